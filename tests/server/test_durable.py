"""The crash fault's undo log (server/durable.py) on real files, against a model of what
each file held when it was last made durable: after a crash every file is byte for byte
that, and a file whose commit was in flight holds, page by page, either that or what was
written since, with no page mixed."""

import os
from types import SimpleNamespace

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from fusetrace.server.durable import PAGE, Durability, crash_events
from fusetrace.server.inodes import Inode
from fusetrace.server.openfiles import Handle

FILES = 2
CALLER = SimpleNamespace(pid=1, uid=0, gid=0)

write = st.tuples(
    st.just("write"),
    st.integers(0, FILES - 1),
    st.integers(0, 5 * PAGE),
    st.binary(min_size=1, max_size=2 * PAGE + 10),
)
commit = st.tuples(st.just("commit"), st.integers(0, FILES - 1))
truncate = st.tuples(st.just("truncate"), st.integers(0, FILES - 1), st.integers(0, 4 * PAGE))
steps = st.lists(st.one_of(write, write, commit, truncate), max_size=25)


class Files:
    """FILES real files, each with a handle as the server holds one, and the model: what
    each holds now and what it held when last made durable."""

    def __init__(self, root, initial: list[bytes]):
        self.durability = Durability(seed=7)
        self.handles, self.now, self.durable = [], [], []
        for i, data in enumerate(initial):
            path = root / f"f{i}"
            path.write_bytes(data)
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            st = os.fstat(fd)
            self.handles.append(Handle(fd, Inode(100 + i, (st.st_dev, st.st_ino), -1, f"/f{i}", st), 0, CALLER))
            self.now.append(bytearray(data))
            self.durable.append(bytes(data))

    def run(self, step) -> None:
        kind, i = step[0], step[1]
        h, d = self.handles[i], self.durability
        if kind == "write":
            off, data = step[2], step[3]
            assert d.pwrite(h, data, off) == len(data)
            now = self.now[i]
            now.extend(bytes(max(0, off - len(now))))
            now[off : off + len(data)] = data
        elif kind == "commit":
            d.begin(h.inode.id)
            trio.run(d.end, h.inode.id, True)
            self.durable[i] = bytes(self.now[i])
        else:  # a truncation through the mount: the file's data, then its new size, on the server
            os.ftruncate(h.fd, step[2])
            trio.run(d.truncated, h.inode.id, step[2])
            now = self.now[i]
            del now[step[2] :]
            now.extend(bytes(step[2] - len(now)))
            self.durable[i] = bytes(now)

    def close(self) -> None:
        for h in self.handles:
            os.close(h.fd)


@pytest.mark.timeout(120)
@settings(max_examples=150, deadline=None)
@given(initial=st.lists(st.binary(max_size=3 * PAGE), min_size=FILES, max_size=FILES), steps=steps)
def test_a_crash_leaves_each_file_as_it_was_last_made_durable(tmp_path_factory, initial, steps):
    files = Files(tmp_path_factory.mktemp("d"), initial)
    try:
        for step in steps:
            files.run(step)
        done = files.durability.crash({h.inode.id: h.fd for h in files.handles})
        assert done.pages_torn == 0
        for i, h in enumerate(files.handles):
            assert os.pread(h.fd, 10 * PAGE, 0) == files.durable[i], f"file {i}"
    finally:
        files.close()


@pytest.mark.timeout(120)
@settings(max_examples=150, deadline=None)
@given(initial=st.binary(max_size=3 * PAGE), steps=st.lists(write, min_size=1, max_size=12))
def test_a_commit_in_flight_tears_by_whole_pages(tmp_path_factory, initial, steps):
    """Each page is the durable one or the one written since; the file ends where the
    durable file did, or at the end of a page the server got (zeros between)."""
    files = Files(tmp_path_factory.mktemp("d"), [initial, b""])
    try:
        for step in steps:
            files.run(("write", 0, *step[2:]))
        now, durable = bytes(files.now[0]), files.durable[0]
        files.durability.begin(100)
        files.durability.crash({100: files.handles[0].fd})
        after = os.pread(files.handles[0].fd, 10 * PAGE, 0)
        assert len(after) >= len(durable) and len(after) <= max(len(durable), len(now))
        for lo in range(0, len(after), PAGE):
            page = after[lo : lo + PAGE]
            old = durable[lo : lo + PAGE].ljust(len(page), b"\0")
            assert page in (old, now[lo : lo + PAGE][: len(page)]), f"page {lo // PAGE} mixed"
    finally:
        files.close()


def test_a_write_on_a_stale_handle_is_refused_and_changes_nothing(tmp_path):
    files = Files(tmp_path, [b"a" * 100, b""])
    try:
        h = files.handles[0]
        h.stale = True
        with pytest.raises(OSError) as raised:
            files.durability.pwrite(h, b"b" * 10, 0)
        assert raised.value.errno == 116  # ESTALE
        assert os.pread(h.fd, 200, 0) == b"a" * 100
    finally:
        files.close()


def test_the_last_close_makes_a_file_durable(tmp_path):
    files = Files(tmp_path, [b"a" * 100, b""])
    try:
        files.run(("write", 0, 50, b"b" * 100))
        files.durability.closed(100)
        assert files.durability.crash({}).files == 0
        assert os.pread(files.handles[0].fd, 300, 0) == b"a" * 50 + b"b" * 100
    finally:
        files.close()


@pytest.mark.parametrize(
    "event, says",
    [
        ({"at": "1s", "crash": False}, "event 1: crash: write crash = true, got False"),
        ({"at": "1s", "crash": True, "set": {}}, "event 1: unknown key 'set'"),
        ({"crash": True}, "event 1: at: missing"),
        ({"at": "soon", "crash": True}, "event 1: at 'soon': expected seconds"),
        ({"at": 40_000_000, "crash": True}, "event 1: at 40000000: at most a year from the mount"),
    ],
)
def test_a_crash_event_with_a_mistake_is_one_line_naming_it(event, says):
    with pytest.raises(ValueError) as raised:
        crash_events([event], "--faults f.toml")
    assert says in str(raised.value) and str(raised.value).startswith("--faults f.toml: ")


def test_crash_events_are_split_from_the_models():
    crashes, rest = crash_events([{"at": "5s", "set": {"a": 1}}, {"at": "2m", "crash": True}], "f")
    assert crashes == [120.0] and rest == [(1, {"at": "5s", "set": {"a": 1}})]
