"""The trace's memory is bounded in bytes, and what it loses is said: by `fusetrace stats`
while mounted, in the server's log at exit, by `report` and by metadata.loss_summary
(for `umount`), without claiming a kill when the trace disk was full."""

import os
import shutil
import subprocess
import sys
import tracemalloc

import pyarrow.parquet as pq
import pytest
from support import fusetrace, is_mounted, poll, stats_json

from fusetrace.report.query import Trace
from fusetrace.report.render import render
from fusetrace.trace import metadata as meta
from fusetrace.trace import writer as tw
from fusetrace.trace.schema import TraceRecord
from fusetrace.trace.writer import TraceWriter


def rec(i: int, path: str, path2: str | None = None) -> tuple:
    """A record with every int its own object, as the mount makes them."""
    big = 10**6 + i
    return (
        10**12 + i,
        big,
        "write",
        big,
        path,
        path2,
        big,
        4096 * big,
        big,
        big,
        0,
        big,
        big,
        big,
        big,
        None,
        0,
        0,
        0,
        None,
        "python3",
        "buffered",
        big + 1,
        big + 2,
        big + 3,
    )


def test_queue_stays_under_its_byte_bound_and_counts_drops(tmp_path):
    bound = 256 << 10
    w = TraceWriter(tmp_path / "t", {}, flush_interval=3600, max_pending_bytes=bound)  # a stalled writer
    try:
        given = 0
        for i in range(3000):
            path = "/d/" + "x" * (i % 7 * 300)  # 3 to 1,803 characters
            w.record(TraceRecord(*rec(i, path, None if i % 3 else path + ".new")))
            given += 1
            assert w.queued_bytes <= bound
        assert w.dropped > 0 and w.queued + w.dropped == given
        assert w.queued_bytes == tw._cost(w._strs[: w.queued * tw._WIDTH])  # add() charges what _cost says
        assert w.queued_bytes > bound - 4000  # full up to about one record's cost
    finally:
        summary = w.close()
    assert summary["records"] == given - w.dropped and summary["dropped"] == w.dropped
    assert meta.read(tmp_path / "t")["max_pending_bytes"] == bound


def test_the_estimate_is_not_below_what_the_queue_holds(tmp_path):
    """Records made as the mount makes them (every int its own object, a path of their own)
    hold less than charged: two whole blocks of them, their rows, references and paths."""
    w = TraceWriter(tmp_path / "t", {}, flush_interval=3600, max_pending_bytes=None)  # pyarrow set up before
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        records = 2 * tw._ROW_GROUP  # fills the first two blocks; the third is not started yet
        for i in range(records):
            w.record(TraceRecord(*rec(i, f"/some/dir/file{i:07d}", f"/other/name{i}" if i % 2 else None)))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    try:
        assert w.dropped == 0 and len(w._blocks) == 2
        assert held <= w.queued_bytes, (held / records, w.queued_bytes / records)
        assert held > w.queued_bytes * 3 / 4  # and not far above it either
    finally:
        w.close()


def test_records_written_from_a_block_it_still_fills_are_let_go(tmp_path):
    """A block goes once all its records are written, but what a written record alone kept
    (its path) goes at once: the bound counts it as gone, and an idle trace keeps nothing."""
    w = TraceWriter(tmp_path / "t", {}, flush_interval=3600, max_pending_bytes=None)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(2000):  # far from filling the block
            w.record(TraceRecord(*rec(i, f"/{i:07d}" + "x" * 2000)))
        queued = tracemalloc.get_traced_memory()[0] - before
        w.close()  # writes them all
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert w.records == 2000 and len(w._blocks) == 1 and w.queued_bytes == 0
    assert queued > 2000 * 2000  # the paths were held while queued
    # and are not once written: what stays is the block's rows and references (under the
    # estimate of a record without its path), not a tenth of the paths' 4 MB
    assert kept < 2000 * tw._RECORD_BYTES < 2000 * 2000 / 5, (queued, kept)


