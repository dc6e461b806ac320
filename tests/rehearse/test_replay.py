"""`fusetrace replay DIR TARGET`: a trace's operations issued again, with their recorded
concurrency and timing, into a directory or another (traced) mount; what differs said.

Traces are real (a workload on a traced mount) or synthetic (TraceWriter); targets are
real directories and real mounts, one of them over a slow FUSE file system of the
tests' own (tests/support/slow_fs.py) so that concurrency shows in time.
"""

import ctypes
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from support import fusetrace_here, one_line_error, poll
from support.replays import CREATE, DIRECT, MS, RDONLY, rec, replay, synthetic, tree

from fusetrace.rehearse.replay import Lateness
from fusetrace.rehearse.replay_calls import REFUSED_HANDLE, REFUSED_PATH
from fusetrace.trace import metadata as meta

# ---- quick: synthetic traces --------------------------------------------------------


def test_a_synthetic_trace_replays_its_operations(tmp_path):
    """Entries, data and attributes, each as its system call; and what cannot be matched
    (the data, an owner's value) is still the same size and kind."""
    trace = synthetic(
        tmp_path / "t",
        [
            rec(0, "mkdir", "/d", mode=stat.S_IFDIR | 0o750),
            rec(2, "create", "/d/f", fh=7, flags=CREATE, mode=stat.S_IFREG | 0o640),
            rec(4, "write", "/d/f", fh=7, size=5000, result=5000),
            rec(5, "write", "/d/f", fh=7, offset=5000, size=3000, result=3000),
            rec(6, "flush", "/d/f", fh=7),
            rec(7, "release", "/d/f", fh=7),
            rec(8, "setattr", "/d/f", path2="mode", mode=stat.S_IFREG | 0o600),
            rec(9, "symlink", "/d/l", path2="f", mode=stat.S_IFLNK | 0o777),
            rec(10, "link", "/d/f", path2="/d/g"),
            rec(11, "rename", "/d/g", path2="/d/h"),
            rec(12, "mknod", "/d/fifo", mode=stat.S_IFIFO | 0o600),
            rec(13, "open", "/d/f", fh=9, flags=RDONLY),
            rec(14, "read", "/d/f", fh=9, size=4096, result=4096),
            rec(15, "read", "/d/f", fh=9, offset=4096, size=8192, result=3904),
            rec(16, "release", "/d/f", fh=9),
            rec(17, "opendir", "/d", fh=11),
            rec(18, "readdir", "/d", fh=11, size=32, result=6),
            rec(19, "readdir", "/d", fh=11, offset=6, size=32, result=0),
            rec(20, "releasedir", "/d", fh=11),
            rec(21, "readlink", "/d/l", result=1),
            rec(22, "lookup", "/d/h", mode=stat.S_IFREG | 0o600),
            rec(23, "setattr", "/d/h", path2="size", size=10),
            rec(24, "unlink", "/d/fifo"),
            rec(25, "statfs", "/"),
        ],
    )
    target = tmp_path / "target"
    target.mkdir()
    s = replay(trace, target, "--as-fast-as-possible")
    assert s["differences"]["count"] == 0, s["differences"]
    assert s["records"] == s["replayed"] == 24 and s["not_replayed"] == {}
    assert tree(target) == {
        "d": (stat.S_IFDIR, 0o750, None),
        "d/f": (stat.S_IFREG, 0o600, 10),  # hard link to h: truncated with it
        "d/h": (stat.S_IFREG, 0o600, 10),
        "d/l": (stat.S_IFLNK, 0o777, "f"),
    }
    assert (target / "d/f").read_bytes() == bytes(10)  # the data is not traced: zeros


