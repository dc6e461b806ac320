"""Time `fusetrace simulate --days 7` on a synthetic busy trace of 302,000 records.

    python bench/simulate_week.py [--records N] [--dir DIR] [--profile cProfile.out] [--open-loop]

The trace: four processes, each doing one job after another (look a file up, open it,
write 64 KiB four times, close it, stat it, read another), 0.5 ms an operation and a think
time between jobs, about an hour in all: 2.4 MiB/s written, past efs-bursting's baseline
(1 MiB/s at 10 GiB stored) once its credits (100 GiB here) run out, within the first day.
It is written once (through the trace writer, as a mount would) and kept in DIR. The
simulation is timed in this process (the command's own function, the text rendered).
"""

import argparse
import cProfile
import os
import stat
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from fusetrace.rehearse import simulate
from fusetrace.shaping.profile import load_params
from fusetrace.trace import reader
from fusetrace.trace.schema import TraceRecord
from fusetrace.trace.writer import TraceWriter

PROCESSES = 4
JOB = 9  # records a job
SETTINGS = ["stored_size=10GiB", "burst_credit_balance=100GiB"]


def write_trace(directory: str, records: int) -> None:
    """The trace described above, `records` records long."""
    t0 = 10**12
    w = TraceWriter(
        directory,
        {"source": "/src", "mountpoint": "/mnt", "start_monotonic_ns": t0},
        flush_interval=3600,
        max_pending_bytes=None,
    )
    jobs = records // JOB // PROCESSES
    rows = []
    for p in range(PROCESSES):
        pid, t = 1000 + p, t0 + p * 1_000_000

        def rec(op, inode, path, fh=0, size=0, kind="meta_read", flags=0, mode=0, entry=0, pid=pid):
            nonlocal t
            rows.append(
                TraceRecord(
                    t,
                    500_000,
                    op,
                    inode,
                    path,
                    None,
                    fh,
                    0,
                    size,
                    size,
                    0,
                    pid,
                    0,
                    0,
                    0,
                    comm="job",
                    kind=kind,
                    flags=flags,
                    mode=mode,
                    entry=entry,
                )
            )
            t += 600_000  # 0.5 ms an operation, 0.1 ms between

        for i in range(jobs):
            f, fh = 100 + (p * 1000 + i) % 500, 10 + p
            rec("lookup", 1, f"/f{f}", mode=stat.S_IFREG | 0o644, entry=f)
            rec("open", f, f"/f{f}", fh=fh, flags=os.O_WRONLY)
            for _ in range(4):
                rec("write", f, f"/f{f}", fh=fh, size=65536, kind="buffered")
            rec("flush", f, f"/f{f}", fh=fh, kind="flush")
            rec("release", f, f"/f{f}", fh=fh, kind="none")
            rec("getattr", f, f"/f{f}", mode=stat.S_IFREG | 0o644)
            t += 400_000_000  # think time: 0.4 s between jobs
    rows.sort(key=lambda r: r.start_ns)
    for r in rows:
        w.record(r)
    w.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=302_000)
    ap.add_argument("--dir", default="/tmp/fusetrace-simulate-week")
    ap.add_argument("--profile", help="write cProfile's figures to this file")
    ap.add_argument("--open-loop", action="store_true")
    ap.add_argument("--days", type=float, default=7.0)
    args = ap.parse_args()
    if (
        not os.path.isdir(args.dir)
        or reader.record_count(args.dir) != args.records // JOB // PROCESSES * JOB * PROCESSES
    ):
        began = time.perf_counter()
        write_trace(args.dir, args.records)
        print(f"wrote {reader.record_count(args.dir):,} records in {time.perf_counter() - began:.1f} s")
    params = load_params("efs-bursting", SETTINGS)
    profiler = cProfile.Profile() if args.profile else None
    began, cpu = time.perf_counter(), time.process_time()
    if profiler:
        profiler.enable()
    s = simulate.simulate(args.dir, params, args.days, closed=not args.open_loop)
    if profiler:
        profiler.disable()
        profiler.dump_stats(args.profile)
    took, cpu = time.perf_counter() - began, time.process_time() - cpu
    s["profile"], s["overrides"] = "efs-bursting", SETTINGS
    print(simulate.render(s))
    print(f"simulate --days {args.days:g}{' --open-loop' if args.open_loop else ''}: {took:.1f} s ({cpu:.1f} s CPU)")


if __name__ == "__main__":
    main()
