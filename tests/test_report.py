"""`fusetrace report` against numpy on the same synthetic records, and the trace
directory read by DuckDB and pandas with no fusetrace code."""

import json
import subprocess
import sys

import duckdb
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from conftest import poll

from fusetrace.report import Trace, render
from fusetrace.trace import metadata as meta
from fusetrace.trace.schema import TraceRecord
from fusetrace.trace.writer import TraceWriter

OPS = ["read", "write", "getattr", "lookup", "open"]
PCTS = {"p50_ns": 50, "p90_ns": 90, "p99_ns": 99, "p999_ns": 99.9}


def synthetic(n: int, seed: int = 7) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    op = rng.choice(len(OPS), n, p=[0.3, 0.2, 0.3, 0.15, 0.05])
    errno = np.where(rng.random(n) < 0.05, 2, 0)
    size = rng.choice([512, 4096, 65536], n)
    io = op <= 1
    return {
        "start_ns": 1_000_000_000 + np.cumsum(rng.integers(1, 200_000, n)),
        "dur_ns": np.rint(rng.lognormal(12, 1.5, n)).astype(np.int64),
        "op": np.array(OPS)[op],
        "path": np.array([f"/d/f{i}" for i in range(40)])[rng.integers(0, 40, n)],
        "size": np.where(io, size, 0),
        "result": np.where(io & (errno == 0), size, np.where(op == 2, 1, 0)),  # getattr's 1 is no byte
        "errno": errno,
        "pid": rng.integers(100, 106, n),
    }


