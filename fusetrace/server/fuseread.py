"""pyfuse3's wait for the next request, made a poll(2) when one is already queued.

Before each read of /dev/fuse, the task holding pyfuse3's read lock awaits
`trio.lowlevel.wait_readable` on the descriptor.  trio then parks the task, re-arms the
descriptor in epoll (EPOLL_CTL_MOD, one-shot) and wakes it on a later turn of its loop,
even when a request is already queued: as one is whenever callers keep many in flight,
and often even for a caller with one, whose next request, sent from another core as the
reply reaches it, is there before the server is back to wait for it.  A poll(2) that does
not wait answers the same question in one system call and the reader reads the request
at once; with nothing queued it waits in trio as before.  It raised IOPS by half to
three quarters (see docs/BENCHMARKS.md, "Figures behind design choices: server/").

The task still yields once per request, when it takes pyfuse3's read lock (trio's
Lock.acquire is a checkpoint), so the loop's other tasks and its I/O are not starved.
A descriptor that reports an error and no request (the connection gone) takes trio's
path, which wakes the reader to find the session ended.
"""

import contextlib
import select
from collections.abc import Callable, Iterator
from typing import Protocol

import trio


class _HasFileNo(Protocol):  # what trio.lowlevel.wait_readable takes besides a descriptor
    def fileno(self) -> int: ...


class ReadWaits:
    """How the reader's waits for a request went, for `fusetrace stats`: `at_once`, a
    request was queued and read without trio's wait; `in_trio`, it waited in trio."""

    __slots__ = ("at_once", "in_trio")

    def __init__(self) -> None:
        self.at_once = 0
        self.in_trio = 0

    def stats(self) -> dict[str, int]:
        return {"at_once": self.at_once, "in_trio": self.in_trio}


def queued_check(fuse_fd: int) -> Callable[[], bool]:
    """A check whether a request is queued on `fuse_fd` for the server to read: one
    poll(2) that does not wait, for POLLIN (an error the descriptor reports alone is no
    request).  Each caller takes its own: a poll object answers one thread at a time."""
    poller = select.poll()
    poller.register(fuse_fd, select.POLLIN)

    def queued() -> bool:
        ready = poller.poll(0)  # [(fuse_fd, events)] or []
        return bool(ready) and bool(ready[0][1] & select.POLLIN)

    return queued


@contextlib.contextmanager
def unparked_when_queued(fuse_fd: int | None) -> Iterator[ReadWaits | None]:
    """Within the block, trio.lowlevel.wait_readable(fuse_fd) returns at once when a
    request is queued on it (pyfuse3 looks the function up at each call); other
    descriptors, and fuse_fd with none queued, wait as before.  With fuse_fd None (not
    found), nothing changes and the block gets None.

    On fuse_fd the function is then no checkpoint: code that waited on that descriptor in
    a loop of its own, with no other await, would spin.  pyfuse3's reader has its lock's."""
    if fuse_fd is None:
        yield None
        return
    waits = ReadWaits()
    queued = queued_check(fuse_fd)
    parked = trio.lowlevel.wait_readable

    async def wait_readable(fd: int | _HasFileNo) -> None:
        if fd == fuse_fd:
            if queued():
                waits.at_once += 1
                return
            waits.in_trio += 1
        await parked(fd)

    trio.lowlevel.wait_readable = wait_readable
    try:
        yield waits
    finally:
        trio.lowlevel.wait_readable = parked
