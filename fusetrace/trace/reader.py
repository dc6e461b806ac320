"""Reading a trace back, in admission order and in bounded memory, whatever its format.

The records of a trace directory come back as Arrow record batches sorted by `start_ns`
(parts hold them in reply order).  DuckDB does the sort and spills to a private
temporary directory past `memory_limit`, so a ten-million-record trace streams through
a replay or a simulation without being loaded whole.  Columns an older format lacks
(format 1: gate to nfs; format 2: comm to entry; format 3: fault) come back with the values
a trace records when it has nothing to say: null, 0 or ""; format 4's missing `host`, with
the host its metadata names; format 5's missing `path_raw`, `path2_raw`, null (its names
that were not UTF-8 are lost: \\xNN in their text).

Several trace directories (a fleet's, one per host) read as one through `TraceSet`; the
command line's arguments, directories or quoted globs, become its directories by `expand`.
"""

import glob
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import duckdb
import pyarrow as pa

from ..errors import UserError
from . import metadata as meta
from .schema import COLUMNS

# What a column missing from an older format reads as.
_DEFAULTS = {"gate": "null::varchar", "wait_ns": "0::bigint", "latency_ns": "0::bigint",
             "transfer_ns": "0::bigint", "nfs": "null::varchar", "comm": "''", "kind": "null::varchar",
             "flags": "0::integer", "mode": "0::uinteger", "entry": "0::ubigint",
             "fault": "null::varchar", "path_raw": "null::blob",
             "path2_raw": "null::blob"}  # and host: the trace's own (host_literal)
MEMORY_LIMIT = "512MB"


class NoTrace(UserError):
    exit_code = 2


class EmptyTrace(NoTrace):
    """A mount's trace with no record: the mount recorded no operation."""


def parts(directory: str) -> list[str]:
    """The trace's Parquet parts, in number order; NoTrace when there is no trace there."""
    if not os.path.isdir(directory):
        if os.path.exists(directory):
            raise NoTrace(f"{directory}: not a trace directory (a trace is a directory of *.parquet parts)")
        raise NoTrace(f"{directory}: no such trace directory")
    files = sorted(glob.glob(os.path.join(glob.escape(os.path.abspath(directory)), "*.parquet")))
    if not files:
        below = sorted({os.path.dirname(f) for f in
                        glob.glob(os.path.join(glob.escape(directory), "*", "*.parquet"))})
        if below:  # a fleet's directory, one trace per host below it
            raise NoTrace(f"{directory}: no trace files (*.parquet) in it, but {len(below)} trace directories "
                          f"below it ({os.path.basename(below[0])}, ...): give "
                          f"'{os.path.join(directory, '*')}' (quoted) to read them together")
        if os.path.exists(os.path.join(directory, "_metadata.json")):  # a mount's trace, with no record
            raise EmptyTrace(f"{directory}: no trace files (*.parquet) in it: the mount recorded no operation "
                             f"(its _metadata.json is there)")
        raise NoTrace(f"{directory}: no trace files (*.parquet) in it")
    for f in files:  # a FIFO among them would hold the reader for good
        try:
            regular = stat.S_ISREG(os.stat(f).st_mode)
        except OSError as exc:
            raise NoTrace(f"{f}: cannot read it: {(exc.strerror or str(exc)).lower()}") from None
        if not regular:
            raise NoTrace(f"{f}: not a regular file, so not a trace part")
    return files


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
                raise NoTrace(f"{argument}: matches nothing")
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


def metadata(directory: str) -> dict:
    """The trace's _metadata.json ({} when it has none or it cannot be read)."""
    try:
        return meta.read(directory)
    except (OSError, ValueError):
        return {}


