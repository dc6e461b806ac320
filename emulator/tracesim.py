"""A recorded workload run through the NFS client and the model in virtual time,
repeated back to back for as long as asked: burst credits, permitted throughput and
the time operations waited, sampled as it goes.

In closed loop (`closed`) each operation of a chain (a thread's, or a process's) is
made once those it waited for in the recording have completed, its think time kept
(chains.py): on a slower file system the job stretches, and repetition r + 1 starts
when repetition r's last operation completes.  In open loop every operation is
admitted at its recorded time (a slower file system does not delay the next one, so
where the workload asks for more than the file system gives, the queue grows and the
operations' wait with it), and repetition r runs the same operations shifted by r x
the workload's span; so are operations of no chain in closed loop.

Simulating every operation of a week of a one-minute workload would take many minutes,
so whole repetitions are fast-forwarded while nothing changes regime.  After `STEADY`
repetitions (not counting the first, whose caches start cold; in closed loop
`CLOSED_STEADY`, the first counted: its length says how cold it began) that did the same
work (metered bytes within `SAME_WORK` of one another, and in closed loop in lengths
within that share too) without moving the client's network credits:

- **periodic**: their queues at the end did not grow.  Either the credit balance stayed
  where it was (at its cap; elastic throughput) and the rest is skipped, or it stayed
  away from zero and from its cap, moving by the same `delta` each time (what the
  baseline earns over the span, less the metered bytes): repetitions are skipped until
  it is `MARGIN` (`CLOSED_MARGIN`) repetitions from where it could reach zero within one
  (as low as it was seen to dip) or its cap, `Model.set` puts it where the skipped ones
  would have left it, and the simulation goes on op by op from there, through the change
  (with the model's queues empty: a steady backlog at the skip's start is dropped);
- **saturated** (open loop only: in closed loop the job waits instead): the queue
  carried from one into the next grew by a steady amount, and the operations' waits with
  it (the workload asks more than is permitted), and it is past every wait and queue of
  the repetitions before them (the first half of all, at most: where the span is not
  much longer than the operations' latencies, what they carry past its end comes and
  goes, and can rise three times in a row by chance). The rest is extrapolated as a
  fluid queue: bytes arrive at the workload's metered rate and are served at the rate
  the last repetitions were (what their queue's growth says) while the balance lasts (it
  falls by `delta` a repetition), then at the lower of that and the baseline; an
  operation waits until the queue ahead of it has passed, so the operations' mean wait
  grows by the share of that the last repetitions measured, and once the buffered data
  queued reaches the client's dirty limit (writers wait from then on) by the share of
  operations the client sends; the longest by all of it where that share is not 0, and
  then the share is at least one operation a repetition (that longest one): the waits'
  total is never below the longest.

Otherwise the next repetition is simulated op by op.  `Result.spans` says which
stretches were simulated op by op and which extrapolated; so does each sample.  The
balance is looked at in every sample, and after an operation whenever it could have
reached zero by then (it falls at most at burst less baseline): the cliff is the first
moment it is seen at zero, the time of an operation or a sample.  Pure and
clock-free, like the model.
"""

import math
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from .call import Call
from .chains import Chains, Pending
from .model import Model
from .nfsclient import NfsClient
from .ops import Admission, Gate
from .repetition import GROWING, SAME_WORK, Rep, alike, mean, queue, queue_growth
from .samples import Sample, coarsened
from .throughput import fs_pipe_rates

STEADY = 3  # repetitions alike in a row before any is extrapolated
# In closed loop, two: no queue of the workload's own can rise in a row by chance (the job
# waits instead), and a pass's length is compared besides its work
CLOSED_STEADY = 2
MARGIN = 2  # repetitions of credits left between a skip's end and the balance's zero or cap
# In closed loop, one: a pass to refill the model's queues, which a skip empties, before the one in which
# the balance could reach zero (the balance after a skip is set to what the skipped ones left)
CLOSED_MARGIN = 1
_CACHE = Gate.CACHE
_KERNEL = Gate.KERNEL


