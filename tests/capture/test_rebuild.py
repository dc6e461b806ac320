"""A capture's user half without the kernel: bpftrace's JSON lines, as its maps print
them, back into trace records (fusetrace/capture/events.py, records.py), and the
program text written from the table of calls (program.py)."""

import json
import os
import stat

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.capture import bpftrace_json

from fusetrace.capture.calls import FD_CALLS, NAMED_CALLS, OP_IDS
from fusetrace.capture.events import BadOutput, Events, Started
from fusetrace.capture.program import CWD, END, READY, SLOT, program
from fusetrace.capture.records import Rebuilder

MNT = "/mnt/efs"
ROOT_INO = 2
TID = 4242


def _fd(op, start, file, ino, *, ret=0, offset=0, size=0, flags=0o100001, mode=0o100644, fd=3, comm="app", call=0):
    """A call on a descriptor as `@f?` prints it: key, then the tuple program.py writes."""
    values = [OP_IDS[op], 100, 1000, 1000, 5000, ret, file, ino, mode, flags, offset, size, fd, call, comm, TID, start]
    return f"{TID},{start}", values


def _named(
    op, start, name, *, name2="", ret=0, flags=0, arg=0, base=0, base2=0, file=0, ino=0, mode=0, dirfd=-100, call=0
):
    names = (1 if name else 0) | (2 if name2 else 0)  # (the names the probe printed)
    values = [OP_IDS[op], 100, 1000, 1000, 7000, ret, flags, arg, base, base2, file, ino, mode, dirfd, -100]
    values += [call, names, "app"]
    values += [TID, start]
    return f"{TID},{start}", values, name, name2


def _lines(index, fds=(), named=()):
    """What a slot's print makes: a set's four maps (bpftrace leaves out the empty ones,
    and ends each print with an empty line), then the line that ends the slot."""
    out = [{f"@f{index}": dict(fds)}, {f"@p{index}": {k: v for k, v, _, _ in named}}]
    out += [{f"@s{index}": {k: n for k, _, n, _ in named}}, {f"@t{index}": {k: n2 for k, _, _, n2 in named}}]
    lines = []
    for data in out:
        if next(iter(data.values())):
            lines += [json.dumps({"type": "map", "data": data}).encode() + b"\n", b"\n"]
    return [*lines, json.dumps({"type": "printf", "data": SLOT + "\n"}).encode()]


def _counts(counts):
    return [
        json.dumps({"type": "map", "data": {"@n": {str(k): v for k, v in counts.items()}}}).encode() + b"\n",
        json.dumps({"type": "printf", "data": END + "\n"}).encode(),
    ]


def _run(lines, proc="/nonexistent"):
    events, rebuilder = Events(), Rebuilder(MNT, ROOT_INO, proc=proc)
    calls = [c for line in lines for c in events.feed(line)]
    records = [r for c in calls if not isinstance(c, Started) if (r := rebuilder.record(c)) is not None]
    return events, rebuilder, records


def test_an_open_write_close_becomes_records_with_one_handle_and_the_path():
    file = 0xFFFF888812345600
    lines = _lines(
        "a",
        fds=[
            _fd("write", 200, file, 77, ret=4096, offset=0, size=4096),
            _fd("flush", 300, file, 77),
        ],
        named=[_named("create", 100, "dir/new", flags=0o1101, base=ROOT_INO, file=file, ino=77, mode=0o100644, ret=3)],
    )
    events, rebuilder, records = _run([*lines, *_counts({OP_IDS["create"]: 1, OP_IDS["write"]: 1, OP_IDS["flush"]: 1})])
    assert [(r.op, r.path, r.fh, r.inode) for r in records] == [
        ("create", "/dir/new", 1, 77),
        ("write", "/dir/new", 1, 77),
        ("flush", "/dir/new", 1, 77),
    ]
    write, flush = records[1], records[2]
    assert (write.offset, write.size, write.result, write.kind) == (0, 4096, 4096, "buffered")
    assert flush.kind == "commit"  # a close after writes commits (close-to-open)
    assert records[0].result == 0  # an open's result is its descriptor: not bytes
    assert events.counts == {OP_IDS["create"]: 1, OP_IDS["write"]: 1, OP_IDS["flush"]: 1}
    assert rebuilder.unknown_paths == 0


def test_a_write_through_an_o_sync_file_is_a_sync_write_and_a_vector_write_sizes_by_its_result():
    file = 0xFFFF888800000040
    _, _, records = _run(
        _lines(
            "b",
            fds=[_fd("write", 10, file, 9, ret=512, size=-1, flags=os.O_WRONLY | os.O_SYNC)],
        )
        + _counts({OP_IDS["write"]: 1})
    )
    assert (records[0].kind, records[0].size, records[0].result) == ("sync", 512, 512)


