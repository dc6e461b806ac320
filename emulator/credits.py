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
"""


class CreditPipe:
    __slots__ = ("balance", "cap", "earn", "free_at", "hi", "lo", "zero_at")

    def __init__(self, hi: float, lo: float, earn: float, cap: float, balance: float, now: float):
        self.hi, self.lo, self.earn, self.cap = hi, lo, earn, cap
        self.free_at = now
        self.balance = min(balance, cap)
        self.zero_at = now if self.balance <= 0 else None

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
        value = max(0.0, min(value, self.cap))
        left = self.free_at - now
        spend = self.hi - self.earn
        if spend <= 0 or value >= spend * left:
            self.balance = value - max(spend, 0.0) * left
            self.zero_at = None if self.balance > 0 else now
        else:
            self.balance = 0.0
            self.zero_at = now + value / spend

    def _idle_until(self, t: float) -> None:
        if t > self.free_at:
            if self.balance < self.cap:
                self.balance = min(self.cap, self.balance + self.earn * (t - self.free_at))
            self.free_at = t
