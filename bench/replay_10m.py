"""`fusetrace replay` of a synthetic trace of 10 million records, in bounded memory.

    python bench/replay_10m.py [--records N ...] [--target DIR] [--docs FILE]

For each size asked (default 1, 10 and 20 million records) it writes a trace with
pyarrow alone, in parts of 10,000 records each written in no time order (as a server
writes them, in reply order, only more so: each part is one process's), then runs the real
command, `fusetrace replay TRACE TARGET --as-fast-as-possible --json`, sampling the
process's resident memory (VmRSS) every half second, and its peak (VmHWM) as it ends.
The trace: 16 processes, each making its directory and then, over and over, one of its
64 files: create, four 4 KiB writes, flush, release, open, four 4 KiB reads, flush,
release, getattr (15 records a cycle), each process's cycles 50 us an operation apart and
3 us behind the one before, so that a few processes' operations are always under way at
once.  Every record replays without a difference: the check that the replay did the work.

Then a trace of the same kind at 16,000 operations a second is replayed with its timing,
at speeds 1, 2, 4 and 8: the drift and how late operations were issued.

The figures go between the `<!-- replay_10m -->` markers of --docs (default
docs/REHEARSAL.md), and to stdout.
"""

import argparse
import itertools
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import memory_kib

from fusetrace.texttable import ns_text
from fusetrace.trace import metadata as meta
from fusetrace.trace.schema import SCHEMA

PROCESSES = 16
FILES = 64
PART = 10_000
STEP_NS = 50_000  # between one process's operations
SKEW_NS = 3_000  # one process behind the one before
DUR_NS = 20_000
BLOCK = 4096
CREATE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_LARGEFILE
RDONLY = os.O_RDONLY | os.O_LARGEFILE
# one cycle on one file: (op, offset block, size, result, flags, mode, write handle or read handle)
CYCLE = (
    [("create", 0, 0, 0, CREATE, stat.S_IFREG | 0o644, 0)]
    + [("write", i, BLOCK, BLOCK, 0, 0, 0) for i in range(4)]
    + [("flush", 0, 0, 0, 0, 0, 0), ("release", 0, 0, 0, 0, 0, 0), ("open", 0, 0, 0, RDONLY, 0, 1)]
    + [("read", i, BLOCK, BLOCK, 0, 0, 1) for i in range(4)]
    + [("flush", 0, 0, 0, 0, 0, 1), ("release", 0, 0, 0, 0, 0, 1), ("getattr", 0, 0, 0, 0, stat.S_IFREG | 0o644, 0)]
)
PACED_STEP_NS = 1_000_000  # 16 processes: 16,000 operations a second
PACED_RECORDS = 80_000  # 5 s of them
PACED_SPEEDS = (1, 2, 4, 8)
HANDLED = {"write", "flush", "release", "read", "create", "open"}
MARK = "<!-- replay_10m -->"


def _table(cols: dict) -> pa.Table:
    """A part from columns (numpy arrays or lists); those not given are null, 0 or ""."""
    n = len(cols["start_ns"])
    arrays = []
    for field in SCHEMA:
        values = cols.get(field.name)
        if values is None:
            arrays.append(
                pa.nulls(n, field.type)
                if field.name in ("path2", "gate", "nfs", "kind", "fault", "path_raw", "path2_raw")
                else pa.array(np.zeros(n), type=field.type)
                if field.name not in ("comm", "host")
                else pa.array(["bench"] * n, type=pa.string()).dictionary_encode().cast(field.type)
            )
        elif pa.types.is_dictionary(field.type):
            arrays.append(pa.array(values, type=pa.string()).dictionary_encode().cast(field.type))
        else:
            arrays.append(pa.array(values, type=field.type))
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


def _mkdirs(t0: int) -> pa.Table:
    """Each process's directory, before its first cycle."""
    pids = np.arange(PROCESSES)
    return _table(
        {
            "start_ns": t0 + pids * SKEW_NS,
            "dur_ns": np.full(PROCESSES, DUR_NS),
            "op": ["mkdir"] * PROCESSES,
            "path": [f"/p{i}" for i in pids],
            "pid": 1000 + pids,
            "mode": np.full(PROCESSES, stat.S_IFDIR | 0o755),
        }
    )


