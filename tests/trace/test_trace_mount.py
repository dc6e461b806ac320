"""A traced mount records every operation it serves, readable with no fusetrace code."""

import errno
import json
import os
import socket
import stat
import sys
import threading

import duckdb
import pandas as pd
from support import fusetrace


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
    assert (df.start_ns.diff().dropna() >= -(10**9)).all()  # roughly in time order across files
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


def test_records_name_the_process_the_handles_and_what_changed(mount):
    """Format 3: comm, open's handle in fh (so open/create pair with release), setattr's
    attributes, the open flags, and the node id and mode a lookup or create answered."""
    m = mount("--attr-timeout", "0", "--entry-timeout", "0", trace=True)
    import subprocess

    subprocess.run(["sh", "-c", f"echo hi > {m.mountpoint}/f && cat {m.mountpoint}/f >/dev/null"], check=True)
    renamed = (
        "import ctypes, sys, threading\n"  # a worker thread that names itself, as a JVM's do
        "def work():\n"
        "    ctypes.CDLL(None).prctl(15, b'worker-7')\n"
        "    open(sys.argv[1], 'w').close()\n"
        "t = threading.Thread(target=work); t.start(); t.join()\n"
    )
    subprocess.run([sys.executable, "-c", renamed, str(m.mountpoint / "by-thread")], check=True)
    os.chmod(m.mountpoint / "f", 0o600)
    os.truncate(m.mountpoint / "f", 0)
    os.mkdir(m.mountpoint / "d")
    os.listdir(m.mountpoint / "d")
    m.unmount()
    df = pd.read_parquet(m.trace)
    meta = json.loads((m.trace / "_metadata.json").read_text())
    assert meta["format_version"] == 8 and 0 < meta["fuse_round_trip_ns"] < 10**8
    assert meta["host"] == meta["hostname"] == socket.gethostname() and set(df.host) == {meta["host"]}
    assert "statfs" not in set(df.op.astype(str))  # the mount's own probes are not traced
    assert {"sh", "cat"} <= set(df.comm) and "" not in set(df.comm)
    reads = df[df.op == "read"]
    assert set(reads.comm) == {"cat"}
    by_thread = df[(df.op == "create") & (df.path == "/by-thread")]  # the process's name, not the thread's
    assert list(by_thread.comm) == [os.path.basename(sys.executable)[:15]], by_thread.comm
    for op in ("create", "open", "opendir"):
        opened = df[df.op == op]
        assert len(opened) and (opened.fh > 0).all() and (opened.result == 0).all(), op
    closing = {"create": "release", "open": "release", "opendir": "releasedir"}
    for _, r in df[df.op.isin(list(closing))].iterrows():
        later = df[(df.op == closing[r.op]) & (df.fh == r.fh) & (df.start_ns > r.start_ns)]
        assert len(later), (r.op, r.fh)
    create = df[df.op == "create"].iloc[0]
    assert create["flags"] & os.O_ACCMODE == os.O_WRONLY
    assert stat.S_ISREG(int(create["mode"])) and create.entry == os.stat(m.source / "f").st_ino
    assert df[df.op == "open"].iloc[0]["flags"] & os.O_ACCMODE == os.O_RDONLY
    mkdir = df[df.op == "mkdir"].iloc[0]
    assert stat.S_ISDIR(int(mkdir["mode"])) and mkdir.entry == os.stat(m.source / "d").st_ino
    assert set(df[df.op == "setattr"].path2) >= {"mode", "size"}
    assert set(df[df.op == "write"].kind) == {"buffered"} and set(df[df.op == "read"].kind) == {"read"}
    looked = df[(df.op == "lookup") & (df.errno == 0)]
    assert (looked.entry > 0).all() and (looked["mode"] > 0).all()


def test_negative_timeout_lets_the_kernel_remember_absent_names(mount):
    """--negative-timeout S: a missing name looked up again within S seconds is answered by
    the kernel (one lookup reaches the trace); without it every lookup does."""
    counts = {}
    for timeout in ("0", "60"):
        m = mount("--negative-timeout", timeout, trace=True)
        for _ in range(5):
            assert not os.path.exists(m.mountpoint / "missing")
        m.unmount()
        df = pd.read_parquet(m.trace)
        counts[timeout] = len(df[(df.op == "lookup") & (df.path == "/missing")])
        assert json.loads((m.trace / "_metadata.json").read_text())["options"]["negative_timeout"] == float(timeout)
    assert counts == {"0": 5, "60": 1}


def test_tid_is_the_calling_thread(mount):
    """Format 8: `tid` is the thread the kernel named for the request; `pid` its process."""
    m = mount("--attr-timeout", "0", "--entry-timeout", "0", trace=True)
    (m.mountpoint / "f").write_bytes(b"x")
    tids = []

    def stat_it() -> None:
        tids.append(threading.get_native_id())
        os.stat(m.mountpoint / "f")

    worker = threading.Thread(target=stat_it)
    worker.start()
    worker.join(timeout=30)
    assert tids and tids[0] != threading.get_native_id()
    m.unmount()
    df = pd.read_parquet(m.trace)
    theirs = df[df.tid == tids[0]]
    assert {"lookup", "getattr"} <= set(theirs.op.astype(str)) and set(theirs.pid) == {os.getpid()}
    mine = df[(df.op == "create") & (df.path == "/f")]
    assert list(mine.tid) == [threading.get_native_id()]  # the main thread's