# A workload's operation: its recorded start and end (s), its chain (the thread or process
# that made it; -1: none, made at its recorded time), and the call.
Timed = tuple[float, float, int, Call]


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
    job: float | None  # the first pass's length as simulated, its first recorded start to its last completion
    # (s); None: it did not end in the time simulated
    chains: dict[int, tuple[float, float, float]]  # closed loop: each chain's first pass, its first
    # recorded start, last recorded end and last completion as simulated (s)
    period: float  # a repetition's length where `delta` was found (the span in open loop)
    steady: float | None  # closed loop: the length of the last repetitions skipped (None: none were)
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


class TraceSim:
    """`calls()` gives one pass of the workload (its operations as (time, call), in time order)
    each time it is called; the first is at `first`.  The model starts at
    `origin` (<= first); repetition r is shifted by r x `span`.  A sample is taken every
    `every` seconds.  `closed`: in closed loop (the operations' chains wait for one
    another) rather than open.  `admitted(call, t, admission)`, if given, sees each
    operation simulated op by op.  `clients`: a fleet's, one a host sharing `model`'s file
    system (Model's `fs`), each call to its `host`'s (default: one client of `model`).
    `pending`: makes a chain's queue of operations read but not yet made (chains.py's
    Pending; a fleet's keeps most of a long one out of memory)."""

    def __init__(
        self,
        model: Model,
        calls: Callable[[], Iterable[Timed]],
        *,
        origin: float,
        first: float,
        span: float,
        every: float,
        closed: bool = False,
        admitted: Callable[[Call, float, Admission], None] | None = None,
        clients: Sequence[NfsClient] | None = None,
        pending: Callable[[], Pending] = deque,
    ):
        if span <= 0 or every <= 0 or first < origin:
            raise ValueError("span and every must be above 0, and the origin not after the first call")
        self.model, self.clients = model, list(clients) if clients else [NfsClient(model)]
        self.calls, self.origin, self.first, self.span, self.every = calls, origin, first, span, every
        self.closed, self.pending = closed, pending
        self.period = span  # a repetition's length: the span, or in closed loop what the steady ones took
        self._bounds: dict[int, float] = {0: origin}  # closed loop: when repetition r starts, once known
        self._pass_ops = 0  # operations in a whole pass
        self.job: float | None = None
        self.steady: float | None = None  # closed loop: the length of the last passes skipped
        self.chains: dict[int, tuple[float, float, float]] = {}
        self._delta_period = span
        self.admitted = admitted
        self.most: int | None = None
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

    def run(self, duration: float | None, most: int | None = None) -> Result:
        """Simulate `duration` virtual seconds from the origin (None: one pass, until its
        last operation completes).  `most`: in one pass, at most about this many samples
        (its length is not known beforehand, and may be far longer than recorded: an
        operation of a chain completing days later delays the rest): the interval between
        them is doubled, and those taken merged, as often as needed."""
        self.most = most if duration is None else None
        stop = self.origin + duration if duration is not None else math.inf
        start = self.model.metrics(self.origin)
        reps: list[Rep] = []
        held: list[float] = []  # the longest wait, operation or queue of reps[:i + 1], for each i
        r = 0
        while self._boundary(r) < stop:
            rep = self._simulate(r, stop)
            if duration is None:
                stop = max(rep.last_done, self.origin)
                break
            if r > 0 or self.closed:  # in closed loop the first too: its length says how cold it began
                reps.append(rep)
                held.append(max(held[-1] if held else 0.0, rep.max_wait, rep.longest, queue(rep)))
            r += 1
            need = CLOSED_STEADY if self.closed else STEADY
            steady = reps[-need:]
            if self._boundary(r) >= stop or len(steady) < need or not alike(steady):
                continue
            if self.closed:
                lengths = [x.length for x in steady]
                if max(lengths) - min(lengths) > SAME_WORK * max(lengths):
                    continue
                self.period = mean(lengths)
            if self.cliff is None and self.delta is None:
                self.delta, self._delta_period = mean([x.delta for x in steady]), self.period
            growth = queue_growth(steady, self.period)
            if growth is not None and growth > GROWING * self.period:
                if self.closed:  # the job's own waits: it has no queue of its own to extrapolate
                    continue
                # A queue that comes and goes with the operations' latencies (a span not much
                # longer than they are) can rise three times in a row by chance: saturated once it
                # is past every wait, operation and queue of the repetitions before these (the first
                # half of them, at most); a backlog shorter than one operation's own time is none
                earlier = min(len(reps) - STEADY, len(reps) // 2)
                if earlier > 0 and queue(steady[0]) > held[earlier - 1]:
                    return self._fluid(r, stop, steady, growth, start)
                continue
            skip = self._skip(r, stop, steady) if growth is not None else 0
            if skip:
                if self.closed:
                    self.steady = self.period
                if self._jump(r, skip, steady, stop):
                    break
                r += skip
                reps.clear()
                held.clear()
        self._sample_until(stop)
        end = self.model.metrics(stop)
        self._observe(stop, end)
        return self._result(stop, start, end, False)

    # ---- op by op --------------------------------------------------------------------

    def _boundary(self, r: int) -> float:
        if self.closed:
            return self._bounds[r]
        return self.origin if r == 0 else self.first + r * self.span

    def _simulate(self, r: int, stop: float) -> Rep:
        """Repetition r, op by op, up to `stop` (in closed loop, up to its last operation's
        completion: the next repetition's start)."""
        begin = self._boundary(r)
        end = stop if self.closed else min(self._boundary(r + 1), stop)
        self._sample_until(begin)
        m = self.model.metrics(begin)
        self._observe(begin, m)
        rep = Rep(m["BurstCreditBalance"], m["ClientNetworkCreditBalance"], m["MeteredIOBytes"])
        shift = begin - self.first if r else 0.0
        admitted, metrics = self.admitted, self.model.metrics
        admits = [x.admit for x in self.clients]  # a fleet's: each call to its host's client
        admit = admits[0] if len(admits) == 1 else (lambda c, t: admits[c.host](c, t))

        # The balance is looked at where it could first be zero: it falls at most at burst
        # less baseline (`fall`).  Where it is lowest, at the end of a busy stretch, it has
        # since earned at most `earn` for the time until it is looked at again (`low`).
        hi, _, earn, _ = fs_pipe_rates(self.model.params, m["StorageBytes"])
        fall = hi - earn if self.model.params.throughput_mode != "elastic" else 0.0
        low, before = rep.balance, begin
        look = begin + rep.balance / fall if fall > 0 else math.inf

        def one(c: Call, t: float) -> float:
            """Admit c at t: when it completes."""
            nonlocal low, before, look
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
            return a.done_at

        chains = Chains(shift, self.pending) if self.closed else None
        cut = False  # stopped before the pass's end
        heap = chains.heap if chains is not None else []
        for at, last, key, c in self.calls():
            t = at + shift
            if chains is not None:
                if heap and heap[0][0] <= t and chains.make(t, stop, one):
                    cut = True
                    break
                if key >= 0:
                    chains.add(at, last, key, c)
                    continue
            if t >= stop:
                cut = True
                break
            one(c, t)
        else:
            if chains is not None:
                cut = chains.make(math.inf, stop, one)
        if self.closed:
            end = stop if cut else max(rep.last_done, begin)
            self._bounds[r + 1] = end
        if not cut and r == 0:
            self.job, self._pass_ops = rep.last_done - self.first, rep.ops
            if chains is not None:
                self.chains = {k: (x.first, x.last_end, x.last_done) for k, x in chains.chains.items()}
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
        rep.length = end - begin
        reps = (end - begin) / self.span  # in closed loop: the share of a pass's operations made
        if self.closed:
            reps = 1.0 if not cut else rep.ops / self._pass_ops if self._pass_ops else reps
        self.spans.append(Span(begin - self.origin, end - self.origin, True, reps))
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
        while self.most is not None and self.samples and self._taken + (t - self._next) / self.every > self.most:
            self.every *= 2
            self.samples = coarsened(self.samples, self.every)
            self._taken = int(self.samples[-1].t / self.every + 1e-9) + 1
            self._next = self.origin + self._taken * self.every
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

    def _skip(self, r: int, stop: float, reps: list[Rep]) -> int:
        """How many whole repetitions from r on may be skipped (0: none)."""
        whole = int((stop - self._boundary(r)) / self.period + 1e-9)
        if self.model.params.throughput_mode == "elastic":
            return whole
        balances = [x.balance for x in reps] + [reps[-1].end_balance]
        if max(balances) - min(balances) <= 1.0:  # it stays where it is: at its cap, or earned as spent
            return whole
        _, _, earn, cap = fs_pipe_rates(self.model.params, self.model.metrics(self._boundary(r))["StorageBytes"])
        dip = max(x.balance - x.low for x in reps)  # how far the balance may fall within a repetition
        if any(b <= dip or b + earn * self.period >= cap for b in balances):
            return 0  # it reached, or could reach, zero or its cap within a repetition
        delta = mean([x.delta for x in reps])
        b = reps[-1].end_balance
        room = (b - dip) / -delta if delta < 0 else (cap - earn * self.period - b) / delta
        return max(0, min(whole, int(room) - (CLOSED_MARGIN if self.closed else MARGIN)))

    def _jump(self, r: int, skip: int, reps: list[Rep], stop: float) -> bool:
        """Skip repetitions r .. r + skip - 1, extrapolated from `reps`, and set the
        balance to what they would have left.  Where they are every whole one left, the
        part of one after them is skipped too, to `stop`: True."""
        begin = self._boundary(r)
        rest = skip == int((stop - begin) / self.period + 1e-9)
        if self.closed:
            self._bounds[r + skip] = stop if rest else begin + skip * self.period
        end = stop if rest else self._boundary(r + skip)
        b, delta = reps[-1].end_balance, mean([x.delta for x in reps])
        work, ops, waited = (
            mean([x.work for x in reps]),
            mean([float(x.ops) for x in reps]),
            mean([x.waited for x in reps]),
        )
        m = self.model.metrics(begin)
        permitted = m["PermittedThroughput"]
        if self.cliff is not None and min(x.low for x in reps) <= 0 and self.model.params.throughput_mode != "elastic":
            # spent as earned: a burst of what was earned since, then the baseline again, in each
            permitted = fs_pipe_rates(self.model.params, m["StorageBytes"])[1]
        longest = max(x.max_wait for x in reps)
        self._extrapolate(
            begin,
            end,
            lambda t: b + delta * (t - begin) / self.period,
            lambda t: permitted,
            work,
            ops,
            lambda t: waited / max(ops, 1.0),
            lambda t: longest,
        )
        skipped = (end - begin) / self.period if rest else skip
        self.model.set("burst_credit_balance", b + delta * skipped, end)
        self.spans.append(Span(begin - self.origin, end - self.origin, False, skipped))
        return rest

    def _fluid(self, r: int, stop: float, reps: list[Rep], growth: float, start: dict[str, float]) -> Result:
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
        delta = mean([x.delta for x in reps])
        work, ops = mean([x.work for x in reps]), mean([float(x.ops) for x in reps])
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

        queue0 = served(queue(last))  # bytes queued at begin

        def drain(s: float) -> float:
            return when(queue0 + demand * s) - s

        waits = [x.waited / max(x.ops, 1) for x in reps]
        wait0, grew = waits[-1], waits[-1] - waits[-2]
        share = min(1.0, max(0.0, grew / growth))
        if share:  # the longest wait, which grows with the queue, is one of a repetition's operations
            share = max(share, 1.0 / max(ops, 1.0))
        # The client's dirty data grows with the queue: when it reaches its limit (s after begin).
        limit = self.model.params.client_dirty_limit
        filling = mean([b.dirty - a.dirty for a, b in pairwise(reps)]) / ((demand - rate) * span)
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
        rate = ops / self.period  # operations a second

        # Waits over [a, b), by the midpoint rule over pieces of at most a repetition (at most 64:
        # wait(t) is piecewise linear, with two kinks at most)
        def waited(a: float, b: float) -> float:
            n = max(1, min(64, math.ceil((b - a) / self.period)))
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
                    metered + work * (at - begin) / self.period,
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
        reps = (end - begin) / self.period
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
        reps = sum(x.reps for x in spans) if self.closed else max(0.0, (stop - self.first) / self.span)
        return Result(
            self.samples,
            self.job,
            self.chains,
            self._delta_period,
            self.steady,
            spans,
            reps,
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