def test_records_of_two_slots_come_in_start_order_even_when_the_end_prints_the_newer_first():
    newer = _lines(0, named=[_named("getattr", 500, "/mnt/efs/b")])
    older = _lines(1, named=[_named("getattr", 400, "/mnt/efs/a")])  # (END prints every set: any order)
    _, _, records = _run([*newer, *older, *_counts({OP_IDS["getattr"]: 2})])
    assert [(r.start_ns, r.path) for r in records] == [(400, "/a"), (500, "/b")]


def test_relative_names_are_rebuilt_from_the_directory_they_start_from():
    # a directory opened by its absolute path, then a name relative to it (openat(dirfd, ...))
    dirfile = 0xFFFF888800000080
    _, rebuilder, records = _run(
        _lines(
            "a",
            named=[
                _named("opendir", 10, "/mnt/efs/data/", file=dirfile, ino=50, mode=stat.S_IFDIR | 0o755, ret=3),
                _named("unlink", 20, "old/x", base=50, dirfd=3),
                _named("rename", 30, "a", name2="../b", base=50, base2=50, dirfd=3),
                _named("getattr", 40, "", base=50, file=dirfile, dirfd=3),  # fstatat(fd, "", AT_EMPTY_PATH)
            ],
        )
        + _counts({})
    )
    assert [(r.op, r.path, r.path2, r.fh, r.inode, r.mode) for r in records] == [
        ("opendir", "/data", None, 1, 50, stat.S_IFDIR | 0o755),
        ("unlink", "/data/old/x", None, 0, 0, 0),
        ("rename", "/data/a", "/b", 0, 0, 0),
        ("getattr", "/data", None, 1, 50, stat.S_IFDIR | 0o755),  # the descriptor's own object
    ]
    assert rebuilder.unknown_paths == 0


def test_a_name_not_rebuilt_is_left_empty_and_counted():
    _, rebuilder, records = _run(_lines(0, named=[_named("mkdir", 10, "sub", base=999, arg=0o755)]) + _counts({}))
    assert (records[0].path, records[0].mode) == ("", stat.S_IFDIR | 0o755)
    assert rebuilder.unknown_paths == 1


def test_a_chdir_is_followed_but_not_recorded():
    _, _, records = _run(
        _lines(
            "a",
            named=[
                _named("chdir", 10, "/mnt/efs/w", ino=60, base2=ROOT_INO, name2="w"),
                _named("create", 20, "f", base=60, file=1, ino=61, mode=0o100600, flags=0o101, ret=3),
            ],
        )
        + _counts({})
    )
    assert [(r.op, r.path) for r in records] == [("create", "/w/f")]


@given(st.binary(min_size=1, max_size=60).filter(lambda b: b"/" not in b and b"\0" not in b and b not in (b".", b"..")))
def test_any_name_comes_back_exactly_and_never_splits_a_record(raw):
    """Whatever bytes a hostile name holds (newlines, quotes, braces, backslashes before
    "uffffff", bytes that are not UTF-8), bpftrace's JSON keeps one record one line, and
    the name is the one the caller gave, as os.fsdecode reads it."""
    key, values, _, _ = _named("unlink", 10, "")
    lines = [json.dumps({"type": "map", "data": {"@p0": {key: values}}}).encode() + b"\n"]
    name = bpftrace_json(b"/mnt/efs/" + raw)
    lines.append(b'{"type": "map", "data": {"@s0": {"%s": %s}}}\n' % (key.encode(), name))
    lines.append(json.dumps({"type": "map", "data": {"@t0": {key: ""}}}).encode() + b"\n")
    lines.append(json.dumps({"type": "printf", "data": SLOT + "\n"}).encode())
    _, _, records = _run([*lines, *_counts({})])
    assert [r.path for r in records] == ["/" + os.fsdecode(raw)]


@pytest.mark.parametrize(
    "line", [b"not json\n", b'{"type": "map"}\n', b'{"type": "map", "data": {"@f0": {"1,2": [1, 2]}}}\n']
)
def test_output_that_is_not_the_programs_is_refused_in_one_line(line):
    slot_end = [json.dumps({"type": "printf", "data": SLOT + "\n"}).encode()]
    with pytest.raises(BadOutput):
        _run([line, *slot_end])


def test_the_ready_line_and_a_program_started_on_the_mount():
    events = Events()
    assert list(events.feed(json.dumps({"type": "printf", "data": f"{CWD} 123 456\n"}).encode())) == [Started(123, 456)]
    assert not events.ready
    list(events.feed(json.dumps({"type": "printf", "data": READY + "\n"}).encode()))
    assert events.ready


def test_the_program_follows_every_call_of_the_table_for_this_mount_only():
    text = program(dev=(0 << 20) | 39, mountpoint=b"/mnt/efs", self_pid=4321)
    for call in (*FD_CALLS, *NAMED_CALLS):
        assert f"sys_enter_{call.name} " in text
    assert "s_dev == 39" in text and "pid != 4321" in text
    # the mount point, read as words: "/mnt/efs" is 0x7366652f746e6d2f little-endian
    assert "0x7366652f746e6d2f" in text
