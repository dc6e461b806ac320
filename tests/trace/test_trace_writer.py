"""TraceWriter on real files: exact round trip, timely parts, a bounded queue, private
modes, and clear errors for directories it cannot use."""

import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support import poll

from fusetrace.trace import metadata as meta
from fusetrace.trace import names, reader
from fusetrace.trace.directory import TraceDirError
from fusetrace.trace.schema import COLUMNS, RECORD_SCHEMA, SCHEMA, TraceRecord
from fusetrace.trace.writer import TraceWriter

U64, I64, U32 = 2**64 - 1, 2**63 - 1, 2**32 - 1


UNSHAPED = (None, 0, 0, 0, None)  # gate, wait_ns, latency_ns, transfer_ns, nfs of an op the model never saw
PLAIN = ("", None, 0, 0, 0, None, 0)  # comm, kind, flags, mode, entry, fault, tid left out


def row(i: int, op: str = "read", path: str = "/f", path2: str | None = None) -> tuple:
    return (1_000 + i, 10 + i, op, 2 + i, path, path2, 3, 4096 * i, 4096, 4096, 0, 100, 0, 0, 0, *UNSHAPED, *PLAIN)


def parts(d: Path) -> list[str]:
    return sorted(p.name for p in d.glob("*.parquet"))


def read_rows(d: Path) -> list[tuple]:
    """The records' own columns; every record's host is the one the metadata names."""
    table = pq.read_table(d)
    assert table.schema.remove_metadata() == SCHEMA
    assert set(table.column("host").to_pylist()) <= {meta.read(d).get("host") or ""}
    return [tuple(r[c] for c in RECORD_SCHEMA.names) for r in table.to_pylist()]


def test_records_round_trip_exactly(tmp_path):
    rows = [
        (
            0,
            0,
            "lookup",
            1,
            "/",
            None,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            *UNSHAPED,
            "ls",
            "meta_read",
            0,
            0o40755,
            U64,
            None,
            U32,
        ),
        (
            -(2**63),
            I64,
            "write",
            U64,
            "/dir/é ü 文件",
            None,
            U64,
            -(2**63),
            I64,
            -1,
            28,
            U32,
            U32,
            U32,
            I64,
            "throughput",
            I64,
            -(2**63),
            0,
            "WRITE,COMMIT",
            "dd é",
            "direct",
            0,
            0,
            0,
            "r1",
            1,
        ),
        (
            5,
            7,
            "rename",
            9,
            "/a/old",
            "/b/new",
            0,
            0,
            0,
            0,
            2,
            42,
            1000,
            1000,
            123,
            "directory",
            100,
            200,
            0,
            "RENAME",
            "mv",
            "meta_write",
            0,
            0,
            0,
            None,
            4242,
        ),
        (
            6,
            8,
            "symlink",
            10,
            "/link",
            "../target",
            0,
            0,
            0,
            0,
            0,
            1,
            2,
            3,
            0,
            "cache",
            0,
            0,
            0,
            "",
            "",
            None,
            0,
            U32,
            0,
            "stall-1",
            0,
        ),
        (
            7,
            9,
            "open",
            11,
            "/f",
            None,
            5,
            0,
            0,
            0,
            0,
            1,
            2,
            3,
            0,
            *UNSHAPED,
            "cat",
            "meta_read",
            -(2**31),
            0,
            0,
            None,
            7,
        ),
    ]
    with TraceWriter(tmp_path / "t", {"source": "/src"}) as w:
        for r in rows:
            w.record(TraceRecord(*r))
    assert read_rows(tmp_path / "t") == rows


def test_many_records_keep_their_order(tmp_path):
    d = tmp_path / "t"
    with TraceWriter(d, {}) as w:
        for i in range(10_000):  # several conversion chunks
            w.record(TraceRecord(*row(i, op=("read", "write", "getattr")[i % 3])))
    got = read_rows(d)
    assert got == [row(i, op=("read", "write", "getattr")[i % 3]) for i in range(10_000)]


def test_records_taken_while_the_loop_adds_stay_whole_and_in_order(tmp_path):
    """The writer takes records from the queue's front while the loop packs more at its end:
    switching threads as often as the interpreter will, every record comes back whole, in
    the order given, however the takes fell."""
    d = tmp_path / "t"
    n = 60_000
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with TraceWriter(d, {}, flush_interval=0.001) as w:
            for i in range(n):
                w.record(TraceRecord(*row(i, path=f"/f{i}")))
    finally:
        sys.setswitchinterval(interval)
    assert (w.records, w.dropped, w.lost, w.write_errors) == (n, 0, 0, 0)
    assert w.files > 2  # taken in several goes, while records were being added (merged at close)
    assert read_rows(d) == [row(i, path=f"/f{i}") for i in range(n)]


