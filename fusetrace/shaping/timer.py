"""Wake trio tasks at CLOCK_MONOTONIC deadlines more finely than trio.sleep.

trio's own timeouts go through epoll's millisecond timeout, so a 0.25 ms sleep
lasts over a millisecond.  Here one timerfd, armed for the next wake-up and
watched by trio, wakes the waiting tasks directly.  The timer is armed a little
early, by how late wake-ups have been running (a moving average), so replies
land near their times rather than always after them.

A sleeper may say how far from its deadline it can bear to wake, before or after
(slack), so that deadlines falling close together cost one wake-up, not one each:
a wake-up of the loop costs far more CPU than a sleeper does (docs/BENCHMARKS.md,
"Figures behind design choices: emulator/, shaping/ and request.py").  Sleepers are kept in the order of the
latest time each may wake (deadline + slack).  The timer is armed for the first
one's latest time when the next one in that order can go with it then (its slack
reaches back to then), else for its deadline, so a sleeper alone wakes on time
(a cancelled sleeper it was armed for, or by, re-plans it).  When it fires it
wakes sleepers in that order for as long as the next one's slack reaches back to
now (one whose time has not come stops the sweep there, and those after it wait
for a later wake-up, within their own slack: a sweep in the order of the
earliest times too would need a second heap, 14 % more CPU per operation for the
model, shaper and timer at queue depth 1,024).  So none wakes before its
deadline - slack (less the lead) nor, the host permitting, after its deadline +
slack, and in a deep queue the errors fall on both sides of the deadlines.  A
sleeper is told the time it was woken for, so that the shaper counts as the
host's only the lateness past it.
"""

import ctypes
import ctypes.util
import heapq
import itertools
import os
from time import monotonic_ns

import outcome
import trio

_checkpoint = trio.lowlevel.checkpoint
_current_task = trio.lowlevel.current_task
_reschedule = trio.lowlevel.reschedule
_wait_task_rescheduled = trio.lowlevel.wait_task_rescheduled
_SUCCEEDED = trio.lowlevel.Abort.SUCCEEDED
_Value = outcome.Value
_heappush, _heappop = heapq.heappush, heapq.heappop
# A sleeper's key in the heap: its latest time (deadline + slack) and its sequence number
# in one int (latest_ns << _SEQ_BITS | seq), so the heap compares plain ints.  The whole
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
    def __init__(self) -> None:
        fd = _libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_create: {os.strerror(err)}")
        self._fd = fd
        self._heap: list[int] = []  # the sleepers' keys (see _SEQ_BITS), cancelled ones until they reach the top
        # key: (task, earliest_ns, deadline_ns), till woken
        self._sleepers: dict[int, tuple[trio.lowlevel.Task, int, int]] = {}
        self._seq = itertools.count()
        self._spec = _Itimerspec()
        self.lead_ns = 0  # how early the timer is armed: average lateness seen
        self._target = 0  # the time the timer is armed for (less lead_ns)
        # While the timer is armed for a lone first sleeper's deadline: that sleeper's latest
        # time, to which the timer moves if a sleeper comes that can wake then (else -1).
        self._defer_to = -1
        self.released = False  # the server is stopping: every sleep returns at once (release_all)

    def _arm(self, target_ns: int) -> None:
        self._target = target_ns
        when = max(target_ns - self.lead_ns, 1)
        self._spec.it_value.tv_sec, self._spec.it_value.tv_nsec = divmod(when, 1_000_000_000)
        _libc.timerfd_settime(self._fd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None)

    def _plan(self) -> None:
        """Arm the timer for the first sleeper: at its latest time if the next one in order can
        wake with it then, else at its deadline."""
        heap, sleepers = self._heap, self._sleepers
        self._defer_to = -1
        while heap and heap[0] not in sleepers:  # cancelled
            _heappop(heap)
        if not heap:
            return
        latest = heap[0] >> _SEQ_BITS
        if len(heap) > 1:  # the next in order, whose time stops the sweep if it has not come
            other = sleepers.get(heap[1] if len(heap) == 2 or heap[1] < heap[2] else heap[2])
            if other is not None and other[1] <= latest:
                self._arm(latest)
                return
        self._defer_to = latest
        self._arm(sleepers[heap[0]][2])

    async def sleep_until(self, deadline_ns: int, slack_ns: int = 0) -> int:
        """Return at (about) monotonic_ns() == deadline_ns, or up to slack_ns before or
        after it when another sleeper is woken then; at once if deadline_ns - slack_ns
        is past.  Returns the time the timer woke it for: lateness past the later of
        that and the deadline is the host's (0: none chosen, the deadline counts)."""
        early = deadline_ns - slack_ns
        if early <= monotonic_ns() + self.lead_ns or self.released:
            await _checkpoint()
            return 0
        key = (deadline_ns + slack_ns) << _SEQ_BITS | next(self._seq)
        sleepers = self._sleepers
        sleepers[key] = (_current_task(), early, deadline_ns)
        heap = self._heap
        _heappush(heap, key)
        if heap[0] == key:
            self._plan()
        elif early <= self._defer_to and key == min(heap[1:3]):  # next in order, it can wake with
            self._defer_to, target = -1, self._defer_to  # the lone first sleeper if that one waits
            self._arm(target)

        def abort(_: object) -> trio.lowlevel.Abort:
            sleepers.pop(key, None)  # its key is dropped when it reaches the top of the heap
            if key in heap[:3]:  # it may be what the timer is armed for, or why
                self._plan()
            return _SUCCEEDED

        woke_for: int = await _wait_task_rescheduled(abort)  # what the timer wakes it with
        return woke_for

    async def run(self) -> None:
        """The background task that wakes sleepers; start it in a nursery."""
        while True:
            await trio.lowlevel.wait_readable(self._fd)
            try:
                os.read(self._fd, 8)
                woke_for = self._target
            except BlockingIOError:  # re-armed since it fired (a sleeper came): no wake-up to judge
                woke_for = 0
            now = monotonic_ns()
            heap, sleepers = self._heap, self._sleepers
            horizon = now + self.lead_ns
            first = woke_for > 0
            while heap:
                sleeper = sleepers.get(heap[0])
                if sleeper is None:  # cancelled
                    _heappop(heap)
                    continue
                if sleeper[1] > horizon:
                    break
                del sleepers[_heappop(heap)]
                _reschedule(sleeper[0], _Value(woke_for))
                if first:  # the timer fired for this one: how late the wake-up was
                    first = False
                    late = now - woke_for
                    # moving average of lateness, kept within [0, MAX_LEAD_NS]
                    self.lead_ns = min(max((7 * self.lead_ns + late + self.lead_ns) // 8, 0), MAX_LEAD_NS)
            self._plan()

    def release_all(self) -> None:
        """Wake every sleeper now, and let no sleep wait from now on: the server is
        stopping, and pyfuse3's loop ends only once every request is answered (a model
        event's hour-long stall, or a crawl `fusetrace set` made, would hold it)."""
        self.released = True
        for task, _, _ in self._sleepers.values():
            _reschedule(task, _Value(0))
        self._sleepers.clear()
        self._heap.clear()

    def close(self) -> None:
        os.close(self._fd)