def test_direct_io_replays_into_a_directory_that_takes_it(tmp_path):
    """O_DIRECT reads and writes reach a local file system as they did the mount: from and
    into page-aligned memory (ext4 refuses an unaligned buffer with EINVAL)."""
    target = tmp_path / "target"
    target.mkdir()
    try:
        os.close(os.open(target / "probe", os.O_CREAT | os.O_WRONLY | os.O_DIRECT))
    except OSError as exc:
        pytest.skip(f"{target}: no O_DIRECT here ({exc.strerror})")
    os.unlink(target / "probe")
    direct_rw = os.O_RDWR | os.O_CREAT | os.O_DIRECT | os.O_LARGEFILE
    trace = synthetic(
        tmp_path / "t",
        [
            rec(0, "create", "/f", fh=3, flags=direct_rw, mode=stat.S_IFREG | 0o644),
            rec(1, "write", "/f", fh=3, size=65536, result=65536),
            rec(2, "write", "/f", fh=3, offset=65536, size=4096, result=4096),
            rec(3, "read", "/f", fh=3, size=4096, result=4096),
            rec(4, "read", "/f", fh=3, offset=4096, size=131072, result=65536),
            rec(5, "release", "/f", fh=3),
        ],
    )
    s = replay(trace, target, "--as-fast-as-possible")
    assert s["differences"]["count"] == 0, s["differences"]
    assert (target / "f").stat().st_size == 69632


def test_a_fifo_where_a_file_was_opened_is_a_difference_not_a_hang(tmp_path):
    """FUSE sends no open for a FIFO, so a trace that opens one (or a target with one
    planted at the name) is hostile: the replay must not wait for a writer."""
    trace = synthetic(
        tmp_path / "t",
        [
            rec(0, "mknod", "/fifo", mode=stat.S_IFIFO | 0o600),
            rec(1, "open", "/fifo", fh=3, flags=RDONLY),
            rec(2, "release", "/fifo", fh=3),
            rec(3, "open", "/planted", fh=4, flags=RDONLY),
            rec(4, "release", "/planted", fh=4),
        ],
    )
    target = tmp_path / "target"
    target.mkdir()
    os.mkfifo(target / "planted")
    s = replay(trace, target, "--as-fast-as-possible")
    opens = [d for d in s["differences"]["by_op"] if d["op"] == "open"]
    assert [(d["kind"], d["count"]) for d in opens] == [("another file type", 2)]


def test_a_read_or_write_larger_than_fuse_sends_is_not_issued(tmp_path):
    trace = synthetic(
        tmp_path / "t",
        [
            rec(0, "create", "/f", fh=3, flags=CREATE, mode=stat.S_IFREG | 0o644),
            rec(1, "write", "/f", fh=3, size=1 << 40, result=1 << 40),
            rec(2, "read", "/f", fh=3, size=1 << 62, result=0),
            rec(3, "release", "/f", fh=3),
        ],
    )
    target = tmp_path / "target"
    target.mkdir()
    s = replay(trace, target, "--as-fast-as-possible")
    assert list(s["not_replayed"].values()) == [2] and "larger than any FUSE request" in next(iter(s["not_replayed"]))


def test_a_handle_number_reused_while_its_release_is_under_way(tmp_path):
    """The kernel's releasedir of handle 30 overlaps the next opendir, which the server
    answered with the number just freed: each record acts on its own handle."""
    trace = synthetic(
        tmp_path / "t",
        [
            rec(0, "opendir", "/d", fh=30),
            rec(2, "readdir", "/d", fh=30, size=32, result=3),
            rec(3, "readdir", "/d", fh=30, offset=3, size=32, result=0),
            rec(10, "releasedir", "/d", fh=30, dur_ms=5),
            rec(12, "opendir", "/e", fh=30),
            rec(20, "readdir", "/e", fh=30, size=32, result=5),
            rec(21, "readdir", "/e", fh=30, offset=5, size=32, result=0),
            rec(30, "releasedir", "/e", fh=30),
        ],
    )
    target = tmp_path / "target"
    for name in ("d/1", "e/1", "e/2", "e/3"):
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        (target / name).write_text("")
    for _ in range(3):
        s = replay(trace, target, "--as-fast-as-possible")
        assert s["replayed"] == 8 and s["differences"]["count"] == 0, s


