"""Wake trio tasks at CLOCK_MONOTONIC deadlines more finely than trio.sleep.

trio's own timeouts go through epoll's millisecond timeout, so a 0.25 ms sleep
lasts over a millisecond.  Here one timerfd, armed for the earliest deadline
in a heap and watched by trio, wakes the waiting tasks directly.  The timer is
armed a little early, by how late wake-ups have been running (a moving
average), so replies land near their deadlines rather than always after them.

A sleeper may say how much earlier than its deadline it can bear to wake (slack):
when the timer fires it wakes sleepers in deadline order for as long as the next
one's slack reaches back to now, so deadlines that fall close together cost one
wake-up, not one each (a sleeper without slack due first stops the sweep there).
"""

import ctypes
import ctypes.util
import heapq
import itertools
import os
from time import monotonic_ns

import trio

_checkpoint = trio.lowlevel.checkpoint
_current_task = trio.lowlevel.current_task
_reschedule = trio.lowlevel.reschedule
_wait_task_rescheduled = trio.lowlevel.wait_task_rescheduled
_SUCCEEDED = trio.lowlevel.Abort.SUCCEEDED
_heappush, _heappop = heapq.heappush, heapq.heappop
# A sleeper's key in the heap: its deadline and its sequence number in one int
# (deadline_ns << _SEQ_BITS | seq), so the heap compares plain ints.  The whole
# sequence number is kept (it never reaches 2**64): sleepers with one deadline, such
# as the fsyncs waiting on one file's write-back, must never share a key.  A heap of
# lists costs two more pointers chased per comparison, ten or so comparisons a pop
# at 1,024 sleepers, paid in cache misses by a loop that has just woken: the same
# in a hot loop, 4 % more CPU per operation for the model, shaper and timer at queue
# depth 1,024 (bench/accuracy.py's part, alternating in one process).
_SEQ_BITS = 64

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC
_TFD_TIMER_ABSTIME = 1
MAX_LEAD_NS = 200_000  # the most the timer is armed ahead of a deadline


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class PreciseTimer:
    def __init__(self):
        fd = _libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_create: {os.strerror(err)}")
        self._fd = fd
        self._heap: list[int] = []  # the sleepers' keys (see _SEQ_BITS), cancelled ones until they reach the top
        self._sleepers: dict[int, tuple[trio.lowlevel.Task, int]] = {}  # key: (task, earliest_ns), till woken
        self._seq = itertools.count()
        self._spec = _Itimerspec()
        self.lead_ns = 0  # how early the timer is armed: average lateness seen

    def _arm(self, deadline_ns: int) -> None:
        when = max(deadline_ns - self.lead_ns, 1)
        self._spec.it_value.tv_sec, self._spec.it_value.tv_nsec = divmod(when, 1_000_000_000)
        _libc.timerfd_settime(self._fd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None)

    async def sleep_until(self, deadline_ns: int, slack_ns: int = 0) -> None:
        """Return at (about) monotonic_ns() == deadline_ns, or up to slack_ns before it
        when another sleeper is woken then; at once if that is past."""
        early = deadline_ns - slack_ns
        if early <= monotonic_ns() + self.lead_ns:
            await _checkpoint()
            return
        key = deadline_ns << _SEQ_BITS | next(self._seq)
        sleepers = self._sleepers
        sleepers[key] = (_current_task(), early)
        heap = self._heap
        _heappush(heap, key)
        if heap[0] == key:
            self._arm(deadline_ns)

        def abort(_):
            sleepers.pop(key, None)  # its key is dropped when it reaches the top of the heap
            return _SUCCEEDED

        await _wait_task_rescheduled(abort)

    async def run(self) -> None:
        """The background task that wakes sleepers; start it in a nursery."""
        while True:
            await trio.lowlevel.wait_readable(self._fd)
            try:
                os.read(self._fd, 8)
            except BlockingIOError:
                pass
            now = monotonic_ns()
            heap, sleepers = self._heap, self._sleepers
            horizon = now + self.lead_ns
            first = True
            while heap:
                sleeper = sleepers.get(heap[0])
                if sleeper is None:  # cancelled
                    _heappop(heap)
                    continue
                if sleeper[1] > horizon:
                    break
                key = _heappop(heap)
                del sleepers[key]
                _reschedule(sleeper[0])
                if first:  # the sleeper the timer was armed for: how late the wake-up was
                    first = False
                    late = now - (key >> _SEQ_BITS)
                    # moving average of lateness, kept within [0, MAX_LEAD_NS]
                    self.lead_ns = min(max((7 * self.lead_ns + late + self.lead_ns) // 8, 0), MAX_LEAD_NS)
            if heap:
                self._arm(heap[0] >> _SEQ_BITS)

    def close(self) -> None:
        os.close(self._fd)
