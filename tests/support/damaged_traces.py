"""Damaged and hostile trace directories, made from a small good one, and every command
that reads a trace run over them in this process (tests/trace/test_damaged_traces.py).

A damage is a name and a function that spoils a copy of the good trace: part files a
crash or a disk leaves (truncated, random, empty), columns of the wrong type or missing,
values out of range or null, `_metadata.json` files that are deep, huge or absurd.  Each
is what a hand-made, converted or hostile trace can hold; every command must meet it
with exit 0, or exit 2 and one line, never a traceback.
"""

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from fusetrace.trace.schema import TraceRecord
from fusetrace.trace.writer import TraceWriter

T0 = 5_000_000_000
INT64_MAX = 2**63 - 1


def good_trace(directory: Path) -> Path:
    """A format 5 trace a replay can run: a file made, written, read back and closed."""
    rows = [
        ("lookup", "/f", dict(errno=2)),
        ("create", "/f", dict(fh=3, flags=0o101, mode=0o100644, entry=9)),
        ("write", "/f", dict(fh=3, size=4096, result=4096, kind="buffered")),
        ("getattr", "/f", dict(mode=0o100644)),
        ("read", "/f", dict(fh=3, size=4096, result=4096)),
        ("flush", "/f", dict(fh=3)),
        ("release", "/f", dict(fh=3)),
        ("mkdir", "/d", dict(mode=0o40755, entry=10)),
    ]
    w = TraceWriter(directory, {"source": "/src", "mountpoint": "/mnt", "host": "box"})
    for i, (op, path, more) in enumerate(rows):
        w.record(
            TraceRecord(
                T0 + i * 1_000_000,
                200_000,
                op,
                1 if op in ("lookup", "create", "mkdir") else 9,
                path,
                None,
                more.pop("fh", 0),
                0,
                more.pop("size", 0),
                more.pop("result", 0),
                more.pop("errno", 0),
                100,
                0,
                0,
                0,
                comm="app",
                **more,
            )
        )
    w.close()
    return directory


def _part(d: Path) -> Path:
    return sorted(d.glob("*.parquet"))[0]


def _rewrite(d: Path, change: Callable[[pa.Table], pa.Table]) -> None:
    part = _part(d)
    table = pq.read_table(part)
    part.unlink()
    pq.write_table(change(table), part)


def set_column(name: str, array: pa.Array | Callable[[int], pa.Array]) -> Callable[[Path], None]:
    """A damage: column `name` replaced (or added) with `array` (or array(rows))."""

    def damage(d: Path) -> None:
        def change(t: pa.Table) -> pa.Table:
            a = array(t.num_rows) if callable(array) else array
            i = t.schema.get_field_index(name)
            return t.set_column(i, name, a) if i >= 0 else t.append_column(name, a)

        _rewrite(d, change)

    return damage


def one_value(name: str, value: object, type_: pa.DataType, row: int = 2) -> Callable[[Path], None]:
    """A damage: column `name`, as `type_`, holding `value` at `row` (its other values kept
    where they fit the type, else that value everywhere)."""

    def damage(d: Path) -> None:
        def change(t: pa.Table) -> pa.Table:
            try:
                values = t.column(name).cast(type_).to_pylist() if name in t.column_names else [value] * t.num_rows
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                values = [value] * t.num_rows
            values[row] = value
            a = pa.array(values, type_)
            i = t.schema.get_field_index(name)
            return t.set_column(i, name, a) if i >= 0 else t.append_column(name, a)

        _rewrite(d, change)

    return damage


def keep_columns(*names: str) -> Callable[[Path], None]:
    return lambda d: _rewrite(d, lambda t: t.select(list(names)))


def drop_column(name: str) -> Callable[[Path], None]:
    return lambda d: _rewrite(d, lambda t: t.drop_columns([name]))


def extra_part(data: Callable[[bytes], bytes], name: str = "part-000099.parquet") -> Callable[[Path], None]:
    """A damage: a second part, `data` of the good part's bytes (what a crash leaves last)."""

    def damage(d: Path) -> None:
        (d / name).write_bytes(data(_part(d).read_bytes()))

    return damage


def only_part(data: Callable[[bytes], bytes]) -> Callable[[Path], None]:
    def damage(d: Path) -> None:
        part = _part(d)
        part.write_bytes(data(part.read_bytes()))

    return damage


