"""A recorded workload run through the NFS client and the model in virtual time,
repeated back to back for as long as asked: burst credits, permitted throughput and
the time operations waited, sampled as it goes.

Each operation is admitted at its recorded time (open loop: a slower file system does
not delay the next one, so where the workload asks for more than the file system
gives, the queue grows and the operations' wait with it; a real application would be
slowed down by about that wait instead).  Repetition r runs the same operations
shifted by r x the workload's span.

Simulating every operation of a week of a one-minute workload would take many minutes,
so whole repetitions are fast-forwarded while nothing changes regime.  After
`STEADY` repetitions (not counting the first, whose caches start cold) that did the
same work (metered bytes within `SAME_WORK` of one another) without moving the
client's network credits:

- **periodic**: their queues at the end did not grow.  Either the credit balance stayed
  where it was (at its cap; elastic throughput) and the rest is skipped, or it stayed
  away from zero and from its cap, moving by the same `delta` each time (what the
  baseline earns over the span, less the metered bytes): repetitions are skipped
  until it is `MARGIN` repetitions from where it could reach zero within one (as low
  as it was seen to dip) or its cap, `Model.set` puts it where the skipped ones would
  have left it, and the simulation goes on op by op from there, through the change
  (with the model's queues empty: a steady backlog at the skip's start is dropped);
- **saturated**: the queue carried from one into the next grew by a steady amount, and
  the operations' waits with it (the workload asks more than is permitted), and it is
  past every wait and queue of the repetitions before them (the first half of all, at
  most: where the span is not much longer than the operations' latencies, what they
  carry past its end comes and goes, and can rise three times in a row by chance).
  The rest is extrapolated as a fluid queue: bytes arrive at the workload's metered
  rate and are served at the rate the last repetitions were (what their queue's growth
  says) while the balance lasts (it falls by `delta` a repetition), then at the lower
  of that and the baseline; an operation waits until the queue ahead of it has
  passed, so the operations' mean wait grows by the share of that the last
  repetitions measured, and once the buffered data queued reaches the client's dirty limit (writers wait
  from then on) by the share of operations the client sends; the longest by all of
  it where that share is not 0, and then the share is at least one operation a
  repetition (that longest one): the waits' total is never below the longest.

Otherwise the next repetition is simulated op by op.  `Result.spans` says which
stretches were simulated op by op and which extrapolated; so does each sample.  The
balance is looked at in every sample, and after an operation whenever it could have
reached zero by then (it falls at most at burst less baseline): the cliff is the first
moment it is seen at zero, the time of an operation or a sample.  Pure and
clock-free, like the model.
"""

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import pairwise

from .call import Call
from .model import Model
from .nfsclient import NfsClient
from .ops import Admission, Gate
from .throughput import fs_pipe_rates

STEADY = 3  # repetitions alike in a row before any is extrapolated
SAME_WORK = 0.05  # their metered bytes within this share of one another
MARGIN = 2  # repetitions of credits left between a skip's end and the balance's zero or cap
GROWING = 0.01  # a queue growing by more than this share of the span a repetition is saturated
_CACHE = Gate.CACHE
_KERNEL = Gate.KERNEL


# A workload's operation: the time (s) it is made at, and the call.
Timed = tuple[float, Call]


@dataclass
class Sample:
    """The model at `t` (s since the origin), and the operations admitted since the
    sample before (extrapolated: their share of a repetition's)."""

    t: float
    balance: float  # BurstCreditBalance, bytes
    permitted: float  # PermittedThroughput, bytes/s
    metered: float  # MeteredIOBytes since the origin
    ops: float
    waited: float  # their waits for limits, slots and queues, summed (s)
    max_wait: float  # the longest of them (s)
    simulated: bool  # op by op; False: extrapolated


@dataclass
class Span:
    """[start, end) (s since the origin): `reps` repetitions, simulated op by op or not."""

    start: float
    end: float
    simulated: bool
    reps: float


