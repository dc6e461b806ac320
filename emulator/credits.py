"""A throughput limit with burst credits: a first-come-first-served fluid pipe.

Bytes pass one after another at `hi` while the credit balance lasts and at `lo`
once it is spent.  While busy at `hi` the balance falls at hi - earn; while idle
it rises at `earn`, up to `cap`.  With earn = lo = baseline and hi = burst this
is EFS's bursting mode (credits earn at baseline minus metered rate, spend
above it); with hi = lo and no balance it is a plain rate limit.

Everything is decided when bytes arrive (deadline shaping), so the state is
kept at `free_at`, the time the queued bytes will have passed: `balance` is the
balance then, and `zero_at` when the queued bytes emptied it, if they did.
Changes of rate or balance apply to bytes that arrive after the change; bytes
already queued keep the times they were given.

The pipe also keeps when its balance was at zero (`stretches`): the report
and `fusetrace stats` say from it when credits ran out and for how long the low rate
held the bytes.  Only the pipe knows every such stretch, including those shorter
than any sampling of its balance, and it learns of one when the balance leaves zero:
a few operations per stretch, and one comparison when bytes reach an idle pipe.
"""

import math

JOIN_S = 1.0  # stretches at zero this close together are one: the credits earned between last milliseconds
KEEP = 256  # stretches kept; past it the two oldest are joined (a bound on the trace's metadata)


class CreditPipe:
    __slots__ = ("balance", "cap", "earn", "emptied", "free_at", "hi", "lo", "zero_at")

    def __init__(self, hi: float, lo: float, earn: float, cap: float, balance: float, now: float):
        self.hi, self.lo, self.earn, self.cap = hi, lo, earn, cap
        self.free_at = now
        self.balance = min(balance, cap)
        self.zero_at = now if self.balance <= 0 else None
        # the stretches the balance was at zero that are over, [from, to, the low rate
        # then], in time order; stretches() adds the current one
        self.emptied: list[list[float]] = []

    def configure(self, hi: float, lo: float, earn: float, cap: float, now: float) -> None:
        """New rates from `now` on; idle time until now earns at the old rate."""
        self._idle_until(now)
        self.hi, self.lo, self.earn, self.cap = hi, lo, earn, cap
        self.balance = min(self.balance, cap)

    def transmit(self, now: float, nbytes: float) -> float:
        """Queue nbytes arriving at `now`; the time the last of them has passed."""
        start, bal, hi, earn = self.free_at, self.balance, self.hi, self.earn
        if now > start:  # idle since the last bytes passed: earning (_idle_until, inline: once per request)
            if bal < self.cap:
                if bal <= 0.0:
                    self._refilled(start)
                bal = min(self.cap, bal + earn * (now - start))
            start = now
        spend = hi - earn
        t_hi = nbytes / hi
        if spend <= 0 or bal >= t_hi * spend:
            end = start + t_hi
            self.balance = bal - t_hi * spend if spend > 0 else bal
        else:  # the balance runs out part way: the rest passes at lo
            t1 = bal / spend
            end = start + t1 + (nbytes - hi * t1) / self.lo
            self.balance = 0.0
            if bal > 0:
                self.zero_at = start + t1
        self.free_at = end
        return end

    def balance_at(self, t: float) -> float:
        """The balance at time t (not before the last arrival)."""
        if t >= self.free_at:
            return min(self.cap, self.balance + self.earn * (t - self.free_at))
        spend = self.hi - self.earn
        if self.balance > 0:  # busy at hi all the way to free_at
            return min(self.cap, self.balance + spend * (self.free_at - t))
        if self.zero_at is not None and t < self.zero_at:
            return min(self.cap, spend * (self.zero_at - t))
        return 0.0

    def rate_at(self, t: float) -> float:
        """The throughput permitted at time t: hi while there are credits, else lo."""
        return self.hi if self.balance_at(t) > 0 else self.lo

    def set_balance(self, value: float, now: float) -> None:
        """Make the balance at `now` equal value (within the cap); queued bytes are
        taken to spend credits from it as they pass."""
        self._idle_until(now)
        if self.balance <= 0:
            self._refilled(now)  # a stretch at zero until now (one that was to begin later never does)
        value = max(0.0, min(value, self.cap))
        left = self.free_at - now
        spend = self.hi - self.earn
        if spend <= 0 or value >= spend * left:
            self.balance = value - max(spend, 0.0) * left
            self.zero_at = None if self.balance > 0 else now
        else:
            self.balance = 0.0
            self.zero_at = now + value / spend

    def stretches(self, now: float) -> list[tuple[float, float | None, float]]:
        """The stretches the balance was at zero up to `now`: (from, to, the low rate
        then), to None for one that lasts at `now`; in time order."""
        out = [s.copy() for s in self.emptied]
        z = self.zero_at
        if self.balance <= 0 and z is not None and z <= now and z < self.free_at:
            _join(out, z, self.free_at if self.free_at <= now else math.inf, self.lo)
        return [(a, None if b == math.inf else b, lo) for a, b, lo in out]

    def _refilled(self, t: float) -> None:
        """The balance leaves zero at t (by then the queued bytes have passed, or it was
        set): the stretch since zero_at is over."""
        z = self.zero_at
        if z is not None and t > z:
            _join(self.emptied, z, t, self.lo)

    def _idle_until(self, t: float) -> None:
        if t > self.free_at:
            if self.balance < self.cap:
                if self.balance <= 0:
                    self._refilled(self.free_at)
                self.balance = min(self.cap, self.balance + self.earn * (t - self.free_at))
            self.free_at = t


def _join(emptied: list[list[float]], start: float, end: float, lo: float) -> None:
    """Add the stretch at zero [start, end) to `emptied`, joined to the last if close."""
    if emptied and start - emptied[-1][1] < JOIN_S:
        emptied[-1][1:] = [end, lo]
        return
    emptied.append([start, end, lo])
    if len(emptied) > KEEP:
        emptied[1][0] = emptied[0][0]
        del emptied[0]
