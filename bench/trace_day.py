"""A day-long trace's files before and after merging, and what merging costs the writer.

Driven through the TraceWriter itself (fusetrace/trace/writer.py), in accelerated time:
the writer flushes every millisecond instead of every 0.5 s, and the bench adds one
flush's records at a time and waits until the writer has written them as a part, so the
parts are the ones a mount makes in real time (a day with one operation a second: one
record a part, 86,400 parts; a busy hour: `--busy-rate` operations a second, that many
records in two parts a second).  Records' start_ns advance as the simulated clock does.

- day: the day with merging as the mount does it (files in the directory at the end of
  the day, before close, and after close), and, without merging (the writer before this
  change: its merge step left out), an hour of it (the day's parts are 24 hours of those).
- busy hour: the same, and `fusetrace compact` of the unmerged hour.
- throughput: records a second the writer sustains while fed as fast as one thread can
  (1.5 million records, a flush every 20 ms so that it merges often), with and without
  merging: from the first record to the end of close (the close's merge included).

    .venv/bin/python bench/trace_day.py [--hours 24] [--busy-rate 2000] [--workdir /var/tmp/fusetrace-day]
"""

import argparse
import functools
import os
import shutil
import time
from pathlib import Path

from fusetrace.trace import compact
from fusetrace.trace.limits import TARGET_BYTES
from fusetrace.trace.parts import PartFiles
from fusetrace.trace.schema import TraceRecord
from fusetrace.trace.writer import TraceWriter

THROUGHPUT_FLUSH = 0.02  # s: parts of a few thousand records, so that the writer merges often meanwhile
print = functools.partial(print, flush=True)  # a long run: each figure as it comes
OPS = ("getattr", "lookup", "read", "write", "open", "release", "flush", "readdir")


def _record(i: int, start_ns: int) -> TraceRecord:
    op = OPS[i % len(OPS)]
    path = f"/data/d{i % 97}/file-{i % 5003}.dat"
    return TraceRecord(
        start_ns, 40_000 + i % 9_000, op, 1000 + i % 5003, path, None, i % 64, 4096 * (i % 1000), 4096,
        4096 if op in ("read", "write") else 0, 0, 4000 + i % 13, 1000, 1000, 0, comm="python3", kind=None,
    )  # fmt: skip


def _files(d: Path) -> tuple[int, int]:
    """(part files, their bytes) in the trace directory."""
    sizes = [p.stat().st_size for p in d.glob("*.parquet")]
    return len(sizes), sum(sizes)


def _no_merging() -> None:
    """The writer as it was before merging: its merge step does nothing."""
    PartFiles.merge = lambda self, final: None  # type: ignore[method-assign]


def _simulate(d: Path, seconds: int, per_second: int, merging: bool) -> dict:
    """`seconds` of a mount doing `per_second` operations a second, flushed as it would be
    (two parts a second while records come; one a second at one operation a second)."""
    saved = PartFiles.merge
    if not merging:
        _no_merging()
    try:
        parts_per_second = 1 if per_second == 1 else 2
        per_part = max(1, per_second // parts_per_second)
        step_ns = 10**9 // parts_per_second
        t0 = time.monotonic_ns()
        started = time.perf_counter()
        most = 0
        i = 0
        with TraceWriter(d, {"host": "bench"}, flush_interval=0.001, max_pending_bytes=None) as w:
            for k in range(seconds * parts_per_second):
                want = w.files + 1
                for _ in range(per_part):
                    w.record(_record(i, t0 + k * step_ns + (i % per_part) * (step_ns // per_part)))
                    i += 1
                while w.files < want:
                    time.sleep(0.0002)
                if k % 512 == 0:
                    most = max(most, _files(d)[0])
            end_of_day = _files(d)
            closing = time.perf_counter()
        return {
            "records": i,
            "parts written": w.files,
            "most files": max(most, end_of_day[0]),
            "files before close": end_of_day[0],
            "bytes before close": end_of_day[1],
            "files": _files(d)[0],
            "bytes": _files(d)[1],
            "close s": time.perf_counter() - closing,
            "run s": closing - started,
        }
    finally:
        PartFiles.merge = saved  # type: ignore[method-assign]


def _throughput(d: Path, n: int, merging: bool) -> float:
    saved = PartFiles.merge
    if not merging:
        _no_merging()
    try:
        t0 = time.monotonic_ns()
        started = time.perf_counter()
        with TraceWriter(d, {"host": "bench"}, flush_interval=THROUGHPUT_FLUSH, max_pending_bytes=None) as w:
            for i in range(n):
                w.record(_record(i, t0 + i * 1000))
        return n / (time.perf_counter() - started)
    finally:
        PartFiles.merge = saved  # type: ignore[method-assign]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hours", type=int, default=24, help="the light trace's length (default a day)")
    ap.add_argument("--busy-rate", type=int, default=2000, help="operations a second in the busy hour")
    ap.add_argument("--records", type=int, default=1_500_000, help="records fed for the throughput figure")
    ap.add_argument("--workdir", default="/var/tmp/fusetrace-day")
    args = ap.parse_args()
    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    print(f"fan-in {compact.FAN_IN}, merged files up to {TARGET_BYTES >> 20} MiB, {os.cpu_count()} CPUs")
    runs = [
        ("day, merging", args.hours * 3600, 1, True),
        ("hour of it, not merging", 3600, 1, False),
        ("busy hour, merging", 3600, args.busy_rate, True),
        ("busy hour, not merging", 3600, args.busy_rate, False),
    ]
    for name, seconds, rate, merging in runs:
        d = work / name.replace(" ", "-").replace(",", "")
        r = _simulate(d, seconds, rate, merging)
        print(f"{name}: " + ", ".join(f"{k} {v:,.2f}" if isinstance(v, float) else f"{k} {v:,}" for k, v in r.items()))
        if not merging:
            started = time.perf_counter()
            line = compact.compact_trace(str(d))
            print(f"  fusetrace compact: {line} in {time.perf_counter() - started:.1f} s")
    for merging in (False, True):
        for k in range(3):
            d = work / f"throughput-{merging}-{k}"
            rate = _throughput(d, args.records, merging)
            how = "merging" if merging else "not merging"
            print(f"throughput, {how}: {rate:,.0f} records/s ({_files(d)[0]} files)")
            shutil.rmtree(d)


if __name__ == "__main__":
    main()