def test_a_field_its_column_cannot_hold_drops_that_record_alone(tmp_path, caplog):
    d = tmp_path / "t"
    with TraceWriter(d, {}) as w:
        w.record(TraceRecord(*row(0)))
        w.record(TraceRecord(*row(1))._replace(inode=-1))  # inode is unsigned
        w.record(TraceRecord(*row(2))._replace(size=None))  # type: ignore[arg-type]
        w.record(TraceRecord(*row(3)))
        w.record(TraceRecord(*row(4))._replace(size=None))  # type: ignore[arg-type]
    assert w.dropped == 3 and w.records == 2
    assert read_rows(d) == [row(0), row(3)]
    # said once per kind of fault, not once per record: a bug must not flood the log
    assert sum("a read record was dropped" in r.getMessage() for r in caplog.records) == 2


# Every byte value but NUL and '/', in names of at most 255 bytes, and names that only look
# like what the format 5 writer made of such bytes (a real backslash), or of what format 6
# makes of them (a real U+FFFD).
ALL_BYTES = bytes(b for b in range(1, 256) if b != ord("/"))
NAMES = [
    b"/d/" + ALL_BYTES[:127],
    b"/d/" + ALL_BYTES[127:],
    b"/" + b"n" * 254 + b"\xff",
    b"/caf\xe9",
    b"/caf\\xe9",
    "/caf\ufffd".encode(),
    b"/\xed\xb2\x80",
    b"/\xe2\x82",
    b"/ok",
]


def test_names_that_are_not_utf8_keep_their_bytes(tmp_path):
    """The text of a name that is not UTF-8 has U+FFFD for those bytes, never \\xNN, and
    its bytes are in path_raw (path2_raw for a second name); a UTF-8 name, backslash and
    U+FFFD included, has null there.  The reader gives every name back exactly."""
    given = [os.fsdecode(n) for n in NAMES]
    with TraceWriter(tmp_path / "t", {}) as w:
        for i, name in enumerate(given):
            w.record(TraceRecord(*row(i, "rename", path=name, path2=given[-1 - i])))
        w.record(TraceRecord(*row(len(given), path="/plain")))
    table = pq.read_table(tmp_path / "t").sort_by("start_ns")
    assert table.schema.remove_metadata() == SCHEMA
    text, raw = table.column("path").to_pylist(), table.column("path_raw").to_pylist()
    utf8 = {b"/caf\\xe9", "/caf\ufffd".encode(), b"/ok"}
    assert raw == [None if n in utf8 else n for n in NAMES] + [None]
    assert table.column("path2_raw").to_pylist() == [None if n in utf8 else n for n in reversed(NAMES)] + [None]
    assert text[2] == "/" + "n" * 254 + "\ufffd" and text[3] == "/caf\ufffd" == text[5] and text[4] == "/caf\\xe9"
    assert not any("\\x" in t for t, r in zip(text, raw) if r is not None)
    assert all(t.encode("utf-8") == n for t, n in zip(text, NAMES) if n in utf8)
    batches = list(reader.ordered_batches(str(tmp_path / "t"), names.with_raw(["path", "path2"])))
    got = [r for b in batches for r in names.rows(b, ["path", "path2"])]
    assert [os.fsencode(p) for p, _ in got] == [*NAMES, b"/plain"]
    assert [os.fsencode(p2) for _, p2 in got[:-1]] == NAMES[::-1] and got[-1][1] is None


def test_a_trace_without_the_raw_columns_reads_as_before(tmp_path):
    """A format 5 part (no path_raw, path2_raw): its names read as their text."""
    with TraceWriter(tmp_path / "t", {}) as w:
        w.record(TraceRecord(*row(0, path="/a\\xff")))
    part = next((tmp_path / "t").glob("*.parquet"))
    pq.write_table(pq.read_table(part).drop_columns(["path_raw", "path2_raw"]), part)
    (batch,) = reader.ordered_batches(str(tmp_path / "t"))
    assert batch.column("path_raw").to_pylist() == [None]
    assert list(names.rows(batch, ["path", "path2"])) == [("/a\\xff", None)]


