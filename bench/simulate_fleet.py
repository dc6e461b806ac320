"""Time `fusetrace simulate` on a synthetic fleet: many hosts' week-long traces through one
emulated file system at once.

    python bench/simulate_fleet.py [--hosts 10,30,100] [--records N] [--dir DIR]
                                   [--docs docs/BENCHMARKS.md] [--profile FILE]

Each host's trace (written once with pyarrow, as the trace writer lays it out, and kept in
DIR/HOSTS-RECORDS/host=hNNN): four processes, each doing one job after another over seven
days, a job every 194 s or so: half of them write a file (look it up, open it, write
256 KiB four times, close it, release it), half read one (look it up, open it, read
256 KiB four times, close it, release it); 0.5 ms an operation, 0.1 ms between.  Each host
works on its own files in one shared directory; a fleet of 100 writes about 1 MiB/s on
average, past efs-bursting's baseline at 10 GiB stored (0.5 MiB/s), so its 100 GiB of
credits run out within the week; ten hosts stay under it.

Each size is timed in a fresh process running `fusetrace simulate 'DIR/*'` (closed loop,
as a user runs it): wall time, CPU time and the child's peak RSS (resource.getrusage of
the children).  With --docs the table goes between the `<!-- simulate-fleet -->` markers.
--profile: one run of the largest fleet in this process under cProfile, written to FILE.
"""

import argparse
import cProfile
import datetime
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import write_between  # noqa: E402

from fusetrace.trace import metadata as meta  # noqa: E402
from fusetrace.trace.schema import SCHEMA, TraceRecord  # noqa: E402

PROCESSES = 4
JOB = 8  # records a job
WEEK_NS = 7 * 86400 * 10**9
SETTINGS = ["stored_size=10GiB", "burst_credit_balance=100GiB"]
MARK = "<!-- simulate-fleet -->"
T0 = 10**12  # every host's CLOCK_MONOTONIC at its mount's start
WALL0 = 1_790_000_000 * 10**9  # and the wall clock then (2026-09-21)
_OPS = ["lookup", "open", "w", "w", "w", "w", "flush", "release"]


