"""`fusetrace report` against numpy on the same synthetic records, and the trace
directory read by DuckDB and pandas with no fusetrace code."""

import errno
import json
import os
import subprocess
import sys

import duckdb
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from support import one_line_error, poll

from fusetrace import cli
from fusetrace.errors import UserError
from fusetrace.globs import glob_regex
from fusetrace.report.filters import Filters
from fusetrace.report.query import Trace
from fusetrace.report.render import render
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
    w = TraceWriter(
        directory, {"source": "/mnt/efs", "mountpoint": "/mnt/t", "host": "box"}, flush_interval=0.01, **writer_args
    )
    n = len(cols["start_ns"])
    rows = [
        (
            int(cols["start_ns"][i]),
            int(cols["dur_ns"][i]),
            str(cols["op"][i]),
            2,
            str(cols["path"][i]),
            None,
            3,
            0,
            int(cols["size"][i]),
            int(cols["result"][i]),
            int(cols["errno"][i]),
            int(cols["pid"][i]),
            0,
            0,
            0,
        )
        for i in range(n)
    ]
    for b in range(batches):
        done = w.files
        for r in rows[b * n // batches : (b + 1) * n // batches]:
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


def expected(cols, mask, group=None) -> dict:
    """The figures of the records in `mask`; rates over the span of those in `group` (a
    --by group's own), else of all."""
    dur = cols["dur_ns"][mask]
    io = np.isin(cols["op"][mask], ["read", "write"])
    inside = slice(None) if group is None else group
    span = (cols["start_ns"] + cols["dur_ns"])[inside].max() - cols["start_ns"][inside].min()
    out = {
        "count": int(mask.sum()),
        "errors": int((cols["errno"][mask] != 0).sum()),
        "bytes": int(cols["result"][mask][io].sum()),
        "total_ns": int(dur.sum()),
        "mean_ns": dur.mean(),
        "max_ns": int(dur.max()),
        "ops_per_s": mask.sum() / (span / 1e9),
    }
    out.update({k: np.percentile(dur, p) for k, p in PCTS.items()})
    return out


def check(row: dict, want: dict) -> None:
    for k, v in want.items():
        assert row[k] == pytest.approx(v, rel=1e-9), k


def test_per_op_numbers_match_numpy(trace, data):
    t = Trace(trace)
    assert meta.read(trace)["files"] >= 4 and len(t.files) == 1  # written as several parts, merged at close
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
        check(r, expected(data, (data[by] == r[by]) & (data["op"] == r["op"]), group=data[by] == r[by]))
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
    assert header.split() == [
        "op",
        "count",
        "errors",
        "ops/s",
        "MB/s",
        "mean",
        "p50",
        "p90",
        "p99",
        "p99.9",
        "max",
        "total",
        "%total",
        "errno",
    ]
    assert "█" in text and "read  (" in text


def fusetrace(*args):
    return subprocess.run([sys.executable, "-m", "fusetrace", *args], capture_output=True, text=True, timeout=120)


def test_cli_json(trace, data):
    done = fusetrace("report", str(trace), "--json", "--histogram", "--by", "pid")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["records"] == 20_000 and out["by"] == "pid" and out["closed"]
    assert out["metadata"]["source"] == "/mnt/efs"
    assert sum(r["count"] for r in out["ops"]) == 20_000
    assert set(out["histograms"]) == set(OPS)
    r = out["ops"][0]
    check(r, expected(data, (data["pid"] == r["pid"]) & (data["op"] == r["op"]), group=data["pid"] == r["pid"]))


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
        assert "dropped     30 records: the writer's queue was full (max_pending 20), or a field was bad" in text
        assert "warning     trace not closed" in text
    finally:
        w.close()
    assert "warning" not in render(Trace(d).summary())


def test_duckdb_reads_the_directory(trace, data):
    rows = duckdb.sql(
        f"select op, quantile_cont(dur_ns, 0.99), count(*) from '{trace}/*.parquet' group by op"
    ).fetchall()
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
        np.percentile(data["dur_ns"][data["op"] == "read"], 99)
    )


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
EMULATED = {
    "source": "/mnt/efs",
    "mountpoint": "/mnt/t",
    "host": "box",
    "emulation": {"profile": "efs-2016", "params": {}},
    "host_load": {
        "ops": 900,
        "added_share": 0.031,
        "queued_share": 0.011,
        "loop_busy": 0.42,
        "host_bound": False,
        "extending_writes": 0,
    },
    "warnings": [],
}


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
            w.record(
                TraceRecord(
                    int(cols["start_ns"][i]),
                    int(cols["dur_ns"][i]),
                    str(cols["op"][i]),
                    2,
                    str(cols["path"][i]),
                    None,
                    3,
                    0,
                    int(cols["size"][i]),
                    int(cols["result"][i]),
                    int(cols["errno"][i]),
                    int(cols["pid"][i]),
                    0,
                    0,
                    0,
                    gate,
                    int(cols["wait_ns"][i]),
                    int(cols["latency_ns"][i]),
                    int(cols["transfer_ns"][i]),
                    None if gate is None else "GETATTR",
                )
            )


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
    assert (
        "emulated    efs-2016; the host kept up with the model (the host added 3.1 % to the modelled time "
        "(replies late 2.0 %, unread in the kernel 1.1 %), loop busy 42 %)"
    ) in lines
    assert "warning" not in "\n".join(lines) and not any(ln.startswith("write-back") for ln in lines)
    at = lines.index("where the modelled time went")
    assert lines[at + 1].split() == [
        "op",
        "shaped",
        "modelled",
        "mean",
        "wait%",
        "latency%",
        "transfer%",
        "gates",
        "(operations)",
    ]
    read = next(ln for ln in lines[at:] if ln.startswith("read "))
    assert sum(float(x) for x in read.split()[4:7]) == pytest.approx(100, abs=0.2)


