"""Reading a trace back, in admission order and in bounded memory, whatever its format.

The records of a trace directory come back as Arrow record batches sorted by `start_ns`
(parts hold them in reply order).  DuckDB does the sort and spills to a private
temporary directory past `memory_limit`, so a ten-million-record trace streams through
a replay or a simulation without being loaded whole.  Columns an older format lacks
(format 1: gate to nfs; format 2: comm to entry; format 3: fault) come back with the values
a trace records when it has nothing to say: null, 0 or ""; format 4's missing `host`, with
the host its metadata names.
"""

import glob
import os
import shutil
import tempfile
from collections.abc import Iterator

import duckdb
import pyarrow as pa

from ..errors import UserError
from . import metadata as meta
from .schema import COLUMNS

# What a column missing from an older format reads as.
_DEFAULTS = {"gate": "null::varchar", "wait_ns": "0::bigint", "latency_ns": "0::bigint",
             "transfer_ns": "0::bigint", "nfs": "null::varchar", "comm": "''", "kind": "null::varchar",
             "flags": "0::integer", "mode": "0::uinteger", "entry": "0::ubigint",
             "fault": "null::varchar"}  # and host: the trace's own (host_literal)
MEMORY_LIMIT = "512MB"


class NoTrace(UserError):
    exit_code = 2


def parts(directory: str) -> list[str]:
    """The trace's Parquet parts, in number order; NoTrace when there is no trace there."""
    if not os.path.isdir(directory):
        raise NoTrace(f"{directory}: no such trace directory")
    files = sorted(glob.glob(os.path.join(glob.escape(os.path.abspath(directory)), "*.parquet")))
    if not files:
        raise NoTrace(f"{directory}: no trace files (*.parquet) in it")
    return files


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