def write_host(directory: str, host: int, records: int) -> None:
    """Host `host`'s trace of `records` records (a whole number of jobs) into `directory`."""
    os.makedirs(directory)
    jobs = records // JOB // PROCESSES
    n = jobs * PROCESSES * JOB
    p = np.repeat(np.arange(PROCESSES), jobs * JOB)  # process of each record
    j = np.tile(np.repeat(np.arange(jobs), JOB), PROCESSES)  # its job
    k = np.tile(np.arange(JOB), jobs * PROCESSES)  # its place in the job
    gap = WEEK_NS // jobs
    rng = np.random.default_rng(host)
    jitter = rng.integers(0, gap // 2, size=(PROCESSES, jobs))
    start = T0 + host * 7_000_000 + p * 1_000_000 + j * gap + jitter[p, j] + k * 600_000
    writing = (j + p + host) % 2 == 0
    inode = 1000 + host * 100_000 + (p * jobs + j) % 997
    op = np.array(_OPS, dtype=object)[k]
    op[op == "w"] = np.where(writing[op == "w"], "write", "read")
    size = np.where((k >= 2) & (k < 6), 262_144, 0)
    fh = 10 + p
    kind = np.select(
        [k < 2, (k >= 2) & (k < 6) & writing, (k >= 2) & (k < 6), k == 6],
        ["meta_read", "buffered", "read", "flush"],
        "none",
    )
    order = np.argsort(start, kind="stable")
    columns = {
        "start_ns": start,
        "dur_ns": np.full(n, 500_000),
        "op": op,
        "inode": np.where(k == 0, 1, inode),
        "path": np.char.add("/data/f", inode.astype(str)),
        "fh": np.where(k == 0, 0, fh),
        "offset": np.where(size > 0, (k - 2) * 262_144, 0),
        "size": size,
        "result": size,
        "errno": np.zeros(n, np.int32),
        "pid": 1000 + p,
        "uid": np.zeros(n),
        "gid": np.zeros(n),
        "shaped_ns": np.zeros(n),
        "comm": np.where(writing, "writer", "reader"),
        "kind": kind,
        "flags": np.where(k == 1, np.where(writing, os.O_WRONLY, os.O_RDONLY), 0),
        "mode": np.where(k == 0, 0o100644, 0),
        "entry": np.where(k == 0, inode, 0),
    }
    arrays = []
    for field in SCHEMA:
        value = columns.get(field.name)
        if value is None:  # what a record leaves it at
            default = TraceRecord._field_defaults.get(field.name)
            arrays.append(pa.nulls(n, field.type) if default is None else pa.array([default] * n, field.type))
            continue
        arrays.append(pa.array(np.asarray(value)[order].tolist() if value.dtype == object else value[order]))
    table = pa.Table.from_arrays(
        [a.cast(f.type) if not pa.types.is_null(a.type) else a for a, f in zip(arrays, SCHEMA)], schema=SCHEMA
    ).set_column(SCHEMA.get_field_index("host"), "host", pa.array([f"h{host:03d}"] * n).dictionary_encode())
    pq.write_table(table.cast(SCHEMA), os.path.join(directory, "part-000000.parquet"), row_group_size=65_536)
    end = int(start.max()) + 500_000
    meta.write(
        directory,
        {
            "start_wall_ns": WALL0 + host * 3_000_000,  # the hosts' clocks a few ms apart, as NTP leaves them
            "start_monotonic_ns": T0,
            "source": "/efs",
            "mountpoint": "/mnt/efs",
            "host": f"h{host:03d}",
            "format_version": 6,
            "clock": "CLOCK_MONOTONIC",
            "end_wall_ns": WALL0 + host * 3_000_000 + end - T0,
            "end_monotonic_ns": end,
            "records": n,
            "dropped": 0,
            "lost": 0,
            "files": 1,
            "write_errors": 0,
            "last_error": None,
        },
    )


def fleet(base: str, hosts: int, records: int) -> str:
    """The fleet's directory, written unless it is there already."""
    directory = os.path.join(base, f"{hosts}-{records}")
    done = os.path.join(directory, ".complete")
    if not os.path.exists(done):
        began = time.perf_counter()
        for h in range(hosts):
            d = os.path.join(directory, f"host=h{h:03d}")
            if not os.path.exists(os.path.join(d, meta.NAME)):
                if os.path.isdir(d):
                    for f in os.listdir(d):
                        os.unlink(os.path.join(d, f))
                    os.rmdir(d)
                write_host(d, h, records)
        Path(done).touch()
        print(f"wrote {hosts} hosts of {records:,} records in {time.perf_counter() - began:.1f} s", flush=True)
    return directory


def timed(directory: str) -> dict:
    """`fusetrace simulate 'DIR/*' --json` in a child: its figures, wall and CPU time and peak RSS."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "fusetrace", "simulate", os.path.join(directory, "host=*"), "--profile",
         "efs-bursting", *(x for s in SETTINGS for x in ("--set", s)), "--json"],
        check=True, capture_output=True, text=True, timeout=3600, cwd=str(ROOT),
    )  # fmt: skip
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    s = json.loads(out.stdout)
    return {
        "wall_s": wall,
        "cpu_s": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
        "rss_mib": after.ru_maxrss / 1024,  # the largest child's so far: run smallest first
        "records": s["records"],
        "run_out_s": s["credits"]["run_out_s"],
        "slowdown": s["slowdown"],
        "waited_s": s["waited"]["total_s"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", default="10,30,100", help="fleet sizes, comma-separated (smallest first)")
    ap.add_argument("--records", type=int, default=100_000, help="records a host")
    ap.add_argument("--dir", default="/tmp/fusetrace-simulate-fleet")
    ap.add_argument("--docs", help="write the figures into this page, between its simulate-fleet markers")
    ap.add_argument("--profile", metavar="FILE", help="profile one run of the largest fleet into FILE, and stop")
    args = ap.parse_args()
    sizes = sorted(int(x) for x in args.hosts.split(","))
    dirs = {h: fleet(args.dir, h, args.records) for h in sizes}
    if args.profile:
        from fusetrace.rehearse import simulate
        from fusetrace.shaping.profile import load_params

        largest = dirs[sizes[-1]]
        traces = sorted(os.path.join(largest, d) for d in os.listdir(largest) if d.startswith("host="))
        profiler = cProfile.Profile()
        profiler.runcall(simulate.simulate, traces, load_params("efs-bursting", SETTINGS), None)
        profiler.dump_stats(args.profile)
        return
    load = os.getloadavg()
    rows = []
    for h in sizes:
        x = timed(dirs[h])
        print(f"{h} hosts: {x}", flush=True)
        run_out = f"{x['run_out_s'] / 86400:.2f} days" if x["run_out_s"] is not None else "not within the week"
        rows.append(
            f"| {h} | {x['records']:,} | {x['wall_s']:.1f} | {x['cpu_s']:.1f} | "
            f"{x['cpu_s'] / x['records'] * 1e6:.1f} | {x['rss_mib']:,.0f} | {run_out} |"
        )
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    part = "\n".join(
        [
            "## A fleet simulated together",
            "",
            f"`bench/simulate_fleet.py --hosts {args.hosts} --records {args.records}`, run {when} on this "
            f"2-core machine, loaded by other engineers' work during the run (load {load[0]:.1f} at the "
            f"start, {os.getloadavg()[0]:.1f} at the end): `fusetrace simulate 'DIR/host=*' --profile "
            f"efs-bursting --set stored_size=10GiB --set burst_credit_balance=100GiB --json`, closed "
            f"loop, in a fresh process for each fleet; each host {args.records:,} records over seven "
            "days (four processes, half the jobs writing 1 MiB, half reading it). Peak RSS is the "
            "child's (getrusage).",
            "",
            "| hosts | records | wall s | CPU s | CPU µs a record | peak RSS MiB | credits run out |",
            "|---|---|---|---|---|---|---|",
            *rows,
        ]
    )
    print(part)
    if args.docs:
        write_between(Path(args.docs), MARK, part)


if __name__ == "__main__":
    main()
