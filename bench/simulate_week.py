"""Time `fusetrace simulate --days 7` on a synthetic busy trace of 302,000 records.

    python bench/simulate_week.py [--records N] [--dir DIR] [--rounds N] [--baseline REV]
                                  [--docs docs/BENCHMARKS.md] [--profile FILE]

The trace: four processes, each doing one job after another (look a file up, open it,
write 64 KiB four times, close it, stat it), 0.5 ms an operation, 0.1 ms between and 0.4 s
of think time between jobs, about an hour in all: 2.5 MiB/s written, past efs-bursting's
baseline (1 MiB/s at 10 GiB stored) once its credits (100 GiB here) run out, within the
first day.  It is written once (through the trace writer, as a mount would) and kept in DIR.

Each round times the simulation in closed loop and in open loop (`--open-loop`), and, with
--baseline, the code of that git revision (its simulate, open loop only), each in a fresh
process, the order alternating between rounds; wall and CPU time (the host is shared: CPU
time moves less with other work).  With --docs the figures go between the `<!-- simulate -->`
markers of that page.  --profile: one closed-loop run in this process under cProfile, its
figures written to FILE, and nothing else.
"""

import argparse
import cProfile
import datetime
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import write_between  # noqa: E402

from fusetrace.trace import reader  # noqa: E402
from fusetrace.trace.schema import TraceRecord  # noqa: E402
from fusetrace.trace.writer import TraceWriter  # noqa: E402

PROCESSES = 4
JOB = 8  # records a job
SETTINGS = ["stored_size=10GiB", "burst_credit_balance=100GiB"]
MARK = "<!-- simulate -->"
# One timed run in a fresh process: the code under sys.argv[1], the trace, closed loop or not.
RUN = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from fusetrace.rehearse import simulate
from fusetrace.shaping.profile import load_params
params = load_params("efs-bursting", json.loads(sys.argv[3]))
loop = {} if sys.argv[4] == "baseline" else {"closed": sys.argv[4] == "closed"}
began, cpu = time.perf_counter(), time.process_time()
s = simulate.simulate(sys.argv[2], params, 7.0, **loop)
print(json.dumps({"wall_s": time.perf_counter() - began, "cpu_s": time.process_time() - cpu,
    "simulated": s["operations"]["simulated"], "total": s["operations"]["total"],
    "run_out_s": s["credits"]["run_out_s"], "repetitions": s["repetitions"],
    "slowdown": s.get("slowdown"), "waited_max_s": s["waited"]["max_s"]}))
