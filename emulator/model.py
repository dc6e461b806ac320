"""The model of EFS: given an operation and the time, when it may complete.

Pure and clock-free: time is handed in (`now`, float seconds, non-decreasing)
and everything is decided at admission (deadline shaping).  An operation goes
through these gates, and completes at the latest of them:

1. IOPS: a token from each operations-per-second limit that applies (total,
   and read or write) -- the time the server starts on it;
2. a slot: writes wait for one of their file's write slots, namespace changes
   for one of their directory's slots;
3. its own latency (a lognormal sample for its class) plus transfer time
   (bytes / per-operation stream rate) from then on;
4. the file system's throughput limit, a first-come-first-served pipe of
   metered bytes at the permitted throughput (burst while credits last,
   baseline after; provisioned; elastic), which metadata operations queue in too;
5. the client's own limit, a pipe of real data bytes (network, with its own
   credits; EFS's per-client limit).

Buffered writes are acknowledged by the client at once (unless its dirty data
is at the limit) and written back in the background through the same gates;
a COMMIT waits for its file's dirty data to drain, then pays a round trip.
Which of these operations a system call makes is the NFS client's business
(nfsclient.py), not this model's.  docs/EMULATOR.md explains every parameter
and where it comes from.
"""

import heapq
import itertools
import math
import random
from collections.abc import Mapping
from typing import Any

from .credits import CreditPipe
from .events import Event
from .iops import IopsLimit, grant
from .latency import Lognormal
from .metrics import CLASSES, Counters
from .ops import Admission, Gate, Op, OpClass
from .params import LATENCY_CLASSES, RPC_LATENCIES, MiB, Params, ParamValue, ProfileError
from .profiles import replace_keys
from .slots import OneSlot, SlotPools
from .throughput import client_pipe_rates, elastic_rates, fs_pipe_rates
from .writeback import Writeback

__all__ = ["Admission", "Gate", "Model", "Op", "OpClass", "Params", "Usage"]

Usage = tuple[int, int, int, int, float]  # (class index, file or directory key, operations, bytes, IOPS cost)

_READ, _WRITE, _META_READ, _META_WRITE, _COMMIT = CLASSES
# the gates _serve names on every request, as plain globals: an enum member's lookup
# on its class costs a tenth of a microsecond
_IOPS, _LATENCY = Gate.IOPS, Gate.LATENCY
# per class, in that order: is it a read (read IOPS limit, read factor), does it carry data
_READS = (True, False, True, False, False)
_DATA = (True, True, False, False, False)


class _Route:
    """How operations of one class are served, derived from the parameters."""

    __slots__ = (
        "charge_fixed",
        "charge_per_byte",
        "fixed_bytes",
        "index",
        "latency",
        "limits",
        "metered_fixed",
        "metered_per_byte",
        "pipe",
    )

    # set by Model._configure from the parameters
    charge_fixed: float
    charge_per_byte: float
    fixed_bytes: float
    latency: Lognormal
    limits: tuple[IopsLimit, ...]
    metered_fixed: float
    metered_per_byte: float
    pipe: CreditPipe | None

    def __init__(self, index: int):
        self.index = index


