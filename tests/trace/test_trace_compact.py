"""Fewer, larger part files: merged as the mount runs and at close, by `fusetrace compact`,
safely through a SIGKILL mid-merge; and the trace's size and age limits."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import ROOT, fusetrace, fusetrace_here, is_mounted, one_line_error, poll, stats_json, unshared

from fusetrace.trace import compact, reader
from fusetrace.trace import metadata as meta
from fusetrace.trace.limits import Limits, parse_age, parse_size
from fusetrace.trace.schema import TraceRecord
from fusetrace.trace.writer import TraceWriter


def record(i: int, start_ns: int | None = None, path: str = "/f") -> TraceRecord:
    start = 1_000 + i if start_ns is None else start_ns
    return TraceRecord(start, 1, "getattr", 1, path, None, i, 0, 0, 0, 0, 0, 0, 0, 0)


def _busy_writer(d: Path) -> subprocess.Popen:
    """A process writing a trace into `d` as fast as it can (tests/support/busy_writer.py)."""
    return subprocess.Popen(
        [sys.executable, "-m", "support.busy_writer", str(d)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "tests")},
    )


def parquet(d: Path) -> list[str]:
    return sorted(p.name for p in d.glob("*.parquet"))


def ids(d: Path) -> list[int]:
    """The records' fh (each record's own number), as fusetrace's reader reads the trace."""
    files = reader.checked_parts(str(d))
    return sorted(r[0] for r in duckdb.sql(f"select fh from read_parquet({files!r})").fetchall())


@given(st.lists(st.integers(1, 40), min_size=1, max_size=12), st.data())
def test_leftovers_are_exactly_the_inputs_a_merged_file_holds(widths, data):
    """Files of adjacent ranges (merged or not), plus any of the merged ones' inputs that a
    crash left: leftovers() names exactly those inputs."""
    names, inputs, first = [], set(), 0
    for w in widths:
        last = first + w - 1
        names.append(compact.part_name(first, last))
        if w > 1:
            left = data.draw(st.sets(st.integers(first, last), max_size=w))
            inputs |= {compact.part_name(i, i) for i in left}
        first = last + 1
    assert compact.leftovers(names + sorted(inputs)) == inputs


def test_size_and_age_parse_and_refuse():
    assert parse_size("10G") == 10 << 30 and parse_size("500M") == 500 << 20 and parse_size("1.5MiB") == 3 << 19
    assert parse_age("7d") == 7 * 86400 * 10**9 and parse_age("12h") == 12 * 3600 * 10**9
    for bad in ("10X", "", "-1G", "1K", "2000E"):
        with pytest.raises(ValueError):
            parse_size(bad)
    for bad in ("7", "5s", "1y", "-1d"):
        with pytest.raises(ValueError):
            parse_age(bad)


@pytest.mark.slow
def test_a_traced_mount_ends_with_few_files_and_every_record_once(mount):
    """Twenty stats of missing names, each in a part of its own (waited for): the writer
    merges while the mount runs and at umount; the trace then is one file, each lookup once."""
    m = mount("--negative-timeout", "0", trace=True)
    n = 20  # more than the 16 parts a merge takes
    for i in range(n):
        try:
            os.stat(m.mountpoint / f"missing-{i}")
        except FileNotFoundError:
            pass
        poll(lambda: f"missing-{i}" in _paths(m.trace), timeout=10)  # noqa: B023 (polled at once)
    live = meta.read(m.trace)
    assert live.get("merges", 0) >= 1  # merged while the mount ran
    m.unmount()
    assert parquet(m.trace) == [compact.part_name(0, meta.read(m.trace)["files"] - 1)]
    df = pq.read_table(m.trace).to_pandas()  # as pandas reads the directory, no fusetrace code
    mine = df[(df.pid == os.getpid()) & (df.op == "lookup") & df.path.str.startswith("/missing-")]
    assert sorted(mine.path) == sorted(f"/missing-{i}" for i in range(n))
    assert len(df) == meta.read(m.trace)["records"] == reader.record_count(str(m.trace))


def _paths(trace: Path) -> str:
    """Every path the trace's parts hold so far, joined (a part may be merged away meanwhile)."""
    try:
        [(paths,)] = duckdb.sql(f"select string_agg(path, ' ') from '{trace}/*.parquet'").fetchall()
        return paths or ""
    except duckdb.Error:
        return ""


