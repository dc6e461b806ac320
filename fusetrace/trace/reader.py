"""Reading a trace back, in admission order and in bounded memory, whatever its format.

The records of a trace directory come back as Arrow record batches sorted by `start_ns`
(parts hold them in reply order).  DuckDB does the sort and spills to a private
temporary directory past `memory_limit`, so a ten-million-record trace streams through
a replay or a simulation without being loaded whole.  Columns an older format lacks
(format 1: gate to nfs; format 2: comm to entry; format 3: fault) come back with the values
a trace records when it has nothing to say: null, 0 or ""; format 4's missing `host`, with
the host its metadata names; format 5's missing `path_raw`, `path2_raw`, null (its names
that were not UTF-8 are lost: \\xNN in their text); format 6's missing `time`, from its
start_ns and its metadata's clock pair (null without one), and `sample`, 1 (nothing was
sampled before format 7); format 7's missing `tid`, 0 (thread unknown).

Every part is checked once, before any command reads it (`checked_parts`): a part that
is not Parquet at all, or whose pages cannot be decoded (what a crash or a full disk
leaves last), is skipped with a warning while others can be read; a column of the wrong
type, a required column missing, a null where the writer never leaves one, or a value
out of its column's range (`RANGES`) is refused as `DamagedTrace`, one line naming the
part, the column and the record.  Columns the reader does not know are left alone.

Several trace directories (a fleet's, one per host) read as one through `TraceSet`; the
command line's arguments, directories or quoted globs, become its directories by `expand`.
"""

import glob
import logging
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import UserError
from ..texttable import printable
from . import compact
from . import metadata as meta
from .schema import COLUMNS, RECORD_SCHEMA, SCHEMA, TraceRecord

log = logging.getLogger(__name__)

# What a column missing from an older format reads as: what a record leaves it at (its
# default in TraceRecord), as a DuckDB literal of its type.
_SQL_TYPES = {pa.int64(): "bigint", pa.uint64(): "ubigint", pa.int32(): "integer", pa.uint32(): "uinteger"}


def _literal(value: int | str | None, field: pa.Field) -> str:
    sql = _SQL_TYPES.get(field.type, "varchar")
    return "''" if value == "" else f"{'null' if value is None else value}::{sql}"


# A column an older trace lacks, as SQL reads it there (every reader, the fleet's included)
DEFAULTS = {
    **{
        f.name: _literal(TraceRecord._field_defaults[f.name], f)
        for f in RECORD_SCHEMA
        if f.name in TraceRecord._field_defaults
    },
    "path_raw": "null::blob",
    "path2_raw": "null::blob",
    "sample": "1::uinteger",
}  # and host, time: the trace's own (host_literal, time_expression)
MEMORY_LIMIT = "512MB"


class NoTrace(UserError):
    exit_code = 2


class EmptyTrace(NoTrace):
    """A mount's trace with no record: the mount recorded no operation."""


class DamagedTrace(NoTrace):
    """A part holding what no fusetrace wrote: a wrong type, a missing column, a bad value."""


# Every format has format 1's columns (start_ns to shaped_ns); later ones may be missing.
REQUIRED = tuple(SCHEMA.names[:15])
# Columns the writer may leave null (comm and host: a converted trace may not know them).
NULLABLE = frozenset(("path2", "gate", "nfs", "comm", "kind", "fault", "host", "path_raw", "path2_raw"))
# What a record may stand for: 1 to 2**32 - 1 operations (sample); 0 is no record's.
MAX_START_NS = 2**62  # CLOCK_MONOTONIC ns: 146 years of uptime; start_ns + dur_ns cannot overflow
MAX_DURATION_NS = 2**53  # 104 days: longer than anything a mount holds, and exact as a float
# [least, most] of each integer column: beyond them a value is no operation's, and the
# readers' arithmetic (start + duration, sums, seconds as floats) would overflow or round.
RANGES: dict[str, tuple[int, int]] = {
    "start_ns": (0, MAX_START_NS - 1),
    **dict.fromkeys(("dur_ns", "shaped_ns", "wait_ns", "latency_ns", "transfer_ns"), (0, MAX_DURATION_NS)),
    **dict.fromkeys(("offset", "size", "result"), (0, 2**63 - 1)),
    **dict.fromkeys(("inode", "fh", "entry"), (0, 2**64 - 1)),
    **dict.fromkeys(("pid", "tid", "uid", "gid", "mode"), (0, 2**32 - 1)),
    "errno": (0, 4095),
    "flags": (-(2**31), 2**31 - 1),
    "sample": (1, 2**32 - 1),
}
_checked: dict[tuple[object, ...], list[str]] = {}  # what checked_parts found, by the parts' names, sizes and times
_unreadable: set[str] = set()  # directories whose metadata was warned of
_rows: dict[str, int] = {}  # each checked part's records, from its footer
_held_dirs: dict[tuple[int, int], int] = {}  # descriptors of trace directories whose names are not UTF-8