def test_a_write_back_trace_says_what_its_writes_are(tmp_path):
    write_shaped(tmp_path / "t", shaped(100), {**EMULATED, "options": {"writeback_cache": True}})
    lines = render(Trace(tmp_path / "t").summary()).splitlines()
    said = [ln for ln in lines if ln.startswith("write-back  ")]
    assert len(said) == 1 and "kernel's write-back of many write(2) calls" in said[0]


def test_an_emulated_run_that_was_flagged_or_host_bound_says_so(tmp_path):
    note = "kernel-serialised extending writes: 250 (FUSE runs O_DIRECT writes past the end of a file ...)"
    bound = {
        **EMULATED,
        "warnings": [note],
        "host_load": {**EMULATED["host_load"], "added_share": 0.4, "host_bound": True, "extending_writes": 250},
    }
    del bound["host_load"]["queued_share"]  # a trace from before the kernel's queue was measured
    write_shaped(tmp_path / "t", shaped(100), bound)
    text = render(Trace(tmp_path / "t").summary())
    assert (
        "emulated    efs-2016; HOST-BOUND: the host, not the model, set the pace (the host added 40.0 % to "
        "the modelled time (replies late 40.0 %, kernel queue not measured: a loop busy over 75 % counts), "
        "loop busy 42 %)"
    ) in text
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


# ---- format 3: who, filters, errno names, coverage, hints, timeline ---------------------------

RICH_OPS = np.array(["read", "write", "getattr", "lookup", "getxattr", "open", "fsync"])
DIRS = np.array(["/src", "/src/lib", "/build", "/"])
COMMS = {200: "make", 201: "cc1", 202: "sh", 203: "python3.11-long"}  # 15 bytes, as the kernel keeps a name
T0 = 5_000_000_000  # the first record's start_ns


def rich(n: int, seed: int = 11) -> pd.DataFrame:
    """Records as a format 3 mount writes them: a process name, nested directories, errors
    of several kinds (an errno Python has no name for among them), xattr names, overlaps."""
    rng = np.random.default_rng(seed)
    op = rng.choice(RICH_OPS, n, p=[0.25, 0.15, 0.2, 0.15, 0.15, 0.05, 0.05])
    directory = rng.choice(DIRS, n)
    path = np.array([f"{d.rstrip('/')}/f{i}" for d, i in zip(directory, rng.integers(0, 6, n))])
    u = rng.random(n)
    err = np.select(
        [
            (op == "lookup") & (u < 0.3),
            (op == "getxattr") & (u < 0.8),
            (op == "read") & (u < 0.05),
            (op == "write") & (u < 0.03),
        ],
        [errno.ENOENT, errno.ENODATA, errno.EACCES, 999],
        0,
    )
    pid = rng.integers(200, 205, n)
    comm = np.array([COMMS.get(p, "") for p in pid], dtype=object)
    comm[(pid == 204) & (u < 0.5)] = "cat"  # 204: half its records named, half not (the process was gone)
    size = np.where(np.isin(op, ["read", "write"]), rng.choice([4096, 65536], n), 0)
    return pd.DataFrame(
        {
            "start_ns": T0 + np.concatenate([[0], np.cumsum(rng.integers(0, 400_000, n - 1))]),
            "dur_ns": np.rint(rng.lognormal(11, 1.5, n)).astype(np.int64),
            "op": op,
            "path": path,
            "path2": np.where(op == "getxattr", rng.choice(["security.capability", "user.x"], n, p=[0.9, 0.1]), None),
            "size": size,
            "result": np.where(err == 0, size, 0),
            "errno": err,
            "pid": pid,
            "comm": comm,
        }
    )


def write3(directory, df: pd.DataFrame, metadata: dict | None = None) -> None:
    """Write a DataFrame's records through a real TraceWriter (format 3)."""
    base = {"source": "/mnt/efs", "mountpoint": "/mnt/t", "host": "box"}
    with TraceWriter(directory, {**base, **(metadata or {})}, flush_interval=3600) as w:
        for r in df.itertuples(index=False):
            path2 = r.path2 if isinstance(r.path2, str) else None  # pandas holds a missing one as NaN
            w.record(
                TraceRecord(
                    int(r.start_ns),
                    int(r.dur_ns),
                    str(r.op),
                    2,
                    str(r.path),
                    path2,
                    0,
                    0,
                    int(r.size),
                    int(r.result),
                    int(r.errno),
                    int(r.pid),
                    0,
                    0,
                    0,
                    comm=str(r.comm),
                )
            )


@pytest.fixture(scope="module")
def rich_df():
    return rich(6_000)


@pytest.fixture(scope="module")
def trace3(tmp_path_factory, rich_df):
    d = tmp_path_factory.mktemp("report3") / "t"
    write3(d, rich_df, {"fuse_round_trip_ns": 40_000})
    return d


def report(capsys, *argv: str) -> subprocess.CompletedProcess:
    """`fusetrace report ...` through the real command line, in this process."""
    code = cli.main(["report", *argv])
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["fusetrace", "report", *argv], code, out, err)


def errnos_of(df: pd.DataFrame) -> dict[str, int]:
    counts = df[df.errno != 0].errno.value_counts()
    return {errno.errorcode.get(int(k), f"errno {k}"): int(v) for k, v in counts.items()}


