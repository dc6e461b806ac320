"""Workloads run against the model in virtual time: no clock, no sleeping.

`closed_loop` keeps `depth` operations outstanding, issuing the next one the
moment one completes (fio with libaio at an iodepth, or N threads); `fio_job`
turns fio's arguments into such a workload (direct I/O: sent as it comes);
`dd_write` and `dd_writers` write files the way `dd` does, with conv=fsync or
oflag=sync, through the NFS client (nfsclient.py); `chains` runs any sequences of
system calls so, one process each.  The calibration tests and the
figures in docs/EMULATOR.md come from here.
"""

import heapq
import itertools
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from .call import Call
from .model import Model
from .nfsclient import NfsClient
from .ops import Op, OpClass
from .params import MiB
from .shared import EXCHANGE_EVERY, Hub, SharedClient


@dataclass(frozen=True)
class Stats:
    ops: int
    nbytes: int
    elapsed: float  # s
    mean_latency: float  # s, admission to completion

    @property
    def iops(self) -> float:
        return self.ops / self.elapsed

    @property
    def mb_per_s(self) -> float:
        return self.nbytes / self.elapsed / 1e6

    @property
    def mean_latency_ms(self) -> float:
        return self.mean_latency * 1000


def closed_loop(
    model: Model,
    op_factory: Callable[[int], Op],
    depth: int,
    *,
    duration: float | None = None,
    count: int | None = None,
    start: float = 0.0,
) -> Stats:
    """Keep `depth` operations outstanding from `start`, op_factory(i) giving the
    i-th, until `duration` seconds have passed (operations completing later are
    not counted) or `count` operations have completed."""
    if (duration is None) == (count is None):
        raise ValueError("give one of duration and count")
    end = start + duration if duration is not None else float("inf")
    heap: list[tuple[float, int, float, int]] = []
    issued = 0

    def issue(now: float) -> None:
        nonlocal issued
        op = op_factory(issued)
        heapq.heappush(heap, (model.admit(op, now).done_at, issued, now, op.nbytes))
        issued += 1

    for _ in range(depth if count is None else min(depth, count)):
        issue(start)
    ops = nbytes = 0
    latency = 0.0
    last = start
    while heap:
        done, _, admitted, size = heapq.heappop(heap)
        if done > end:
            break
        ops += 1
        nbytes += size
        latency += done - admitted
        last = done
        if count is None or issued < count:
            issue(done)
    elapsed = duration if duration is not None else last - start
    return Stats(ops, nbytes, elapsed, latency / ops if ops else 0.0)


