"""The reader's wait for a request: a queued one is read without a turn of trio's loop,
and every other wait is trio's own.  A pipe stands in
for /dev/fuse (both are polled the same way); the server's use of it runs in every mount."""

import os

import pytest
import trio
import trio.testing

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
    with fuseread.unparked_when_queued(r):
        assert not _in_trio(r)
    assert _in_trio(r)  # trio's wait again once the block is left


def test_with_nothing_queued_the_reader_waits_in_trio(pipe):
    r, w = pipe
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
        os.write(other_w, b"x")
        with fuseread.unparked_when_queued(r):
            assert _in_trio(other_r)
            os.close(w)  # the far end gone: an error (POLLHUP) and no request
            assert _in_trio(r)
    finally:
        os.close(other_r)
        os.close(other_w)


def test_without_the_descriptor_nothing_changes():
    before = trio.lowlevel.wait_readable
    with fuseread.unparked_when_queued(None):
        assert trio.lowlevel.wait_readable is before
    assert trio.lowlevel.wait_readable is before
