"""How busy the trio loop is: the other half of knowing the host's limit.

The shaper sees replies that leave after their deadlines.  It cannot see requests
that wait in the kernel because the loop is busy with others: a saturated loop
admits requests late and meets every deadline it is given.  So the loop's thread
CPU time is read beside the clock: the loop is busy while its thread runs, idle
while it waits in epoll.  (A trio instrument timing each wait in epoll says the
same, but costs two calls on every turn of the loop: docs/BENCHMARKS.md, "Figures
behind design choices: emulator/, shaping/ and request.py".)
Read it on the loop's own thread.
"""

from time import monotonic_ns, thread_time_ns
from typing import TypedDict


class LoopReading(TypedDict):
    """Since the loop started (ns): time passed, and time its thread was not running."""

    elapsed_ns: int
    idle_ns: int


class LoopLoad:
    def __init__(self) -> None:
        self.started_ns = monotonic_ns()
        self.cpu_at_start_ns = thread_time_ns()

    def reading(self) -> LoopReading:
        """Cumulative counters (ns); busy share between two readings is
        1 - d(idle_ns) / d(elapsed_ns)."""
        elapsed = monotonic_ns() - self.started_ns
        busy = thread_time_ns() - self.cpu_at_start_ns
        return {"elapsed_ns": elapsed, "idle_ns": max(elapsed - busy, 0)}