@pytest.mark.parametrize(
    "glob, path, matches",
    [
        ("/a/*", "/a/b", True),
        ("/a/*", "/a/b/c", False),
        ("/a/*", "/a", False),
        ("/a/*", "/a/", True),
        ("/a/**", "/a/b", True),
        ("/a/**", "/a/b/c", True),
        ("/a/**", "/a", False),
        ("/a/**/c", "/a/c", True),
        ("/a/**/c", "/a/b/c", True),
        ("/a/**/c", "/a/b/x/c", True),
        ("/a/**/c", "/a/bc", False),
        ("/a**", "/a/b/c", True),
        ("/a/***", "/a/b/c", True),
        ("*.o", "/x.o", True),
        ("*.o", "/d/e/x.o", True),
        ("*.o", "/d/x.oo", False),
        ("*.o", "/d.o/x", False),
        ("d/*.c", "/d/a.c", True),
        ("d/*.c", "/x/d/a.c", True),
        ("d/*.c", "/xd/a.c", False),
        ("/f?", "/f1", True),
        ("/f?", "/f12", False),
        ("/f?", "/f/", False),
        ("/[ab]*", "/a1", True),
        ("/[ab]*", "/b", True),
        ("/[ab]*", "/c", False),
        ("/[!ab]", "/c", True),
        ("/[!ab]", "/a", False),
        ("/x[!a]y", "/x/y", False),
        ("/[a-c]", "/b", True),
        ("/[a-c]", "/-", False),
        ("/x[]]", "/x]", True),
        ("/x[[]", "/x[", True),
        ("/x[\\]", "/x\\", True),
        ("/x[!]]", "/xa", True),
        ("/x[!]]", "/x]", False),
        ("/x[!^]", "/xa", True),
        ("/a.b", "/axb", False),
        ("/a+b", "/aab", False),
        ("/a+b", "/a+b", True),
        ("/(1)|x", "/(1)|x", True),
        ("/it's", "/it's", True),
        ("/\\x80*", "/\\x80abc", True),
        ("/\\x80*", "/x80abc", False),
        ("/é?", "/éa", True),
        ("/{a,b}", "/{a,b}", True),
        ("/{a,b}", "/a", False),
        ("/$^", "/$^", True),
    ],
)
def test_path_glob_matches_as_documented(glob, path, matches):
    """DuckDB (RE2) runs the expression: `*` stays within a name, `**` crosses `/`."""
    [(found,)] = duckdb.execute("select regexp_full_match(?, ?)", [path, glob_regex(glob)]).fetchall()
    assert found is matches


def test_path_glob_refuses_an_open_class():
    with pytest.raises(UserError, match=r"--path /a\[b: a \[ opens a character class that has no \]"):
        Filters(path="/a[b")
    with pytest.raises(UserError, match=r"--path x\[\^\]: a \["):
        Filters(path="x[^]")


def test_filters_combined_match_pandas(trace3, rich_df):
    df = rich_df
    t = (df.start_ns - T0) / 1e9
    f = Filters(
        ops=("read", "write", "lookup"),
        pids=(200, 201, 202, 204),
        comms=("make", "cc1", "cat"),
        path="/src/**",
        since="0.2",
        until="0.9",
    )
    mine = df[
        df.op.isin(["read", "write", "lookup"])
        & df.pid.isin([200, 201, 202, 204])
        & df.comm.isin(["make", "cc1", "cat"])
        & df.path.str.startswith("/src/")
        & (t >= 0.2)
        & (t < 0.9)
    ]
    assert 100 < len(mine) < len(df) / 4
    trace = Trace(trace3, f)
    assert (trace.records, trace.matched) == (len(df), len(mine))
    assert trace.first_ns == mine.start_ns.min() and trace.last_ns == (mine.start_ns + mine.dur_ns).max()
    rows, _ = trace.ops()
    for r in rows:
        sel = mine[mine.op == r["op"]]
        assert (r["count"], r["total_ns"], r["errnos"]) == (len(sel), sel.dur_ns.sum(), errnos_of(sel))
        assert r["p99_ns"] == pytest.approx(np.percentile(sel.dur_ns, 99), rel=1e-9)
    assert {r["op"] for r in rows} == set(mine.op)
    # every section sees only the filtered records
    hist = trace.histograms()
    assert {op: sum(b["count"] for b in bs) for op, bs in hist.items()} == mine.op.value_counts().to_dict()
    timeline = trace.timeline()
    assert timeline is not None and sum(b["ops"] for b in timeline["buckets"]) == len(mine)
    s = trace.summary()
    assert s["filters"]["options"] == [
        "--op read,write,lookup",
        "--pid 200",
        "--pid 201",
        "--pid 202",
        "--pid 204",
        "--comm make",
        "--comm cc1",
        "--comm cat",
        "--path /src/**",
        "--since 0.2",
        "--until 0.9",
    ]
    assert s["coverage"]["span_ns"] == trace.span_ns
    header = next(line for line in render(s).splitlines() if line.startswith("filters"))
    assert header.startswith("filters     --op read,write,lookup  --pid 200") and header.endswith(
        f": {len(mine):,} of {len(df):,} records"
    )
    assert "(since +0.200 s, " in header and "; until +0.900 s, " in header


def test_a_comm_longer_than_the_kernel_keeps_matches_its_first_15_bytes(trace3, rich_df):
    trace = Trace(trace3, Filters(comms=("python3.11-long-running",)))
    assert trace.matched == (rich_df.pid == 203).sum() > 0


def test_a_glob_may_start_with_the_mountpoint(trace3, rich_df):
    assert Trace(trace3, Filters(path="/mnt/t/src/*")).matched == rich_df.path.str.match(r"^/src/[^/]*$").sum()


def test_no_record_matched(trace3):
    s = Trace(trace3, Filters(ops=("rename",))).summary(timeline=True)
    assert s["matched"] == 0 and s["ops"] == [] and s["coverage"] is None and s["timeline"] is None
    text = render(s)
    assert "no records match the filters" in text and "in flight" not in text


@pytest.mark.parametrize("by", ["comm", "dir", "pid"])
def test_by_comm_dir_and_pid_match_pandas(trace3, rich_df, by):
    df = rich_df.copy()
    df["dir"] = df.path.map(lambda p: p.rsplit("/", 1)[0] or "/")
    rows, groups = Trace(trace3).ops(by)
    assert groups == df[by].nunique()
    for r in rows:
        sel = df[(df[by] == r[by]) & (df.op == r["op"])]
        assert (r["count"], r["total_ns"], r["errors"], r["errnos"]) == (
            len(sel),
            sel.dur_ns.sum(),
            (sel.errno != 0).sum(),
            errnos_of(sel),
        )
    assert sum(r["count"] for r in rows) == len(df)
    if by == "pid":
        comms = {r["pid"]: r["comms"] for r in rows}
        assert comms[200] == ["make"] and comms[204] == ["cat"]  # its unnamed records add no name