def write(directory, cols: dict[str, np.ndarray], batches: int = 4, **writer_args) -> TraceWriter:
    """Feed the records through a real TraceWriter, in `batches` flushes (several parts)."""
    w = TraceWriter(directory, {"source": "/mnt/efs", "mountpoint": "/mnt/t", "host": "box"},
                    flush_interval=0.01, **writer_args)
    n = len(cols["start_ns"])
    rows = [(int(cols["start_ns"][i]), int(cols["dur_ns"][i]), str(cols["op"][i]), 2, str(cols["path"][i]),
             None, 3, 0, int(cols["size"][i]), int(cols["result"][i]), int(cols["errno"][i]),
             int(cols["pid"][i]), 0, 0, 0) for i in range(n)]
    for b in range(batches):
        done = w.files
        for r in rows[b * n // batches:(b + 1) * n // batches]:
            w.record(TraceRecord(*r))
        poll(lambda done=done: w.files > done, timeout=5)
    return w


@pytest.fixture(scope="module")
def data():
    return synthetic(20_000)


@pytest.fixture(scope="module")
def trace(tmp_path_factory, data):
    d = tmp_path_factory.mktemp("report") / "trace1"
    write(d, data).close()
    return d


def expected(cols, mask) -> dict:
    dur = cols["dur_ns"][mask]
    io = np.isin(cols["op"][mask], ["read", "write"])
    span = (cols["start_ns"] + cols["dur_ns"]).max() - cols["start_ns"].min()
    out = {"count": int(mask.sum()), "errors": int((cols["errno"][mask] != 0).sum()),
           "bytes": int(cols["result"][mask][io].sum()), "total_ns": int(dur.sum()),
           "mean_ns": dur.mean(), "max_ns": int(dur.max()),
           "ops_per_s": mask.sum() / (span / 1e9)}
    out.update({k: np.percentile(dur, p) for k, p in PCTS.items()})
    return out


def check(row: dict, want: dict) -> None:
    for k, v in want.items():
        assert row[k] == pytest.approx(v, rel=1e-9), k


def test_per_op_numbers_match_numpy(trace, data):
    t = Trace(trace)
    assert len(t.files) >= 4
    rows, groups = t.ops()
    assert groups == 1 and sorted(r["op"] for r in rows) == sorted(OPS)
    for r in rows:
        check(r, expected(data, data["op"] == r["op"]))
    totals = [r["total_ns"] for r in rows]
    assert totals == sorted(totals, reverse=True)
    read = next(r for r in rows if r["op"] == "read")
    assert read["bytes_per_s"] == pytest.approx(read["bytes"] / (t.span_ns / 1e9))


@pytest.mark.parametrize("by", ["pid", "path"])
def test_grouped_numbers_match_numpy(trace, data, by):
    rows, groups = Trace(trace).ops(by)
    assert groups == len(np.unique(data[by]))
    assert len(rows) == len({(r[by], r["op"]) for r in rows})
    for r in rows:
        check(r, expected(data, (data[by] == r[by]) & (data["op"] == r["op"])))
    group_totals = {}
    for r in rows:
        group_totals.setdefault(r[by], 0)
        group_totals[r[by]] += r["total_ns"]
    order = list(dict.fromkeys(r[by] for r in rows))
    assert order == sorted(group_totals, key=lambda k: (-group_totals[k], k))


def test_top_keeps_the_busiest_groups(trace):
    everything, groups = Trace(trace).ops("path")
    top, same = Trace(trace).ops("path", top=3)
    assert same == groups
    kept = list(dict.fromkeys(r["path"] for r in everything))[:3]
    assert [r for r in everything if r["path"] in kept] == top


def test_histograms_match_numpy(trace, data):
    hists = Trace(trace).histograms()
    for op, buckets in hists.items():
        dur = data["dur_ns"][data["op"] == op]
        want = np.bincount([max(int(d).bit_length() - 1, 0) for d in dur])
        first = buckets[0]["bucket"]
        assert [b["bucket"] for b in buckets] == list(range(first, first + len(buckets)))
        assert [b["count"] for b in buckets] == list(want[first:])
        assert want[:first].sum() == 0
        assert all(b["high_ns"] == 2 * b["low_ns"] == 2 ** (b["bucket"] + 1) for b in buckets)


def test_text_report(trace):
    text = render(Trace(trace).summary(histogram=True))
    lines = text.splitlines()
    assert lines[0].startswith(f"trace       {trace}  (20,000 records in ")
    assert "source      /mnt/efs on box, mounted at /mnt/t" in lines
    assert "dropped" not in text and "warning" not in text
    header = next(ln for ln in lines if ln.startswith("op "))
    assert header.split() == ["op", "count", "errors", "ops/s", "MB/s", "mean", "p50", "p90", "p99",
                              "p99.9", "max", "total", "%total", "errno"]
    assert "█" in text and "read  (" in text


def fusetrace(*args):
    return subprocess.run([sys.executable, "-m", "fusetrace", *args], capture_output=True, text=True,
                          timeout=120)


def test_cli_json(trace, data):
    done = fusetrace("report", str(trace), "--json", "--histogram", "--by", "pid")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["records"] == 20_000 and out["by"] == "pid" and out["closed"]
    assert out["metadata"]["source"] == "/mnt/efs"
    assert sum(r["count"] for r in out["ops"]) == 20_000
    assert set(out["histograms"]) == set(OPS)
    r = out["ops"][0]
    check(r, expected(data, (data["pid"] == r["pid"]) & (data["op"] == r["op"])))


def test_cli_text_by_path(trace):
    done = fusetrace("report", str(trace), "--by", "path")
    assert done.returncode == 0, done.stderr
    assert "path" in done.stdout and "/d/f" in done.stdout
    assert "top 20 of 40 paths (--top N shows more, --json has all)" in done.stdout


@pytest.mark.parametrize("make", ["missing", "empty", "metadata only"])
def test_cli_no_trace_exits_2(tmp_path, make):
    d = tmp_path / "t"
    if make != "missing":
        d.mkdir()
    if make == "metadata only":
        meta.write(str(d), {"source": "/x"})
    done = fusetrace("report", str(d))
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and str(d) in done.stderr


def test_header_tells_of_drops_and_an_open_trace(tmp_path):
    d = tmp_path / "t"
    w = write(d, synthetic(50), batches=1, max_pending=20)  # 30 of the 50 dropped
    poll(lambda: meta.read(d)["dropped"] == 30, timeout=5)  # written after the part
    try:
        text = render(Trace(d).summary())
        assert "dropped     30 records: the writer's queue was full (max_pending 20)" in text
        assert "warning     trace not closed" in text
    finally:
        w.close()
    assert "warning" not in render(Trace(d).summary())


def test_duckdb_reads_the_directory(trace, data):
    rows = duckdb.sql(f"select op, quantile_cont(dur_ns, 0.99), count(*) from '{trace}/*.parquet' "
                      f"group by op").fetchall()
    for op, p99, n in rows:
        dur = data["dur_ns"][data["op"] == op]
        assert n == len(dur) and p99 == pytest.approx(np.percentile(dur, 99), rel=1e-9)


def test_pandas_reads_the_directory_while_a_part_is_being_written(trace, data):
    tmp = trace / ".part-000099.parquet.tmp"  # what a reader may meet mid-flush
    tmp.write_bytes(b"PAR1 half a file")
    try:
        df = pd.read_parquet(trace)
    finally:
        tmp.unlink()
    assert len(df) == 20_000 and list(df["dur_ns"]) == list(data["dur_ns"])
    assert isinstance(df["op"].dtype, pd.CategoricalDtype)
    assert df.groupby("op", observed=True)["dur_ns"].quantile(0.99)["read"] == pytest.approx(
        np.percentile(data["dur_ns"][data["op"] == "read"], 99))


def test_parts_without_metadata_still_report(trace, tmp_path):
    d = tmp_path / "copied"
    d.mkdir()
    for p in trace.glob("*.parquet"):
        (d / p.name).write_bytes(p.read_bytes())
    text = render(Trace(d).summary())
    assert "(20,000 records in " in text
    assert "warning     no _metadata.json" in text


# ---- an emulated trace: where the modelled time went ---------------------------------------

GATES = np.array(["latency", "iops", "file", "throughput", "cache"])
EMULATED = {"source": "/mnt/efs", "mountpoint": "/mnt/t", "host": "box",
            "emulation": {"profile": "efs-2016", "params": {}},
            "host_load": {"ops": 900, "added_share": 0.031, "loop_busy": 0.42, "host_bound": False,
                          "extending_writes": 0}, "warnings": []}


def shaped(n: int, seed: int = 3) -> dict[str, np.ndarray]:
    """synthetic() with the model's account: a gate, a split of the modelled time, the RPCs;
    every tenth record unshaped (gate null), as an emulated mount's own probes are."""
    cols = synthetic(n, seed)
    rng = np.random.default_rng(seed)
    cols["gate"] = np.where(np.arange(n) % 10 == 0, None, GATES[rng.integers(0, len(GATES), n)])
    for k in ("wait_ns", "latency_ns", "transfer_ns"):
        cols[k] = np.where(cols["gate"] == None, 0, rng.integers(0, 5_000_000, n))  # noqa: E711 (numpy)
    return cols


def write_shaped(directory, cols: dict[str, np.ndarray], metadata: dict) -> None:
    with TraceWriter(directory, metadata, flush_interval=3600) as w:
        for i in range(len(cols["start_ns"])):
            gate = cols["gate"][i]
            w.record(TraceRecord(int(cols["start_ns"][i]), int(cols["dur_ns"][i]), str(cols["op"][i]), 2,
                                 str(cols["path"][i]), None, 3, 0, int(cols["size"][i]), int(cols["result"][i]),
                                 int(cols["errno"][i]), int(cols["pid"][i]), 0, 0, 0, gate,
                                 int(cols["wait_ns"][i]), int(cols["latency_ns"][i]), int(cols["transfer_ns"][i]),
                                 None if gate is None else "GETATTR"))


def test_where_the_modelled_time_went_matches_numpy(tmp_path):
    cols = shaped(5_000)
    write_shaped(tmp_path / "t", cols, EMULATED)
    rows = Trace(tmp_path / "t").shaping()
    assert rows is not None and sorted(r["op"] for r in rows) == sorted(OPS)
    for r in rows:
        mine = (cols["op"] == r["op"]) & (cols["gate"] != None)  # noqa: E711 (numpy)
        assert r["count"] == mine.sum()
        for k in ("wait_ns", "latency_ns", "transfer_ns"):
            assert r[k] == cols[k][mine].sum()
        assert r["modelled_ns"] == r["wait_ns"] + r["latency_ns"] + r["transfer_ns"]
        gates, counts = np.unique(cols["gate"][mine].astype(str), return_counts=True)
        assert r["gates"] == dict(sorted(zip(gates.tolist(), counts.tolist()), key=lambda g: (-g[1], g[0])))
    assert [r["modelled_ns"] for r in rows] == sorted((r["modelled_ns"] for r in rows), reverse=True)


def test_text_report_of_an_emulated_trace(tmp_path):
    write_shaped(tmp_path / "t", shaped(500), EMULATED)
    lines = render(Trace(tmp_path / "t").summary()).splitlines()
    assert ("emulated    efs-2016; the host kept up with the model (replies 3.1 % later than modelled in all, "
            "loop busy 42 % of the time)") in lines
    assert "warning" not in "\n".join(lines)
    at = lines.index("where the modelled time went")
    assert lines[at + 1].split() == ["op", "shaped", "modelled", "mean", "wait%", "latency%", "transfer%", "gates",
                                     "(operations)"]
    read = next(ln for ln in lines[at:] if ln.startswith("read "))
    assert sum(float(x) for x in read.split()[4:7]) == pytest.approx(100, abs=0.2)


def test_an_emulated_run_that_was_flagged_or_host_bound_says_so(tmp_path):
    note = "kernel-serialised extending writes: 250 (FUSE runs O_DIRECT writes past the end of a file ...)"
    bound = {**EMULATED, "warnings": [note],
             "host_load": {**EMULATED["host_load"], "added_share": 0.4, "host_bound": True, "extending_writes": 250}}
    write_shaped(tmp_path / "t", shaped(100), bound)
    text = render(Trace(tmp_path / "t").summary())
    assert "emulated    efs-2016; HOST-BOUND: the host, not the model, set the pace (replies 40.0 %" in text
    assert f"warning     {note}" in text


def test_a_format_1_trace_still_reports(tmp_path, trace):
    """A trace written before the gate columns: read as it is, its figures the same, and
    the report says the split was not recorded."""
    old = tmp_path / "old"
    old.mkdir()
    for p in trace.glob("*.parquet"):
        table = pq.read_table(p)
        pq.write_table(table.drop_columns(["gate", "wait_ns", "latency_ns", "transfer_ns", "nfs"]), old / p.name)
    meta.write(str(old), {**EMULATED, "format_version": 1, "end_wall_ns": 1})
    summary = Trace(old).summary()
    assert summary["shaping"] is None
    assert summary["ops"] == Trace(trace).summary()["ops"]
    text = render(summary)
    assert "where the modelled time went: not recorded (a format 1 trace" in text
    done = fusetrace("report", str(old), "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["shaping"] is None