def parts(directory: str) -> list[str]:
    """The trace's Parquet parts, in number order; NoTrace when there is no trace there.
    (Messages show each name printable: a directory's name may hold a newline, or bytes
    that are not UTF-8.)"""
    shown = printable(directory)
    if not os.path.isdir(directory):
        if os.path.exists(directory):
            raise NoTrace(f"{shown}: not a trace directory (a trace is a directory of *.parquet parts)")
        raise NoTrace(f"{shown}: no such trace directory")
    compact.hold_for_reading(os.path.abspath(directory))  # a live trace's merges wait for this process
    files = sorted(glob.glob(os.path.join(glob.escape(os.path.abspath(directory)), "*.parquet")))
    merged = compact.leftovers(os.path.basename(f) for f in files)  # a crash kept them from being unlinked
    files = [f for f in files if os.path.basename(f) not in merged]
    if not files:
        below = sorted({os.path.dirname(f) for f in glob.glob(os.path.join(glob.escape(directory), "*", "*.parquet"))})
        if below:  # a fleet's directory, one trace per host below it
            raise NoTrace(
                f"{shown}: no trace files (*.parquet) in it, but {len(below)} trace directories "
                f"below it ({printable(os.path.basename(below[0]))}, ...): give "
                f"'{os.path.join(shown, '*')}' (quoted) to read them together"
            )
        if os.path.exists(os.path.join(directory, "_metadata.json")):  # a mount's trace, with no record
            raise EmptyTrace(
                f"{shown}: no trace files (*.parquet) in it: the mount recorded no operation "
                f"(its _metadata.json is there)"
            )
        raise NoTrace(f"{shown}: no trace files (*.parquet) in it")
    for f in files:  # a FIFO among them would hold the reader for good
        try:
            regular = stat.S_ISREG(os.stat(f).st_mode)
        except OSError as exc:
            raise NoTrace(f"{printable(f)}: cannot read it: {(exc.strerror or str(exc)).lower()}") from None
        if not regular:
            raise NoTrace(f"{printable(f)}: not a regular file, so not a trace part")
    return files


def checked_parts(directory: str) -> list[str]:
    """The trace's parts that can be read, each checked once per process (types,
    required columns, nulls, ranges): DamagedTrace names the part, column and record of
    the first value refused.  A part that cannot be read at all is skipped with a
    warning, and DamagedTrace raised when none can."""
    files = parts(directory)
    try:
        key = tuple((f, st.st_size, st.st_mtime_ns) for f in files for st in [os.stat(f)])
        opened = _openable(files)
    except OSError as exc:  # gone since parts() listed it
        why = (exc.strerror or str(exc)).lower()
        raise NoTrace(f"{printable(str(exc.filename))}: cannot read it: {why}") from None
    if key in _checked:
        return _checked[key]
    readable: dict[str, pa.Schema] = {}
    damaged: dict[str, str] = {}
    for f in files:
        if f not in opened:
            damaged[f] = "its name is not UTF-8: no name the writer gives"
            continue
        try:
            footer = pq.read_metadata(opened[f])
            schema = footer.schema.to_arrow_schema()
        except (OSError, pa.ArrowException) as exc:
            damaged[f] = _first_line(exc)
            continue
        _check_types(f, schema)
        readable[opened[f]] = schema
        _rows[opened[f]] = footer.num_rows
    shown = {name: f for f, name in opened.items()}
    damaged.update((shown[name], why) for name, why in _check_values(readable, shown).items())
    good = [opened[f] for f in files if f not in damaged]
    if not good:
        f, why = next(iter(damaged.items()))
        raise DamagedTrace(
            f"{printable(f)}: not a readable trace part ({why})"
            + (f", nor are the other {len(damaged) - 1} parts" if len(damaged) > 1 else "")
        )
    for f, why in damaged.items():
        log.warning(
            "fusetrace: warning: %s: not a readable trace part (%s): skipped, %s read",
            printable(f),
            why,
            "the other part" if len(good) == 1 else f"the {len(good):,} others",
        )
    _checked[key] = good
    return good


