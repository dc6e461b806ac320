"""Operations-per-second limits: token buckets kept as a theoretical arrival time (GCRA).

An operation is granted the earliest time its bucket has a token; booking that
token moves the bucket's theoretical arrival time on by cost / rate.  With a
burst tolerance of b seconds, the cost granted in any window of W seconds is
at most rate x (W + b) + one operation's cost.
"""

from collections.abc import Sequence

_WINDOW_S = 60  # PercentIOLimit looks back one CloudWatch period


class IopsLimit:
    __slots__ = ("_count", "_end", "_i", "_per", "_sec", "rate", "tat", "tolerance")

    def __init__(self, rate: float, burst_s: float):
        self.tat = float("-inf")
        self._sec = [-1] * _WINDOW_S  # per second of grant time: which second, how much cost
        self._count = [0.0] * _WINDOW_S
        self._i = 0  # the slot of the second being counted, which ends at _end
        self._end = float("-inf")
        self.configure(rate, burst_s)

    def configure(self, rate: float, burst_s: float) -> None:
        self.rate = rate
        self._per = 1 / rate if rate > 0 else 0.0
        self.tolerance = burst_s

    def book(self, at: float, cost: float) -> None:
        tat = self.tat
        self.tat = (tat if tat > at else at) + cost * self._per
        if not self._end - 1.0 <= at < self._end:  # a grant in another second than the last one's
            sec = int(at)
            i = self._i = sec % _WINDOW_S
            self._end = sec + 1.0
            if self._sec[i] != sec:
                self._sec[i] = sec
                self._count[i] = 0.0
        self._count[self._i] += cost

    def percent_used(self, now: float) -> float:
        """Cost granted over the last minute as a percentage of what the limit allows."""
        sec = int(now)
        used = sum(c for s, c in zip(self._sec, self._count) if sec - _WINDOW_S < s <= sec)
        return 100.0 * used / (self.rate * _WINDOW_S)


def grant(limits: Sequence[IopsLimit], now: float, cost: float) -> float:
    """Book `cost` operations on every limit in `limits`; the time they allow it."""
    if len(limits) == 1:  # the common case (one limit applies), without the loops
        limit = limits[0]
        t = limit.tat - limit.tolerance
        at = t if t > now else now
        limit.book(at, cost)
        return at
    at = now
    for limit in limits:
        t = limit.tat - limit.tolerance
        if t > at:
            at = t
    for limit in limits:
        limit.book(at, cost)
    return at
