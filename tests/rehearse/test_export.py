"""`fusetrace export`: a fio iolog that fio replays to the same I/Os, Perfetto JSON whose
tracks never mis-nest, nfsslower CSV rows as nfsslower would print them; and bad input
said in one line, with no half-written output left behind."""

import csv
import io
import itertools
import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pandas as pd
import pytest
from support import fusetrace_here, one_line_error

from fusetrace.trace.schema import TraceRecord
from fusetrace.trace.writer import TraceWriter

MS = 1_000_000
T0 = 5_000 * MS  # the synthetic traces' first operation (CLOCK_MONOTONIC ns)
FIO = shutil.which("fio")
need_fio = pytest.mark.skipif(FIO is None, reason="fio is not installed")


def rec(
    at_us: float,
    dur_us: float,
    op: str,
    path: str,
    *,
    fh=0,
    offset=0,
    size=0,
    result=0,
    errno=0,
    pid=100,
    comm="app",
    **more,
) -> TraceRecord:
    """A record starting `at_us` after T0."""
    return TraceRecord(
        T0 + round(at_us * 1000),
        round(dur_us * 1000),
        op,
        7,
        path,
        more.pop("path2", None),
        fh,
        offset,
        size,
        result,
        errno,
        pid,
        1000,
        1000,
        more.pop("shaped_ns", 0),
        comm=comm,
        **more,
    )


def trace(directory: Path, records: list[TraceRecord]) -> Path:
    w = TraceWriter(directory, {"source": "/src", "mountpoint": "/mnt", "host": "box"})
    for r in records:
        w.record(r)
    w.close()
    return directory


def export(trace_dir: Path, fmt: str, output: Path, check: bool = True):
    return fusetrace_here("export", str(trace_dir), "--format", fmt, "-o", str(output), check=check)


def fio_replay(iolog: Path, directory: Path) -> dict:
    """fio's JSON account of replaying `iolog` in `directory` (the command the docs give)."""
    out = directory.parent / "fio.json"
    done = subprocess.run(
        [FIO, "--name=replay", f"--read_iolog={iolog}", "--output-format=json", f"--output={out}"],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=120,
    )
    job = json.loads(out.read_text())["jobs"][0]
    assert done.returncode == 0 and job["error"] == 0, (done.stdout, done.stderr, out.read_text()[:2000])
    return job


# ---- fio iolog ---------------------------------------------------------------------------

LONG = "/" + "n" * 257
SYNTHETIC = [
    rec(0, 20, "lookup", "/a"),
    rec(1000, 50, "create", "/a", fh=5, flags=os.O_CREAT | os.O_WRONLY),
    rec(2000, 200, "write", "/a", fh=5, offset=0, size=4096, result=4096),
    rec(2100, 200, "write", "/a", fh=5, offset=4096, size=4096, result=4096),
    rec(3000, 900, "fsync", "/a", fh=5),
    rec(3500, 10, "open", "/a", fh=8, pid=300, comm="tail"),  # a second handle on /a: no second open
    rec(4000, 10, "read", "/a", fh=8, offset=0, size=131072, result=8192, pid=300, comm="tail"),
    rec(4500, 10, "read", "/a", fh=8, offset=8192, size=131072, result=0, pid=300, comm="tail"),  # EOF
    rec(5000, 10, "release", "/a", fh=5),
    rec(5500, 10, "release", "/a", fh=8, pid=300),
    rec(6000, 10, "open", "/untouched", fh=6),  # never read or written: fio need not open it
    rec(6100, 10, "release", "/untouched", fh=6),
    rec(7000, 10, "open", "/d/pre", fh=9),
    rec(7100, 30, "read", "/d/pre", fh=9, offset=65536, size=4096, result=4096),
    rec(7200, 10, "write", "/d/pre", fh=9, offset=0, size=10, result=0, errno=28),  # ENOSPC: moved nothing
    rec(8000, 10, "read", "/old", fh=11, offset=0, size=512, result=512),  # its open is before the trace
    rec(9000, 10, "open", "/a b", fh=12),
    rec(9100, 10, "read", "/a b", fh=12, size=4096, result=100),
    rec(9200, 10, "write", LONG, fh=13, size=4096, result=4096),
    rec(9300, 10, "write", "/caf\\xe9", fh=14, size=1, result=1),  # a real backslash
    rec(9400, 10, "write", os.fsdecode(b"/caf\xe9"), fh=15, offset=1, size=1, result=1),  # Latin-1: not UTF-8
    rec(300_000.5, 10, "release", "/d/pre", fh=9),  # ts in whole microseconds, rounded down
]
IOLOG = """\
fio version 3 iolog
1000 a add
1000 a open
2000 a write 0 4096
2100 a write 4096 4096
3000 a sync 0 0
4000 a read 0 8192
5500 a close
7000 d/pre add
7000 d/pre open
7100 d/pre read 65536 4096
8000 old add
8000 old open
8000 old read 0 512
9300 caf\\xe9 add
9300 caf\\xe9 open
9300 caf\\xe9 write 0 1
9400 caf\xe9 add
9400 caf\xe9 open
9400 caf\xe9 write 1 1
300000 d/pre close
""".encode("latin-1")  # the names' exact bytes: caf, backslash, xe9 and caf, 0xE9