class Model:
    def __init__(self, params: Params, now: float, rng: random.Random | None = None, fs: "Model | None" = None):
        """`fs`: another client's model whose file system this one shares, in one process
        (a fleet simulated together): its IOPS limits, throughput pipes and credits, file
        and directory slots and counters are this one's too, taken in time order by every
        client's requests; the network, the per-client limit and the dirty data stay this
        client's own.  Its metrics then count the whole file system's operations."""
        self.params = params
        self._rng = rng if rng is not None else random.Random(params.seed)
        self._now = now
        self._measured = 0.0  # the backing directory's size, as last applied
        self._measured_pending: float | None = None
        period = params.storage_remeasure_s
        self._next_remeasure = now + period if period > 0 else math.inf
        self._counters = Counters()
        self._routes = tuple(_Route(i) for i in range(len(CLASSES)))
        self._read, self._write, self._meta_read, self._meta_write, self._commit = self._routes
        self._read_limit = IopsLimit(0.0, 0.0)
        self._write_limit = IopsLimit(0.0, 0.0)
        self._total_limit = IopsLimit(0.0, 0.0)
        self._credit = CreditPipe(1.0, 1.0, 0.0, 0.0, 0.0, now)  # rates and balance set below
        self._elastic: tuple[CreditPipe | None, CreditPipe | None] = (None, None)
        self._client: CreditPipe | None = None
        self._files: SlotPools | None = None
        self._stripes: OneSlot | None = None  # a file's stripes, each one slot (params: file_stripe_size)
        self._rpc_latency: dict[str, Lognormal] = {}
        self._dirs: SlotPools | None = None
        self._writeback = Writeback(params.client_dirty_limit)
        self._sets: list[tuple[float, int, dict[str, ParamValue]]] = []  # scheduled `set` events: by time, order
        self._scheduled = itertools.count()  # the order of events scheduled for one instant
        self._stalls: list[tuple[float, float]] = []  # scheduled stalls: (from, to), apart, in time order
        self._stall_events: dict[int, tuple[float, float]] = {}  # each scheduled stall, by its number
        self.refused_events: dict[int, str] = {}  # scheduled sets inconsistent at their instant: number -> why
        self.clients = 1  # clients of the file system (ClientConnections); emulator/shared.py sets it
        self._usage: dict[tuple[int, int], list[Any]] | None = None  # when shared: what went through the shared gates
        # the gates the last request served went through (busy()): its route, and its slot pool and key
        self._last: tuple[_Route, SlotPools | None, int, bool] | None = None
        if fs is not None:
            self._credit, self._elastic, self._counters = fs._credit, fs._elastic, fs._counters
            self._read_limit, self._write_limit, self._total_limit = fs._read_limit, fs._write_limit, fs._total_limit
            self._files, self._dirs, self._stripes = fs._files, fs._dirs, fs._stripes
        self._configure(now)
        if fs is None:
            self._credit.set_balance(params.burst_credit_balance, now)

    # ---- the contract ---------------------------------------------------------------

    def admit(self, op: Op, now: float, after: float = -math.inf) -> Admission:
        """When `op`, arriving at `now`, may complete, and what held it.  The server
        does not start on it before `after` (the client sends it then: a GETATTR
        after a flush); a COMMIT also not before its file's dirty data has drained."""
        if self._now < now < self._next_remeasure and not self._sets:
            self._now = now  # what _advance does in the common case, without the call
        else:
            self._advance(now)
            now = self._now
        cls = op.cls
        n = op.nbytes
        own = self._rpc_latency.get(op.rpc) if self._rpc_latency else None
        if cls is _WRITE:
            if op.write_mode == "buffered":
                return self._buffered_write(op, now)
            done, gate, latency, transfer = self._serve(
                self._write,
                now,
                n,
                max(1, -(-n // self._io_size)),
                self._files,
                op.file,
                self._file_hold,
                after,
                own,
                self._stripe_key(op),
            )
        elif cls is _READ:
            done, gate, latency, transfer = self._serve(
                self._read, now, n, max(1, -(-n // self._io_size)), None, 0, 0.0, after, own
            )
        elif cls is _META_READ:
            done, gate, latency, transfer = self._serve(self._meta_read, now, 0, 1, None, 0, 0.0, after, own)
        elif cls is _META_WRITE:
            pool = self._dirs if op.directory else None
            done, gate, latency, transfer = self._serve(
                self._meta_write, now, 0, 1, pool, op.directory, self._dir_hold, after, own
            )
        else:  # COMMIT: the server starts on it once the file's dirty data has drained
            done, gate, latency, transfer = self._serve(
                self._commit, now, 0, 1, None, 0, 0.0, max(after, self._writeback.drained_at(op.file)), own
            )
        if self._stalls:
            done, gate = self._stalled(now, done, gate)
        wait = done - now - latency - transfer
        return Admission(done, gate, latency, transfer, wait if wait > 0.0 else 0.0)

    def busy(self, now: float) -> bool:
        """Whether a request like the last one served, arriving at `now`, would wait for
        earlier work: an IOPS limit already past its burst allowance, a throughput pipe
        whose queued bytes pass after the request's median latency (bytes that pass
        before it are over delay nothing), or its file's or directory's slots all taken.
        fusetrace/shaping/kernelqueue.py asks it of the requests left unread in the FUSE
        kernel: those the model would have queued anyway lost nothing there."""
        last = self._last
        if last is None:
            return False
        route, pool, key, data = last
        for limit in route.limits:
            if limit.tat - limit.tolerance > now:  # as grant() decides
                return True
        ready = now + route.latency.median
        pipe = route.pipe
        if (
            pipe is not None
            and pipe.free_at > ready
            and (route.charge_fixed > 0 or (data and route.charge_per_byte > 0))
        ):
            return True
        client = self._client
        if data and client is not None and client.free_at > ready:
            return True
        return pool is not None and pool.busy(key, now)

    def schedule(self, event: Event, origin: float) -> int:
        """Have `event` happen at origin + event.at of the model's time (emulator/events.py).
        A `set` takes effect at that instant, as `set` would; a `stall` delays every
        request the server would serve in it to its end, and every one in service at its
        start by its length (a hard mount's calls resume when the server answers again).
        Returns its number, for unschedule."""
        at = origin + event.at
        number = next(self._scheduled)
        if event.stall:
            self._stall_events[number] = (at, at + event.stall)
            self._rejoin_stalls()
        else:
            replace_keys(self.params, event.set, "set ")  # refused now, not at its instant
            heapq.heappush(self._sets, (at, number, dict(event.set)))
        self._advance(self._now)
        return number

    def unschedule(self, number: int, now: float) -> bool:
        """Call off the event `schedule` numbered so: a `set` not yet applied, or a stall
        not yet over (one in force stops holding what arrives from `now` on; what it
        delayed already keeps the completion it was given).  False if it had happened."""
        self._advance(now)
        kept = [s for s in self._sets if s[1] != number]
        if len(kept) < len(self._sets):
            heapq.heapify(kept)
            self._sets = kept
            return True
        stall = self._stall_events.pop(number, None)
        if stall is None or stall[1] <= self._now:
            return False
        self._rejoin_stalls()
        return True

    def _rejoin_stalls(self) -> None:
        """_stalls from the scheduled stalls not over yet (the others forgotten), overlapping
        ones joined."""
        self._stall_events = {n: s for n, s in self._stall_events.items() if s[1] > self._now}
        self._stalls = _joined(list(self._stall_events.values()))

    def _stalled(self, now: float, done: float, gate: Gate) -> tuple[float, Gate]:
        """A completion moved by the stalls it meets: one admitted inside a stall is served
        after it; one in service when a stall begins completes that much later."""
        # one over before the model's now moves nothing from then on (`now` here may be later: an ack)
        self._stalls = [s for s in self._stalls if s[1] > self._now]
        for begin, end in self._stalls:
            if begin <= now < end:
                done, gate = end + (done - now), Gate.STALL
            elif now < begin < done:
                done, gate = done + (end - begin), Gate.STALL
        return done, gate

    def drained_at(self, file: int) -> float:
        """When all of the file's buffered data will have reached the server (-inf: none written)."""
        return self._writeback.drained_at(file)

    def client_restarted(self) -> None:
        """The client crashed and came back: the data it had not written back is gone
        (its commits no longer wait for it)."""
        self._writeback = Writeback(self._writeback.limit)

    def set(self, key: str, value: object, now: float) -> ParamValue:
        """Change a parameter now; `value` may be text as typed (--set).  Work
        already admitted keeps its times.  Returns the value as stored."""
        self._advance(now)
        self._set_keys({key: value}, self._now)
        stored: ParamValue = getattr(self.params, key)
        return stored

    def _set_keys(self, keys: Mapping[str, object], now: float) -> None:
        """Change several parameters at one instant, all or none (ProfileError)."""
        self.params = replace_keys(self.params, keys, "set ")
        if "seed" in keys:
            self._rng.seed(self.params.seed)
        if "storage_remeasure_s" in keys:
            period = self.params.storage_remeasure_s
            self._next_remeasure = now + period if period > 0 else math.inf
        self._configure(now)
        if "burst_credit_balance" in keys:
            self._credit.set_balance(self.params.burst_credit_balance, now)
        if "client_network_credit" in keys and self._client is not None:
            self._client.set_balance(self.params.client_network_credit, now)

    def set_stored_bytes(self, nbytes: float, now: float) -> None:
        """The backing directory's size, as measured by the shaper.  Like EFS, the
        model takes it into account only at its next re-measure boundary; the
        stored size is the profile's `stored_size` plus this."""
        self._advance(now)
        self._measured_pending = float(nbytes)
        if self.params.storage_remeasure_s <= 0:
            self._apply_measured(self._now)

    def metrics(self, now: float) -> dict[str, float]:
        """CloudWatch-style figures at `now` (EFS user guide, "Amazon CloudWatch metrics for Amazon EFS"); byte
        counters are cumulative, others are current values."""
        self._advance(now)
        now = self._now
        out = self._counters.snapshot()
        read_pipe, write_pipe = self._elastic
        if self.params.throughput_mode == "elastic":
            permitted = max((p.hi for p in (read_pipe, write_pipe) if p), default=0.0)  # 0: no limit
        else:
            permitted = self._credit.rate_at(now)
        limits = [lim for lim in (self._read_limit, self._write_limit, self._total_limit) if lim.rate > 0]
        out.update(
            PermittedThroughput=permitted,
            BurstCreditBalance=self._credit.balance_at(now),
            PercentIOLimit=max((lim.percent_used(now) for lim in limits), default=0.0),
            StorageBytes=self._stored,
            ClientConnections=float(self.clients),
            DirtyBytes=self._writeback.dirty(now),
            ClientNetworkCreditBalance=self._client.balance_at(now) if self._client else 0.0,
        )
        return out

    def credit_stretches(self, now: float) -> list[tuple[float, float | None, float]]:
        """When the burst credits were spent up to `now`: the stretches the file system's
        throughput ran at the baseline (CreditPipe.stretches: from, to or None, the
        baseline); none in elastic mode, nor where the baseline is as fast as the burst."""
        self._advance(now)
        pipe = self._credit
        if self.params.throughput_mode == "elastic" or pipe.lo >= pipe.hi:
            return []
        return pipe.stretches(self._now)

    # ---- a file system shared by several clients (emulator/shared.py) -------------------

    def share(self) -> None:
        """Record from now on what this client puts through the file system's shared gates
        (IOPS, throughput and credits, file and directory slots), for take_usage()."""
        if self._usage is None:
            self._usage = {}

    def take_usage(self) -> list[Usage]:
        """What went through the shared gates since the last call, per class and file or
        directory: (class index, key, operations, bytes, IOPS cost)."""
        if not self._usage:
            return []
        out = [(i, key, n, nbytes, cost) for (i, key), (n, nbytes, cost) in self._usage.items()]
        self._usage = {}
        return out

    def absorb(self, usage: list[Usage], now: float) -> None:
        """Other clients' usage, put through this client's copy of the shared gates at
        `now`: their IOPS tokens, throughput and burst credits, file and directory slots
        are taken as their own requests would take them, and their operations counted.
        Not this client's own gates (network, per-client limit, dirty data)."""
        self._advance(now)
        now = self._now
        counters = self._counters
        for i, key, n, nbytes, cost in usage:
            route = self._routes[i]
            counters.ops[i] += n
            counters.nbytes[i] += nbytes or route.fixed_bytes * n
            counters.metered += nbytes * route.metered_per_byte + route.metered_fixed * n
            if route.limits:
                grant(route.limits, now, cost)
            if key:
                pool, hold = (
                    (self._files, self._file_hold)
                    if route is self._write
                    else (self._dirs, self._dir_hold)
                    if route is self._meta_write
                    else (None, 0.0)
                )
                if pool is not None:  # the hold spread over the key's slots, as the others' requests were
                    share = hold * cost / pool.slots
                    for _ in range(pool.slots):
                        pool.take(key, now, share)
            charge = nbytes * route.charge_per_byte + route.charge_fixed * n
            if route.pipe is not None and charge > 0:
                route.pipe.transmit(now, charge)

    # ---- serving an operation -----------------------------------------------------------

    def _serve(
        self,
        route: _Route,
        now: float,
        nbytes: int,
        cost: float,
        pool: SlotPools | None,
        key: int,
        hold: float,
        ready: float,
        own: Lognormal | None = None,
        stripe: int = -1,
    ) -> tuple[float, Gate, float, float]:
        """Run the gates for one request admitted at `now` whose service may not
        start before `ready` (a commit: its file's dirty data has drained; a
        write-back: the write got into the page cache): (done, gate, latency,
        transfer).  `own`: its RPC's latency, where it has one apart from its
        class's; `stripe`: the stripe a write's bytes go into (-1: none), which
        takes them one write after another.  The shared queues (IOPS, pipes) take it in admission order,
        at `now`, so that nothing queues behind a request that is not ready."""
        self._last = (route, pool, key, nbytes > 0)
        counters = self._counters
        i = route.index
        counters.ops[i] += 1
        counters.nbytes[i] += nbytes or route.fixed_bytes
        counters.metered += nbytes * route.metered_per_byte + route.metered_fixed
        usage = self._usage
        if usage is not None:
            where = (i, key if pool is not None else 0)
            used = usage.get(where)
            if used is None:
                usage[where] = [1, nbytes, cost]
            else:
                used[0] += 1
                used[1] += nbytes
                used[2] += cost

        at = grant(route.limits, now, cost) if route.limits else now
        gate = _IOPS if at > now else _LATENCY
        if ready > at:
            at, gate = ready, Gate.WRITEBACK
        if pool is not None:
            start = pool.take(key, at, hold * cost)
            if start > at:
                gate = pool.label
        else:
            start = at
        latency = (own or route.latency).sample(self._rng)
        if stripe >= 0 and self._stripes is not None:
            transfer = nbytes / self._stripe_rate
            begin = self._stripes.take(stripe, start, transfer)
            if begin > start:
                gate = Gate.FILE
            done = begin + latency + transfer
        else:
            transfer = nbytes / self._stream_rate if nbytes and self._stream_rate else 0.0
            done = start + latency + transfer

        pipe = route.pipe
        if pipe is not None:
            charge = nbytes * route.charge_per_byte + route.charge_fixed
            if charge > 0:
                t = pipe.transmit(now, charge)
                if t > done:
                    done, gate = t, Gate.THROUGHPUT
        if nbytes and self._client is not None:
            t = self._client.transmit(now, nbytes)
            if t > done:
                done, gate = t, Gate.CLIENT
        return done, gate, latency, transfer

    def _buffered_write(self, op: Op, now: float) -> Admission:
        """Acknowledged once the data fits under the client's dirty limit; its
        write-back (coalesced into wsize requests) goes through the gates then."""
        n = op.nbytes
        ack = self._writeback.room_at(now, n)
        cost = n / self._io_size
        drained, _, _, _ = self._serve(
            self._write, now, n, cost, self._files, op.file, self._file_hold, ack, None, self._stripe_key(op)
        )
        if self._stalls:  # the write-back waits for the server like any request; the ack does not
            drained, _ = self._stalled(max(now, ack), drained, Gate.STALL)
        self._writeback.add(op.file, n, drained)
        latency = self._buffered_cost
        return Admission(ack + latency, Gate.DIRTY if ack > now else Gate.BUFFERED, latency, 0.0, ack - now)

    def _stripe_key(self, op: Op) -> int:
        """The stripe a write's bytes go into, as one key over all files (-1: stripes are
        not modelled).  A write is taken to lie in the stripe of its first byte; the
        limit on stripe sizes keeps a stripe's index within 32 bits."""
        if self._stripes is None:
            return -1
        return op.file << 32 | int(op.offset // self._stripe_size)

    # ---- time and parameters -------------------------------------------------------------

    def _advance(self, now: float) -> None:
        while self._sets and self._sets[0][0] <= now:  # scheduled changes, each at its own instant
            at, number, keys = heapq.heappop(self._sets)
            if at > self._now:
                self._now = at
            if self._now >= self._next_remeasure:
                self._remeasure(self._now)
            try:
                self._set_keys(keys, self._now)
            except ProfileError as exc:  # a later `set` made it inconsistent: not applied, and said
                self.refused_events[number] = str(exc)
        if now > self._now:
            self._now = now
        if self._now >= self._next_remeasure:
            self._remeasure(self._now)

    def _remeasure(self, now: float) -> None:
        """Apply the last reported size at the boundary that has just passed."""
        boundary = self._next_remeasure
        period = self.params.storage_remeasure_s
        self._next_remeasure = boundary + period * (math.floor((now - boundary) / period) + 1)
        if self._measured_pending is not None:
            self._apply_measured(boundary)

    def _apply_measured(self, at: float) -> None:
        if self._measured_pending is not None:
            self._measured, self._measured_pending = self._measured_pending, None
        self._configure(at)

    def _configure(self, now: float) -> None:
        """Derive rates, limits and samplers from the parameters, keeping the state
        (balances, queues, slots, tokens) as it is."""
        p = self.params
        self._stored = p.stored_size + self._measured
        self._credit.configure(*fs_pipe_rates(p, self._stored), now)
        self._elastic = self._elastic_pipes(now) if p.throughput_mode == "elastic" else (None, None)
        self._client = _keep(self._client, client_pipe_rates(p), now)

        burst_s = p.iops_burst_ms / 1000
        for limit, rate in (
            (self._read_limit, p.read_iops),
            (self._write_limit, p.write_iops),
            (self._total_limit, p.total_iops),
        ):
            limit.configure(rate, burst_s)
        self._files = _pools(self._files, p.file_write_slots, Gate.FILE, now)
        self._dirs = _pools(self._dirs, p.dir_write_slots, Gate.DIRECTORY, now)
        self._file_hold = p.file_write_hold_ms / 1000
        self._dir_hold = p.dir_write_hold_ms / 1000
        self._writeback.limit = p.client_dirty_limit
        self._buffered_cost = p.buffered_write_ms / 1000
        self._stream_rate = p.stream_mibps * MiB
        self._io_size = int(p.nfs_io_size)
        self._stripe_size = p.file_stripe_size
        self._stripe_rate = (p.stripe_write_mibps or p.stream_mibps) * MiB
        striped = self._stripe_size > 0 and self._stripe_rate > 0
        self._stripes = (self._stripes or OneSlot(Gate.FILE)) if striped else None

        self._rpc_latency = _rpc_latencies(p)
        elastic = p.throughput_mode == "elastic"
        md, rf = p.metadata_io_size, p.read_factor
        for route, name, reads, data in zip(self._routes, LATENCY_CLASSES, _READS, _DATA):
            route.latency = Lognormal(getattr(p, f"{name}_latency_ms"), getattr(p, f"{name}_latency_p99_ms"))
            limit = self._read_limit if reads else self._write_limit
            route.limits = tuple(lim for lim in (self._total_limit, limit) if lim.rate > 0)
            metered_factor = rf if reads else 1.0
            route.fixed_bytes = 0.0 if data else md
            route.metered_per_byte = metered_factor if data else 0.0
            route.metered_fixed = 0.0 if data else md * metered_factor
            if elastic:  # elastic limits are on real bytes, reads and writes apart
                route.pipe = self._elastic[0 if reads else 1]
                route.charge_per_byte, route.charge_fixed = (1.0 if data else 0.0), route.fixed_bytes
            else:
                route.pipe = self._credit
                route.charge_per_byte, route.charge_fixed = route.metered_per_byte, route.metered_fixed

    def _elastic_pipes(self, now: float) -> tuple[CreditPipe | None, CreditPipe | None]:
        read, write = (
            _keep(pipe, (rate, rate, rate, 0.0) if rate > 0 else None, now)
            for pipe, rate in zip(self._elastic, elastic_rates(self.params))
        )
        return read, write


def _rpc_latencies(p: Params) -> dict[str, Lognormal]:
    """The samplers of the RPCs timed apart from their class (params.RPC_LATENCIES), by RPC
    name; each keeps its class's spread."""
    out = {}
    for key, (cls, rpcs) in RPC_LATENCIES.items():
        median = getattr(p, f"{key}_latency_ms")
        if median > 0:
            base, p99 = getattr(p, f"{cls}_latency_ms"), getattr(p, f"{cls}_latency_p99_ms")
            sampler = Lognormal(median, median * (p99 / base if base > 0 else 1.0))
            out.update(dict.fromkeys(rpcs, sampler))
    return out


def _keep(pipe: CreditPipe | None, rates: tuple[float, float, float, float] | None, now: float) -> CreditPipe | None:
    """The pipe reconfigured to `rates` (hi, lo, earn, cap), made if new (with a
    full balance), or None if there is no limit."""
    if rates is None:
        return None
    if pipe is None:
        return CreditPipe(*rates, rates[3], now)
    pipe.configure(*rates, now)
    return pipe


def _pools(pools: SlotPools | None, slots: int, label: Gate, now: float) -> SlotPools | None:
    if slots <= 0:
        return None
    if pools is None:
        return SlotPools(slots, label)
    if pools.slots != slots:
        pools.resize(slots, now)
    return pools


def _joined(stalls: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Stall intervals in time order with overlapping ones joined: a server that is not
    answering for two reasons at once is not answering, not twice as late."""
    out: list[tuple[float, float]] = []
    for begin, end in sorted(stalls):
        if out and begin <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((begin, end))
    return out