def test_a_part_appears_within_about_a_second(tmp_path):
    d = tmp_path / "t"
    w = TraceWriter(d, {})
    try:
        w.record(TraceRecord(*row(0)))
        poll(lambda: parts(d), timeout=5)
        assert read_rows(d) == [row(0)]
        w.record(TraceRecord(*row(1)))
        poll(lambda: len(parts(d)) == 2, timeout=5)
    finally:
        w.close()
    assert sorted(os.listdir(d)) == [meta.NAME, "part-000000-000001.parquet"]  # merged at close
    assert read_rows(d) == [row(0), row(1)]


def test_nothing_to_write_writes_no_part(tmp_path):
    d = tmp_path / "t"
    w = TraceWriter(d, {}, flush_interval=0.01)
    summary = w.close()
    assert os.listdir(d) == [meta.NAME]
    assert summary["files"] == 0 and meta.read(d)["files"] == 0


def test_overflow_drops_and_counts_without_blocking(tmp_path):
    d = tmp_path / "t"
    w = TraceWriter(d, {}, flush_interval=3600, max_pending=10)
    for i in range(25):
        w.record(TraceRecord(*row(i)))
    assert w.dropped == 15
    assert (w.queued, w.recorded, w.records) == (10, 10, 0)  # waiting for the next flush
    started = time.monotonic()
    for i in range(100_000):
        w.record(TraceRecord(*row(i)))
    assert time.monotonic() - started < 5
    assert w.dropped == 100_015
    summary = w.close()
    assert summary["records"] == 10 and summary["dropped"] == 100_015
    assert (w.queued, w.recorded) == (0, 10)
    assert read_rows(d) == [row(i) for i in range(10)]  # the first ones are kept
    assert meta.read(d)["dropped"] == 100_015


def test_files_are_private_whatever_the_umask(tmp_path):
    d = tmp_path / "t"
    old = os.umask(0)
    try:
        with TraceWriter(d, {}) as w:
            w.record(TraceRecord(*row(0)))
    finally:
        os.umask(old)
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    for name in os.listdir(d):
        assert stat.S_IMODE((d / name).stat().st_mode) == 0o600, name


def test_metadata_at_start_and_close(tmp_path):
    d = tmp_path / "t"
    given = {"source": "/mnt/efs", "mountpoint": "/mnt/t", "host": "h", "options": {"threads": 4}}
    w = TraceWriter(d, given)
    start = meta.read(d)
    assert start["source"] == "/mnt/efs" and start["options"] == {"threads": 4}
    assert start["format_version"] == meta.FORMAT_VERSION
    assert abs(start["start_wall_ns"] - time.time_ns()) < 60e9
    assert abs(start["start_monotonic_ns"] - time.monotonic_ns()) < 60e9
    assert "end_wall_ns" not in start
    w.record(TraceRecord(*row(0)))
    w.close()
    end = meta.read(d)
    assert end["end_wall_ns"] >= start["start_wall_ns"]
    assert (end["records"], end["dropped"], end["files"], end["write_errors"]) == (1, 0, 1, 0)
    assert meta.to_wall_ns(end, end["start_monotonic_ns"] + 5) == end["start_wall_ns"] + 5


def test_caller_may_give_the_clock_pair(tmp_path):
    w = TraceWriter(tmp_path / "t", {"start_wall_ns": 10, "start_monotonic_ns": 20})
    w.close()
    m = meta.read(tmp_path / "t")
    assert (m["start_wall_ns"], m["start_monotonic_ns"]) == (10, 20)


def test_update_metadata_lands_on_the_next_flush(tmp_path):
    d = tmp_path / "t"
    w = TraceWriter(d, {}, flush_interval=0.05)
    w.update_metadata(metrics={"BurstCreditBalance": 123})
    poll(lambda: meta.read(d).get("metrics"), timeout=5)
    w.update_metadata(profile="efs-bursting")
    w.close()
    m = meta.read(d)
    assert m["metrics"] == {"BurstCreditBalance": 123} and m["profile"] == "efs-bursting"


def test_close_is_idempotent_and_later_records_are_not_queued(tmp_path):
    d = tmp_path / "t"
    w = TraceWriter(d, {})
    w.record(TraceRecord(*row(0)))
    first = w.close()
    w.record(TraceRecord(*row(1)))
    assert w.close() == first
    assert w.dropped == 1 and w.queued == 0
    assert read_rows(d) == [row(0)]