def _openable(files: list[str]) -> dict[str, str]:
    """{part: the name pyarrow and DuckDB open it by}: its path, unless that is not UTF-8
    (they take only text that is; a trace directory's name may be any bytes): then
    /proc/self/fd/N/<part>, N the directory held open for the rest of the process, since
    the names outlive this call (DuckDB views, replays).  A part whose own name is not
    UTF-8, which no writer made, is left out."""
    opened, fd = {}, None
    for f in files:  # all in one directory
        name = os.path.basename(f)
        if _utf8(f):
            opened[f] = f
        elif _utf8(name):
            fd = _held(os.path.dirname(f)) if fd is None else fd
            opened[f] = f"/proc/self/fd/{fd}/{name}"
    return opened


def _utf8(name: str) -> bool:
    try:
        name.encode()
    except UnicodeEncodeError:
        return False
    return True


def _held(directory: str) -> int:
    """A descriptor of `directory`, opened once per directory (device and inode) per process."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    st = os.fstat(fd)
    held = _held_dirs.setdefault((st.st_dev, st.st_ino), fd)
    if held != fd:
        os.close(fd)
    return held


def record_count(directory: str) -> int:
    """How many records the trace's readable parts hold (from their footers: no scan)."""
    return sum(_rows[f] for f in checked_parts(directory))


def _first_line(exc: BaseException) -> str:
    return printable((str(exc).strip().splitlines() or [type(exc).__name__])[0][:200])


def _check_types(f: str, schema: pa.Schema) -> None:
    """DamagedTrace unless each of the part's known columns has a type its values can be
    read as without loss (any integer width; plain or dictionary-encoded strings) and
    format 1's columns are all there."""
    missing = [c for c in REQUIRED if c not in schema.names]
    if missing:
        raise DamagedTrace(
            f"{printable(f)}: no column {', '.join(missing)} (every format of trace has {len(REQUIRED)} "
            f"columns, start_ns to shaped_ns)"
        )
    for name in schema.names:
        want = SCHEMA.field(name).type if name in COLUMNS else None
        if want is None:
            continue  # a column of a later format: not ours to judge
        if schema.names.count(name) > 1:
            raise DamagedTrace(f"{printable(f)}: column {name} given {schema.names.count(name)} times")
        got = schema.field(name).type
        if pa.types.is_dictionary(got):
            got = got.value_type
        if pa.types.is_integer(want):
            ok, kind = pa.types.is_integer(got), f"an integer ({want} as written)"
        elif pa.types.is_binary(want):  # a name's exact bytes (path_raw, path2_raw)
            ok, kind = pa.types.is_binary(got) or pa.types.is_large_binary(got), "bytes"
        elif pa.types.is_timestamp(want):  # time: any unit; a zone, since it is UTC
            ok, kind = pa.types.is_timestamp(got) and got.tz is not None, "a timestamp with a time zone"
        else:
            ok, kind = pa.types.is_string(got) or pa.types.is_large_string(got), "a string"
        if not ok and not (pa.types.is_null(got) and name in NULLABLE):
            raise DamagedTrace(f"{printable(f)}: column {name} is {printable(str(got))[:60]}, not {kind}")


