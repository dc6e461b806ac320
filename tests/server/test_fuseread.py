"""The reader's wait for a request: a queued one is read without a turn of trio's loop,
and every other wait is trio's own.  A pipe stands in for /dev/fuse (both are polled the
same way); then a real mount, whose `fusetrace stats` counts the requests read each way:
in the quick suite, so a pyfuse3 that no longer reads through the patched call fails it."""

import mmap
import os
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import trio
import trio.testing
from support import fusetrace, poll, stats_json

from fusetrace.server import fuseread


@pytest.fixture
def pipe():
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        try:
            os.close(fd)
        except OSError:
            pass  # closed by the test


def _in_trio(fd: int) -> bool:
    """Whether trio.lowlevel.wait_readable(fd) was trio's own: a checkpoint, which in a
    cancelled scope raises at once.  The poll's path returns, no checkpoint (the read
    lock pyfuse3 takes just before is one)."""

    async def main() -> bool:
        with trio.CancelScope() as scope:
            scope.cancel()
            await trio.lowlevel.wait_readable(fd)
            return False
        return True

    return trio.run(main)


def test_a_queued_request_is_read_at_once(pipe):
    r, w = pipe
    os.write(w, b"x")
    with fuseread.unparked_when_queued(r) as waits:
        assert not _in_trio(r)
        assert (waits.at_once, waits.in_trio) == (1, 0)
    assert _in_trio(r)  # trio's wait again once the block is left


def test_with_nothing_queued_the_reader_waits_in_trio(pipe):
    r, w = pipe
    with fuseread.unparked_when_queued(r) as waits:
        assert _in_trio(r)
        assert (waits.at_once, waits.in_trio) == (0, 1)

    async def arrives_later() -> None:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.lowlevel.wait_readable, r)
                await trio.testing.wait_all_tasks_blocked()
                os.write(w, b"y")  # woken by trio's epoll, not by the poll

    with fuseread.unparked_when_queued(r):
        trio.run(arrives_later)


def test_other_descriptors_and_a_closed_connection_take_trios_path(pipe):
    r, w = pipe
    other_r, other_w = os.pipe()
    try:
        os.write(w, b"x")  # a request queued: still not the other descriptor's business
        os.write(other_w, b"x")
        with fuseread.unparked_when_queued(r) as waits:
            assert _in_trio(other_r)
            assert (waits.at_once, waits.in_trio) == (0, 0)
        os.read(r, 1)
        os.close(w)  # the far end gone: an error (POLLHUP) and no request
        with fuseread.unparked_when_queued(r):
            assert _in_trio(r)
    finally:
        os.close(other_r)
        os.close(other_w)


def test_without_the_descriptor_nothing_changes():
    before = trio.lowlevel.wait_readable
    with fuseread.unparked_when_queued(None) as waits:
        assert waits is None
        assert trio.lowlevel.wait_readable is before
    assert trio.lowlevel.wait_readable is before


def _random_reads(path: Path, in_flight: int = 32, each: int = 64) -> None:
    """4 KiB O_DIRECT reads at random offsets, `in_flight` threads at once: a queue depth
    of 32, as fio's libaio job had, with nothing but Python (the server is another
    process, and a read releases the GIL)."""
    blocks = path.stat().st_size // 4096

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        try:
            with mmap.mmap(-1, 4096) as buf:  # page-aligned, as O_DIRECT needs
                for _ in range(each):
                    os.preadv(fd, [buf], rng.randrange(blocks) * 4096)
        finally:
            os.close(fd)

    with ThreadPoolExecutor(in_flight) as pool:
        list(pool.map(reader, range(in_flight)))


def test_a_mount_reads_queued_requests_at_once_and_says_so(mount):
    m = mount()
    (m.source / "f").write_bytes(os.urandom(1 << 20))

    def read_at_once() -> int:
        _random_reads(m.mountpoint / "f")
        return stats_json(m.mountpoint)["fuse_reads"]["at_once"]

    poll(read_at_once, timeout=60, interval=0)  # 32 requests in flight: the kernel queues some
    assert "found queued (read at once)" in fusetrace("stats", str(m.mountpoint)).stdout
