"""A trace's records as plain tuples, in start order, for the exporters.

`records` streams them through the trace reader (sorted by start_ns, bounded memory), a
batch at a time; an exporter names the columns it needs and which operations.  Names
come back exact (a str with os.fsdecode's surrogates for bytes that are not UTF-8): an
exporter writes them as its format allows.  `last_closes` says which close(2) of a
captured trace ends its file's handle, for the exporters and the replay alike.
"""

from collections.abc import Iterator
from dataclasses import dataclass, field

import duckdb

from ..trace import metadata as meta
from ..trace import names, reader
from .progress import counted


@dataclass
class Outcome:
    """What an export says when it is done: one line for stdout, and lines for stderr
    about what it left out."""

    summary: str
    notes: list[str] = field(default_factory=list)


def records(trace_dir: str, columns: list[str], where: str | None = None) -> Iterator[tuple]:
    """The trace's records, `columns` of each in that order, sorted by start_ns; names
    (path, path2) exact, as os.fsdecode gives them (fusetrace/trace/names.py); a progress
    line every few seconds on a terminal."""
    yield from counted(
        _rows(trace_dir, columns, where), "fusetrace export", reader.record_count(trace_dir), of_total=where is None
    )


def _rows(trace_dir: str, columns: list[str], where: str | None) -> Iterator[tuple]:
    for batch in reader.ordered_batches(trace_dir, names.with_raw(columns), where=where):
        yield from names.rows(batch, columns)


def last_closes(trace_dir: str) -> dict[int, int] | None:
    """For a captured trace (`source` "syscalls"), which has no release: the start_ns of the
    last close(2) (flush) of each handle number closed more than once (a duplicate's or a
    forked child's copy's close before it; most are closed once, so this stays small).  A
    flush not in it is its handle's last close.  None for a FUSE trace."""
    if meta.trace_kind(reader.metadata(trace_dir)) != "syscalls":
        return None
    db = duckdb.connect()
    try:
        db.read_parquet(reader.checked_parts(trace_dir), union_by_name=True, hive_partitioning=False).create_view(
            "trace"
        )
        rows = db.execute(
            "select fh, max(start_ns) from trace where op = 'flush' and fh <> 0 group by fh having count(*) > 1"
        ).fetchall()
    finally:
        db.close()
    return dict(rows)


def last_close(closes: dict[int, int], fh: int, start_ns: int) -> bool:
    """Whether a captured trace's flush of `fh` at `start_ns` is its handle's last close."""
    return closes.get(fh, start_ns) == start_ns


def examples(shown: list[str], total: int) -> str:
    """The first few of `total` items, and how many more."""
    return ", ".join(shown) + (f" and {total - len(shown):,} more" if total > len(shown) else "")