def _check_values(schemas: dict[str, pa.Schema], shown: dict[str, str]) -> dict[str, str]:
    """DamagedTrace at the first record with a null where none may be or a value out of
    RANGES; {part: why} for the parts whose pages cannot be decoded.  One scan of every
    part (parts with the same columns in one query)."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for f, schema in schemas.items():
        groups.setdefault(tuple(c for c in schema.names if c in COLUMNS), []).append(f)
    damaged: dict[str, str] = {}
    for names, files in groups.items():
        tests = [(c, f'"{c}" is null', "") for c in names if c not in NULLABLE]
        tests += [
            (c, f'"{c}" not between {least} and {most}', f"out of range ({least:,} to {most:,})")
            for c, (least, most) in RANGES.items()
            if c in names
        ]
        db = duckdb.connect()
        try:
            db.execute("set enable_progress_bar = false")  # its bar would be a second line
            try:
                found = _first_bad(db, files, names, tests, shown)
            except (duckdb.Error, _Undecodable):  # a page that cannot be decoded: which part?
                found = None
                for f in files:
                    try:
                        found = found or _first_bad(db, [f], names, tests, shown)
                    except (duckdb.Error, _Undecodable) as exc:
                        damaged[f] = _first_line(exc)
        finally:
            db.close()
        if found:
            raise DamagedTrace(found)
    return damaged


class _Undecodable(Exception):
    """A part DuckDB reads inconsistently (a damaged page): as one it cannot decode."""


def _first_bad(
    db: duckdb.DuckDBPyConnection,
    files: list[str],
    names: tuple[str, ...],
    tests: list[tuple[str, str, str]],
    shown: dict[str, str],
) -> str | None:
    """'part: record N: column value: why' of the first record failing a test, else None.
    Every column is counted, so that a page that cannot be decoded raises here.  `shown`
    gives each part's path for the name it is read by."""
    source = "read_parquet(?, filename=true, file_row_number=true, union_by_name=true)"
    failing = " or ".join(f"({sql})" for _, sql, _ in tests) or "false"
    counts = ", ".join(f'count("{c}")' for c in names)
    row = db.execute(f"select count(*) filter (where {failing}), {counts} from {source}", [files]).fetchone()
    if row is None or not row[0]:
        return None
    found = db.execute(
        f"select filename, file_row_number, [{', '.join(f'({sql})' for _, sql, _ in tests)}] "
        f"from {source} where {failing} order by filename, file_row_number limit 1",
        [files],
    ).fetchone()
    if found is None:  # counted above, yet not there: its pages decode one way, then another
        raise _Undecodable("its pages decode differently from one read to the next")
    f, number, failed = found
    column, _, why = tests[failed.index(True)]
    value = db.execute(
        f'select "{column}"::varchar from read_parquet(?, file_row_number=true) where file_row_number = ?',
        [[f], number],
    ).fetchone()
    if not why:
        return f"{printable(shown[f])}: record {number + 1:,}: {column} is null (every record of a trace has one)"
    text = printable(value[0][:40]) if value and value[0] is not None else "?"
    return f"{printable(shown[f])}: record {number + 1:,}: {column} {text}: {why}"


def expand(arguments: Sequence[str], idle: list[str] | None = None) -> list[str]:
    """The trace directories the command line's arguments name: each a directory or a glob
    (quoted, so that the shell leaves it to us; its matches sorted), in the order given,
    each directory once.  NoTrace names the first glob that matches nothing or path that
    is not a trace.  A glob's match whose mount recorded nothing (a fleet's idle host) is
    left out and added to `idle` when one is given; the glob must match a trace with
    records all the same."""
    out: dict[str, str] = {}
    for argument in arguments:
        globbed = glob.has_magic(argument) and not os.path.exists(argument)
        if globbed:
            matches = sorted(glob.glob(argument))
            if not matches:
                raise NoTrace(f"{printable(argument)}: matches nothing")
        else:
            matches = [argument]
        empty: dict[str, EmptyTrace] = {}
        for directory in matches:
            try:
                parts(directory)
            except EmptyTrace as exc:
                if not globbed or idle is None:
                    raise
                empty[directory] = exc
                continue
            out.setdefault(os.path.abspath(directory), directory)
        if empty and len(empty) == len(matches):
            raise next(iter(empty.values()))
        if idle is not None:
            idle += [d for d in empty if d not in idle]
    return list(out.values())


