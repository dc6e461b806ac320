"""How long requests wait in the FUSE kernel, unread, while the model has room for them.

The shaper sees replies that leave after their deadlines.  It cannot see a request
that waits in the kernel because the loop is busy with others, or because its thread
is runnable but preempted by another process (its CPU time then stops too): a loop
that falls behind admits requests late and meets every deadline it is given.

The kernel counts a connection's requests from the moment a caller asks for one until
its reply has been taken (/sys/fs/fuse/connections/N/waiting).  Less the requests the
server holds, that is the number no one has read yet, and by Little's law its integral
over time is the time they all waited.  Nearly: a system call's request is counted
until its caller runs again after the reply, which on a busy host can be a while, with
nothing left for the server to read.  So the count stands only while the server's
/dev/fuse descriptor is readable (a request is queued for it); else none is unread.
While one is, answered requests whose callers have not run yet still count.

It is sampled every EVERY_S seconds from a thread of its own, at instants that have
nothing to do with the loop's work.  A task on the loop would sample only while the
loop runs, right after a wake-up, when the requests that woke it are still unread, and
reads more of the modelled time unread than there was (docs/BENCHMARKS.md, "Figures
behind design choices: emulator/, shaping/ and request.py").  (A request is also unread for a moment
on every round trip, between the kernel's queue and the handler: a few tens of
microseconds each, which the samples count too.)

That wait costs the emulation only while the model has room: a request that would
have queued in the model anyway, behind an IOPS limit say, queues in the kernel
instead and leaves when it would have.  So each sample also asks the model whether the
gates of the last request it served are busy (Model.busy), and counts its unread
requests only if they are not: in all, the unread time at the instants the model
stood idle.  The sum is added to the replies' lateness (hostload.host_load).
Sampling starts once the mount has measured its round trip.

Requests the kernel blocks because max_background asynchronous requests are already
outstanding (the FUSE connection's cap, which fusetrace raises to 1,000 at mount) or
because the server runs as many as --max-requests lets it wait on a limit, not on the
host: the count is taken below the lower of the two caps.  (max_background holds back
asynchronous requests alone, such as libaio's; a thousand synchronous calls at once
would be undercounted.)
"""

import logging
import os
import threading
from collections.abc import Callable

import trio

log = logging.getLogger("fusetrace")
_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_DIR_FLAGS = _FLAGS | os.O_DIRECTORY
EVERY_S = 0.05  # between samples
LOOP_STANDS_IN = "host-bound is judged from the loop's CPU"  # where the queue is not measured


def pending(waiting: int, held: int, cap: int) -> int:
    """Requests read by no one yet: those the kernel counts (`waiting`) below the cap
    on requests in flight, less those the server holds."""
    return max(min(waiting, cap) - held, 0)


class UnreadWait:
    """The integral over time of the requests no one has read, while the model had room
    for them (`queued_ns`), from samples: pure arithmetic."""

    def __init__(self) -> None:
        self.queued_ns = 0
        self._last: tuple[int, int, bool] | None = None  # the last sample: time, unread, room

    def add(self, now_ns: int, unread: int, room: bool) -> None:
        """A sample: `unread` requests pending now, and whether the model has room for
        them.  The interval since the last sample adds its length times the mean of its
        two ends' unread counts, each end's counted only if the model had room then."""
        last = self._last
        self._last = (now_ns, unread, room)
        if last is None:
            return
        then, before, had_room = last
        if (before + unread) and (room or had_room):
            self.queued_ns += (now_ns - then) * (before * had_room + unread * room) // 2


class KernelQueue:
    """Samples a FUSE connection's counters into an UnreadWait (`wait`), from a thread."""

    def __init__(
        self,
        connection: str,
        queued: Callable[[], bool],
        held: Callable[[], int],
        room: Callable[[int], bool],
        server_cap: int,
    ):
        """`connection`: the connection's directory under /sys/fs/fuse/connections;
        `queued()`: whether a request is queued on the server's /dev/fuse descriptor for
        it to read (server/fuseread.queued_check, this thread's own); `held()`: the requests the
        server holds (read and not answered); `room(now_ns)`: whether the model would
        serve a request arriving now without queueing it; `server_cap`: the most requests
        the server runs at once.  Raises OSError when the connection's counters cannot be
        read (fusectl not mounted)."""
        self._dir = os.open(connection, _DIR_FLAGS)
        try:
            self._read("waiting")
        except OSError:
            os.close(self._dir)
            raise
        self._queued, self._held, self._room = queued, held, room
        self._server_cap = server_cap
        self.wait = UnreadWait()
        self.samples = 0
        self.failed: str | None = None  # why sampling stopped early: the queue is then not measured

    def _read(self, name: str) -> int:
        """One of the connection's counters.  Opened afresh each time: the files have no
        offset to seek back to, and each open formats the value anew."""
        fd = os.open(name, _FLAGS, dir_fd=self._dir)
        try:
            return int(os.read(fd, 32))
        finally:
            os.close(fd)

    def sample(self, now_ns: int) -> None:
        unread = 0
        if self._queued():
            cap = min(self._read("max_background"), self._server_cap)
            unread = pending(self._read("waiting"), self._held(), cap)
        self.wait.add(now_ns, unread, self._room(now_ns))
        self.samples += 1

    async def run(self, now: Callable[[], int], ready: trio.Event) -> None:
        """Sample every EVERY_S seconds once `ready` is set, from a thread of its own (see
        above), until cancelled.  The thread then owns the connection's descriptor and
        closes it on its way out."""
        await ready.wait()
        stop = threading.Event()
        threading.Thread(target=self._sample_every, args=(now, stop), name="kernel-queue", daemon=True).start()
        try:
            await trio.sleep_forever()
        finally:
            stop.set()

    def _sample_every(self, now: Callable[[], int], stop: threading.Event) -> None:
        try:
            while not stop.wait(EVERY_S):
                self.sample(now())
        except Exception as exc:  # the thread's end: whatever stopped it is said, not lost
            if not stop.is_set():  # not the connection going away at unmount
                self.failed = f"{type(exc).__name__}: {exc}"
                log.warning(
                    "the FUSE kernel's queue is no longer measured (%s): %s from now on", self.failed, LOOP_STANDS_IN
                )
        finally:
            self.close()

    def close(self) -> None:
        """Close the connection's directory (the sampling thread does, on its way out)."""
        os.close(self._dir)
