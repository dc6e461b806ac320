"""Callers killed while the server holds their request: answered EINTR at once.

Once the server has read a FUSE request, the kernel waits for its answer whatever
signal the caller gets (fs/fuse/dev.c, request_wait_answer: the last wait is
uninterruptible), so a process in a call that a stall rule or the emulated file
system holds for an hour could not be ended, not even by SIGKILL.  Linux's NFS
client waits on an RPC killably on a hard mount: SIGKILL ends the wait.  pyfuse3
does not pass on FUSE_INTERRUPT (libfuse reads it; pyfuse3 registers no interrupt
callback and asks no `fuse_req_interrupted`), so the server looks itself: the
callers of the requests held long are read from /proc now and then, and a request
whose caller is being killed is let go, to be answered EINTR (the handlers do that
and trace it).

A caller is being killed when SIGKILL is pending for its thread (`SigPnd` in
/proc/TID/status: the kernel's fatal_signal_pending, which a fatal signal sets in
every thread of the process) or for its process (`ShdPnd`: kill(2)'s SIGKILL stays
there while the process exits and closes its files, whose FLUSH the kernel sends and
waits on uninterruptibly).  /proc/TID/status is the thread's own (a FUSE request
names the calling thread; /proc answers for any thread id, listed or not), with
the process's shared set beside it.  Where the thread is the one that sent the
request (a request context), its being gone or a zombie is death too.  Reads,
writes, flushes and fsyncs have no context in pyfuse3: for them the process that
opened the file is read (/proc/PID/status: its first thread's set, which a fatal
signal also marks, and the shared one), and only a pending SIGKILL counts, since
another process may share the open file and be the one waiting.

Cost: the /proc reads happen on the loop, at most `MOST_READS` a round every
`EVERY_S`, each thread once a round, and only for requests held longer than
`AFTER_NS`: nothing on the path of a request, and nothing at all while none is held
long; with more callers held than MOST_READS, each is read less often than every
round, which bounds a round's cost to a small share of the loop (see
docs/BENCHMARKS.md, "Figures behind design choices: server/").
"""

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from time import monotonic_ns

import trio

EVERY_S = 0.2  # a round of checks this often while requests are held
AFTER_NS = 200_000_000  # a request is checked once it has been held this long
MOST_READS = 32  # /proc reads a round: the longest unchecked first
_KILL = 1 << (signal.SIGKILL - 1)  # SIGKILL's bit in SigPnd / ShdPnd


def dying(tid: int, itself: bool) -> bool:
    """Whether thread `tid`'s process is being killed (see the module's docstring);
    `itself`: tid sent the request and waits on it, so its end is the caller's."""
    try:
        fd = os.open(f"/proc/{tid}/status", os.O_RDONLY | os.O_CLOEXEC)  # procfs: answered from memory
        try:
            status = os.read(fd, 8192)  # about 1.5 KB: one read
        finally:
            os.close(fd)
    except OSError:  # gone (ENOENT, or ESRCH once opened)
        return itself
    pending = 0
    for line in status.splitlines():
        if line.startswith(b"State:"):
            if itself and line[6:].strip()[:1] in (b"Z", b"X"):
                return True
        elif line.startswith((b"SigPnd:", b"ShdPnd:")):
            pending |= int(line[7:].strip(), 16)
    return bool(pending & _KILL)


class _Waiter:
    """A held request whose caller is watched: its thread, whether that thread sent it
    (see dying), the scope that lets it go, since when it is held, when last checked."""

    __slots__ = ("checked", "itself", "scope", "since", "tid")

    def __init__(self, tid: int, itself: bool, scope: trio.CancelScope, since: int) -> None:
        self.tid, self.itself, self.scope, self.since = tid, itself, scope, since
        self.checked = 0


class Kills:
    """The held requests whose callers may be killed, and the task that checks them."""

    def __init__(self) -> None:
        self._waiters: dict[object, _Waiter] = {}
        self._some = trio.Event()  # set while there are waiters
        self.released = 0  # requests let go because their caller was being killed

    @contextmanager
    def watched(self, tid: int, itself: bool, since: int) -> Iterator[trio.CancelScope]:
        """While inside, held since `since`: let go (the scope is cancelled, and catches
        it) if thread `tid`'s process is being killed; `scope.cancelled_caught` says."""
        token = object()
        with trio.CancelScope() as scope:
            self._waiters[token] = _Waiter(tid, itself, scope, since)
            self._some.set()
            try:
                yield scope
            finally:
                del self._waiters[token]

    async def run(self) -> None:
        """Check the callers every EVERY_S while any request is watched; start it in a
        nursery."""
        while True:
            if not self._waiters:
                self._some = trio.Event()
                await self._some.wait()
            await trio.sleep(EVERY_S)
            self.check(monotonic_ns())

    def check(self, now: int) -> int:
        """One round: read the status of the callers held over AFTER_NS (the least
        lately checked first, up to MOST_READS threads) and let go those being killed;
        how many were let go."""
        due = sorted((w for w in self._waiters.values() if now - w.since >= AFTER_NS), key=lambda w: w.checked)
        seen: dict[tuple[int, bool], bool] = {}
        let_go = 0
        for w in due:
            key = (w.tid, w.itself)
            if key not in seen:
                if len(seen) >= MOST_READS:
                    break
                seen[key] = dying(w.tid, w.itself)
            w.checked = now
            if seen[key] and not w.scope.cancel_called:
                w.scope.cancel()
                let_go += 1
        self.released += let_go
        return let_go