def test_by_dir_files_a_directory_listing_under_the_directory(tmp_path):
    df = pd.DataFrame(
        {
            "start_ns": T0 + np.arange(6) * 1000,
            "dur_ns": 10,
            "op": ["readdir", "opendir", "lookup", "getattr", "mkdir", "getattr"],
            "path": ["/a/b", "/a/b", "/a/b/c", "/a/b", "/x", "/"],
            "path2": None,
            "size": 0,
            "result": 0,
            "errno": 0,
            "pid": 1,
            "comm": "ls",
        }
    )
    write3(tmp_path / "t", df)
    rows, _ = Trace(tmp_path / "t").ops("dir")
    assert sorted((r["dir"], r["op"]) for r in rows) == [
        ("/", "getattr"),
        ("/", "mkdir"),
        ("/a", "getattr"),
        ("/a/b", "lookup"),
        ("/a/b", "opendir"),
        ("/a/b", "readdir"),
    ]


def test_text_names_processes_and_errors(trace3, rich_df, capsys):
    done = report(capsys, str(trace3), "--by", "comm", "--top", "2")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    head = next(ln for ln in lines if ln.startswith("comm "))
    assert head.split()[-3:] == ["total", "%total", "errno"]
    assert "top 2 of 6 comms (--top N shows more, --json has all)" in done.stdout  # "" the sixth
    looked = rich_df[(rich_df.op == "lookup") & (rich_df.comm == rich_df.groupby("comm").dur_ns.sum().idxmax())]
    assert any(ln.split()[-2:] == ["ENOENT", f"{(looked.errno == errno.ENOENT).sum():,}"] for ln in lines)
    writes = rich_df[rich_df.op == "write"]
    text = report(capsys, str(trace3), "--op", "write").stdout
    assert "EACCES" not in text and f"errno 999 {(writes.errno == 999).sum()}" in text
    by_pid = report(capsys, str(trace3), "--by", "pid", "--top", "5").stdout
    assert any(ln.startswith("204 cat ") for ln in by_pid.splitlines())
    by_unknown = report(capsys, str(trace3), "--by", "comm", "--pid", "204").stdout
    assert "(unknown)" in by_unknown and any(ln.startswith("cat ") for ln in by_unknown.splitlines())


def union_ns(intervals) -> int:
    """The length of a union of [start, end) intervals, merged the plain way."""
    total, lo, hi = 0, None, None
    for s, e in sorted(intervals):
        if hi is None or s > hi:
            total += 0 if hi is None else hi - lo
            lo, hi = s, e
        else:
            hi = max(hi, e)
    return total + (0 if hi is None else hi - lo)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_coverage_matches_merging_the_intervals(tmp_path, seed):
    rng = np.random.default_rng(seed)
    n = 400
    df = rich(n, seed)
    # clusters of overlapping operations with gaps between them, zero-length ones among them
    df["start_ns"] = T0 + np.sort(rng.integers(0, 50_000_000, n))
    df["dur_ns"] = np.where(rng.random(n) < 0.05, 0, rng.integers(1, 400_000, n))
    rt = int(rng.integers(5_000, 60_000))
    write3(tmp_path / "t", df, {"fuse_round_trip_ns": rt})
    c = Trace(tmp_path / "t").coverage()
    s, e = df.start_ns.to_numpy(), (df.start_ns + df.dur_ns).to_numpy()
    lo, hi = s.min(), e.max()
    assert c["span_ns"] == hi - lo
    assert c["busy_ns"] == union_ns(zip(s, e)) < c["span_ns"]
    assert c["busy_with_round_trip_ns"] == union_ns(zip(np.maximum(s - rt, lo), e)) > c["busy_ns"]
    assert c["busy_share"] == pytest.approx(c["busy_ns"] / (hi - lo))
    assert c["rest_share"] == pytest.approx(1 - c["busy_with_round_trip_ns"] / (hi - lo))
    assert (c["round_trip_ns"], c["round_trips_ns"], c["summed_ns"]) == (rt, rt * n, df.dur_ns.sum())
    pids = Trace(tmp_path / "t", Filters(pids=(201,))).coverage()
    mine = df[df.pid == 201]
    assert pids["busy_ns"] == union_ns(zip(mine.start_ns, mine.start_ns + mine.dur_ns))


def test_coverage_lines(trace3, tmp_path):
    lines = render(Trace(trace3).summary()).splitlines()
    flight = next(ln for ln in lines if ln.startswith("in flight   "))
    assert "had an operation in flight; their latencies sum to" in flight
    assert next(ln for ln in lines if ln.startswith("round trip  ")).startswith(
        "round trip  with FUSE's (40.0µs each, measured at mount) added to each operation: "
    )
    assert next(ln for ln in lines if ln.startswith("the rest    ")).endswith(
        "of the span: the application's own time (CPU, other I/O, waiting) and what the kernel answered from its caches"
    )
    write3(tmp_path / "t", rich(50))  # no round trip in the metadata
    assert (
        "round trip  FUSE's own, before and after each operation: not measured (not in its _metadata.json)"
        in render(Trace(tmp_path / "t").summary())
    )