def test_default_bound_is_tens_of_mib_and_rss_stays_near_it():
    """A stalled writer and 600,000 operations: the old 1M-record queue grew RSS by
    ~280 MB; now the queue stops at 64 MiB estimated (about 236,000 records, 60 MiB real)."""
    script = """
import os, sys, tempfile
from fusetrace.trace.schema import TraceRecord
from fusetrace.trace.writer import MAX_PENDING_BYTES, TraceWriter
def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) * 1024
w = TraceWriter(os.path.join(tempfile.mkdtemp(), "t"), {}, flush_interval=3600)
base = rss()
for i in range(600_000):
    big = 10**6 + i
    w.record(TraceRecord(10**12 + i, big, "write", big, "/some/dir/file%07d" % i, None, big, big, big, big, 0, big,
                         big, big, big))
print(MAX_PENDING_BYTES, w.queued, w.dropped, w.queued_bytes, rss() - base)
w.close()
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=dict(os.environ)
    )
    assert done.returncode == 0, done.stderr
    bound, queued, dropped, queued_bytes, grew = map(int, done.stdout.split())
    assert bound == 64 << 20
    assert queued + dropped == 600_000 and dropped > 300_000
    assert queued_bytes <= bound
    assert grew < 80 << 20, f"RSS grew {grew / 2**20:.0f} MiB"


def test_writer_converts_and_writes_in_bounded_row_groups(tmp_path):
    d = tmp_path / "t"
    n = 2 * tw._ROW_GROUP + 100
    with TraceWriter(d, {}, flush_interval=3600) as w:
        for i in range(n):
            w.record(TraceRecord(*rec(i, f"/f{i}")))
    [part] = [p for p in os.listdir(d) if p.endswith(".parquet")]
    f = pq.ParquetFile(d / part)
    assert f.metadata.num_rows == n and f.metadata.num_row_groups == 3
    assert [r["start_ns"] for r in f.read(columns=["start_ns"]).to_pylist()] == [10**12 + i for i in range(n)]
    assert w.queued_bytes == 0


def test_a_failed_part_discards_its_records_and_frees_the_queue(tmp_path):
    d = tmp_path / "t"
    w = TraceWriter(d, {}, flush_interval=0.01)
    shutil.rmtree(d)  # the writer's descriptor now names a removed directory: every write fails
    for i in range(100):
        w.record(TraceRecord(*rec(i, "/f")))
    poll(lambda: w.lost == 100, timeout=5)
    assert w.queued == 0 and w.queued_bytes == 0 and w.records == 0
    assert "lost in" not in w.closing_line() and "100 lost" in w.closing_line()
    w.close()


# ---- a full trace disk, for real -------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs, unmounted at the end."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "none", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk) -> None:
    """Fill the file system up to its last byte."""
    with open(disk / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs")
def test_a_full_trace_disk_is_said_by_stats_report_and_umount(tmp_path, small_disk):
    src, mnt, trace = tmp_path / "src", tmp_path / "mnt", small_disk / "trace"
    src.mkdir()
    mnt.mkdir()
    (src / "f").write_bytes(b"x")
    log = tmp_path / "server.log"
    fusetrace("mount", str(src), str(mnt), "--trace", str(trace), "--attr-timeout", "0", "--log", str(log))

    def trace_stats() -> dict:
        return stats_json(mnt)["trace"]

    try:
        for _ in range(100):
            os.stat(mnt / "f")
        poll(lambda: (trace / "part-000000.parquet").exists(), timeout=10)
        fill(small_disk)  # from now on nothing fits: no part, no metadata rewrite
        for _ in range(3000):
            os.stat(mnt / "f")
        poll(lambda: trace_stats()["lost"] >= 3000, timeout=15)
        text = fusetrace("stats", str(mnt)).stdout
        assert "lost in" in text and "No space left on device" in text, text
    finally:
        if is_mounted(mnt):
            fusetrace("umount", str(mnt))
    m = meta.read(trace)  # written at close in the space the writer had kept back
    assert m["lost"] >= 3000 and m["write_errors"] >= 1 and "end_wall_ns" in m, m
    assert not (trace / ".reserve").exists()
    said = [ln for ln in log.read_text().splitlines() if "closed:" in ln]
    assert said and f"{m['lost']:,} lost" in said[-1] and "No space left on device" in said[-1], said
    line = meta.loss_summary(trace)
    assert line is not None and f"{m['lost']:,} records lost" in line and "No space left" in line, line
    out = render(Trace(str(trace)).summary())
    assert f"lost        {m['lost']:,} records" in out and "killed" not in out, out


def test_report_says_why_a_trace_was_not_closed(tmp_path):
    d = tmp_path / "t"
    with TraceWriter(d, {"source": "/s"}) as w:
        w.record(TraceRecord(*rec(0, "/f")))
    m = meta.read(d)
    del m["end_wall_ns"]
    m.update(pid=os.getpid(), host=os.uname().nodename)  # pytest: not a fusetrace server
    meta.write(str(d), m)
    text = render(Trace(str(d)).summary())
    assert "killed, or that write failed" in text
    m.update(write_errors=3, lost=70, last_error="OSError: [Errno 28] No space left on device")
    meta.write(str(d), m)
    text = render(Trace(str(d)).summary())
    assert "its final _metadata.json could not be written" in text and "full disk" in text, text
    assert "No space left on device" in text
    assert "not written (the trace disk full, or the server killed)" in meta.loss_summary(d)