def metadata(directory: str) -> meta.Metadata:
    """The trace's _metadata.json ({} when it has none or it cannot be read: a warning
    says why, once per directory)."""
    try:
        return meta.read(directory)
    except (OSError, ValueError) as exc:
        if directory not in _unreadable:
            _unreadable.add(directory)
            why = _first_line(exc).removeprefix(f"{meta.NAME}: ").removeprefix(f"{meta.NAME} ")
            log.warning(
                "fusetrace: warning: %s: unreadable (%s): the trace read without it (source, clock and host unknown)",
                printable(os.path.join(directory, meta.NAME)),
                why,
            )
        return {}


def ordered_batches(
    directory: str, columns: list[str] | None = None, *, where: str | None = None, batch_rows: int = 65_536
) -> Iterator[pa.RecordBatch]:
    """The trace's records, `columns` of them (default all, in schema order), sorted by
    start_ns, `batch_rows` at a time; `where` is a DuckDB condition on the columns.
    Memory stays near MEMORY_LIMIT however long the trace."""
    files = checked_parts(directory)
    wanted = list(COLUMNS) if columns is None else columns
    unknown = [c for c in wanted if c not in COLUMNS]
    if unknown:
        raise ValueError(f"not trace columns: {', '.join(unknown)}")
    known = metadata(directory)
    defaults = {**DEFAULTS, "host": host_literal(known), "time": time_expression(known)}
    scratch = tempfile.mkdtemp(prefix="fusetrace-sort-")  # 0700, ours
    try:
        db = duckdb.connect(
            config={"memory_limit": MEMORY_LIMIT, "temp_directory": scratch, "preserve_insertion_order": False}
        )
        try:
            db.read_parquet(files, union_by_name=True, hive_partitioning=False).create_view("trace")
            have = {row[0] for row in db.execute("describe trace").fetchall()}
            select = ", ".join(f'"{c}"' if c in have else f'{defaults[c]} as "{c}"' for c in wanted)
            condition = f"where {where}" if where else ""
            reader = db.sql(f"select {select} from trace {condition} order by start_ns").to_arrow_reader(batch_rows)
            yield from reader
        finally:
            db.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def host_literal(metadata: meta.Metadata) -> str:
    """The host a trace from before format 5 (no host column) reads as, as a DuckDB
    literal: the one its metadata names, else ""."""
    host = metadata.get("host")
    return "'" + (host if isinstance(host, str) else "").replace("'", "''") + "'"


def time_expression(metadata: meta.Metadata) -> str:
    """A trace from before format 7's `time` (no column), as a DuckDB expression of its
    start_ns: through its metadata's clock pair, else null."""
    if not _has_clock(metadata):
        return "null::timestamptz_ns"
    offset = int(metadata["start_wall_ns"]) - int(metadata["start_monotonic_ns"])
    return f"make_timestamp_ns(start_ns + ({offset})::bigint)::timestamptz_ns"


@dataclass
class Member:
    """One trace of a TraceSet."""

    directory: str  # absolute
    files: list[str]
    metadata: meta.Metadata  # {} when it has none or it cannot be read
    metadata_error: str | None  # why there is no metadata, in a few words; None when there is
    offset_ns: int  # added to its start_ns to put its records on the set's clock
    columns: frozenset[str] = frozenset()  # its parts' columns, once TraceSet.create_view has read them
    host: str = ""  # the host its records name, once TraceSet.create_view has read them

    @property
    def format_version(self) -> int:
        """Its metadata's format_version, else what its columns say."""
        c = self.columns
        return self.metadata.get("format_version") or (
            8
            if "tid" in c
            else 7
            if "sample" in c
            else 6
            if "path_raw" in c
            else 5
            if "host" in c
            else 4
            if "fault" in c
            else 3
            if "comm" in c
            else 2
            if "gate" in c
            else 1
        )