def metadata_text(text: str | bytes) -> Callable[[Path], None]:
    def damage(d: Path) -> None:
        (d / "_metadata.json").write_bytes(text if isinstance(text, bytes) else text.encode())

    return damage


def metadata_key(key: str, value: object) -> Callable[[Path], None]:
    def damage(d: Path) -> None:
        m = json.loads((d / "_metadata.json").read_text())
        m[key] = value
        (d / "_metadata.json").write_text(json.dumps(m))

    return damage


def levels_spoiled(d: Path) -> None:
    """The part rewritten uncompressed with `op` dictionary-encoded, then one byte of that
    column's data page set to 0x11: DuckDB then counts 7 records whose `op` is null, yet
    finds none of them when asked which (its pages decode one way, then another)."""
    part = _part(d)
    pq.write_table(pq.read_table(part), part, compression="none", use_dictionary=["op", "path", "comm"])
    group = pq.read_metadata(part).row_group(0)
    op = next(group.column(i) for i in range(group.num_columns) if group.column(i).path_in_schema == "op")
    data = bytearray(part.read_bytes())
    data[op.dictionary_page_offset + op.total_compressed_size - 7] = 0x11
    part.write_bytes(bytes(data))


def _random(n: int) -> bytes:
    return bytes((i * 7919 + 13) % 251 for i in range(n))


