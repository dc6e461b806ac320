"""What `fusetrace capture` follows, on a tmpfs, with a loop-mounted ext4 beside it: an open
file through dup, dup2, fork and SCM_RIGHTS (one fh, the right path, whichever process
writes); another mount's and /tmp's writes by the same process left out; paths rebuilt
from a directory descriptor, a working directory entered after the capture began or a
program started in, across renames; a hostile name kept to its bytes, forging nothing.

One capture for the module (bpftrace takes seconds to start): support/capture_workload.py,
run under it by the `captured` fixture."""

import json
import sys

import pytest
from support import capture_workload
from support.capture import capture, raw, records
from support.capture_workload import ELSEWHERE, HOSTILE, WIDTHS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def captured(tmpfs, ext4, tmp_path_factory):
    """(the records, the workload's facts, the trace): the module's one capture."""
    work = tmp_path_factory.mktemp("follows")
    out, trace = work / "facts.json", work / "trace"
    capture(tmpfs, trace, sys.executable, capture_workload.__file__, str(tmpfs), str(ext4), str(out))
    return records(trace), json.loads(out.read_text()), trace


def _at(recs: list[dict], path: str) -> list[dict]:
    return [r for r in recs if r["path"] == path]


def test_dup_and_dup2_write_one_open_file(captured):
    recs, facts, _ = captured
    f = _at(recs, "/dup/f")
    assert [r["op"] for r in f] == ["create", "getattr"] + ["write"] * 3 + ["flush"] * 3  # (its fstat: the inode)
    assert len({r["fh"] for r in f}) == 1 and f[0]["fh"] > 0
    # (fstat(3) is fstatat(fd, "", AT_EMPTY_PATH) in glibc: a named call on the descriptor itself)
    assert {r["inode"] for r in f} == {facts["dup_ino"]}
    width = WIDTHS["dup"]
    assert [(r["offset"], r["result"]) for r in f if r["op"] == "write"] == [(i * width, width) for i in range(3)]


def test_a_forked_child_writes_through_its_parent_s_open_file(captured):
    recs, facts, _ = captured
    f = _at(recs, "/fork/f")
    assert [(r["op"], r["pid"]) for r in f] == [
        ("create", facts["pid"]),
        ("write", facts["fork_child"]),
        ("write", facts["pid"]),
        ("flush", facts["pid"]),
    ]
    assert len({r["fh"] for r in f}) == 1
    writes = [(r["offset"], r["result"]) for r in f if r["op"] == "write"]
    assert writes == [(0, WIDTHS["fork_child"]), (WIDTHS["fork_child"], WIDTHS["fork_parent"])]


def test_a_descriptor_passed_over_a_socket_is_followed(captured):
    recs, facts, _ = captured
    f = _at(recs, "/scm/f")
    assert sorted((r["op"], r["pid"]) for r in f) == sorted(
        [
            ("create", facts["pid"]),
            ("flush", facts["pid"]),
            ("write", facts["scm_child"]),
            ("flush", facts["scm_child"]),
        ]
    )
    assert len({r["fh"] for r in f}) == 1
    (write,) = [r for r in f if r["op"] == "write"]
    assert write["result"] == WIDTHS["scm"] and write["offset"] == 0


def test_another_mount_s_calls_are_not_recorded(captured):
    recs, facts, trace = captured
    assert not [r for r in recs if r["size"] == ELSEWHERE or b"elsewhere" in raw(r)]
    written = sorted(r["result"] for r in recs if r["op"] == "write" and r["pid"] in (facts["pid"],))
    assert written == sorted([WIDTHS["dup"]] * 3 + [WIDTHS["fork_parent"], WIDTHS["names"]])
    meta = json.loads((trace / "_metadata.json").read_text())
    assert meta["source"] == "syscalls" and meta["capture"]["lost"] == {}


def test_paths_are_rebuilt_from_descriptors_working_directories_and_renames(captured):
    recs, _, _ = captured
    made = [(r["op"], r["path"], r["path2"]) for r in recs if r["op"] in ("create", "rename")]
    assert ("create", "/paths/d/by-dirfd", None) in made  # below a directory descriptor
    assert ("create", "/paths/by-cwd", None) in made  # from a working directory entered since
    assert ("rename", "/paths/by-cwd", "/paths/renamed") in made
    assert ("rename", "/paths/d", "/paths/e") in made
    assert ("create", "/paths/e/after-rename", None) in made  # the descriptor's directory's new name
    assert ("create", "/paths/s/started-here", None) in made  # a program started in a directory of the mount
    assert [r["op"] for r in _at(recs, "/paths/renamed")] == ["open", "read", "flush"]
    assert "" not in {r["path"] for r in recs}


def test_a_hostile_name_is_kept_whole(captured):
    recs, _, trace = captured
    name = b"/names/" + HOSTILE
    names = [(r["op"], raw(r), r["path2_raw"] and bytes(r["path2_raw"])) for r in recs if raw(r).startswith(b"/names")]
    assert names == [
        ("mkdir", b"/names", None),
        ("create", name, None),
        ("write", name, None),
        ("flush", name, None),
        ("rename", name, name + b".2"),
        ("unlink", name + b".2", None),
    ]
    assert json.loads((trace / "_metadata.json").read_text())["capture"]["cut_names"] == 0


def test_every_record_is_of_a_name_the_workload_used(captured):
    """Nothing forged, nothing split: each record's path is one the workload named."""
    recs, _, _ = captured
    named = {"/dup", "/fork", "/scm", "/paths", "/paths/d", "/paths/s", "/names", "/dup/f", "/fork/f", "/scm/f"}
    named |= {"/paths/d/by-dirfd", "/paths/by-cwd", "/paths/renamed", "/paths/e", "/paths/e/after-rename"}
    named |= {"/paths/s/started-here"}
    odd = {raw(r) for r in recs} - {n.encode() for n in named} - {b"/names/" + HOSTILE, b"/names/" + HOSTILE + b".2"}
    assert not odd