def fio_job(args: str, file: int = 1) -> tuple[Callable[[int], Op], int]:
    """(op_factory, depth) of an fio job given as its arguments, e.g.
    "-direct=1 -iodepth 16 -rw=randwrite -bs=4K -numjobs=1": all on one file
    (numjobs > 1: one file per job), offsets ignored by the model."""
    opts: dict[str, str] = {}
    words = shlex.split(args)
    for i, word in enumerate(words):
        if word.startswith("-"):
            key, sep, value = word.lstrip("-").partition("=")
            if not sep and i + 1 < len(words) and not words[i + 1].startswith("-"):
                value = words[i + 1]
            opts[key] = value
    rw = opts.get("rw", opts.get("readwrite", "read"))
    if rw not in ("read", "randread", "write", "randwrite"):
        raise ValueError(f"fio rw={rw}: only read, randread, write, randwrite are simulated")
    size = parse_size(opts.get("bs", "4k"))
    jobs = int(opts.get("numjobs", 1))
    depth = int(opts.get("iodepth", 1)) * jobs
    if rw.endswith("read"):

        def op_factory(i: int) -> Op:
            return Op(OpClass.DATA_READ, size, file=file + i % jobs)
    else:
        if opts.get("sync") == "1":
            raise ValueError("fio sync=1: a synchronous write is the NFS client's flush; simulate it with dd_writers")
        mode = "direct" if opts.get("direct") == "1" else "buffered"
        blocks = max(1, int(parse_size(opts.get("size", "1g"))) // size)
        # where each job's i-th write lands: in order, or spread over the file (a fixed
        # stride coprime with most block counts stands for fio's random offsets)
        step = 1 if rw == "write" else 2_654_435_761

        def op_factory(i: int) -> Op:
            offset = (i // jobs * step) % blocks * size
            return Op(OpClass.DATA_WRITE, size, file=file + i % jobs, write_mode=mode, offset=offset)

    return op_factory, depth


def dd_write(
    model: Model,
    block: int,
    count: int,
    *,
    sync: bool = False,
    max_write: int = 1 * MiB,
    start: float = 0.0,
    file: int = 1,
) -> Stats:
    """`dd if=/dev/zero of=F bs=block count=count` with conv=fsync (buffered
    writes, one fsync at the end) or, with sync, oflag=sync (every write
    synchronous), as a Linux NFS client sends it (nfsclient.py).  Elapsed time
    includes the fsync, as dd reports."""
    return dd_writers(model, 1, block, count, sync=sync, max_write=max_write, start=start, file=file)


def dd_writers(
    model: Model,
    writers: int,
    block: int,
    count: int,
    *,
    sync: bool = False,
    max_write: int = 1 * MiB,
    start: float = 0.0,
    file: int = 1,
) -> Stats:
    """`writers` dd processes at once, each writing its own file (file, file + 1, ...)
    as dd_write does.  Each block reaches the client as the kernel's FUSE path
    delivers it (writes of at most max_write bytes; with oflag=sync, then a flush);
    the NFS client charges what it would send for the whole system call."""
    client = NfsClient(model)
    chunks = [max_write] * (block // max_write) + ([block % max_write] if block % max_write else [])
    mode = "sync" if sync else "buffered"

    def calls(f: int) -> Iterator[Call]:
        pos = 0
        for _ in range(count):
            for size in chunks:
                yield Call("write", f, size=size, offset=pos, write_mode=mode)
                pos += size
            if sync:
                yield Call("fsync", f)  # the flush the kernel makes after each O_SYNC write
        yield Call("fsync", f)  # conv=fsync; with oflag=sync there is nothing left to flush
        yield Call("flush", f)  # close

    end = chains(client, [calls(f) for f in range(file, file + writers)], start)
    ops = writers * count * len(chunks)
    return Stats(ops, writers * block * count, end - start, (end - start) / ops)


def parse_size(text: str) -> int:
    """fio/dd sizes: 4k, 512K, 1M, 1g, 1.5m, 4KiB, 64kb (binary units); the one parser of
    sizes, for fio jobs here and in scenarios/fio.py and for fault rules (pure, so all reach it)."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    text = text.strip().lower().rstrip("b").rstrip("i")
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def shared_closed_loop(
    clients: list[tuple[SharedClient, Callable[[int], Op], int]],
    hub: Hub,
    *,
    duration: float,
    every: float = EXCHANGE_EVERY,
    start: float = 0.0,
) -> list[Stats]:
    """closed_loop for several clients of one file system, each (SharedClient, op_factory,
    depth) on its own model, exchanging with `hub` every `every` seconds (staggered, as
    clients on several hosts would be): the Stats of each."""
    end = start + duration
    # (time, seq, client, admitted or None for an exchange, bytes)
    heap: list[tuple[float, int, int, float | None, int]] = []
    seq = itertools.count()
    issued = [0] * len(clients)
    done_ops, done_bytes, latency = [0] * len(clients), [0] * len(clients), [0.0] * len(clients)

    def issue(c: int, now: float) -> None:
        shared, factory, _ = clients[c]
        op = factory(issued[c])
        issued[c] += 1
        heapq.heappush(heap, (shared.model.admit(op, now).done_at, next(seq), c, now, op.nbytes))

    for c, (_, _, depth) in enumerate(clients):
        heapq.heappush(heap, (start + every * c / len(clients), next(seq), c, None, 0))
        for _ in range(depth):
            issue(c, start)
    while heap:
        t, _, c, admitted, size = heapq.heappop(heap)
        if t > end:
            break
        if admitted is None:  # this client's exchange
            shared = clients[c][0]
            shared.apply(hub.exchange(shared.report(t)), t)
            heapq.heappush(heap, (t + every, next(seq), c, None, 0))
            continue
        done_ops[c] += 1
        done_bytes[c] += size
        latency[c] += t - admitted
        issue(c, t)
    return [Stats(n, b, duration, lat / n if n else 0.0) for n, b, lat in zip(done_ops, done_bytes, latency)]


def chains(client: NfsClient, sequences: list[Iterator[Call]], start: float = 0.0) -> float:
    """Run `sequences` at once from `start`, each a process making its calls one after
    another (the next when the one before completes): when the last one completes."""
    heap = [(start, i, it) for i, it in enumerate(sequences)]
    end = start
    while heap:
        now, i, it = heapq.heappop(heap)
        step = next(it, None)
        if step is None:
            end = max(end, now)
            continue
        heapq.heappush(heap, (client.admit(step, now).done_at, i, it))
    return end
