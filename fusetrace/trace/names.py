"""Names in a trace: readable text for everyone, and the exact bytes where the text is not them.

The handlers hold a name as `os.fsdecode` gives it: a str in which each byte that is not
UTF-8 is a lone surrogate (surrogateescape), so that `os.fsencode` gives the bytes back.
Parquet's strings are UTF-8 and cannot hold those, so the writer stores a name as two
columns: its text (`path`), where each byte that is not UTF-8 reads as
U+FFFD, and its bytes (`path_raw`) only when they are not UTF-8 (null otherwise, so an
ordinary name costs nothing).  A null raw value says the text is the name; a non-null
one, that the text is not (a real name holding U+FFFD or a backslash is never mistaken
for one that held other bytes).  docs/TRACE_FORMAT.md, *Names that are not UTF-8*.
"""

import os
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

# The columns that hold names, and the column of each one's exact bytes (format 6).
RAW = {"path": "path_raw", "path2": "path2_raw"}


def stored(name: str) -> tuple[str, bytes | None]:
    """(text, raw) of a name as the trace keeps it: its text, undecodable bytes as U+FFFD,
    and its bytes when they are not UTF-8 (else None)."""
    raw = os.fsencode(name)
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace"), raw


def readable(name: str) -> str:
    """The text a trace shows for a name (undecodable bytes as U+FFFD): for output that
    must be UTF-8 (JSON, CSV, a terminal), and for matching a name given on the command
    line against the trace's text."""
    return stored(name)[0]


def exact(text: str, raw: bytes | None) -> str:
    """The name a trace's text and raw values stand for, as `os.fsdecode` gives it (what a
    system call takes to reach those exact bytes); a null name (path2) stays None."""
    return text if raw is None else os.fsdecode(raw)


def with_raw(columns: list[str]) -> list[str]:
    """`columns` and, after them, the raw columns of the names among them: what to read
    from a trace to have each name exactly (see rows)."""
    return columns + [RAW[c] for c in columns if c in RAW and RAW[c] not in columns]


def rows(batch: pa.RecordBatch, columns: list[str]) -> Iterator[tuple[Any, ...]]:
    """The batch's rows, `columns` of each, its names exact (a batch read with
    with_raw(columns): each name's raw value, when there is one, replaces its text)."""
    lists = {}
    for name in columns:
        values = batch.column(name).to_pylist()
        raw = RAW.get(name)
        if raw is not None and raw in batch.schema.names and batch.column(raw).null_count < batch.num_rows:
            values = [exact(text, b) for text, b in zip(values, batch.column(raw).to_pylist())]
        lists[name] = values
    return zip(*(lists[c] for c in columns))
