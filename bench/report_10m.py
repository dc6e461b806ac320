"""Time `fusetrace report` on a synthetic trace of 10 million records.

    python bench/report_10m.py [--records N] [--parts N] [--dir DIR]

Writes the trace with pyarrow alone (as many parts as a long-running server would
leave: by default 1000 parts of 10,000 records), then times the text report, the
--histogram, --by pid, --by path, --by comm, --by dir, --timeline, filtered and --json
variants in-process.
"""

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from fusetrace.report.filters import Filters
from fusetrace.report.query import Trace
from fusetrace.report.render import TOP_GROUPS, render
from fusetrace.trace import metadata as meta
from fusetrace.trace.schema import SCHEMA

OPS = np.array(["getattr", "lookup", "read", "write", "open", "release", "flush", "readdir"])
OP_WEIGHTS = np.array([0.30, 0.20, 0.20, 0.15, 0.05, 0.05, 0.04, 0.01])
COMMS = np.array(["make", "cc1", "sh", "python3", "ld", "as", "cat", "tar"])


def synthetic(n: int, rng: np.random.Generator, t0: int, paths: pa.Array) -> pa.Table:
    """n records starting at monotonic time t0, ~20,000 ops/s."""
    start = t0 + np.cumsum(rng.exponential(50_000, n)).astype(np.int64)
    dur = rng.lognormal(np.log(300_000), 1.2, n).astype(np.int64)
    op_idx = rng.choice(len(OPS), n, p=OP_WEIGHTS).astype(np.int8)
    io = np.isin(op_idx, [2, 3])
    size = np.where(io, 65536, 0).astype(np.int64)
    err = np.where(rng.random(n) < 0.01, 2, 0).astype(np.int32)
    pid = rng.integers(1000, 1016, n, dtype=np.uint32)
    cols = {
        "start_ns": start,
        "dur_ns": dur,
        "op": pa.DictionaryArray.from_arrays(pa.array(op_idx), pa.array(OPS)),
        "inode": rng.integers(2, 100_000, n, dtype=np.uint64),
        "path": paths.take(pa.array(rng.integers(0, len(paths), n))),
        "path2": pa.nulls(n, pa.string()),
        "fh": np.where(io, rng.integers(3, 1000, n), 0).astype(np.uint64),
        "offset": np.where(io, rng.integers(0, 1 << 20, n) * 65536, 0).astype(np.int64),
        "size": size,
        "result": np.where(err == 0, size, 0),
        "errno": err,
        "pid": pid,
        "uid": np.zeros(n, np.uint32),
        "gid": np.zeros(n, np.uint32),
        "shaped_ns": np.zeros(n, np.int64),
        # a traced mount that does not emulate: the model's account is absent
        "gate": pa.nulls(n, pa.dictionary(pa.int8(), pa.string())),
        "wait_ns": np.zeros(n, np.int64),
        "latency_ns": np.zeros(n, np.int64),
        "transfer_ns": np.zeros(n, np.int64),
        "nfs": pa.nulls(n, pa.dictionary(pa.int32(), pa.string())),
        # format 3: each process's name; the request's details as a trace-only mount has them for most ops
        "comm": pa.DictionaryArray.from_arrays(pa.array((pid % len(COMMS)).astype(np.int32)), pa.array(COMMS)),
        "kind": pa.nulls(n, pa.dictionary(pa.int8(), pa.string())),
        "flags": np.zeros(n, np.int32),
        "mode": np.zeros(n, np.uint32),
        "entry": np.zeros(n, np.uint64),
        "fault": pa.nulls(n, pa.dictionary(pa.int32(), pa.string())),  # format 4: no fault rule fired
        "host": pa.DictionaryArray.from_arrays(np.zeros(n, np.int32), pa.array(["bench"])),  # format 5
        "path_raw": pa.nulls(n, pa.binary()),
        "path2_raw": pa.nulls(n, pa.binary()),  # format 6: UTF-8 names
    }
    return pa.Table.from_arrays([pa.array(cols[f.name], type=f.type) for f in SCHEMA], schema=SCHEMA)


def write_trace(directory: str, records: int, parts: int, seed: int = 1) -> None:
    os.makedirs(directory, mode=0o700, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = pa.array([f"/data/dir{i % 100}/file{i}" for i in range(10_000)])
    wall, mono = meta.clock_pair()
    t = mono
    per = records // parts
    for i in range(parts):
        table = synthetic(per + (records % parts if i == parts - 1 else 0), rng, t, paths)
        t = table["start_ns"][-1].as_py()
        pq.write_table(table, os.path.join(directory, f"part-{i:06d}.parquet"), compression="zstd")
    meta.write(
        directory,
        {
            "start_wall_ns": wall,
            "start_monotonic_ns": mono,
            "format_version": meta.FORMAT_VERSION,
            "source": "synthetic",
            "mountpoint": "-",
            "end_wall_ns": wall,
            "records": records,
            "dropped": 0,
            "files": parts,
        },
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=10_000_000)
    p.add_argument("--parts", type=int, default=1000)
    p.add_argument("--dir", help="keep the trace here (default: a temporary directory)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = args.dir or os.path.join(tmp, "trace")
        if not os.path.exists(os.path.join(directory, meta.NAME)):
            t = time.perf_counter()
            write_trace(directory, args.records, args.parts)
            print(f"wrote {args.records:,} records in {args.parts} parts: {time.perf_counter() - t:.1f} s")
        filtered = Filters(ops=("read", "write"), path="/data/dir1*/**", since="100")
        runs: list[tuple[str, dict[str, Any], bool, Filters]] = [
            ("report", {}, False, Filters()),
            ("--histogram", {"histogram": True}, False, Filters()),
            ("--by pid", {"by": "pid"}, False, Filters()),
            ("--by path", {"by": "path"}, False, Filters()),
            ("--by comm", {"by": "comm"}, False, Filters()),
            ("--by dir", {"by": "dir"}, False, Filters()),
            ("--timeline", {"timeline": True}, False, Filters()),
            ("--op, --path, --since", {}, False, filtered),
            ("--json --histogram", {"histogram": True}, True, Filters()),
        ]
        for label, kwargs, as_json, filters in runs:
            t = time.perf_counter()
            trace = Trace(directory, filters)
            if as_json:
                out = json.dumps(trace.summary(**kwargs))
            else:
                out = render(trace.summary(top=TOP_GROUPS, **kwargs))
            print(f"{label:<22} {time.perf_counter() - t:6.2f} s  ({len(out):,} characters)")


if __name__ == "__main__":
    main()