def _cycles(pid_index: int, first_cycle: int, cycles: int, t0: int, step_ns: int) -> pa.Table:
    """`cycles` cycles of one process from `first_cycle` on, its operations step_ns apart."""
    idx = np.arange(cycles * len(CYCLE))
    cycle, step = first_cycle + idx // len(CYCLE), idx % len(CYCLE)
    column = {
        k: np.array([c[i] for c in CYCLE])[step]
        for i, k in enumerate(("op", "block", "size", "result", "flags", "mode", "reader"))
    }
    op = column["op"]
    return _table(
        {
            "start_ns": t0 + pid_index * SKEW_NS + (cycle * len(CYCLE) + step + 1) * step_ns,
            "dur_ns": np.full(len(idx), DUR_NS),
            "op": op.tolist(),
            "path": np.char.add(f"/p{pid_index}/f", (cycle % FILES).astype(str)).tolist(),
            "fh": np.where(np.isin(op, list(HANDLED)), 1000 + 2 * pid_index + column["reader"], 0),
            "offset": column["block"] * BLOCK,
            "size": column["size"],
            "result": column["result"],
            "pid": np.full(len(idx), 1000 + pid_index),
            "flags": column["flags"],
            "mode": column["mode"],
        }
    )


def write_trace(directory: str, records: int, step_ns: int = STEP_NS) -> int:
    """A trace of about `records` records, each process's operations step_ns apart;
    returns how many it has."""
    os.makedirs(directory, mode=0o700)
    wall, mono = meta.clock_pair()
    per_part = PART // len(CYCLE)  # cycles a part holds
    cycles = max(1, (records - PROCESSES) // len(CYCLE) // PROCESSES)
    tables = itertools.chain(
        [_mkdirs(mono)],
        (
            _cycles(pid_index, first, min(per_part, cycles - first), mono, step_ns)
            for pid_index in range(PROCESSES)
            for first in range(0, cycles, per_part)
        ),
    )
    written = parts = 0
    for parts, table in enumerate(tables, 1):
        pq.write_table(table, os.path.join(directory, f"part-{parts - 1:06d}.parquet"), compression="zstd")
        written += table.num_rows
    meta.write(
        directory,
        {
            "start_wall_ns": wall,
            "start_monotonic_ns": mono,
            "format_version": meta.FORMAT_VERSION,
            "source": "synthetic",
            "mountpoint": "-",
            "end_wall_ns": wall,
            "records": written,
            "dropped": 0,
            "files": parts,
        },
    )
    return written


def replay(trace: str, target: str, *options: str) -> dict:
    """Run `fusetrace replay` as a user would, sampling its memory."""
    shutil.rmtree(target, ignore_errors=True)
    os.makedirs(target)
    began = time.monotonic()
    p = subprocess.Popen(
        [sys.executable, "-m", "fusetrace", "replay", trace, target, *options, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    samples: list[tuple[float, int]] = []
    peak = 0
    while p.poll() is None:
        st = memory_kib(p.pid)
        if st:
            samples.append((time.monotonic() - began, st["VmRSS"]))
            peak = max(peak, st["VmHWM"])
        time.sleep(0.5)
    out, err = p.communicate()
    if p.returncode != 0:
        raise SystemExit(f"replay failed ({p.returncode}): {err}")
    summary = json.loads(out)
    return {"elapsed_s": time.monotonic() - began, "samples": samples, "peak_kib": peak, "summary": summary}


def _rss_at(samples: list[tuple[float, int]], share: float) -> int:
    """RSS (KiB) of the sample nearest `share` of the run."""
    if not samples:
        return 0
    end = samples[-1][0]
    return min(samples, key=lambda s: abs(s[0] - share * end))[1]


def render(rows: list[dict], paced: list[dict]) -> str:
    lines = [
        MARK,
        "",
        f"`bench/replay_10m.py` ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs, target on "
        f"{rows[0]['fs']}): `fusetrace replay TRACE TARGET --as-fast-as-possible` of synthetic traces "
        f"({PROCESSES} processes, each creating, writing, reading and closing its files; see the script), "
        "resident memory sampled every 0.5 s:",
        "",
        "| records | replayed | differences | run | replay's span | ops/s | RSS at 10 % / 50 % / 90 % of the run "
        "| peak RSS | most at once |",
        "|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in rows:
        s = r["summary"]
        rss = " / ".join(f"{_rss_at(r['samples'], q) / 1024:.0f}" for q in (0.1, 0.5, 0.9))
        lines.append(
            f"| {s['records']:,} | {s['replayed']:,} | {s['differences']['count']:,} | {r['elapsed_s']:.0f} s "
            f"| {s['span_ns'] / 1e9:.0f} s | {s['replayed'] / (s['span_ns'] / 1e9):,.0f} "
            f"| {rss} MiB "
            f"| {r['peak_kib'] / 1024:.0f} MiB | {s['most_at_once']} |"
        )
    s = paced[0]["summary"]
    lines += [
        "",
        f"The same kind of trace at {PROCESSES * 1e9 / PACED_STEP_NS:,.0f} operations a second "
        f"({s['records']:,} records over {s['recorded_span_ns'] / 1e9:.1f} s), replayed with its timing "
        "at each speed into the same tmpfs directory:",
        "",
        "| speed | operations due a second | due in | replayed in | drift | issued late: p50 / p99 / max "
        "| differences |",
        "|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in paced:
        s = r["summary"]
        late = s["late_ns"]
        lines.append(
            f"| {s['speed']:g} | {s['records'] / (s['due_span_ns'] / 1e9):,.0f} | {ns_text(s['due_span_ns'])} "
            f"| {ns_text(s['span_ns'])} | {100 * s['drift']:+.1f} % "
            f"| {ns_text(late['p50'])} / {ns_text(late['p99'])} / {ns_text(late['max'])} "
            f"| {s['differences']['count']} |"
        )
    lines += ["", MARK]
    return "\n".join(lines)


def _fs_type(path: str) -> str:
    best = ("", "?")
    with open("/proc/self/mounts", encoding="utf-8", errors="surrogateescape") as f:  # any name
        for line in f:
            _, where, fstype, *_ = line.split()
            if (path == where or path.startswith(where.rstrip("/") + "/")) and len(where) > len(best[0]):
                best = (where, fstype)
    return best[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, nargs="+", default=[1_000_000, 10_000_000, 20_000_000])
    p.add_argument("--target", default="/dev/shm/fusetrace-replay-bench", help="replayed into (default: tmpfs)")
    p.add_argument(
        "--docs",
        default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "REHEARSAL.md"),
        help="where the figures go (between markers)",
    )
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        for n in args.records:
            trace = os.path.join(tmp, f"trace{n}")
            t = time.monotonic()
            written = write_trace(trace, n)
            print(f"wrote {written:,} records in {time.monotonic() - t:.0f} s", flush=True)
            row = replay(trace, args.target, "--as-fast-as-possible")
            row["fs"] = _fs_type(os.path.abspath(args.target))
            rows.append(row)
            s = row["summary"]
            print(
                f"{s['records']:,} records: replayed {s['replayed']:,} in {row['elapsed_s']:.0f} s, "
                f"{s['differences']['count']} differences, peak RSS {row['peak_kib'] / 1024:.0f} MiB",
                flush=True,
            )
            shutil.rmtree(trace)
        trace = os.path.join(tmp, "paced")
        written = write_trace(trace, PACED_RECORDS, PACED_STEP_NS)
        paced = []
        for speed in PACED_SPEEDS:
            paced.append(replay(trace, args.target, "--speed", str(speed)))
            s = paced[-1]["summary"]
            print(f"{written:,} records at speed {speed}: drift {100 * s['drift']:+.1f}%", flush=True)
    shutil.rmtree(args.target, ignore_errors=True)
    table = render(rows, paced)
    print(table)
    if os.path.exists(args.docs):
        with open(args.docs) as f:
            text = f.read()
        if text.count(MARK) == 2:
            before, _, rest = text.partition(MARK)
            _, _, after = rest.partition(MARK)
            text = before + table + after
        else:
            text = text.rstrip("\n") + "\n\n" + table + "\n"
        with open(args.docs, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
