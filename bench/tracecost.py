"""What tracing costs: the CPU it adds to an operation, against the CPU an operation takes.

Two fusetrace servers differ in speed by up to ±20 % on a small VM even when neither
traces (two untraced mounts, run in alternating slices, show it), so a cost of 10 % cannot
be read from the wall-clock figures of a traced and an untraced mount.  What tracing adds
is CPU work, and that is measured apart:

- on the event loop: the loop thread's CPU per `Operations.read` of one cached 4 KiB
  block with and without a tracer, in this process (run on the loop: what differs is the
  record built and queued, its fields, the caller's process, the path), while the writer
  thread drains the queue as a mount's does;
- in the writer thread: its CPU per record while turning a large queue into Parquet;
- against what each row's operations cost the traced server in CPU (user and system
  time of all its threads, from /proc, over the row, divided by the records it queued).
"""

import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common import Caller

from fusetrace.server.handlers import Operations
from fusetrace.server.inline import InlinePolicy
from fusetrace.server.inodes import ROOT
from fusetrace.server.workers import Workers
from fusetrace.trace.schema import TraceRecord
from fusetrace.trace.writer import TraceWriter

BLOCK = 4096
BLOCKS = 256


async def _per_call_s(ops: Operations, n: int, op: str = "read") -> float:
    """The loop thread's CPU per read (or write) of a cached block through `ops` (not the
    writer thread's: writer_us counts that), its file opened and closed by the handlers as
    the kernel would ask."""
    who = Caller()
    entry = await ops.lookup(ROOT, b"data", who)
    info = await ops.open(entry.st_ino, os.O_RDONLY if op == "read" else os.O_WRONLY, who)
    block = os.urandom(BLOCK)
    t0 = time.thread_time()
    if op == "read":
        for i in range(n):
            await ops.read(info.fh, i % BLOCKS * BLOCK, BLOCK)
    else:
        for i in range(n):
            await ops.write(info.fh, i % BLOCKS * BLOCK, block)
    spent = time.thread_time() - t0
    await ops.release(info.fh)
    await ops.forget([(entry.st_ino, 1)])
    return spent / n


def loop_us(n: int = 100_000, repeats: int = 7, op: str = "read") -> float:
    """CPU (µs) a tracer adds to one operation on the event loop: the median of `repeats`
    alternating measurements of the loop thread's CPU, traced minus untraced, the writer
    thread draining the queue meanwhile as a mount's does (every 0.5 s) and done before
    each untraced pass.  The median: single passes spread by several µs either way, and
    the least of them, used before, reported an outlier (1.3-1.6 µs where the median of
    the same passes was 3-4 µs on this VM)."""
    with tempfile.TemporaryDirectory(prefix="fusetrace-tracecost-") as tmp:
        with open(os.path.join(tmp, "data"), "wb") as f:
            f.write(os.urandom(BLOCKS * BLOCK))
        workers = Workers(1)
        plain = Operations(tmp, workers=workers, inline=InlinePolicy(50.0))
        writer = TraceWriter(os.path.join(tmp, "trace"), {}, max_pending_bytes=None)  # none dropped
        traced = Operations(tmp, workers=workers, inline=InlinePolicy(50.0), tracer=writer)
        diffs = []
        for _ in range(repeats):
            with_tracer = trio.run(_per_call_s, traced, n, op)
            _drained(writer)  # so that its work on them does not slow the untraced pass
            diffs.append(with_tracer - trio.run(_per_call_s, plain, n, op))
        writer.close()
        for ops in (plain, traced):
            ops.close()
        workers.close()
    if writer.dropped:  # a dropped record costs the loop less than a queued one
        raise RuntimeError(f"the trace writer dropped {writer.dropped:,} records")
    return max(statistics.median(diffs), 0.0) * 1e6


def _drained(writer: TraceWriter, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while writer.queued or writer.records + writer.lost < writer.recorded:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the trace writer still holds {writer.queued:,} records after {timeout:.0f} s")
        time.sleep(0.05)


def writer_us(n: int = 200_000) -> float:
    """CPU (µs) of the writer thread per record, turning `n` queued records into Parquet
    as one part (see _records)."""
    with tempfile.TemporaryDirectory(prefix="fusetrace-tracecost-") as tmp:
        writer = TraceWriter(
            os.path.join(tmp, "trace"), {}, flush_interval=3600.0, max_pending=n + 1, max_pending_bytes=None
        )
        for rec in _records(n):
            writer.record(rec)
        t0 = time.process_time()
        writer.close()  # the thread writes everything queued, then stops
        return (time.process_time() - t0) / n * 1e6


def paced_us(rate: int = 20_000, seconds: float = 10.0) -> tuple[float, float]:
    """CPU (µs) of the writer thread per record when `rate` records come a second for
    `seconds`, as on a busy mount: a part every flush interval (0.5 s, each with its fixed
    cost: a Parquet file's setup and footer, its fsync, the metadata), and the merges
    that come due meanwhile (16 parts make one); then what closing adds (the last part
    and the final merge, at unmount).  This thread queues the records (see _records) in
    twentieths of a second and its own CPU is left out."""
    records = _records(rate * int(seconds))
    step = rate // 20
    with tempfile.TemporaryDirectory(prefix="fusetrace-tracecost-") as tmp:
        writer = TraceWriter(os.path.join(tmp, "trace"), {}, max_pending_bytes=None)
        cpu, own, begun = time.process_time(), time.thread_time(), time.monotonic()
        for i in range(0, len(records), step):
            for rec in records[i : i + step]:
                writer.record(rec)
            time.sleep(max(0.0, begun + (i + step) / rate - time.monotonic()))
        running = time.process_time() - cpu - (time.thread_time() - own)
        cpu = time.process_time()
        writer.close()
        closing = time.process_time() - cpu
    return running / len(records) * 1e6, closing / len(records) * 1e6


def _records(n: int) -> list[TraceRecord]:
    """4 KiB reads of a process's files, at random offsets of 64 MiB, each taking its own
    time, as a traced fio run's records do (Parquet encodes a column of one repeated
    duration or of evenly spaced offsets to almost nothing, which real ones never are)."""
    rand = random.Random(1)
    out = []
    start = 0
    for i in range(n):
        dur = int(rand.lognormvariate(10.5, 0.3))  # about 36 µs, most within 20-70
        start += dur + rand.randrange(2_000, 10_000)
        out.append(
            TraceRecord(
                start,
                dur,
                "read",
                5 + i % 100,
                f"/dir/file{i % 100}",
                None,
                7 + i % 100,
                rand.randrange(BLOCKS * 64) * BLOCK,
                4096,
                4096,
                0,
                1234,
                0,
                0,
                0,
                comm="fio",
                kind="read",
            )
        )
    return out


if __name__ == "__main__":
    print(f"loop: {loop_us():.2f} µs a read, {loop_us(op='write'):.2f} µs a write")
    print(f"writer: {writer_us():.2f} µs a record as one part")
    running, closing = paced_us()
    print(f"writer at 20,000 records a second: {running:.2f} µs a record, and {closing:.2f} more at close")