def _flip_middle(data: bytes) -> bytes:
    """The bytes of the column chunks spoiled, the footer left whole."""
    middle = bytearray(data)
    for i in range(8, len(data) // 2):
        middle[i] ^= 0x5A
    return bytes(middle)


DAMAGES: dict[str, Callable[[Path], None]] = {
    # part files a crash or a disk leaves
    "last part truncated": extra_part(lambda b: b[: len(b) // 2]),
    "last part 200 bytes": extra_part(lambda b: b[:200]),
    "last part random": extra_part(lambda b: _random(len(b))),
    "last part empty": extra_part(lambda b: b""),
    "last part magic only": extra_part(lambda b: b"PAR1"),
    "last part spoiled inside": extra_part(_flip_middle),
    "only part truncated": only_part(lambda b: b[: len(b) // 2]),
    "only part random": only_part(lambda b: _random(4096)),
    "only part empty": only_part(lambda b: b""),
    "only part spoiled inside": only_part(_flip_middle),
    "op's levels spoiled": levels_spoiled,
    "no records": lambda d: _rewrite(d, lambda t: t.slice(0, 0)),
    # types
    "path null": one_value("path", None, pa.string()),
    "path all null": set_column("path", lambda n: pa.nulls(n)),
    "path integer": set_column("path", lambda n: pa.array(range(n), pa.int64())),
    "path binary": set_column("path", lambda n: pa.array([b"/\xff"] * n, pa.binary())),
    "start_ns string": set_column("start_ns", lambda n: pa.array([str(T0 + i) for i in range(n)])),
    "start_ns float": set_column("start_ns", lambda n: pa.array([T0 + i + 0.5 for i in range(n)])),
    "dur_ns float nan": one_value("dur_ns", float("nan"), pa.float64()),
    "op integer": set_column("op", lambda n: pa.array([1] * n, pa.int32())),
    "op list": set_column("op", lambda n: pa.array([["read"]] * n)),
    "uid struct": set_column("uid", lambda n: pa.array([{"a": 1}] * n)),
    "errno bool": set_column("errno", lambda n: pa.array([True] * n)),
    # missing columns
    "only start_ns and op": keep_columns("start_ns", "op"),
    "no dur_ns": drop_column("dur_ns"),
    "no path": drop_column("path"),
    "no start_ns": drop_column("start_ns"),
    # values
    "dur_ns int64 max": one_value("dur_ns", INT64_MAX, pa.int64()),
    "dur_ns negative": one_value("dur_ns", -5, pa.int64()),
    "start_ns int64 max": one_value("start_ns", INT64_MAX, pa.int64()),
    "start_ns int64 min": one_value("start_ns", -(2**63), pa.int64()),
    "start_ns uint64 max": one_value("start_ns", 2**64 - 1, pa.uint64()),
    "write size negative": one_value("size", -4096, pa.int64(), row=2),
    "offset negative": one_value("offset", -1, pa.int64(), row=4),
    "op null": one_value("op", None, pa.string()),
    "op unknown": one_value("op", "frobnicate", pa.string()),
    "op unknown, with escapes": one_value("op", "read\x1b[2J\x1b]0;title\x07", pa.string()),
    "errno negative": one_value("errno", -2, pa.int32()),
    "pid int64 huge": one_value("pid", 2**40, pa.int64()),
    "fh negative": one_value("fh", -1, pa.int64(), row=3),
    "shaped_ns int64 max": one_value("shaped_ns", INT64_MAX, pa.int64()),
    "wait_ns negative": one_value("wait_ns", -1, pa.int64()),
    "comm null": one_value("comm", None, pa.string()),
    "extra columns path_raw": set_column("path_raw", lambda n: pa.array([b"/f\xff"] * n, pa.binary())),
    "path_raw integer": set_column("path_raw", lambda n: pa.array(range(n), pa.int64())),
    "path_raw climbing out": set_column("path_raw", lambda n: pa.array([b"/../../out\xff"] * n, pa.binary())),
    # the extremes the reader accepts: every command must still meet them
    "start_ns at its bound": one_value("start_ns", 2**62 - 1, pa.int64(), row=7),
    "start_ns 0": one_value("start_ns", 0, pa.int64(), row=0),
    "dur_ns at its bound": one_value("dur_ns", 2**53, pa.int64()),
    "write size at its bound": one_value("size", INT64_MAX, pa.int64()),
    "offset at its bound": one_value("offset", INT64_MAX, pa.int64()),
    "fh at its bound": one_value("fh", 2**64 - 1, pa.uint64(), row=3),
    "errno 4095": one_value("errno", 4095, pa.int32()),
    # _metadata.json
    "metadata nested 100000 deep": metadata_text("[" * 100_000 + "]" * 100_000),
    "metadata wall time 2**200": metadata_key("start_wall_ns", 2**200),
    "metadata wall time negative": metadata_key("start_wall_ns", -(2**62)),
    "metadata int of 5000 digits": metadata_text('{"records": ' + "9" * 5000 + "}"),
    "metadata format_version 2**70": metadata_key("format_version", 2**70),
    "metadata not utf-8": metadata_text(b'{"source": "\xff"}'),
    "metadata a list": metadata_text("[1, 2]"),
    "metadata 40 MB": metadata_text('{"warnings": ["' + "x" * 40_000_000 + '"]}'),
    "metadata round trip int64 max": metadata_key("fuse_round_trip_ns", INT64_MAX),
    "metadata escapes": metadata_key("host", "\x1b[2Jevil\n"),
}

# Each command that reads a trace, as argv given the trace, a good trace beside it and a
# scratch directory.
COMMANDS: dict[str, Callable[[Path, Path, Path], list[str]]] = {
    "report": lambda t, good, tmp: ["report", str(t)],
    "report --json --by path": lambda t, good, tmp: ["report", str(t), "--json", "--by", "path"],
    "fit": lambda t, good, tmp: ["fit", str(t), "-o", str(tmp / "fitted.toml")],
    "simulate": lambda t, good, tmp: ["simulate", str(t), "--profile", "efs-bursting"],
    "export fio-iolog": lambda t, good, tmp: ["export", str(t), "--format", "fio-iolog", "-o", str(tmp / "x.iolog")],
    "export perfetto": lambda t, good, tmp: ["export", str(t), "--format", "perfetto", "-o", str(tmp / "x.json")],
    "export csv": lambda t, good, tmp: ["export", str(t), "--format", "csv", "-o", str(tmp / "x.csv")],
    "compare": lambda t, good, tmp: ["compare", str(good), str(t)],
    "replay": lambda t, good, tmp: ["replay", str(t), str(tmp / "target"), "--as-fast-as-possible"],
    "compact": lambda t, good, tmp: ["compact", str(t)],  # last: it rewrites the trace's files
}


def damaged(root: Path, good: Path, name: str) -> Path:
    """A copy of `good` with damage `name` done to it."""
    d = root / name.replace(" ", "_").replace("*", "")
    shutil.copytree(good, d)
    DAMAGES[name](d)
    return d


def scratch(tmp: Path, name: str) -> Path:
    """A fresh directory for one run's outputs (and replay's target)."""
    d = tmp / name
    shutil.rmtree(d, ignore_errors=True)
    (d / "target").mkdir(parents=True)
    os.chmod(d, 0o755)
    return d