def test_outcomes_that_differ_are_listed_with_their_paths(tmp_path):
    """A file the recording found is missing here: its lookup and open fail, the read on
    its handle cannot be issued; a read comes back short; an error recorded is an
    outcome like any other (matched here: no difference)."""
    trace = synthetic(
        tmp_path / "t",
        [
            rec(0, "lookup", "/input", mode=stat.S_IFREG | 0o644),
            rec(1, "open", "/input", fh=5, flags=RDONLY),
            rec(2, "read", "/input", fh=5, size=4096, result=4096),
            rec(3, "release", "/input", fh=5),
            rec(4, "lookup", "/gone", err=2),
            rec(5, "open", "/small", fh=6, flags=RDONLY),
            rec(6, "read", "/small", fh=6, size=4096, result=4096),
            rec(7, "release", "/small", fh=6),
            rec(8, "lookup", "/small", mode=stat.S_IFDIR | 0o755),
        ],
    )
    target = tmp_path / "target"
    target.mkdir()
    (target / "small").write_bytes(b"x" * 100)
    s = replay(trace, target)
    by = {(d["op"], d["kind"]): d["count"] for d in s["differences"]["by_op"]}
    assert by == {
        ("lookup", "ENOENT, recorded ok"): 1,
        ("open", "ENOENT, recorded ok"): 1,
        ("read", "fewer bytes read"): 1,
        ("lookup", "another file type"): 1,
    }
    assert s["not_replayed"] == {REFUSED_HANDLE: 2}  # the read and release of /input
    first = s["differences"]["first"]
    assert [(d["op"], d["path"]) for d in first] == [
        ("lookup", "/input"),
        ("open", "/input"),
        ("read", "/small"),
        ("lookup", "/small"),
    ]
    assert first[2]["detail"] == "100, recorded 4,096"
    text = fusetrace_here("replay", str(trace), str(target)).stdout
    assert "outcomes that differ from the recording: 4" in text
    assert "/input" in text and "ENOENT, recorded ok" in text and "another file type (file, recorded directory)" in text


def test_speed_scales_the_recorded_gaps_and_the_drift_says_how_well(tmp_path):
    """Two operations a second apart: at --speed 10 the second is due 100 ms after the
    first, never earlier; the span and drift reported agree with each other."""
    trace = synthetic(
        tmp_path / "t",
        [rec(0, "mkdir", "/a", mode=stat.S_IFDIR | 0o755), rec(1000, "mkdir", "/b", mode=stat.S_IFDIR | 0o755)],
    )
    target = tmp_path / "target"
    target.mkdir()
    s = replay(trace, target, "--speed", "10")
    assert s["recorded_span_ns"] == 1001 * MS and s["due_span_ns"] == 1001 * MS // 10
    assert 100 * MS <= s["span_ns"] < 1000 * MS  # paced, and by the speed, not the recording
    assert s["drift"] == pytest.approx(s["span_ns"] / s["due_span_ns"] - 1)
    assert s["late_ns"]["max"] < s["span_ns"] and s["late_ns"]["p50"] <= s["late_ns"]["max"]
    assert (target / "a").is_dir() and (target / "b").is_dir()
    (tmp_path / "target2").mkdir()
    text = fusetrace_here("replay", str(trace), str(tmp_path / "target2"), "--speed", "10").stdout
    assert "at speed 10: drift +" in text and "issued late: p50" in text
    fast = replay(trace, target, "--as-fast-as-possible")  # again: the directories are there
    assert fast["span_ns"] < 100 * MS and fast["drift"] is None and fast["late_ns"] is None
    assert {d["kind"] for d in fast["differences"]["by_op"]} == {"EEXIST, recorded ok"}