def hint_trace(
    tmp_path,
    ops: dict[str, int],
    errors: dict[str, int] | None = None,
    metadata: dict | None = None,
    files: int = 3,
    other_writes: int = 0,
    size: int = 0,
) -> list[str]:
    """The hints of a trace of `ops` ({op: count}) on `files` files, `errors[op]` of them
    failing as lookups and getxattrs do (ENOENT, ENODATA), and `other_writes` to other files;
    every record of `size` bytes."""
    rows = [("write", 0, f"/other/f{i}") for i in range(other_writes)]
    for op, count in ops.items():
        failing = (errors or {}).get(op, 0)
        code = errno.ENODATA if op == "getxattr" else errno.ENOENT
        rows += [(op, code if i < failing else 0, f"/d/f{i % files}") for i in range(count)]
    df = pd.DataFrame(rows, columns=["op", "errno", "path"])
    n = len(df)
    df = df.assign(
        start_ns=T0 + np.arange(n) * 1000,
        dur_ns=500,
        size=size,
        result=0,
        pid=7,
        comm="sqlite3",
        path2=np.where(df.op == "getxattr", "security.capability", None),
    )
    d = tmp_path / f"t{len(list(tmp_path.iterdir()))}"
    write3(d, df, metadata)
    return [h["hint"] for h in Trace(d).hints()]


def test_xattr_miss_hint(tmp_path):
    assert hint_trace(tmp_path, {"getxattr": 25, "write": 75}, {"getxattr": 25}) == ["xattr-misses"]
    assert hint_trace(tmp_path, {"getxattr": 25, "write": 75}, {"getxattr": 19}) == []  # 19 %
    assert hint_trace(tmp_path, {"getxattr": 25, "write": 75}) == []  # found: not a miss


@pytest.mark.parametrize(
    "names, said",
    [
        ({"user.a": 10, "user.b": 6, "user.c": 3, "user.d": 1}, "user.a 10, user.b 6, 2 other names 4"),
        ({"user.a": 10, "user.b": 6, "user.c": 4}, "user.a 10, user.b 6, 1 other name 4"),
        ({"user.a": 10, "user.b": 10}, "user.a 10, user.b 10"),
    ],
)
def test_xattr_miss_hint_counts_the_names_it_does_not_name(tmp_path, capsys, names, said):
    attrs = [name for name, k in names.items() for _ in range(k)]
    n = 2 * len(attrs)
    df = pd.DataFrame(
        {
            "op": ["getxattr"] * len(attrs) + ["read"] * len(attrs),
            "errno": [errno.ENODATA] * len(attrs) + [0] * len(attrs),
            "path": "/d/f",
            "path2": attrs + [None] * len(attrs),
        }
    )
    df = df.assign(start_ns=T0 + np.arange(n) * 1000, dur_ns=500, size=0, result=0, pid=7, comm="ls")
    write3(tmp_path / "t", df)
    [hint] = [ln for ln in report(capsys, str(tmp_path / "t")).stdout.splitlines() if ln.startswith("- getxattr")]
    assert f"the file does not have ({said}): mount with --no-xattrs" in hint, hint


def test_removed_while_open_hint_counts_the_names_an_nfs_client_hides(tmp_path, capsys):
    rows = [("unlink", 5, 0), ("unlink", 0, 0), ("rename", 6, 0), ("unlink", 7, errno.ENOENT), ("read", 0, 0)]
    records = [
        TraceRecord(T0 + i * 1000, 500, op, 2, f"/d/f{i}", None, 0, 0, 0, 0, err, 7, 0, 0, 0, comm="app", entry=entry)
        for i, (op, entry, err) in enumerate(rows)
    ]
    with TraceWriter(
        tmp_path / "t", {"source": "/mnt/efs", "mountpoint": "/mnt/t", "host": "box"}, flush_interval=3600
    ) as w:
        for r in records:
            w.record(r)
    [hint] = [ln for ln in report(capsys, str(tmp_path / "t")).stdout.splitlines() if ln.startswith("- unlink")]
    assert hint.startswith(
        "- unlink, rename: 2 names of files still open removed or replaced: an NFS client renames each"
    ), hint
    write3(
        tmp_path / "u",
        pd.DataFrame(
            {
                "op": ["unlink"],
                "path": ["/f"],
                "path2": [None],
                "start_ns": [T0],
                "dur_ns": [1],
                "size": [0],
                "result": [0],
                "errno": [0],
                "pid": [7],
                "comm": ["app"],
            }
        ),
    )
    assert "- unlink" not in report(capsys, str(tmp_path / "u")).stdout  # a name not open: no hint


def test_failed_lookup_hint(tmp_path):
    assert hint_trace(tmp_path, {"lookup": 40, "getattr": 60}, {"lookup": 20}) == ["failed-lookups"]
    assert hint_trace(tmp_path, {"lookup": 40, "getattr": 60}, {"lookup": 19}) == []


def test_fsync_hint(tmp_path):
    assert hint_trace(tmp_path, {"write": 60, "fsync": 20}) == ["fsync-per-write"]  # one per 3 writes
    assert hint_trace(tmp_path, {"write": 40, "fsync": 15, "fsyncdir": 5}) == ["fsync-per-write"]
    assert hint_trace(tmp_path, {"write": 81, "fsync": 20}) == []
    assert hint_trace(tmp_path, {"write": 60, "fsync": 20}, other_writes=500) == ["fsync-per-write"]  # not synced
    assert hint_trace(tmp_path, {"write": 19, "fsync": 19}) == []  # too few to matter
    # with the write-back cache a write is the kernel's write-back of many write(2) calls
    wb = {"options": {"writeback_cache": True}}
    assert hint_trace(tmp_path, {"write": 20, "fsync": 20}, metadata=wb, size=16384) == ["fsync-per-write"]
    assert hint_trace(tmp_path, {"write": 20, "fsync": 20}, metadata=wb, size=16385) == []  # 5 pages each
    assert hint_trace(tmp_path, {"write": 20, "fsync": 20}, size=1 << 20) == ["fsync-per-write"]
    # --op fsync leaves the writes out: nothing to judge the syncs by
    d = next(p for p in sorted(tmp_path.iterdir()) if p.name == "t0")
    assert [h["hint"] for h in Trace(d, Filters(ops=("fsync",))).hints()] == []
    assert [h["hint"] for h in Trace(d, Filters(ops=("fsync", "write"))).hints()] == ["fsync-per-write"]


