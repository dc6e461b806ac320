"""A hint is added in one place, fusetrace/report/hints.py's RULES: each registered rule
has named thresholds, a row in docs/REPORT.md, and a trace here that fires it and one just
short of its threshold that does not (a rule without such a pair fails here).  And the
report's queries take any trace directory and filter value as data: quotes, backslashes
and bytes that are not UTF-8."""

import json
import math
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from fusetrace import cli
from fusetrace.report import hints
from fusetrace.report.filters import Filters
from fusetrace.report.query import Trace
from fusetrace.trace import metadata as meta
from fusetrace.trace.schema import TraceRecord
from fusetrace.trace.writer import TraceWriter

REPO = Path(__file__).resolve().parents[2]
T0 = 1_000_000_000
ENODATA, ENOENT = 61, 2
N = 100  # records of a share rule's trace


def write(directory: Path, rows: list[tuple], metadata: dict | None = None) -> Path:
    """A trace of `rows` (op, errno, path, entry), one process, through a real TraceWriter."""
    base = {"source": "/mnt/efs", "mountpoint": "/mnt/t", "host": "box"}
    with TraceWriter(directory, {**base, **(metadata or {})}, flush_interval=3600) as w:
        for i, (op, err, path, entry) in enumerate(rows):
            path2 = "user.x" if op == "getxattr" else None
            w.record(
                TraceRecord(
                    T0 + i * 1000, 500, op, 2, path, path2, 0, 0, 0, 0, err, 7, 0, 0, 0, comm="app", entry=entry
                )
            )
    return directory


def share(op: str, err: int, k: int, metadata: dict | None = None) -> Callable[[Path], Path]:
    """A trace of N records, `k` of them `op` answering `err`, the rest reads."""
    rows = [(op, err, "/d/f", 0)] * k + [("read", 0, "/d/f", 0)] * (N - k)
    return lambda d: write(d, rows, metadata)


def waste(xattrs: int, lookups: int, metadata: dict | None = None) -> Callable[[Path], Path]:
    """A trace of N records: `xattrs` getxattr misses, `lookups` failed lookups, the rest reads."""
    rows = [("getxattr", ENODATA, "/d/f", 0)] * xattrs + [("lookup", ENOENT, "/d/g", 0)] * lookups
    return lambda d: write(d, rows + [("read", 0, "/d/f", 0)] * (N - xattrs - lookups), metadata)


def syncs(n: int) -> Callable[[Path], Path]:
    """`n` fsyncs, each after FSYNC_HINT_WRITES writes to the file it syncs."""
    rows = [("write", 0, "/d/db", 0)] * (hints.FSYNC_HINT_WRITES * n) + [("fsync", 0, "/d/db", 0)] * n
    return lambda d: write(d, rows)


def missing(n: int) -> Callable[[Path], Path]:
    def make(d: Path) -> Path:
        write(d, [("read", 0, "/d/f", 0)])
        meta.write(str(d), {**meta.read(str(d)), "dropped": n, "lost": 0})
        return d

    return make


def least(share: float) -> int:
    """The fewest of N records that reach `share`."""
    return math.ceil(share * N)