def test_paths_that_would_leave_the_target_are_refused(tmp_path):
    """'..' components are refused before any call; a symbolic link on the way is not
    followed (the walk fails as ELOOP), even one the trace itself made."""
    outside = tmp_path / "outside"
    outside.mkdir()
    target = tmp_path / "target"
    target.mkdir()
    (target / "out").symlink_to(outside)
    trace = synthetic(
        tmp_path / "t",
        [
            rec(0, "mkdir", "/../outside/a", mode=stat.S_IFDIR | 0o755),
            rec(1, "create", "/x/../../outside/b", fh=5, flags=CREATE),
            rec(2, "rename", "/y", path2="/../outside/c"),
            rec(3, "create", "/out/d", fh=6, flags=CREATE),  # through the target's own link
            rec(4, "symlink", "/up", path2=str(outside)),
            rec(5, "mkdir", "/up/e", mode=stat.S_IFDIR | 0o755),  # through the trace's
            rec(6, "setattr", "/out", path2="size", size=0),
            rec(7, "setxattr", "/up/f", path2="user.x", size=3),
            rec(8, "lookup", "relative"),
        ],
    )
    s = replay(trace, target)
    assert s["not_replayed"] == {REFUSED_PATH: 4}
    by = {(d["op"], d["kind"]): d["count"] for d in s["differences"]["by_op"]}
    assert by == {
        ("create", "ELOOP, recorded ok"): 1,
        ("mkdir", "ELOOP, recorded ok"): 1,
        ("setxattr", "ELOOP, recorded ok"): 1,
        ("setattr", "EINVAL, recorded ok"): 1,
    }  # truncate(2) of the link itself, not where it leads
    assert list(outside.iterdir()) == []


def test_a_bad_target_or_trace_is_one_line(tmp_path):
    trace = synthetic(tmp_path / "t", [rec(0, "getattr", "/")])
    one_line_error(
        fusetrace_here("replay", str(trace), str(tmp_path / "missing"), check=False),
        "missing",
        "no such file or directory",
        code=1,
    )
    (tmp_path / "file").write_text("")
    one_line_error(
        fusetrace_here("replay", str(trace), str(tmp_path / "file"), check=False), "file", "not a directory", code=1
    )
    one_line_error(
        fusetrace_here("replay", str(tmp_path / "nothing"), str(tmp_path), check=False),
        "nothing",
        "no such trace directory",
        code=2,
    )
    old = synthetic(tmp_path / "old", [rec(0, "getattr", "/")])
    meta.write(str(old), {**meta.read(str(old)), "format_version": 2})
    one_line_error(
        fusetrace_here("replay", str(old), str(tmp_path), check=False), "old", "format 2", "needs format 3", code=2
    )
    broken = tmp_path / "broken"
    broken.mkdir(mode=0o700)
    (broken / "part-000000.parquet").write_bytes(b"not parquet at all")
    one_line_error(
        fusetrace_here("replay", str(broken), str(tmp_path), check=False), "broken", "not a readable trace part", code=2
    )


def test_lateness_percentiles_within_a_bucket():
    late = Lateness()
    values = [i * 1000 for i in range(1, 10_001)]  # 1 us to 10 ms
    for v in values:
        late.add(v)
    late.add(0)
    assert late.n == 10_001 and late.max_ns == 10 * MS
    for q in (0.5, 0.99):
        exact = values[int(q * len(values)) - 1]
        assert exact <= late.quantile(q) <= exact * 1.045
    assert late.quantile(1.0) == 10 * MS and late.quantile(0.0) == 0