@dataclass
class Result:
    samples: list[Sample]
    spans: list[Span]
    reps: float  # repetitions of the workload in the time simulated
    ops: int  # operations simulated op by op
    ops_total: float  # with the extrapolated ones
    waited: float  # all their waits, summed (s)
    max_wait: float  # the longest (s)
    start_balance: float
    end_balance: float
    least_balance: float  # the lowest the balance was seen at
    end_permitted: float
    metered: float  # MeteredIOBytes in all
    cliff: float | None  # when the credit balance first reached zero (s since the origin); None: never
    cliff_simulated: bool  # that moment was simulated op by op (False: extrapolated)
    after_cliff: float | None  # the throughput permitted once the credits are spent (bytes/s)
    delta: float | None  # the balance's change a repetition, first found steady (None: never, or only after
    # the cliff)
    saturated: bool  # the workload asked more than was permitted: its queue grew without bound


@dataclass
class _Rep:
    """One repetition simulated op by op: the model at its boundaries, and its work."""

    balance: float
    client_balance: float
    metered: float
    ops: int = 0
    waited: float = 0.0
    max_wait: float = 0.0
    longest: float = 0.0  # the longest any of its operations took (s): a queue shorter is none
    last_done: float = -math.inf  # when its last operation completes
    end_balance: float = 0.0
    end_client_balance: float = 0.0
    end_metered: float = 0.0
    end_permitted: float = 0.0
    dirty: float = 0.0  # buffered data not yet written back at its end
    carried: float = 0.0  # how long its work runs on past its end (s)
    sent: int = 0  # operations the client did not answer alone
    low: float = 0.0  # the balance was never below this in it

    @property
    def delta(self) -> float:
        return self.end_balance - self.balance

    @property
    def work(self) -> float:
        return self.end_metered - self.metered