class TraceSet:
    """Trace directories read as one: their records in one DuckDB view, each with its
    `host`, and every start_ns on one clock.

    CLOCK_MONOTONIC is per machine and per boot, so each trace's start_ns is moved onto
    the clock of the trace that started first, through each one's wall-clock mapping
    (start_wall_ns, start_monotonic_ns): two hosts' records interleave as they did in wall
    time, to within their wall clocks' agreement (NTP: milliseconds or better).  A trace
    without that mapping keeps its own clock and is listed in `unaligned`.  One trace
    alone is read exactly as it is."""

    def __init__(self, directories: Sequence[str]):
        if not directories:
            raise ValueError("no trace directories")
        self.members: list[Member] = []
        for given in directories:
            directory = os.path.abspath(given)
            data: meta.Metadata = {}
            error: str | None = None
            try:
                data = meta.read(directory)
            except (OSError, ValueError) as exc:
                error = f"{meta.NAME} unreadable: {exc}"
            else:
                if not data:
                    error = f"no {meta.NAME}: source, start time and drops unknown"
            self.members.append(Member(directory, checked_parts(given), data, error, 0))
        clocked = [m for m in self.members if _has_clock(m.metadata)]
        self.base: meta.Metadata = min((m.metadata for m in clocked), key=lambda d: d["start_wall_ns"], default={})
        if len(self.members) > 1:
            for m in clocked:
                m.offset_ns = (m.metadata["start_wall_ns"] - m.metadata["start_monotonic_ns"]) - (
                    self.base["start_wall_ns"] - self.base["start_monotonic_ns"]
                )
            # clocks 73 years apart are a metadata's nonsense, and would overflow start_ns
            clocked = [m for m in clocked if abs(m.offset_ns) < MAX_START_NS // 2]
            for m in self.members:
                m.offset_ns = m.offset_ns if m in clocked else 0
        self.unaligned = [] if len(self.members) == 1 else [m.directory for m in self.members if m not in clocked]

    @property
    def files(self) -> list[str]:
        return [f for m in self.members for f in m.files]

    def create_view(self, db: duckdb.DuckDBPyConnection, name: str) -> set[str]:
        """View `name` over every member's records, `host` filled in for a format 4 or older
        trace, `time` and `sample` for a format 6 or older; returns its columns.  Columns
        only some members have are null in the others'."""
        selects = []
        for i, m in enumerate(self.members):
            part = db.read_parquet(m.files, union_by_name=True, hive_partitioning=False)
            part.create_view(f"{name}_{i}")
            m.columns = frozenset(part.columns)
            named = m.metadata.get("host")
            if "host" in m.columns and not isinstance(named, str):  # parts without their metadata
                # fetchall: a result left unfinished refuses the next member's read_parquet
                rows = db.execute(f"select any_value(host) from {name}_{i}").fetchall()
                named = rows[0][0] if rows else None
            m.host = named if isinstance(named, str) else ""
            moved = f" replace (start_ns + {m.offset_ns} as start_ns)" if m.offset_ns else ""
            host = "" if "host" in m.columns else f", {host_literal(m.metadata)} as host"
            if "time" not in m.columns:
                host += f", {time_expression(m.metadata)} as time"
            if "sample" not in m.columns:
                host += f", {DEFAULTS['sample']} as sample"
            selects.append(f"select *{moved}{host} from {name}_{i}")
        db.execute(f"create view {name} as {' union all by name '.join(selects)}")
        return {row[0] for row in db.execute(f"describe {name}").fetchall()}


def _has_clock(metadata: meta.Metadata) -> bool:
    return all(isinstance(metadata.get(k), int) for k in ("start_wall_ns", "start_monotonic_ns"))