"""


def write_trace(directory: str, records: int) -> None:
    """The trace described above, `records` records long (to a whole number of jobs)."""
    t0 = 10**12
    meta = {"source": "/src", "mountpoint": "/mnt", "start_monotonic_ns": t0}
    w = TraceWriter(directory, meta, flush_interval=3600, max_pending_bytes=None)
    rows = []
    for p in range(PROCESSES):
        pid, t = 1000 + p, t0 + p * 1_000_000

        def rec(op, inode, path, fh=0, size=0, kind="meta_read", flags=0, mode=0, entry=0, pid=pid):
            nonlocal t
            rows.append(
                TraceRecord(
                    t, 500_000, op, inode, path, None, fh, 0, size, size, 0, pid, 0, 0, 0,
                    comm="job", kind=kind, flags=flags, mode=mode, entry=entry,
                )
            )  # fmt: skip
            t += 600_000

        for i in range(records // JOB // PROCESSES):
            f, fh = 100 + (p * 1000 + i) % 500, 10 + p
            rec("lookup", 1, f"/f{f}", mode=stat.S_IFREG | 0o644, entry=f)
            rec("open", f, f"/f{f}", fh=fh, flags=os.O_WRONLY)
            for _ in range(4):
                rec("write", f, f"/f{f}", fh=fh, size=65536, kind="buffered")
            rec("flush", f, f"/f{f}", fh=fh, kind="flush")
            rec("release", f, f"/f{f}", fh=fh, kind="none")
            t += 400_000_000  # think time between jobs
    rows.sort(key=lambda r: r.start_ns)
    for r in rows:
        w.record(r)
    w.close()


def baseline_tree(rev: str, into: str) -> str:
    """The files of git revision `rev` under `into` (its own emulator/ included)."""
    data = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into)  # our own repository's files
    return into


def timed(code: str, trace: str, loop: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", RUN, code, trace, json.dumps(SETTINGS), loop],
        check=True, capture_output=True, text=True, cwd=tempfile.gettempdir(), timeout=1800,
    )  # fmt: skip
    return json.loads(out.stdout.splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=302_000)
    ap.add_argument("--dir", default="/tmp/fusetrace-simulate-week")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--baseline", metavar="REV", help="also time the simulate of this git revision")
    ap.add_argument("--docs", help="write the figures into this page, between its simulate markers")
    ap.add_argument("--profile", metavar="FILE", help="profile one closed-loop run into FILE, and stop")
    args = ap.parse_args()
    whole = args.records // JOB // PROCESSES * JOB * PROCESSES
    if not os.path.isdir(args.dir) or reader.record_count(args.dir) != whole:
        shutil.rmtree(args.dir, ignore_errors=True)  # another size's, or a part-written one
        began = time.perf_counter()
        write_trace(args.dir, args.records)
        print(f"wrote {reader.record_count(args.dir):,} records in {time.perf_counter() - began:.1f} s")
    if args.profile:
        from fusetrace.rehearse import simulate
        from fusetrace.shaping.profile import load_params

        profiler = cProfile.Profile()
        profiler.runcall(simulate.simulate, args.dir, load_params("efs-bursting", SETTINGS), 7.0)
        profiler.dump_stats(args.profile)
        return
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        kinds = [("closed", str(ROOT)), ("open", str(ROOT))]
        if args.baseline:
            kinds.append(("baseline", baseline_tree(args.baseline, tmp)))
        runs: dict[str, list[dict]] = {k: [] for k, _ in kinds}
        for r in range(args.rounds):
            for kind, code in kinds if r % 2 == 0 else kinds[::-1]:
                runs[kind].append(timed(code, args.dir, kind))
                x = runs[kind][-1]
                print(
                    f"round {r + 1} {kind}: {x['wall_s']:.1f} s ({x['cpu_s']:.1f} s CPU), {x['simulated']:,} op by op"
                )
    names = {
        "closed": "this tree, closed loop (the default)",
        "open": "this tree, `--open-loop`",
        "baseline": f"{args.baseline} (open loop, before this work)",
    }
    rows = []
    for kind, _ in kinds:
        xs = runs[kind]
        cpu = ", ".join(f"{x['cpu_s']:.1f}" for x in xs)
        wall = ", ".join(f"{x['wall_s']:.1f}" for x in xs)
        x = xs[0]
        rows.append(
            f"| {names[kind]} | {cpu} | {wall} | {x['simulated']:,} of {x['total'] / 1e6:,.1f} million | "
            f"{(x['run_out_s'] or 0) / 3600:.1f} h | {x['repetitions']:,.1f} |"
        )
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    part = "\n".join(
        [
            "## simulate: a week of a 302,000-record trace",
            "",
            f"`bench/simulate_week.py --rounds {args.rounds}"
            + (f" --baseline {args.baseline}" if args.baseline else "")
            + f"`, run {when} on this machine (shared with other work: load {load[0]:.1f} at the start, "
            f"{os.getloadavg()[0]:.1f} at the end): `fusetrace simulate --days 7` of {whole:,} records (four "
            "processes writing, an hour) on efs-bursting, 10 GiB stored, 100 GiB of credits; each run in a "
            "fresh process, the order alternating between rounds. Seconds for every round.",
            "",
            "| code | CPU s | wall s | operations simulated op by op | credits run out | passes in 7 days |",
            "|---|---|---|---|---|---|",
            *rows,
        ]
    )
    print(part)
    if args.docs:
        write_between(Path(args.docs), MARK, part)


if __name__ == "__main__":
    main()