def test_a_server_killed_mid_merge_loses_at_most_a_second_and_duplicates_nothing(tmp_path):
    """A writer process is SIGKILLed the moment a merge's hidden file is seen, five times:
    fusetrace's reader then reads records 0 to k-1 exactly once each, the last of them
    added within a second of the kill; after `fusetrace compact`, so does pyarrow."""
    cut_mid_merge = 0
    for round_ in range(5):
        d = tmp_path / f"t{round_}"
        child = _busy_writer(d)
        try:
            assert child.stdout is not None and child.stdout.readline() == "writing\n"
            deadline = time.monotonic() + 30
            while not any(compact.numbers(n[1:-4]) for n in os.listdir(d) if n.startswith(".part-") and "-0" in n[6:]):
                assert time.monotonic() < deadline, "no merge seen within 30 s"
            killed_ns = time.monotonic_ns()
            child.send_signal(signal.SIGKILL)
        finally:
            child.kill()
            child.wait()
        cut_mid_merge += any(n.startswith(".part-") and n.count("-") == 2 for n in os.listdir(d))
        got = ids(d)
        assert got == list(range(len(got))), "a record twice, or one missing before the last"
        files = reader.checked_parts(str(d))
        [(last_ns,)] = duckdb.sql(f"select max(start_ns) from read_parquet({files!r})").fetchall()
        assert killed_ns - last_ns < 1.5e9, (killed_ns - last_ns) / 1e9  # a second, and a loaded host's scheduling
        fusetrace_here("compact", str(d))
        assert sorted(pq.read_table(d).column("fh").to_pylist()) == got
        assert not [n for n in os.listdir(d) if n.startswith(".part-")]
    assert cut_mid_merge >= 1  # at least one kill fell inside a merge, its hidden file left behind


STATS = """
import os, sys
for i in range(10**9):
    try:
        os.stat(f"{sys.argv[1]}/missing-{i}")
    except FileNotFoundError:
        pass
"""