def test_write_errors_are_counted_not_raised(tmp_path):
    d = tmp_path / "t"
    w = TraceWriter(d, {}, flush_interval=0.01)
    shutil.rmtree(d)
    w.record(TraceRecord(*row(0)))
    poll(lambda: w.write_errors, timeout=5)
    summary = w.close()
    assert summary["lost"] == 1 and summary["records"] == 0
    assert "No such file or directory" in summary["last_error"]


def _one_line(exc: TraceDirError, *needles: str) -> None:
    text = str(exc)
    assert "\n" not in text
    for needle in needles:
        assert needle in text, text


def test_directory_below_a_file(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(TraceDirError) as err:
        TraceWriter(tmp_path / "afile" / "sub" / "t", {})
    _one_line(err.value, str(tmp_path / "afile" / "sub" / "t"), f"{tmp_path / 'afile'} is not a directory")


def test_directory_that_is_a_file(tmp_path):
    (tmp_path / "t").write_text("x")
    with pytest.raises(TraceDirError) as err:
        TraceWriter(tmp_path / "t", {})
    _one_line(err.value, str(tmp_path / "t"), "not a directory")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere; see the read-only test")
def test_directory_without_write_permission(tmp_path):
    d = tmp_path / "t"
    d.mkdir(mode=0o500)
    with pytest.raises(TraceDirError) as err:
        TraceWriter(d, {})
    _one_line(err.value, str(d), "permission denied")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs a mount namespace")
def test_read_only_file_system(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    probe = (
        "import sys\nfrom fusetrace.trace.directory import TraceDirError\nfrom fusetrace.trace.writer import TraceWriter\n"
        "for d in sys.argv[1:]:\n"
        "    try:\n        TraceWriter(d, {})\n    except TraceDirError as e:\n        print(e)\n"
    )
    script = f'mount -t tmpfs -o ro none "$1" && shift && exec {sys.executable} -c "$0" "$@"'
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script, probe, str(ro), str(ro), str(ro / "sub")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"trace directory {ro}: read-only file system",
        f"trace directory {ro / 'sub'}: read-only file system",
    ]


def test_refuses_a_directory_holding_another_trace(tmp_path):
    d = tmp_path / "t"
    with TraceWriter(d, {}) as w:
        w.record(TraceRecord(*row(0)))
    with pytest.raises(TraceDirError) as err:
        TraceWriter(d, {})
    _one_line(err.value, str(d), "already holds a trace (1 parts)")
    assert parts(d) == ["part-000000.parquet"]


def test_refuses_a_directory_with_other_files_but_not_hidden_ones(tmp_path):
    d = tmp_path / "t"
    d.mkdir()
    (d / ".keep").write_text("")
    TraceWriter(d, {}).close()
    other = tmp_path / "u"
    other.mkdir()
    (other / "notes.txt").write_text("x")
    with pytest.raises(TraceDirError) as err:
        TraceWriter(other, {})
    _one_line(err.value, str(other), "not empty", "notes.txt")


def test_the_record_type_is_the_schema_field_for_field():
    assert list(TraceRecord._fields) == RECORD_SCHEMA.names
    # the writer adds the trace's host to every record, the bytes of names that are not UTF-8,
    # the wall-clock time and the sampling factor
    assert [*TraceRecord._fields, "host", "path_raw", "path2_raw", "time", "sample"] == COLUMNS


def test_every_record_names_the_traces_host(tmp_path):
    with TraceWriter(tmp_path / "t", {"host": "web-1.example"}, flush_interval=0.01) as w:
        for i in range(3):
            w.record(TraceRecord(*row(i)))
        poll(lambda: w.files, timeout=5)  # a second part, so the column is checked across parts
        w.record(TraceRecord(*row(3)))
    table = pq.read_table(tmp_path / "t")
    assert table.column("host").to_pylist() == ["web-1.example"] * 4
    assert table.schema.field("host").type == pa.dictionary(pa.int32(), pa.string())
    assert read_rows(tmp_path / "t") == [row(i) for i in range(4)]


def test_a_record_left_without_the_models_account_is_unshaped(tmp_path):
    short = row(0)[: -len(UNSHAPED)]  # as trace-only callers make it
    assert TraceRecord(*short) == row(0)
    with TraceWriter(tmp_path / "t", {}) as w:
        w.record(TraceRecord(*short))
    assert read_rows(tmp_path / "t") == [row(0)]