def test_iolog_holds_the_data_operations_with_their_files_and_times(tmp_path):
    t = trace(tmp_path / "t", SYNTHETIC)
    done = export(t, "fio-iolog", tmp_path / "x.iolog")
    assert (tmp_path / "x.iolog").read_bytes() == IOLOG
    assert (
        done.stdout == f"{tmp_path / 'x.iolog'}: fio iolog v3: 3 reads (12,800 bytes), 4 writes (8,194 bytes), "
        "1 sync on 5 files\n"
    )
    notes = done.stderr.splitlines()
    assert notes[0] == "fusetrace export: left out 2 operations whose file names fio cannot take (2 files):"
    assert set(notes[1:3]) == {
        "fusetrace export:   1 with white space (fio splits iolog lines on it): 'a b'",
        f"fusetrace export:   1 with longer than 256 bytes (fio reads at most that much of a name): {LONG[1:]!r}",
    }
    assert notes[3] == "fusetrace export: left out 2 operations (read, write, fsync) that failed or moved no bytes"
    assert notes[4] == (
        "fusetrace export: the directory fio replays in must hold 2 files the log reads before it "
        "writes them, each at least as large as read: 'd/pre' (69,632 bytes), 'old' (512 bytes)"
    )
    assert notes[5] == (
        "fusetrace export: fio makes the files the log writes first, not directories: the directory "
        "it replays in must hold 1 directory (mkdir -p): 'd'"
    )
    assert len(notes) == 6


def test_paths_that_would_lead_fio_outside_its_directory_are_left_out(tmp_path):
    """A hostile trace's path with '..' (or '.', '//', no leading '/') never reaches the
    log: fio would create or read the file outside the directory it replays in."""
    bad = ["/../../escape", "/a/../../b", "//etc/x", "/./x", "relative"]
    t = trace(tmp_path / "t", [rec(i, 1, "write", p, fh=10 + i, size=1, result=1) for i, p in enumerate(bad)])
    done = export(t, "fio-iolog", tmp_path / "x.iolog")
    assert (tmp_path / "x.iolog").read_text() == "fio version 3 iolog\n"
    assert "5 with a '.', '..' or empty component, or no leading '/'" in done.stderr


def test_names_fio_cannot_take_are_counted_with_the_first_few(tmp_path):
    t = trace(tmp_path / "t", [rec(i, 1, "write", f"/f {i}", fh=10 + i, size=1, result=1) for i in range(5)])
    done = export(t, "fio-iolog", tmp_path / "x.iolog")
    assert "5 with white space (fio splits iolog lines on it): 'f 0', 'f 1', 'f 2' and 2 more" in done.stderr
    assert (tmp_path / "x.iolog").read_text() == "fio version 3 iolog\n"