def test_fsync_hint_judges_each_process_by_its_own_writes(tmp_path):
    """A process writing in bulk and syncing once (fio) must not hide another that syncs
    every other write (sqlite)."""
    rows = [("write", "/bulk", 8) for _ in range(2000)] + [("fsync", "/bulk", 8)]
    rows += [(op, "/db", 7) for _ in range(30) for op in ("write", "write", "fsync")]
    df = pd.DataFrame(rows, columns=["op", "path", "pid"])
    df = df.assign(start_ns=T0 + np.arange(len(df)) * 1000, dur_ns=500, size=0, result=0, comm="x", errno=0, path2=None)
    write3(tmp_path / "t", df, None)
    [hint] = [h for h in Trace(tmp_path / "t").hints() if h["hint"] == "fsync-per-write"]
    assert (hint["syncs"], hint["writes"], hint["synced"]) == (30, 60, 1)
    assert "30 calls (fsyncdir included) on 1 file or directory, one for every 2.0 writes" in hint["text"]


def test_attr_timeout_hint(tmp_path):
    ops = {"getattr": 30, "read": 70}
    assert hint_trace(tmp_path, ops, metadata={"options": {"attr_timeout": 0}}) == ["attr-timeout-0"]
    assert hint_trace(tmp_path, ops, metadata={"options": {"attr_timeout": 1.0}}) == []
    assert hint_trace(tmp_path, {"getattr": 19, "read": 81}, metadata={"options": {"attr_timeout": 0}}) == []


def test_missing_records_hint(tmp_path):
    assert hint_trace(tmp_path, {"read": 10}) == []
    d = next(tmp_path.iterdir())
    for counter in ("dropped", "lost"):
        meta.write(str(d), {**meta.read(str(d)), "dropped": 0, "lost": 0, counter: 3})
        assert [h["hint"] for h in Trace(d).hints()] == ["missing-records"]


def test_hints_in_text_and_json(tmp_path, capsys):
    hint_trace(tmp_path, {"getxattr": 30, "lookup": 30, "write": 30, "fsync": 25}, {"getxattr": 30, "lookup": 30})
    d = next(tmp_path.iterdir())
    text = report(capsys, str(d)).stdout
    at = text.splitlines().index("hints")
    hints = text.splitlines()[at + 1 :]
    assert len(hints) == 3 and all(h.startswith("- ") for h in hints)
    assert hints[0].startswith(
        "- getxattr: 26.1 % of the records are look-ups of extended attributes the file does "
        "not have (security.capability 30): mount with --no-xattrs"
    )
    assert hints[1].startswith("- lookup: 26.1 % of the records look up names that do not exist (most in /d: 30)")
    assert "this mount caches no absent names" in hints[1]
    assert hints[2].startswith(
        "- fsync: 25 calls (fsyncdir included) on 3 files and directories, one for every 1.2 writes to them, "
    )
    out = json.loads(report(capsys, str(d), "--json").stdout)
    assert [h["hint"] for h in out["hints"]] == ["xattr-misses", "failed-lookups", "fsync-per-write"]
    assert out["hints"][2]["syncs"] == 25 and out["hints"][2]["writes"] == 30
    # the filters apply: without the getxattrs and lookups, only fsync's hint is left
    out = json.loads(report(capsys, str(d), "--json", "--op", "write,fsync").stdout)
    assert [h["hint"] for h in out["hints"]] == ["fsync-per-write"]


def test_timeline_matches_numpy(trace3, rich_df):
    timeline = Trace(trace3).timeline()
    assert timeline is not None
    width = timeline["width_ns"]
    b = (rich_df.start_ns - T0).to_numpy() // width
    n = b.max() + 1
    assert len(timeline["buckets"]) == n <= 60
    assert n > 60 / 2.5  # the next width down, 1, 2 or 5 times a power of ten, would need more than 60
    ok = rich_df.errno == 0
    want = {
        "ops": np.bincount(b, minlength=n),
        "errors": np.bincount(b, weights=~ok, minlength=n),
        "read_bytes": np.bincount(b, weights=np.where(rich_df.op == "read", rich_df.result, 0), minlength=n),
        "write_bytes": np.bincount(b, weights=np.where(rich_df.op == "write", rich_df.result, 0), minlength=n),
    }
    for k, v in want.items():
        assert [x[k] for x in timeline["buckets"]] == v.tolist(), k
    first = timeline["buckets"][3]
    assert first["t_s"] == 3 * width / 1e9 and first["start_ns"] == T0 + 3 * width
    assert first["ops_per_s"] == pytest.approx(first["ops"] / (width / 1e9))
    assert first["read_mb_per_s"] == pytest.approx(first["read_bytes"] / 1e6 / (width / 1e9))