def test_ctrl_c_stops_the_replay_cleanly(tmp_path):
    """Interrupted between two operations a minute apart: a summary of what was replayed,
    exit 130, no traceback."""
    trace = synthetic(tmp_path / "t", [rec(0, "create", "/f", fh=5, flags=CREATE), rec(60_000, "release", "/f", fh=5)])
    target = tmp_path / "target"
    target.mkdir()
    # SIGINT at its default, as in a terminal: a suite run in the background passes it on ignored
    p = subprocess.Popen(
        [sys.executable, "-m", "fusetrace", "replay", str(trace), str(target)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    poll(lambda: (target / "f").exists())
    started = time.monotonic()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 130, err
    assert time.monotonic() - started < 10
    assert "Traceback" not in err
    assert out.startswith("stopped by Ctrl-C") and "replayed 1 of 2 operations" in out


# ---- concurrency, observed on a slow file system ------------------------------------


def _two_reads(tmp_path: Path, second_at_ms: float) -> Path:
    """One process, two handles of the slow file, a 200 ms read on each: the second
    starting `second_at_ms` after the first."""
    return synthetic(
        tmp_path / f"t{second_at_ms:g}",
        [
            rec(0, "open", "/f", fh=5, flags=DIRECT),
            rec(1, "open", "/f", fh=6, flags=DIRECT),
            rec(10, "read", "/f", fh=5, size=4096, result=4096, dur_ms=200),
            rec(10 + second_at_ms, "read", "/f", fh=6, offset=4096, size=4096, result=4096, dur_ms=200),
            rec(500, "release", "/f", fh=5),
            rec(501, "release", "/f", fh=6),
        ],
    )


def _reads_seen(trace: Path) -> list[tuple[int, int]]:
    df = pd.read_parquet(trace)
    reads = df[df.op == "read"].sort_values("start_ns")
    return list(zip(reads.start_ns, reads.start_ns + reads.dur_ns))


@pytest.mark.slow
def test_a_process_overlapping_operations_overlap_again_and_others_do_not(slow_mount):
    """Reads that overlapped in the recording (one process's two threads) overlap on the
    target: the second starts before the first has ended, though each takes 300 ms there;
    reads that did not overlap stay one after the other, even as fast as possible."""
    m = slow_mount(300, 1 << 20, trace=True)
    tmp = m.trace.parent
    s = replay(_two_reads(tmp, 20), m.mountpoint)
    assert s["differences"]["count"] == 0 and s["most_at_once"] == 2 and s["streams"] == 2
    s = replay(_two_reads(tmp, 250), m.mountpoint, "--as-fast-as-possible")
    assert s["differences"]["count"] == 0 and s["most_at_once"] == 1 and s["streams"] == 1
    m.unmount()
    (a_start, a_end), (b_start, _), (_, c_end), (d_start, _) = _reads_seen(m.trace)
    assert a_end - a_start >= 300 * MS and b_start < a_end  # overlapped
    assert c_end <= d_start  # in order, though nothing paced them


# ---- a real workload, replayed into a directory and into another traced mount ------

WORKLOAD = r"""
set -e
cd "$1"
mkdir -p src/sub logs
cat input > src/copy
for i in 1 2 3 4 5; do echo "line $i" > src/sub/f$i; done
chmod 600 src/sub/f1
ln -s f2 src/sub/link
tar cf archive.tar src
mkdir unpacked
tar xf archive.tar -C unpacked
mv unpacked/src/sub/f3 unpacked/src/sub/moved
rm unpacked/src/sub/f4
truncate -s 12345 unpacked/big
ls -lR . > /dev/null
"""


def _threads_writing(root: Path) -> None:
    """Four threads of this process writing files at once."""

    def write(i: int) -> None:
        with open(root / "logs" / f"t{i}", "wb") as f:
            for _ in range(16):
                f.write(os.urandom(4096))
                f.flush()

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _record_workload(mount) -> tuple:
    """A traced mount over a source holding `input` (so not in the trace), the workload
    run on it, unmounted: (mount, the tree it left)."""
    m = mount("--inline", "never", trace=True)  # every call in a worker: the threads' writes overlap
    (m.source / "input").write_bytes(b"i" * 70_000)
    subprocess.run(["sh", "-c", WORKLOAD, "sh", str(m.mountpoint)], check=True)
    _threads_writing(m.mountpoint)
    subprocess.run(["sh", "-c", 'cd "$1" && cat logs/* > logs/all && rm -r src', "sh", str(m.mountpoint)], check=True)
    m.unmount()
    return m, tree(m.source)


@pytest.mark.slow
def test_a_real_workload_replays_into_a_directory_and_another_mount(mount, tmp_path):
    m, recorded_tree = _record_workload(mount)
    original = pd.read_parquet(m.trace)
    assert original.pid.nunique() >= 10  # sh, mkdir, cat, tar, ... and this process's threads

    # into a directory holding what the source held before the trace: the same tree
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "input").write_bytes(b"i" * 70_000)
    s = replay(m.trace, plain)
    assert s["differences"]["count"] == 0, s["differences"]
    assert tree(plain) == recorded_tree
    assert s["streams"] > s["processes"]  # this process's threads overlapped
    assert abs(s["drift"]) < 0.5

    # into another traced mount: the same tree below it, and about as many requests of each kind
    again = mount(trace=True)
    (again.source / "input").write_bytes(b"i" * 70_000)
    s = replay(m.trace, again.mountpoint)
    assert s["differences"]["count"] == 0, s["differences"]
    again.unmount()
    assert tree(again.source) == recorded_tree
    replayed = pd.read_parquet(again.trace)
    before, after = original.op.astype(str).value_counts(), replayed.op.astype(str).value_counts()
    for op, n in before.items():
        if op in ("read", "getattr", "lookup", "getxattr"):  # the target kernel's caches and readahead decide
            assert 0.5 * n <= after.get(op, 0) <= 1.5 * n, (op, n, after.get(op, 0))
        else:
            assert after.get(op, 0) == n, (op, n, after.get(op, 0))

    # into a directory without the input file: its operations differ, and say so
    empty = tmp_path / "empty"
    empty.mkdir()
    s = replay(m.trace, empty)
    kinds = {(d["op"], d["kind"]) for d in s["differences"]["by_op"]}
    assert ("open", "ENOENT, recorded ok") in kinds
    assert {d["path"] for d in s["differences"]["first"]} >= {"/input"}


def test_renameat2_flags_are_traced_and_replayed(mount, tmp_path):
    """RENAME_EXCHANGE and RENAME_NOREPLACE reach the trace's `flags` and the replay: an
    exchange replayed as a plain rename lost a name (the trace said flags 0)."""
    libc = ctypes.CDLL(None, use_errno=True)
    m = mount(trace=True)
    root = os.fsencode(m.mountpoint)
    for name, data in ((b"a", b"1"), (b"b\xff", b"22"), (b"c", b"333")):
        (Path(os.fsdecode(root)) / os.fsdecode(name)).write_bytes(data)
    assert libc.renameat2(-100, root + b"/a", -100, root + b"/b\xff", ctypes.c_uint(2)) == 0  # EXCHANGE
    assert libc.renameat2(-100, root + b"/c", -100, root + b"/d", ctypes.c_uint(1)) == 0  # NOREPLACE
    m.unmount()
    renames = pd.read_parquet(m.trace).query("op == 'rename'")
    assert sorted(zip(renames["flags"], renames["errno"])) == [(1, 0), (2, 0)]
    target = tmp_path / "again"
    target.mkdir()
    done = fusetrace_here("replay", str(m.trace), str(target), "--as-fast-as-possible", "--json")
    assert json.loads(done.stdout)["differences"]["count"] == 0
    got = {os.fsencode(p.name): p.stat().st_size for p in target.iterdir()}  # (a replay writes zeros)
    assert got == {b"a": 2, b"b\xff": 1, b"d": 3} == {os.fsencode(p.name): p.stat().st_size for p in m.source.iterdir()}