@need_fio
def test_fio_replays_the_synthetic_iolog(tmp_path):
    """fio takes every line: the same I/Os, and the read-before-write files prepared as the note says."""
    t = trace(tmp_path / "t", SYNTHETIC)
    export(t, "fio-iolog", tmp_path / "x.iolog")
    replay = tmp_path / "replay"
    (replay / "d").mkdir(parents=True)
    (replay / "d" / "pre").write_bytes(b"p" * 69_632)
    (replay / "old").write_bytes(b"o" * 512)
    job = fio_replay(tmp_path / "x.iolog", replay)
    assert (job["read"]["total_ios"], job["read"]["io_bytes"]) == (3, 12_800)
    assert (job["write"]["total_ios"], job["write"]["io_bytes"]) == (4, 8194)
    assert job["sync"]["total_ios"] == 1
    assert (replay / "a").stat().st_size == 8192
    assert {b"caf\\xe9", b"caf\xe9"} <= set(os.listdir(os.fsencode(replay)))  # the names' exact bytes


@need_fio
def test_fio_replays_a_real_trace_to_the_same_ios(mount, tmp_path):
    """Files written (one through a subdirectory, one fsync'd), read back, and one that was
    there before the trace; fio, run in a directory prepared as the export's note says,
    reports the trace's reads, writes, bytes and syncs."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "before").write_bytes(os.urandom(300_000))
    m = mount("--attr-timeout", "0", "--entry-timeout", "0", source=src, trace=True)
    (m.mountpoint / "sub").mkdir()
    with open(m.mountpoint / "a", "wb") as f:
        for _ in range(4):
            f.write(os.urandom(65536))
        f.flush()
        os.fsync(f.fileno())
    (m.mountpoint / "sub" / "b").write_bytes(os.urandom(100_000))
    (m.mountpoint / "with space").write_bytes(b"s" * 4096)
    for name in ("a", "sub/b", "before"):
        assert len((m.mountpoint / name).read_bytes()) > 0
    m.unmount()

    done = export(m.trace, "fio-iolog", tmp_path / "real.iolog")
    assert "1 with white space (fio splits iolog lines on it): 'with space'" in done.stderr
    assert (
        "must hold 1 file the log reads before it writes them, each at least as large as read: "
        "'before' (300,000 bytes)" in done.stderr
    )
    assert "the directory it replays in must hold 1 directory (mkdir -p): 'sub'" in done.stderr

    df = pd.read_parquet(m.trace)
    moved = df[df.op.isin(["read", "write"]) & (df.errno == 0) & (df.result > 0) & (df.path != "/with space")]
    expect = {op: (int((moved.op == op).sum()), int(moved[moved.op == op].result.sum())) for op in ("read", "write")}
    assert expect["read"][1] == 300_000 + 4 * 65536 + 100_000
    assert expect["write"][1] == 4 * 65536 + 100_000

    replay = tmp_path / "replay"
    (replay / "sub").mkdir(parents=True)
    shutil.copy(src / "before", replay / "before")
    job = fio_replay(tmp_path / "real.iolog", replay)
    assert (job["read"]["total_ios"], job["read"]["io_bytes"]) == expect["read"]
    assert (job["write"]["total_ios"], job["write"]["io_bytes"]) == expect["write"]
    assert job["sync"]["total_ios"] == int(((df.op == "fsync") & (df.errno == 0)).sum()) >= 1
    assert (replay / "a").stat().st_size == 4 * 65536 and (replay / "sub" / "b").stat().st_size == 100_000


# ---- Perfetto ------------------------------------------------------------------------------


def events(path: Path) -> tuple[dict, list[dict]]:
    doc = json.loads(path.read_text())
    return doc, doc["traceEvents"]


def assert_tracks_never_overlap(slices: list[dict]) -> None:
    """On every (pid, tid), each slice ends before the next starts, whether a viewer
    rounds ts*1000 and dur*1000 (Perfetto now) or truncates them (older versions)."""
    for convert in (round, int):
        by_track: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for e in slices:
            start = convert(e["ts"] * 1000)
            by_track.setdefault((e["pid"], e["tid"]), []).append((start, start + convert(e["dur"] * 1000)))
        for spans in by_track.values():
            spans.sort()
            for (_, end), (start, _) in itertools.pairwise(spans):
                assert end <= start, spans


def test_perfetto_puts_overlapping_operations_on_their_own_tracks(tmp_path):
    records = [
        rec(0, 100, "write", "/f", fh=1, offset=0, size=10, result=10, kind="buffered"),
        rec(10, 100, "write", "/f", fh=1, offset=10, size=10, result=10, kind="buffered"),  # overlaps the first
        rec(20, 110, "getattr", "/f", mode=0o100644),  # overlaps both, and the flush
        rec(100, 5, "flush", "/f", fh=1),  # starts as the first ends: the guard keeps it off that lane
        rec(200.001, 5, "lookup", "/nope", errno=2, pid=200, comm="ls"),
        rec(
            201,
            1,
            "read",
            "/g",
            fh=3,
            offset=4096,
            size=4096,
            result=4096,
            pid=201,
            comm="",
            gate="throughput",
            nfs="READ",
            wait_ns=500,
            latency_ns=300,
            transfer_ns=100,
            shaped_ns=800,
        ),
        # back to back, where a viewer that truncates ts*1000 and dur*1000 ends the first 1 ns too late
        rec(255.996, 0.005, "getattr", "/h", pid=300, comm="stat"),
        rec(256.001, 1, "getattr", "/h", pid=300, comm="stat"),
    ]
    t = trace(tmp_path / "t", records)
    done = export(t, "perfetto", tmp_path / "x.json")
    assert "8 operations of 4 processes on 8 tracks" in done.stdout
    doc, evs = events(tmp_path / "x.json")
    slices = [e for e in evs if e["ph"] == "X"]
    assert len(slices) == len(records)
    assert_tracks_never_overlap(slices)
    assert [(e["name"], e["ts"], e["dur"]) for e in slices[:4]] == [
        ("write", 0.0, 100.0),
        ("write", 10.0, 100.0),
        ("getattr", 20.0, 110.0),
        ("flush", 100.0, 5.0),
    ]
    tracks = [(e["pid"], e["tid"]) for e in slices]
    assert tracks[0] == (100, 100) and len(set(tracks[:4])) == 4  # lane 0 is the pid; 3 more lanes
    assert all(tid > 1 << 22 for _, tid in tracks[1:4])
    names = {e["pid"]: e["args"]["name"] for e in evs if e["name"] == "process_name"}
    assert slices[6]["tid"] != slices[7]["tid"]
    assert names == {100: "app", 200: "ls", 300: "stat"}  # pid 201's name is unknown: the viewer says "Process 201"
    threads = {e["tid"]: e["args"]["name"] for e in evs if e["name"] == "thread_name"}
    assert threads[100] == "app ops" and threads[tracks[1][1]] == "app ops, lane 1"
    assert slices[0]["args"] == {
        "path": "/f",
        "size": 10,
        "result": 10,
        "errno": 0,
        "offset": 0,
        "inode": 7,
        "fh": 1,
        "uid": 1000,
        "gid": 1000,
        "kind": "buffered",
    }
    assert slices[0]["cat"] == "buffered" and slices[2]["cat"] == "fuse"
    assert slices[2]["args"]["mode"] == 0o100644
    assert slices[4]["args"]["errno"] == 2 and slices[4]["args"]["error"] == "ENOENT"
    assert slices[4]["ts"] == 200.001
    shaped = slices[5]["args"]
    assert (shaped["gate"], shaped["nfs"], shaped["wait_ns"], shaped["shaped_ns"]) == ("throughput", "READ", 500, 800)
    assert doc["otherData"]["ts_zero_monotonic_ns"] == T0 and doc["otherData"]["source"] == "/src"


def test_a_real_trace_with_concurrent_threads_opens_in_perfetto_without_overlaps(mount, tmp_path):
    m = mount("--inline", "never", trace=True)  # every call on a worker thread: they overlap
    for i in range(4):
        (m.mountpoint / f"f{i}").write_bytes(os.urandom(1 << 20))

    def churn(i: int) -> None:
        for _ in range(5):
            (m.mountpoint / f"f{i}").read_bytes()
            os.stat(m.mountpoint / f"f{i}")

    threads = [threading.Thread(target=churn, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    m.unmount()

    export(m.trace, "perfetto", tmp_path / "real.json")
    _, evs = events(tmp_path / "real.json")
    slices = [e for e in evs if e["ph"] == "X"]
    df = pd.read_parquet(m.trace)
    assert len(slices) == len(df)
    assert_tracks_never_overlap(slices)
    mine = [e for e in slices if e["pid"] == os.getpid()]
    assert len({e["tid"] for e in mine}) > 1  # four threads of one process overlapped
    comm = Path("/proc/self/comm").read_text().strip()
    assert {"name": "process_name", "ph": "M", "pid": os.getpid(), "args": {"name": comm}} in evs


# ---- nfsslower CSV -------------------------------------------------------------------------


def test_csv_rows_are_what_nfsslower_prints(tmp_path):
    records = [
        rec(0, 1500.5, "read", "/d/big", fh=1, offset=1 << 20, size=131072, result=131072, comm="dd"),
        rec(100, 20, "getattr", "/", pid=9, comm="ls"),
        rec(200, 7, "lookup", "/d/x"),  # not one of nfsslower's operations
        rec(300, 40, "create", "/d/a,b", fh=2, pid=9, comm="ls"),
        rec(400, 10, "open", "/d/nope", errno=2),
        rec(500, 2000, "write", "/d/big", fh=1, offset=4096, size=4096, result=4096, comm="dd"),
        rec(600, 3, "flush", "/d/big", fh=1),
    ]
    t = trace(tmp_path / "t", records)
    done = export(t, "csv", tmp_path / "x.csv")
    assert "1 R, 1 W, 2 O, 1 G" in done.stdout
    text = (tmp_path / "x.csv").read_text()
    end = T0 // 1000  # in whole microseconds, as ENDTIME_us
    assert text.splitlines()[0] == "ENDTIME_us,TASK,PID,TYPE,BYTES,OFFSET_b,LATENCY_us,FILE"
    assert text.splitlines()[1:] == [
        f"{end + 120},ls,9,G,0,0,20,/",
        f'{end + 340},ls,9,O,0,0,40,"a,b"',
        f"{end + 410},app,100,O,4294967294,0,10,nope",  # a failed call's -ENOENT, as a u32
        f"{end + 1500},dd,100,R,131072,1048576,1500,big",  # in end order: 1500.5 us after its start
        f"{end + 2500},dd,100,W,4096,4096,2000,big",
    ]
    rows = list(csv.DictReader(io.StringIO(text)))
    assert rows[1]["FILE"] == "a,b" and pd.read_csv(tmp_path / "x.csv")["LATENCY_us"].sum() == 3570


def test_csv_of_a_real_trace_matches_its_records(mount, tmp_path):
    m = mount("--attr-timeout", "0", trace=True)
    (m.mountpoint / "f").write_bytes(b"z" * 200_000)
    assert (m.mountpoint / "f").read_bytes() == b"z" * 200_000
    os.stat(m.mountpoint / "f")
    m.unmount()
    export(m.trace, "csv", tmp_path / "real.csv")
    got = pd.read_csv(tmp_path / "real.csv", keep_default_na=False)
    df = pd.read_parquet(m.trace)
    df = df[df.op.isin(["read", "write", "open", "create", "getattr"])].copy()
    df["end_us"] = (df.start_ns + df.dur_ns) // 1000
    df = df.sort_values(["end_us", "start_ns"], kind="stable")
    assert len(got) == len(df) and got.ENDTIME_us.is_monotonic_increasing
    assert sorted(got.ENDTIME_us) == sorted(df.end_us) and sorted(got.LATENCY_us) == sorted(df.dur_ns // 1000)
    assert got[got.TYPE == "R"].BYTES.sum() == got[got.TYPE == "W"].BYTES.sum() == 200_000
    assert set(got[got.TYPE.isin(["R", "W", "O"])].FILE) == {"f"}
    assert set(got.PID) == set(df.pid) and set(got.TASK) == set(df.comm.astype(str))


# ---- output and bad input ------------------------------------------------------------------


@pytest.fixture
def small(tmp_path) -> Path:
    return trace(tmp_path / "t", SYNTHETIC[:5])


def test_existing_output_is_replaced_and_a_symlink_is_not_followed(small, tmp_path):
    out = tmp_path / "out.csv"
    out.write_text("old\n")
    export(small, "csv", out)
    assert out.read_text().startswith("ENDTIME_us,") and oct(out.stat().st_mode & 0o777) == "0o600"
    target = tmp_path / "precious"
    target.write_text("keep me\n")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    export(small, "perfetto", link)
    assert target.read_text() == "keep me\n"
    assert not link.is_symlink() and json.loads(link.read_text())["traceEvents"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "out.csv", "precious", "t"]


@pytest.mark.parametrize("fmt", ["fio-iolog", "perfetto", "csv"])
def test_an_unreadable_trace_leaves_no_output(tmp_path, small, fmt):
    """A trace whose only part is damaged fails the export in one line, with no output and
    no temporary file left; a damaged part beside a good one (what a crash leaves last) is
    skipped with a warning, and the rest exported."""
    part = next(small.glob("*.parquet"))
    damaged = small / "part-000099.parquet"
    damaged.write_bytes(part.read_bytes()[:200])
    out = tmp_path / "out" / "x"
    out.parent.mkdir()
    done = export(small, fmt, out, check=False)
    assert done.returncode == 0 and done.stderr.startswith(
        f"fusetrace: warning: {damaged}: not a readable trace part"
    ), done.stderr
    assert "skipped, the other part read" in done.stderr and out.stat().st_size > 0
    out.unlink()
    part.write_bytes(damaged.read_bytes())
    damaged.unlink()
    done = export(small, fmt, out, check=False)
    one_line_error(done, str(part), "not a readable trace part", code=2)
    assert list(out.parent.iterdir()) == []


def test_bad_input_is_one_line(tmp_path, small):
    done = export(tmp_path / "missing", "csv", tmp_path / "x.csv", check=False)
    one_line_error(done, str(tmp_path / "missing"), "no such trace directory", code=2)
    (tmp_path / "empty").mkdir()
    done = export(tmp_path / "empty", "csv", tmp_path / "x.csv", check=False)
    one_line_error(done, "no trace files", code=2)
    done = export(small, "csv", tmp_path / "nodir" / "x.csv", check=False)
    one_line_error(done, str(tmp_path / "nodir" / "x.csv"), "no such directory", code=1)
    done = export(small, "csv", tmp_path, check=False)
    one_line_error(done, str(tmp_path), "is a directory", code=1)
    done = export(small, "csv", small / "x.csv", check=False)
    one_line_error(done, "inside the trace directory", code=1)
    done = fusetrace_here("export", str(small), "--format", "xml", "-o", str(tmp_path / "x"), check=False)
    assert done.returncode == 2 and "invalid choice: 'xml'" in done.stderr
    assert not (tmp_path / "x.csv").exists()


def test_an_unwritable_output_directory_is_one_line(tmp_path, small):
    if os.geteuid() == 0:
        where = Path("/sys/fs")  # even root may not create files in sysfs
    else:
        where = tmp_path / "ro"
        where.mkdir(mode=0o500)
    done = export(small, "csv", where / "x.csv", check=False)
    one_line_error(done, str(where / "x.csv"), "cannot write it", "ermission denied", code=1)