def ordered_batches(directory: str, columns: list[str] | None = None, *, where: str | None = None,
                    batch_rows: int = 65_536) -> Iterator[pa.RecordBatch]:
    """The trace's records, `columns` of them (default all, in schema order), sorted by
    start_ns, `batch_rows` at a time; `where` is a DuckDB condition on the columns.
    Memory stays near MEMORY_LIMIT however long the trace."""
    files = parts(directory)
    wanted = list(COLUMNS) if columns is None else columns
    unknown = [c for c in wanted if c not in COLUMNS]
    if unknown:
        raise ValueError(f"not trace columns: {', '.join(unknown)}")
    defaults = {**_DEFAULTS, "host": host_literal(metadata(directory))}
    scratch = tempfile.mkdtemp(prefix="fusetrace-sort-")  # 0700, ours
    try:
        db = duckdb.connect(config={"memory_limit": MEMORY_LIMIT, "temp_directory": scratch,
                                    "preserve_insertion_order": False})
        try:
            db.read_parquet(files, union_by_name=True, hive_partitioning=False).create_view("trace")
            have = {row[0] for row in db.execute("describe trace").fetchall()}
            select = ", ".join(f'"{c}"' if c in have else f'{defaults[c]} as "{c}"' for c in wanted)
            condition = f"where {where}" if where else ""
            reader = db.sql(f"select {select} from trace {condition} order by start_ns").to_arrow_reader(
                batch_rows)
            yield from reader
        finally:
            db.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def host_literal(metadata: dict) -> str:
    """The host a trace from before format 5 (no host column) reads as, as a DuckDB
    literal: the one its metadata names, else ""."""
    host = metadata.get("host")
    return "'" + (host if isinstance(host, str) else "").replace("'", "''") + "'"


@dataclass
class Member:
    """One trace of a TraceSet."""

    directory: str  # absolute
    files: list[str]
    metadata: dict  # {} when it has none or it cannot be read
    metadata_error: str | None  # why there is no metadata, in a few words; None when there is
    offset_ns: int  # added to its start_ns to put its records on the set's clock
    columns: frozenset[str] = frozenset()  # its parts' columns, once TraceSet.create_view has read them
    host: str = ""  # the host its records name, once TraceSet.create_view has read them

    @property
    def format_version(self) -> int:
        """Its metadata's format_version, else what its columns say."""
        c = self.columns
        return self.metadata.get("format_version") or (
            6 if "path_raw" in c else 5 if "host" in c else 4 if "fault" in c else 3 if "comm" in c
            else 2 if "gate" in c else 1)


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
            data: dict = {}
            error: str | None = None
            try:
                data = meta.read(directory)
            except (OSError, ValueError) as exc:
                error = f"{meta.NAME} unreadable: {exc}"
            else:
                if not data:
                    error = f"no {meta.NAME}: source, start time and drops unknown"
            self.members.append(Member(directory, parts(given), data, error, 0))
        clocked = [m for m in self.members if _has_clock(m.metadata)]
        self.base: dict = min((m.metadata for m in clocked), key=lambda d: d["start_wall_ns"], default={})
        self.unaligned = [] if len(self.members) == 1 else [m.directory for m in self.members if m not in clocked]
        if len(self.members) > 1:
            for m in clocked:
                m.offset_ns = ((m.metadata["start_wall_ns"] - m.metadata["start_monotonic_ns"])
                               - (self.base["start_wall_ns"] - self.base["start_monotonic_ns"]))

    @property
    def files(self) -> list[str]:
        return [f for m in self.members for f in m.files]

    def create_view(self, db: duckdb.DuckDBPyConnection, name: str) -> set[str]:
        """View `name` over every member's records, `host` filled in for a format 4 or older
        trace; returns its columns.  Columns only some members have are null in the others'."""
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
            selects.append(f"select *{moved}{host} from {name}_{i}")
        db.execute(f"create view {name} as {' union all by name '.join(selects)}")
        return {row[0] for row in db.execute(f"describe {name}").fetchall()}


def _has_clock(metadata: dict) -> bool:
    return all(isinstance(metadata.get(k), int) for k in ("start_wall_ns", "start_monotonic_ns"))
