"""A traced mount records every operation it serves, readable with no fusetrace code."""

import errno
import json
import os
import stat

import duckdb
import pandas as pd
from conftest import fusetrace


def test_trace_records_operations(mount):
    m = mount("--attr-timeout", "0", "--entry-timeout", "0", trace=True)
    with open(m.mountpoint / "f", "wb") as f:
        f.write(b"x" * 10000)
    with open(m.mountpoint / "f", "rb") as f:
        assert f.read() == b"x" * 10000
    try:
        os.stat(m.mountpoint / "missing")
    except FileNotFoundError:
        pass
    os.rename(m.mountpoint / "f", m.mountpoint / "g")
    m.unmount()

    df = pd.read_parquet(m.trace)
    mine = df[df.pid == os.getpid()]
    ops = set(mine.op.astype(str))
    assert {"create", "write", "flush", "release", "open", "read", "lookup", "rename"} <= ops
    writes = mine[mine.op == "write"]
    assert writes["size"].sum() == 10000 and writes.result.sum() == 10000
    assert set(writes.path) == {"/f"}
    reads = mine[(mine.op == "read") & (mine.result > 0)]
    assert reads.result.sum() == 10000
    missing = mine[(mine.op == "lookup") & (mine.path == "/missing")]
    assert len(missing) >= 1 and set(missing.errno) == {errno.ENOENT}
    rename = mine[mine.op == "rename"].iloc[0]
    assert (rename.path, rename.path2) == ("/f", "/g")
    assert (mine.uid == os.getuid()).all() and (mine.dur_ns > 0).all()
    assert (df.start_ns.diff().dropna() >= -10**9).all()  # roughly in time order across files
    # trace mode: nothing shaped, so no model's account
    assert df.gate.isna().all() and df.nfs.isna().all() and (df.shaped_ns == 0).all()
    assert (df[["wait_ns", "latency_ns", "transfer_ns"]] == 0).all().all()

    for name in os.listdir(m.trace):
        assert stat.S_IMODE(os.stat(m.trace / name).st_mode) == 0o600, name
    assert stat.S_IMODE(os.stat(m.trace).st_mode) == 0o700
    meta = json.loads((m.trace / "_metadata.json").read_text())
    assert meta["source"] == str(m.source) and meta["mountpoint"] == str(m.mountpoint)
    assert meta["dropped"] == 0

    [(count,)] = duckdb.sql(f"select count(*) from '{m.trace}/*.parquet'").fetchall()
    assert count == len(df)


def test_report_of_a_real_trace(mount):
    m = mount(trace=True)
    for i in range(20):
        (m.mountpoint / f"f{i}").write_bytes(b"y" * 4096)
    m.unmount()
    done = fusetrace("report", str(m.trace), "--json")
    report = json.loads(done.stdout)
    text = json.dumps(report)
    assert "write" in text and "create" in text
    table = fusetrace("report", str(m.trace), "--histogram").stdout
    assert "p99" in table and "write" in table
