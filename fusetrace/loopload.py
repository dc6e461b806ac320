"""How busy the trio loop is: the other half of knowing the host's limit.

The shaper sees replies that leave after their deadlines.  It cannot see requests
that wait in the kernel because the loop is busy with others: a saturated loop
admits them late and meets every deadline it is given.  So the time the loop
spends idle in epoll is added up; busy time is the rest.
"""

from time import monotonic_ns

import trio


class LoopLoad(trio.abc.Instrument):
    def __init__(self):
        self.started_ns = monotonic_ns()
        self.idle_ns = 0
        self._since = None

    def before_io_wait(self, timeout: float) -> None:
        self._since = monotonic_ns() if timeout > 0 else None  # 0: tasks are waiting to run

    def after_io_wait(self, timeout: float) -> None:
        if self._since is not None:
            self.idle_ns += monotonic_ns() - self._since
            self._since = None

    def reading(self) -> dict:
        """Cumulative counters (ns); busy share between two readings is
        1 - d(idle_ns) / d(elapsed_ns)."""
        return {"elapsed_ns": monotonic_ns() - self.started_ns, "idle_ns": self.idle_ns}