@pytest.mark.slow
def test_a_mount_killed_mid_merge_keeps_each_operation_once_but_its_last_second(mount):
    """A traced mount's server is SIGKILLed the moment a merge's hidden file appears, a
    process stat'ing missing-0, missing-1, ... through it: the trace holds the lookups of
    missing-0 to missing-(k-1), each once, the last within a second or so of the kill."""
    m = mount("--negative-timeout", "0", trace=True)
    server = m.server_pid()
    child = subprocess.Popen([sys.executable, "-c", STATS, str(m.mountpoint)], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not any(n.startswith(".part-") and n.count("-") == 2 for n in os.listdir(m.trace)):
            assert time.monotonic() < deadline, "no merge seen within 120 s"
        killed_ns = time.monotonic_ns()
        os.kill(server, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    poll(lambda: not os.path.exists(f"/proc/{server}"), timeout=30)
    files = reader.checked_parts(str(m.trace))
    rows = duckdb.sql(
        f"select path, start_ns from read_parquet({files!r}) where op = 'lookup' and path like '/missing-%'"
    ).fetchall()
    got = sorted(int(p.removeprefix("/missing-")) for p, _ in rows)
    assert got and got == list(range(len(got))), "an operation twice, or one missing before the last"
    assert killed_ns - max(t for _, t in rows) < 1.5e9  # a second, and a loaded host's scheduling


READ_ONCE = """
import sys, duckdb
from fusetrace.trace import reader
files = reader.checked_parts(sys.argv[1])
got = sorted(r[0] for r in duckdb.sql(f"select fh from read_parquet({files!r})").fetchall())
print(got == list(range(len(got))), len(got), len(files))
"""


@pytest.mark.slow
def test_fusetraces_reader_reads_a_trace_being_merged_exactly(tmp_path):
    """Readers in processes of their own, one after another, while a writer writes and
    merges parts all the time: each reads records 0 to k-1 once each, k growing."""
    d = tmp_path / "t"
    child = _busy_writer(d)
    try:
        assert child.stdout is not None and child.stdout.readline() == "writing\n"
        counts = []
        for _ in range(8):
            done = subprocess.run([sys.executable, "-c", READ_ONCE, str(d)], capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            exact, n, _files = done.stdout.split()
            assert exact == "True"
            counts.append(int(n))
        merges = meta.read(d).get("merges", 0)
    finally:
        child.kill()
        child.wait()
    assert counts == sorted(counts) and counts[-1] > counts[0] and merges > 0


def _old_trace(d: Path, n: int, parts: int) -> pa.Table:
    """A trace as fusetrace wrote before merging: `parts` part files of `n` records."""
    with TraceWriter(d, {"host": "h"}, flush_interval=60) as w:
        for i in range(n):
            w.record(record(i, path=f"/dir/{i % 7}/file-{i}"))
    [whole] = parquet(d)
    table = pq.read_table(d / whole)
    os.unlink(d / whole)
    step = -(-n // parts)
    for k in range(parts):
        pq.write_table(table.slice(k * step, step), d / compact.part_name(k, k), compression="zstd")
    return table


def test_compact_merges_an_old_trace_keeping_every_record(tmp_path):
    d = tmp_path / "old"
    table = _old_trace(d, 5_000, 250)
    assert len(parquet(d)) == 250
    done = fusetrace_here("compact", str(d))
    assert done.stdout.startswith(f"{d}: 250 part files now 1 file, 5,000 records")
    assert parquet(d) == ["part-000000-000249.parquet"]
    after = pq.read_table(d).select(table.schema.names)
    assert after.sort_by("fh").equals(table.sort_by("fh"))
    assert fusetrace_here("compact", str(d)).stdout.startswith(f"{d}: 1 part file now 1 file")  # again: nothing to do


def test_a_merge_cut_after_its_rename_reads_once(tmp_path):
    """A crash between a merge's rename and its unlinks leaves inputs beside the merged
    file: fusetrace's reader skips them, compact removes them."""
    d = tmp_path / "t"
    _old_trace(d, 300, 3)
    kept = {n: (d / n).read_bytes() for n in parquet(d)}
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        compact.merge(fd, [compact.describe(n, fd) for n in sorted(kept)])
    finally:
        os.close(fd)
    (d / "part-000001.parquet").write_bytes(kept["part-000001.parquet"])  # as if never unlinked
    assert ids(d) == list(range(300))
    assert "1 leftover of an interrupted merge removed" in fusetrace_here("compact", str(d)).stdout
    assert parquet(d) == ["part-000000-000002.parquet"]


def test_compact_refuses_a_live_trace_a_damaged_part_and_no_trace(tmp_path, mount):
    m = mount(trace=True)
    os.listdir(m.mountpoint)
    poll(lambda: parquet(m.trace))
    one_line_error(fusetrace_here("compact", str(m.trace), check=False), "running fusetrace server (pid", code=2)

    d = tmp_path / "damaged"
    _old_trace(d, 100, 10)
    (d / "part-000004.parquet").write_bytes(b"PAR1 not parquet PAR1")
    before = parquet(d)
    one_line_error(
        fusetrace_here("compact", str(d), check=False), "part-000004.parquet: not a readable trace part", code=2
    )
    assert parquet(d) == before

    empty = tmp_path / "empty"
    empty.mkdir(mode=0o700)
    one_line_error(fusetrace_here("compact", str(empty), check=False), "not a trace directory", code=2)
    one_line_error(fusetrace_here("compact", str(tmp_path / "none"), check=False), "no such trace directory", code=2)
    (empty / "data.parquet").write_bytes(b"")
    one_line_error(fusetrace_here("compact", str(empty), check=False), "data.parquet", "not a trace", code=2)


def _fill(mnt: Path, files: int, first: int = 0) -> None:
    """Make `files` files with long random names (which compress badly: a trace of bytes),
    numbered from `first`."""
    rnd = random.Random(first)
    for i in range(first, first + files):
        name = f"{i:06d}-" + "".join(rnd.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=240))
        (mnt / name).touch()


def _parts_bytes(d: Path) -> int:
    total = 0
    for p in d.glob("*.parquet"):
        try:
            total += p.stat().st_size
        except FileNotFoundError:  # merged or rotated away meanwhile
            pass
    return total


@pytest.mark.slow
def test_trace_max_rotates_the_oldest_out_and_stays_under_it(mount):
    m = mount("-o", "trace_max=256K", trace=True)
    _fill(m.mountpoint, 1_500)
    m.unmount()
    data = meta.read(m.trace)
    assert data["trace_max"] == 256 << 10 and data["trace_full"] == "rotate"
    assert _parts_bytes(m.trace) <= 256 << 10
    assert data["rotated"] > 0 and data["records"] - data["rotated"] == reader.record_count(str(m.trace))
    paths = set(pq.read_table(m.trace, columns=["path"]).column("path").to_pylist())
    assert not any(p.startswith("/000000-") for p in paths)  # the oldest went
    assert any(p.startswith("/001499-") for p in paths)  # the newest stayed
    assert [r for r in paths if r.startswith("/")]
    first = data["first_start_ns"]
    assert first == pq.read_table(m.trace, columns=["start_ns"]).column("start_ns").to_pandas().min()
    report = fusetrace_here("report", str(m.trace)).stdout
    [line] = [line for line in report.splitlines() if line.startswith("rotated")]
    assert f"{data['rotated']:,} records: the trace's first parts were rotated out" in line


@pytest.mark.slow
def test_trace_max_with_stop_stops_recording_and_counts_it(mount):
    m = mount("--trace-max", "256K", "--trace-full", "stop", trace=True)
    # a part at a time (the limit keeps whole parts: one 0.5 s flush of a quick host's 1,500
    # files alone passes 256K, and with it the trace would keep nothing)
    for first in range(0, 1_500, 100):
        _fill(m.mountpoint, 100, first)
        poll(lambda: stats_json(m.mountpoint)["trace"]["queued"] == 0)
    m.unmount()
    data = meta.read(m.trace)
    assert data["trace_full"] == "stop" and data["stopped"] > 0 and "stopped_at_ns" in data
    assert _parts_bytes(m.trace) <= 256 << 10
    assert reader.record_count(str(m.trace)) == data["records"]
    paths = set(pq.read_table(m.trace, columns=["path"]).column("path").to_pylist())
    assert any(p.startswith("/000000-") for p in paths) and not any(p.startswith("/001499-") for p in paths)
    report = fusetrace_here("report", str(m.trace)).stdout
    assert f"stopped     {data['stopped']:,} records not recorded" in report


def test_an_age_limit_rotates_out_the_parts_older_than_it(tmp_path):
    """Records an hour old (their start_ns set back: accelerated time) go at the next
    flush under a 30-minute limit; those of now stay."""
    d = tmp_path / "t"
    now = time.monotonic_ns()
    with TraceWriter(d, {}, flush_interval=0.01, limits=Limits(max_age_ns=1800 * 10**9)) as w:
        for i in range(100):
            w.record(record(i, start_ns=now - 3600 * 10**9))
        poll(lambda: w.files >= 1)
        for i in range(100, 150):
            w.record(record(i, start_ns=now))
        poll(lambda: w.files >= 2)
    assert ids(d) == list(range(100, 150))
    data = meta.read(d)
    assert data["rotated"] == 100 and data["first_start_ns"] == now and data["trace_max_age_s"] == 1800


@pytest.mark.parametrize(
    "options, needle",
    [
        (["--trace-max", "10X"], "--trace-max: '10X': not a size"),
        (["-o", "trace_max=100K"], "under the least, 256K"),
        (["--trace-max-age", "5s"], "--trace-max-age: '5s': under the least"),
        (["--trace-max-age", "7y"], "not an age"),
        (["--trace-full", "stop"], "--trace-full stop: says what happens at --trace-max"),
        (["--trace-full", "drop", "--trace-max", "1G"], "invalid choice: 'drop'"),
    ],
)
def test_bad_limits_exit_2_with_one_line_and_no_mount(tmp_path, options, needle):
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    done = fusetrace("mount", str(src), str(mnt), "--trace", str(tmp_path / "t"), *options, check=False)
    one_line_error(done, needle, code=2)
    assert not is_mounted(mnt)
    done = fusetrace("mount", str(src), str(mnt), "--trace-max", "1G", check=False)
    one_line_error(done, "--trace-max: limits the trace; give --trace DIR with it", code=2)


_LOW_DISK = """
import os, random, sys
sys.path.insert(0, sys.argv[3])
from test_trace_compact import record
from fusetrace.trace import metadata as meta
from fusetrace.trace.limits import Limits
from fusetrace.trace.writer import TraceWriter
root, full = sys.argv[1], sys.argv[2]
st = os.statvfs(root)
floor = st.f_blocks * st.f_frsize // 20
with open(os.path.join(root, "filler"), "wb") as f:  # leave the floor and 1 MiB free
    f.write(bytes(st.f_bavail * st.f_frsize - floor - (1 << 20)))
rng = random.Random(7)
with TraceWriter(os.path.join(root, "t"), {}, flush_interval=0.01, limits=Limits(full=full)) as w:
    for i in range(40_000):  # about 4 MiB of parts: four times the room
        w.record(record(i, path=f"/{i:06d}-" + rng.randbytes(48).hex()))
        if i % 2_000 == 0:
            while w.queued:
                pass
st = os.statvfs(root)
data = meta.read(os.path.join(root, "t"))
print(st.f_bavail * st.f_frsize >= floor, data.get("rotated", 0), data.get("stopped", 0), data["records"])
"""


@pytest.mark.parametrize("full", ["rotate", "stop"])
def test_no_limit_given_still_never_takes_the_disks_last_space(tmp_path, full):
    """On a 32 MiB file system with 1 MiB above its floor (a twentieth), a trace of four
    times that with no --trace-max rotates its oldest parts out (or stops) and leaves the
    floor free, counting what went."""
    root = tmp_path / "small"
    root.mkdir()
    script = f'mount -t tmpfs -o size=32M none "$1" && exec {sys.executable} -c "$0" "$@"'
    done = subprocess.run(
        unshared(script, _LOW_DISK, str(root), full, str(Path(__file__).parent)),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT / "tests")},
    )
    assert done.returncode == 0, done.stderr
    kept_floor, rotated, stopped, records = done.stdout.split()
    assert kept_floor == "True"
    assert int(rotated if full == "rotate" else stopped) > 0 and int(records) > 0
    assert "rather than fill it" in done.stderr