class TraceSim:
    """`calls()` gives one pass of the workload (its operations as (time, call), in time order)
    each time it is called; the first is at `first`.  The model starts at
    `origin` (<= first); repetition r is shifted by r x `span`.  A sample is taken every
    `every` seconds.  `admitted(call, t, admission)`, if given, sees each operation
    simulated op by op."""

    def __init__(
        self,
        model: Model,
        calls: Callable[[], Iterable[Timed]],
        *,
        origin: float,
        first: float,
        span: float,
        every: float,
        admitted: Callable[[Call, float, Admission], None] | None = None,
    ):
        if span <= 0 or every <= 0 or first < origin:
            raise ValueError("span and every must be above 0, and the origin not after the first call")
        self.model, self.client = model, NfsClient(model)
        self.calls, self.origin, self.first, self.span, self.every = calls, origin, first, span, every
        self.admitted = admitted
        self.samples: list[Sample] = []
        self.spans: list[Span] = []
        self._taken = 0  # samples taken; the next is due at origin + taken x every
        self._next = origin
        self._ops = self._waited = self._max = 0.0  # the open interval's operations, their waits, the longest
        self._extra = [0.0, 0.0, 0.0]  # extrapolated so far: metered bytes, operations, waits
        self.ops = 0
        self.waited = self.max_wait = 0.0
        self.least = math.inf
        self.cliff: float | None = None
        self.cliff_simulated = False
        self.after_cliff: float | None = None
        self.delta: float | None = None  # the balance's change a repetition in the first steady stretch

    def run(self, duration: float) -> Result:
        """Simulate `duration` virtual seconds from the origin."""
        stop = self.origin + duration
        start = self.model.metrics(self.origin)
        reps: list[_Rep] = []
        held: list[float] = []  # the longest wait, operation or queue of reps[:i + 1], for each i
        r = 0
        while self._boundary(r) < stop:
            rep = self._simulate(r, stop)
            if r > 0:
                reps.append(rep)
                held.append(max(held[-1] if held else 0.0, rep.max_wait, rep.longest, _queue(rep)))
            r += 1
            steady = reps[-STEADY:]
            if self._boundary(r) >= stop or len(steady) < STEADY or not _alike(steady):
                continue
            if self.cliff is None and self.delta is None:
                self.delta = _mean([x.delta for x in steady])
            growth = _growth(steady, self.span)
            if growth is not None and growth > GROWING * self.span:
                # A queue that comes and goes with the operations' latencies (a span not much
                # longer than they are) can rise three times in a row by chance: saturated once it
                # is past every wait, operation and queue of the repetitions before these (the first
                # half of them, at most); a backlog shorter than one operation's own time is none
                earlier = min(len(reps) - STEADY, len(reps) // 2)
                if earlier > 0 and _queue(steady[0]) > held[earlier - 1]:
                    return self._fluid(r, stop, steady, growth, start)
                continue
            skip = self._skip(r, stop, steady) if growth is not None else 0
            if skip:
                self._jump(r, skip, steady)
                r += skip
                reps.clear()
                held.clear()
        self._sample_until(stop)
        end = self.model.metrics(stop)
        self._observe(stop, end)
        return self._result(stop, start, end, False)

    # ---- op by op --------------------------------------------------------------------

    def _boundary(self, r: int) -> float:
        return self.origin if r == 0 else self.first + r * self.span

    def _simulate(self, r: int, stop: float) -> _Rep:
        """Repetition r, op by op, up to `stop`."""
        begin, end = self._boundary(r), min(self._boundary(r + 1), stop)
        self._sample_until(begin)
        m = self.model.metrics(begin)
        self._observe(begin, m)
        rep = _Rep(m["BurstCreditBalance"], m["ClientNetworkCreditBalance"], m["MeteredIOBytes"])
        shift = r * self.span
        admit, admitted, metrics = self.client.admit, self.admitted, self.model.metrics
        # The balance is looked at where it could first be zero: it falls at most at burst
        # less baseline (`fall`).  Where it is lowest, at the end of a busy stretch, it has
        # since earned at most `earn` for the time until it is looked at again (`low`).
        hi, _, earn, _ = fs_pipe_rates(self.model.params, m["StorageBytes"])
        fall = hi - earn if self.model.params.throughput_mode != "elastic" else 0.0
        low, before = rep.balance, begin
        look = begin + rep.balance / fall if fall > 0 else math.inf
        for at, c in self.calls():
            t = at + shift
            if t >= stop:
                break
            if t >= self._next:
                self._sample_until(t)
            a = admit(c, t)
            w = a.wait
            rep.ops += 1
            rep.waited += w
            if w > rep.max_wait:
                rep.max_wait = w
            if a.done_at > rep.last_done:
                rep.last_done = a.done_at
            took = a.done_at - t
            if took > rep.longest:
                rep.longest = took
            if a.gate is not _CACHE and a.gate is not _KERNEL:
                rep.sent += 1
            self._ops += 1
            self._waited += w
            if w > self._max:
                self._max = w
            if t >= look:
                seen = metrics(t)
                self._observe(t, seen)
                balance = seen["BurstCreditBalance"]
                low, before, look = min(low, balance - earn * (t - before)), t, t + balance / fall
                if low <= 0 and self.cliff is not None:
                    look = math.inf  # nothing more to learn in this repetition
            if admitted is not None:
                admitted(c, t, a)
        self.ops += rep.ops
        self.waited += rep.waited
        self.max_wait = max(self.max_wait, rep.max_wait)
        self._sample_until(end)
        m = self.model.metrics(end)
        self._observe(end, m)
        rep.end_balance, rep.end_client_balance = m["BurstCreditBalance"], m["ClientNetworkCreditBalance"]
        rep.end_metered, rep.end_permitted, rep.dirty = m["MeteredIOBytes"], m["PermittedThroughput"], m["DirtyBytes"]
        rep.carried = max(0.0, rep.last_done - end)
        rep.low = min(low, rep.end_balance - earn * (end - before))
        self.spans.append(Span(begin - self.origin, end - self.origin, True, (end - begin) / self.span))
        return rep

    def _observe(self, t: float, m: dict[str, float]) -> None:
        """Note the balance at t: the lowest yet, and the cliff when it first reaches zero."""
        balance = m["BurstCreditBalance"]
        self.least = min(self.least, balance)
        if balance <= 0 and self.cliff is None and self.model.params.throughput_mode != "elastic":
            self.cliff, self.cliff_simulated = t - self.origin, True
            self.after_cliff = fs_pipe_rates(self.model.params, m["StorageBytes"])[1]

    def _sample_until(self, t: float) -> None:
        """Take the samples due by t (the model has seen every operation before them)."""
        while self._next <= t:
            at = self._next
            m = self.model.metrics(at)
            self._observe(at, m)
            self.samples.append(
                Sample(
                    at - self.origin,
                    m["BurstCreditBalance"],
                    m["PermittedThroughput"],
                    m["MeteredIOBytes"] + self._extra[0],
                    self._ops,
                    self._waited,
                    self._max,
                    True,
                )
            )
            self._ops = self._waited = self._max = 0.0
            self._taken += 1
            self._next = self.origin + self._taken * self.every

    # ---- fast-forward ----------------------------------------------------------------

    def _skip(self, r: int, stop: float, reps: list[_Rep]) -> int:
        """How many whole repetitions from r on may be skipped (0: none)."""
        whole = int((stop - self._boundary(r)) / self.span + 1e-9)
        if self.model.params.throughput_mode == "elastic":
            return whole
        balances = [x.balance for x in reps] + [reps[-1].end_balance]
        if max(balances) - min(balances) <= 1.0:  # it stays where it is: at its cap, or earned as spent
            return whole
        _, _, earn, cap = fs_pipe_rates(self.model.params, self.model.metrics(self._boundary(r))["StorageBytes"])
        dip = max(x.balance - x.low for x in reps)  # how far the balance may fall within a repetition
        if any(b <= dip or b + earn * self.span >= cap for b in balances):
            return 0  # it reached, or could reach, zero or its cap within a repetition
        delta = _mean([x.delta for x in reps])
        b = reps[-1].end_balance
        room = (b - dip) / -delta if delta < 0 else (cap - earn * self.span - b) / delta
        return max(0, min(whole, int(room) - MARGIN))

    def _jump(self, r: int, skip: int, reps: list[_Rep]) -> None:
        """Skip repetitions r .. r + skip - 1, extrapolated from `reps`, and set the
        balance to what they would have left."""
        begin, end = self._boundary(r), self._boundary(r + skip)
        b, delta = reps[-1].end_balance, _mean([x.delta for x in reps])
        work, ops, waited = (
            _mean([x.work for x in reps]),
            _mean([float(x.ops) for x in reps]),
            _mean([x.waited for x in reps]),
        )
        permitted = self.model.metrics(begin)["PermittedThroughput"]
        longest = max(x.max_wait for x in reps)
        self._extrapolate(
            begin,
            end,
            lambda t: b + delta * (t - begin) / self.span,
            lambda t: permitted,
            work,
            ops,
            lambda t: waited / max(ops, 1.0),
            lambda t: longest,
        )
        self.model.set("burst_credit_balance", b + delta * skip, end)
        self.spans.append(Span(begin - self.origin, end - self.origin, False, skip))

    def _fluid(self, r: int, stop: float, reps: list[_Rep], growth: float, start: dict[str, float]) -> Result:
        """Extrapolate from repetition r to `stop` as a fluid queue and give the result.

        The workload's metered bytes arrive at `demand` a second; the queue is served at
        `rate`, what the last repetitions were served at (its growth says), until the
        balance is spent, and at the lower of that and the baseline from then on.  An
        operation arriving s seconds after `begin` is served once the queue ahead of it
        has passed: `drain(s)`.  The operations' mean wait grows by the share of that the
        last repetitions measured, and once the buffered data queued reaches the client's
        dirty limit (writers then wait too), by the share of operations the client sends;
        the longest wait grows by all of it while that share is not 0 (nothing waits for
        write-back alone until the limit), and the share is then at least one operation a
        repetition's (that longest one), so that the waits' total is never below it."""
        begin, span = self._boundary(r), self.span
        last = reps[-1]
        delta = _mean([x.delta for x in reps])
        work, ops = _mean([x.work for x in reps]), _mean([float(x.ops) for x in reps])
        m = self.model.metrics(begin)
        elastic = self.model.params.throughput_mode == "elastic"
        lo = fs_pipe_rates(self.model.params, m["StorageBytes"])[1]
        b = last.end_balance
        # seconds after begin at which the balance is spent (inf: not while this lasts)
        zero = math.inf if elastic else 0.0 if b <= 0 else b / -delta * span if delta < 0 else math.inf
        demand = work / span
        rate = demand * span / (span + growth)
        after = rate if elastic else min(rate, lo)

        def served(s: float) -> float:  # bytes served in the first s seconds
            return rate * min(s, zero) + after * max(0.0, s - zero)

        def when(y: float) -> float:  # the moment the first y bytes have been served
            return y / rate if y <= rate * zero else zero + (y - rate * zero) / after

        queue0 = served(_queue(last))  # bytes queued at begin

        def drain(s: float) -> float:
            return when(queue0 + demand * s) - s

        waits = [x.waited / max(x.ops, 1) for x in reps]
        wait0, grew = waits[-1], waits[-1] - waits[-2]
        share = min(1.0, max(0.0, grew / growth))
        if share:  # the longest wait, which grows with the queue, is one of a repetition's operations
            share = max(share, 1.0 / max(ops, 1.0))
        # The client's dirty data grows with the queue: when it reaches its limit (s after begin).
        limit = self.model.params.client_dirty_limit
        filling = _mean([b.dirty - a.dirty for a, b in pairwise(reps)]) / ((demand - rate) * span)
        full = math.inf
        if filling > 0 and last.dirty < limit:
            lo_s, hi_s = 0.0, 1.0
            while demand * hi_s - served(hi_s) < (limit - last.dirty) / filling and hi_s < 1e12:
                lo_s, hi_s = hi_s, 2 * hi_s
            for _ in range(60):
                mid = (lo_s + hi_s) / 2
                lo_s, hi_s = (mid, hi_s) if demand * mid - served(mid) < (limit - last.dirty) / filling else (lo_s, mid)
            full = hi_s
        share_full = max(share, last.sent / max(last.ops, 1)) if full < math.inf else share
        d0, d_full = drain(0.0), drain(min(full, 1e12))

        def balance(t: float) -> float:
            return b if elastic else max(0.0, b + delta * (t - begin) / span)

        def permitted(t: float) -> float:
            return lo if t - begin >= zero else m["PermittedThroughput"]

        def wait(t: float) -> float:  # an operation's wait at t, on average
            s = t - begin
            if s <= full:
                return wait0 + share * (drain(s) - d0)
            return wait0 + share * (d_full - d0) + share_full * (drain(s) - d_full)

        def worst(t: float) -> float:  # the longest: the queue's, where operations wait for it
            s = t - begin
            if s <= full:
                return last.max_wait + (drain(s) - d0 if share else 0.0)
            return last.max_wait + (d_full - d0 if share else 0.0) + (drain(s) - d_full if share_full else 0.0)

        self._extrapolate(begin, stop, balance, permitted, work, ops, wait, worst)
        if self.cliff is None and begin + zero < stop:
            self.cliff, self.cliff_simulated = begin + zero - self.origin, False
            self.after_cliff = lo
        self.least = min(self.least, balance(stop))
        self.spans.append(Span(begin - self.origin, stop - self.origin, False, (stop - begin) / span))
        end = {**m, "BurstCreditBalance": balance(stop), "PermittedThroughput": permitted(stop)}
        return self._result(stop, start, end, True)

    def _extrapolate(
        self,
        begin: float,
        end: float,
        balance: Callable[[float], float],
        permitted: Callable[[float], float],
        work: float,
        ops: float,
        wait: Callable[[float], float],
        worst: Callable[[float], float],
    ) -> None:
        """Samples due in [begin, end) from a repetition's figures (`work` metered bytes,
        `ops` operations, `wait(t)` their mean wait at t, `worst(t)` the longest), and the
        totals."""
        metered = self.model.metrics(begin)["MeteredIOBytes"] + self._extra[0]
        rate = ops / self.span  # operations a second

        # Waits over [a, b), by the midpoint rule over pieces of at most a repetition (at most 64:
        # wait(t) is piecewise linear, with two kinks at most)
        def waited(a: float, b: float) -> float:
            n = max(1, min(64, math.ceil((b - a) / self.span)))
            step = (b - a) / n
            return sum(rate * step * wait(a + (i + 0.5) * step) for i in range(n))

        prev = begin
        while self._next < end:
            at = self._next
            self._ops += rate * (at - prev)
            self._waited += waited(prev, at)
            self._max = max(self._max, worst(at))
            b = balance(at)
            self.least = min(self.least, b)
            self.samples.append(
                Sample(
                    at - self.origin,
                    b,
                    permitted(at),
                    metered + work * (at - begin) / self.span,
                    self._ops,
                    self._waited,
                    self._max,
                    False,
                )
            )
            self._ops = self._waited = self._max = 0.0
            self._taken += 1
            self._next = self.origin + self._taken * self.every
            prev = at
        self._ops += rate * (end - prev)
        self._waited += waited(prev, end)
        self._max = max(self._max, worst(end))
        reps = (end - begin) / self.span
        self._extra[0] += work * reps
        self._extra[1] += ops * reps
        self._extra[2] += waited(begin, end)
        self.max_wait = max(self.max_wait, worst(end))

    # ---- the answer ------------------------------------------------------------------

    def _result(self, stop: float, start: dict[str, float], end: dict[str, float], saturated: bool) -> Result:
        spans: list[Span] = []
        for s in self.spans:
            if spans and spans[-1].simulated == s.simulated and abs(spans[-1].end - s.start) < 1e-9:
                spans[-1] = Span(spans[-1].start, s.end, s.simulated, spans[-1].reps + s.reps)
            else:
                spans.append(s)
        self.least = min(self.least, end["BurstCreditBalance"])
        metered = end["MeteredIOBytes"] + self._extra[0]
        if self.samples[-1].t < stop - self.origin - 1e-9:  # the last, at the end
            self.samples.append(
                Sample(
                    stop - self.origin,
                    end["BurstCreditBalance"],
                    end["PermittedThroughput"],
                    metered,
                    self._ops,
                    self._waited,
                    self._max,
                    spans[-1].simulated,
                )
            )
        return Result(
            self.samples,
            spans,
            max(0.0, (stop - self.first) / self.span),
            self.ops,
            self.ops + self._extra[1],
            self.waited + self._extra[2],
            self.max_wait,
            start["BurstCreditBalance"],
            end["BurstCreditBalance"],
            self.least,
            end["PermittedThroughput"],
            metered,
            self.cliff,
            self.cliff_simulated,
            self.after_cliff,
            self.delta,
            saturated,
        )


def _alike(reps: list["_Rep"]) -> bool:
    """The repetitions did the same work, and the client's network credits did not move."""
    works = [x.work for x in reps]
    if max(works) - min(works) > SAME_WORK * max(max(works), 1.0):
        return False
    return all(abs(x.end_client_balance - x.client_balance) <= 1.0 for x in reps)


def _queue(rep: "_Rep") -> float:
    """The queue at a repetition's end (s): the longer of its work carried past the end and
    its buffered data still to be written back, at the rate permitted."""
    return max(rep.carried, rep.dirty / rep.end_permitted if rep.end_permitted else 0.0)


def _growth(reps: list["_Rep"], span: float) -> float | None:
    """How much the queue grows a repetition (s), when it grows steadily, and the
    operations' mean wait with it, or not at all; else None."""
    for series in ([_queue(x) for x in reps], [x.waited / max(x.ops, 1) for x in reps]):
        growth = [b - a for a, b in pairwise(series)]
        mean = _mean(growth)
        if any(abs(g - mean) > 0.1 * abs(mean) + GROWING * span / 10 for g in growth):
            return None
    return max(_mean([_queue(b) - _queue(a) for a, b in pairwise(reps)]), 0.0)


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)