# {rule name: (a trace that fires it, one just short of it)}
CASES: dict[str, tuple[Callable[[Path], Path], Callable[[Path], Path]]] = {
    "xattr-misses": (
        share("getxattr", ENODATA, least(hints.XATTR_MISS_SHARE)),
        share("getxattr", ENODATA, least(hints.XATTR_MISS_SHARE) - 1),
    ),
    "failed-lookups": (
        share("lookup", ENOENT, least(hints.FAILED_LOOKUP_SHARE)),
        share("lookup", ENOENT, least(hints.FAILED_LOOKUP_SHARE) - 1),
    ),
    "wasted-round-trips": (
        waste(least(hints.WASTE_SHARE) // 2, least(hints.WASTE_SHARE) - least(hints.WASTE_SHARE) // 2),
        waste(least(hints.WASTE_SHARE) // 2, least(hints.WASTE_SHARE) - least(hints.WASTE_SHARE) // 2 - 1),
    ),
    "fsync-per-write": (syncs(hints.FSYNC_HINT_COUNT), syncs(hints.FSYNC_HINT_COUNT - 1)),
    "removed-while-open": (
        lambda d: write(d, [("unlink", 0, "/d/f", 5)] * hints.REMOVED_WHILE_OPEN_COUNT),
        lambda d: write(d, [("unlink", 0, "/d/f", 0)]),
    ),
    "attr-timeout-0": (
        share("getattr", 0, least(hints.ATTR_TIMEOUT_0_SHARE), {"options": {"attr_timeout": 0}}),
        share("getattr", 0, least(hints.ATTR_TIMEOUT_0_SHARE) - 1, {"options": {"attr_timeout": 0}}),
    ),
    "missing-records": (missing(hints.MISSING_RECORDS_COUNT), missing(hints.MISSING_RECORDS_COUNT - 1)),
}


def test_every_rule_is_registered_once_with_a_case_here():
    names = [r.name for r in hints.RULES]
    assert len(names) == len(set(names))
    assert set(names) == set(CASES), "a hint rule needs a (fires, silent) pair in CASES"


@pytest.mark.parametrize("rule", hints.RULES, ids=lambda r: r.name)
def test_rule_has_named_thresholds_and_a_row_in_the_docs(rule):
    assert rule.thresholds, f"{rule.name}: no threshold named"
    for name in rule.thresholds:
        assert name.isupper() and isinstance(getattr(hints, name, None), int | float), name
    table = (REPO / "docs" / "REPORT.md").read_text().split("## Hints", 1)[1].split("\n## ", 1)[0]
    assert f"| `{rule.name}` |" in table, f"{rule.name}: no row in docs/REPORT.md's hint table"


@pytest.mark.parametrize("rule", hints.RULES, ids=lambda r: r.name)
def test_rule_fires_at_its_threshold_and_not_below(rule, tmp_path):
    fires, silent = CASES[rule.name]
    assert [h["hint"] for h in Trace(fires(tmp_path / "fires")).hints()] == [rule.name]
    assert [h["hint"] for h in Trace(silent(tmp_path / "silent")).hints()] == []


def test_waste_together_fires_where_neither_part_does(tmp_path):
    """14 % extended-attribute misses and 10 % failed lookups: each under its own 20 %, a
    quarter of the round trips together; 2 % and 2 % are not worth a line."""
    [hint] = Trace(waste(14, 10)(tmp_path / "t")).hints()
    assert hint["hint"] == "wasted-round-trips" and (hint["xattr_misses"], hint["failed_lookups"]) == (14, 10)
    assert hint["share"] == pytest.approx(0.24) and hint["time_share"] == pytest.approx(0.24)
    assert "extended-attribute misses 14.0 %" in hint["text"] and "--no-xattrs" in hint["text"]
    assert "failed lookups 10.0 % (most in /d: 10)" in hint["text"]
    assert Trace(waste(2, 2)(tmp_path / "u")).hints() == []
    # a part at its own share has its own hint, and this one says nothing more
    assert [h["hint"] for h in Trace(waste(20, 10)(tmp_path / "v")).hints()] == ["xattr-misses"]


def test_waste_fires_by_its_share_of_time_with_fuse_round_trip(tmp_path):
    """Few records, but slow ones (as a LOOKUP the server answers, beside reads from the
    page cache): 10 % of the records take 28.8 % of the time, FUSE's round trip included."""
    rows = [("getxattr", ENODATA, 300_000)] * 5 + [("lookup", ENOENT, 300_000)] * 5 + [("read", 0, 10_000)] * 90
    with TraceWriter(tmp_path / "t", {"host": "box", "fuse_round_trip_ns": 100_000}, flush_interval=3600) as w:
        for i, (op, err, dur) in enumerate(rows):
            w.record(TraceRecord(T0 + i * 10**6, dur, op, 2, "/d/f", None, 0, 0, 0, 0, err, 7, 0, 0, 0))
    [hint] = Trace(tmp_path / "t").hints()
    assert hint["share"] == pytest.approx(0.1)
    assert hint["time_share"] == pytest.approx(10 * 400e3 / (10 * 400e3 + 90 * 110e3))
    assert "10.0 % of the records and 28.8 % of the operations' time (FUSE's round trip included) are" in hint["text"]


NAMES = ["it's", 'say "x"', "back\\slash", "'; drop table trace; --", "%_*?[x]"]


@pytest.mark.parametrize("name", NAMES)
def test_queries_take_quotes_and_backslashes_as_data(tmp_path, capsys, name):
    """A trace directory, a path filter and a process name with SQL's and globs' own
    characters: each reaches DuckDB as a value."""
    d = tmp_path / name
    rows = [("read", 0, f"/d/{name}/f", 0), ("write", 0, f"/d/{name}/f", 0), ("read", 0, "/e/f", 0)]
    write(d, rows)
    assert cli.main(["report", str(d), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["directory"] == str(d) and out["matched"] == 3
    trace = Trace(d, Filters(path=f"/d/{name.replace('[', '[[]')}/*", comms=("app",)))
    assert trace.matched == 2
    with TraceWriter(tmp_path / "c", {"host": "box"}, flush_interval=3600) as w:
        w.record(TraceRecord(T0, 500, "read", 2, "/f", None, 0, 0, 0, 0, 0, 7, 0, 0, 0, comm=name[:15]))
        w.record(TraceRecord(T0 + 1, 500, "read", 2, "/f", None, 0, 0, 0, 0, 0, 8, 0, 0, 0, comm="other"))
    assert Trace(tmp_path / "c", Filters(comms=(name,))).matched == 1


def test_queries_take_bytes_that_are_not_utf8_in_records(tmp_path):
    """A name with bytes that are not UTF-8 is matched as the trace keeps it (U+FFFD)."""
    name = os.fsdecode(b"caf\xe9")
    write(tmp_path / "t", [("read", 0, f"/d/{name}", 0), ("read", 0, "/d/cafe", 0)])
    assert Trace(tmp_path / "t", Filters(path=f"/d/{name}")).matched == 1


def test_trace_directory_whose_name_is_not_utf8(tmp_path):
    d = tmp_path / os.fsdecode(b"it's \\ \xff")
    write(d, [("read", 0, "/d/f", 0)])
    assert Trace(d).matched == 1
