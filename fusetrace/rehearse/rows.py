"""A trace's records as plain tuples, in start order, for the exporters.

`records` streams them through the trace reader (sorted by start_ns, bounded memory), a
batch at a time; an exporter names the columns it needs and which operations.  Names
come back exact (a str with os.fsdecode's surrogates for bytes that are not UTF-8): an
exporter writes them as its format allows.
"""

from collections.abc import Iterator
from dataclasses import dataclass, field

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


def examples(shown: list[str], total: int) -> str:
    """The first few of `total` items, and how many more."""
    return ", ".join(shown) + (f" and {total - len(shown):,} more" if total > len(shown) else "")