def test_timeline_widths_keep_to_60_rows(tmp_path):
    spans = {"t1": 40_000_000, "t2": 7 * 10**9, "t3": 5 * 3600 * 10**9, "t4": 9 * 86400 * 10**9}
    for name, span in spans.items():
        df = rich(3).assign(start_ns=[T0, T0 + span // 3, T0 + span], dur_ns=1)
        write3(tmp_path / name, df)
        t = Trace(tmp_path / name).timeline()
        assert t is not None and 30 <= len(t["buckets"]) <= 60, (name, t["width_ns"])
        assert [b["ops"] for b in t["buckets"]].count(0) == len(t["buckets"]) - 3


def test_timeline_text_and_plot(trace3, tmp_path, capsys):
    png = tmp_path / "timeline.png"
    done = report(capsys, str(trace3), "--timeline", "--plot", str(png), "--op", "read")
    assert done.returncode == 0, done.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    lines = done.stdout.splitlines()
    at = lines.index("timeline")
    assert lines[at + 1].split() == ["t", "(s)", "time", "ops", "ops/s", "read", "MB/s", "write", "MB/s", "errors"]
    assert f"drawn into {png}" in done.stdout
    rows = lines[at + 3 : next(i for i, ln in enumerate(lines) if ln.startswith("(operations that started"))]
    assert sum(int(r.split()[2].replace(",", "")) for r in rows) == Trace(trace3, Filters(ops=("read",))).matched
    assert "█" in "\n".join(rows)
    out = json.loads(report(capsys, str(trace3), "--timeline", "--json").stdout)
    assert sum(b["ops"] for b in out["timeline"]["buckets"]) == out["matched"] == out["records"]


def test_json_has_everything(trace3, rich_df, capsys):
    out = json.loads(report(capsys, str(trace3), "--json", "--by", "dir", "--comm", "make", "--histogram").stdout)
    assert out["format_version"] == 8 and out["by"] == "dir" and out["top"] is None
    assert out["faults"] == []  # no rule acted on any of its records
    assert out["filters"]["comm"] == ["make"] and out["matched"] == (rich_df.comm == "make").sum()
    assert set(out["coverage"]) >= {
        "span_ns",
        "busy_ns",
        "busy_share",
        "round_trip_ns",
        "busy_with_round_trip_ns",
        "rest_share",
    }
    assert out["hints"] and out["histograms"]
    assert sum(sum(r["errnos"].values()) for r in out["ops"]) == ((rich_df.comm == "make") & (rich_df.errno != 0)).sum()


def test_since_and_until_as_wall_clock_times(tmp_path, capsys, monkeypatch):
    """A time of day is the occurrence nearest the first record: a trace that runs past
    midnight takes 00:00:00.5 on its second day.  The same cut in seconds agrees."""
    monkeypatch.setenv("TZ", "UTC")
    import time as _time

    _time.tzset()
    try:
        df = rich(2000).assign(start_ns=T0 + np.arange(2000) * 1_000_000)  # 2 s from 23:59:59 UTC
        midnight = int(pd.Timestamp("2026-11-24T00:00:00Z").value)
        write3(tmp_path / "t", df, {"start_wall_ns": midnight - 10**9, "start_monotonic_ns": T0})

        def matched(*argv):
            return json.loads(report(capsys, str(tmp_path / "t"), "--json", *argv).stdout)["matched"]

        assert matched("--since", "1.5") == 500
        assert matched("--since", "00:00:00.5") == 500
        assert matched("--since", "0:00:00.5") == 500
        assert matched("--since", "2026-11-24T00:00:00.5") == 500
        assert matched("--since", "2026-11-24T01:00:00.5+01:00") == 500
        assert matched("--since", "23:59:59.25", "--until", "00:00") == 750
        assert matched("--until", "23:59") == 0
    finally:
        monkeypatch.undo()
        _time.tzset()


@pytest.mark.parametrize(
    "argv, needles",
    [
        (["--since", "abc"], ["--since abc: not seconds since the trace's first record (12.5), a time of day"]),
        (["--until", "-1"], ["--until -1: seconds since the trace's first record must be 0 or more"]),
        (["--since", "25:00"], ["--since 25:00: not seconds"]),
        (["--since", "nan"], ["--since nan: seconds since"]),
        (["--since", "2", "--until", "1"], ["--since 2 is not before --until 1"]),
        (["--path", "/src/[ab"], ["--path /src/[ab: a [ opens a character class that has no ]"]),
        (["--op", "reed"], ["--op reed: not a traced operation (one of: lookup, getattr"]),
        (["--plot", "x.jpg"], ["--plot x.jpg: the plot is a PNG; name the file .png"]),
    ],
)
def test_bad_options_are_one_line_errors(trace3, capsys, argv, needles):
    done = report(capsys, str(trace3), *argv)
    one_line_error(done, *needles, code=2)
    assert done.stdout == "" and done.stderr.startswith("fusetrace: ")


def test_a_plot_with_no_folder_to_go_in_is_one_line(trace3, capsys):
    """A folder that is not there: the world's answer, not a usage error (exit 1)."""
    done = report(capsys, str(trace3), "--plot", "/nonexistent/x.png")
    one_line_error(done, "--plot /nonexistent/x.png: no such directory /nonexistent", code=1)
    assert done.stdout == "" and done.stderr.startswith("fusetrace: ")


def test_a_wall_clock_time_needs_the_metadata(trace, tmp_path, capsys):
    d = tmp_path / "copied"
    d.mkdir()
    for p in trace.glob("*.parquet"):
        (d / p.name).write_bytes(p.read_bytes())
    one_line_error(
        report(capsys, str(d), "--since", "12:00"),
        "--since 12:00: this trace has no clock mapping (no "
        "_metadata.json: source, start time and drops unknown); give seconds since its first record",
    )


def test_a_plot_that_cannot_be_written_is_one_line(trace3, tmp_path, capsys):
    (tmp_path / "x.png").mkdir()  # a directory where the file should go
    one_line_error(
        report(capsys, str(trace3), "--timeline", "--plot", str(tmp_path / "x.png")),
        f"--plot {tmp_path / 'x.png'}: cannot write it: ",
    )


def test_a_format_2_trace_reports_and_refuses_comm_in_one_line(trace3, tmp_path, capsys):
    """Before format 3 records named no process: the report works as before; --by comm and
    --comm say so in one line and point to --pid."""
    old = tmp_path / "old"
    old.mkdir()
    for p in trace3.glob("*.parquet"):
        pq.write_table(pq.read_table(p).drop_columns(["comm", "kind", "flags", "mode", "entry"]), old / p.name)
    meta.write(str(old), {**meta.read(str(trace3)), "format_version": 2})
    del_rt = meta.read(str(old))
    del del_rt["fuse_round_trip_ns"]
    meta.write(str(old), del_rt)
    new, was = Trace(trace3).summary(by="pid"), Trace(old).summary(by="pid")
    assert [{**r, "comms": []} for r in new["ops"]] == was["ops"]
    assert was["coverage"]["busy_ns"] == new["coverage"]["busy_ns"] and was["coverage"]["round_trip_ns"] is None
    assert "not measured (a trace from before format 3)" in render(was)
    for argv, what in ((["--by", "comm"], "--by comm"), (["--comm", "sh"], "--comm")):
        one_line_error(
            report(capsys, str(old), *argv),
            f"{old}: {what}: this trace names no processes (format 2, "
            "recorded before format 3 added comm); --pid and --by pid work on it",
        )


def test_report_of_a_real_mount_names_the_tools(mount, tmp_path, capsys):
    """sh, mkdir, cat and tar on a traced mount: the report names each, finds cat's missing
    file by its errno's name, measures the round trip, and filters by path and process."""
    m = mount("--attr-timeout", "0", "--entry-timeout", "0", trace=True)
    script = (
        f"mkdir {m.mountpoint}/src && for i in 1 2 3; do echo $i > {m.mountpoint}/src/f$i; done; "
        f"cat {m.mountpoint}/src/f1 {m.mountpoint}/src/nope; tar cf {tmp_path}/x.tar -C {m.mountpoint} src"
    )
    subprocess.run(["sh", "-c", script], capture_output=True, check=False)
    m.unmount()
    out = json.loads(report(capsys, str(m.trace), "--json", "--by", "comm").stdout)
    rows = {(r["comm"], r["op"]): r for r in out["ops"]}
    assert {"sh", "mkdir", "cat", "tar"} <= {comm for comm, _ in rows}
    assert rows["cat", "lookup"]["errnos"].get("ENOENT", 0) >= 1 and rows["mkdir", "mkdir"]["count"] == 1
    c = out["coverage"]
    assert 0 < c["round_trip_ns"] < 10**8 and 0 < c["busy_ns"] <= c["busy_with_round_trip_ns"] <= c["span_ns"]
    assert c["rest_share"] == pytest.approx(1 - c["busy_with_round_trip_share"])
    tar = json.loads(report(capsys, str(m.trace), "--json", "--by", "path", "--comm", "tar", "--path", "/src/*").stdout)
    assert tar["matched"] > 0 and {r["path"] for r in tar["ops"]} <= {"/src/f1", "/src/f2", "/src/f3"}
    text = report(capsys, str(m.trace), "--by", "dir", "--timeline").stdout
    assert any(ln.startswith("/src ") for ln in text.splitlines()) and "\ntimeline\n" in text


def test_a_trace_with_no_record_says_so(mount):
    m = mount(trace=True)
    m.unmount()  # nothing done through it
    one_line_error(fusetrace("report", str(m.trace)), "no trace files", "the mount recorded no operation", code=2)


def test_names_a_trace_holds_reach_the_terminal_without_escape_sequences(tmp_path, capsys):
    """Paths, process names and attribute names are chosen by whoever used the mount:
    an escape sequence among them (a window title set, the screen cleared) or a newline
    (a forged row) is printed as '?'."""
    evil = "\x1b]0;pwned\x07\x1b[2J"
    w = TraceWriter(
        tmp_path / "t", {"source": f"/src{evil}", "mountpoint": "/mnt", "host": f"h{evil}"}, flush_interval=3600
    )
    for i in range(30):
        w.record(
            TraceRecord(
                10**12 + i * 1000,
                500,
                "getxattr",
                2,
                f"/f{evil}\nrow",
                f"user.{evil}",
                0,
                0,
                0,
                0,
                errno.ENODATA,
                100,
                0,
                0,
                0,
                comm=f"c{evil}",
            )
        )
    w.close()
    for by in ("comm", "path"):
        out = report(capsys, str(tmp_path / "t"), "--by", by).stdout
        assert "\x1b" not in out and "\x07" not in out and "\nrow" not in out, out
        assert "?]0;pwned?" in out


@pytest.mark.parametrize("planted", ["_metadata.json", "part-000009.parquet"])
def test_a_fifo_in_a_trace_directory_is_said_not_waited_on(tmp_path, capsys, planted):
    w = TraceWriter(tmp_path / "t", {"source": "/s", "mountpoint": "/m"}, flush_interval=3600)
    w.record(TraceRecord(10**12, 500, "getattr", 2, "/f", None, 0, 0, 0, 0, 0, 100, 0, 0, 0, comm="c"))
    w.close()
    (tmp_path / "t" / planted).unlink(missing_ok=True)
    os.mkfifo(tmp_path / "t" / planted)
    done = report(capsys, str(tmp_path / "t"))  # returns: the FIFO is never opened to wait on it
    if planted.endswith(".parquet"):  # no trace without its parts: one line
        assert done.returncode != 0 and planted in done.stderr and "not a regular file" in done.stderr, done
    else:  # a report without metadata, which says why
        assert done.returncode == 0 and f"{planted} unreadable: {planted} is not a regular file" in done.stdout


@pytest.mark.parametrize(
    "key, value",
    [
        ("fuse_round_trip_ns", float("inf")),
        ("start_wall_ns", "x"),
        ("start_monotonic_ns", [1]),
        ("dropped", "x"),
        ("options", 5),
        ("emulation", 3),
        ("format_version", "9"),
        ("flush_interval", float("nan")),
    ],
)
def test_a_metadata_value_of_the_wrong_type_is_said_once_not_a_traceback(tmp_path, capsys, key, value):
    w = TraceWriter(tmp_path / "t", {"source": "/s", "mountpoint": "/m"}, flush_interval=3600)
    w.record(TraceRecord(10**12, 500, "getattr", 2, "/f", None, 0, 0, 0, 0, 0, 100, 0, 0, 0, comm="c"))
    w.close()
    path = tmp_path / "t" / meta.NAME
    data = json.loads(path.read_text())
    data[key] = value
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=f"{key} .*: expected "):
        meta.read(str(tmp_path / "t"))
    for argv in ([], ["--timeline"]):
        done = report(capsys, str(tmp_path / "t"), *argv)
        assert done.returncode == 0 and f"{meta.NAME} unreadable" in done.stdout, done
