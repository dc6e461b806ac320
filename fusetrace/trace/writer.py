"""TraceWriter: one record per FUSE operation, written as Parquet parts in the background.

The trio loop only appends a tuple to a deque (`record`); a daemon thread drains it every
`flush_interval` seconds into a new `part-NNNNNN.parquet`, so a record reaches disk
within about a second and a killed server loses at most that.  docs/TRACE_FORMAT.md
describes the files.
"""

import collections
import errno
import logging
import os
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import UserError
from . import metadata as meta
from .schema import COLUMNS, SCHEMA

log = logging.getLogger(__name__)

_ROW = pa.struct(list(SCHEMA))
# Rows converted per pyarrow call.  Conversion holds the GIL for the whole call
# (~1 us a row here), so small chunks keep the trio loop from stalling behind it.
_CHUNK = 2048
_PATHS = (COLUMNS.index("path"), COLUMNS.index("path2"))


class TraceDirError(UserError):
    """The trace directory cannot be used; the message is one line naming it and why."""


class TraceWriter:
    def __init__(self, directory: str | os.PathLike, metadata: dict, *, flush_interval: float = 0.5,
                 max_pending: int = 1_000_000):
        self.directory = os.path.abspath(directory)
        self.flush_interval = flush_interval
        self._max_pending = max_pending
        self._pending: collections.deque[tuple] = collections.deque()
        self.records = 0  # written to parts
        self._taken = 0  # taken from the queue to be written
        self.dropped = 0  # refused because max_pending records were waiting
        self.lost = 0  # taken from the queue but lost to a failed write
        self.files = 0
        self.write_errors = 0
        self.last_error: str | None = None
        self._closed = False
        self._summary: dict = {}

        _prepare(self.directory)
        # pyarrow's first conversion imports pandas (~0.4 s, GIL held); pay it now, not mid-trace
        pa.array([], type=_ROW)
        wall, mono = meta.clock_pair()
        self._meta = {
            "start_wall_ns": wall,
            "start_monotonic_ns": mono,
            **metadata,
            "format_version": meta.FORMAT_VERSION,
            "clock": "CLOCK_MONOTONIC",
            "flush_interval": flush_interval,
            "max_pending": max_pending,
        }
        self._meta_lock = threading.Lock()
        self._meta_dirty = False
        self._meta_counts = None
        try:
            self._write_metadata()
        except OSError as exc:
            raise TraceDirError(f"trace directory {self.directory}: {_reason(exc)}") from None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fusetrace-trace-writer", daemon=True)
        self._thread.start()

    def record(self, *fields) -> None:
        """Queue one record, fields in schema order.  Never blocks: when max_pending
        records are already waiting, the record is counted in `dropped` instead."""
        if len(self._pending) < self._max_pending:
            self._pending.append(fields)
        else:
            self.dropped += 1

    @property
    def queued(self) -> int:
        """Records waiting for the writer thread."""
        return len(self._pending)

    @property
    def recorded(self) -> int:
        """Records given so far (and not dropped): written, being written or queued."""
        return self._taken + len(self._pending)

    def update_metadata(self, **extra) -> None:
        """Add keys to _metadata.json; they are written at the next flush or at close."""
        with self._meta_lock:
            self._meta.update(extra)
            self._meta_dirty = True

    def close(self) -> dict:
        """Write everything pending, stop the thread, and write the final metadata.
        Returns the counters (records, dropped, lost, files, write_errors, last_error).
        Records given after close are counted as dropped."""
        if not self._closed:
            self._closed = True
            self._max_pending = 0
            self._stop.set()
            self._thread.join()
            end_wall, end_mono = meta.clock_pair()
            self.update_metadata(end_wall_ns=end_wall, end_monotonic_ns=end_mono)
            self._flush_metadata()
            self._summary = self._counters()
        return self._summary

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- the writer thread -----------------------------------------------------------

    def _run(self) -> None:
        due = time.monotonic()
        while True:
            due += self.flush_interval
            if self._stop.wait(max(0.0, due - time.monotonic())):
                break
            self._flush()
            due = max(due, time.monotonic() - self.flush_interval)  # don't catch up after a slow write
        self._flush()

    def _flush(self) -> None:
        n = len(self._pending)
        if n:
            popleft = self._pending.popleft
            rows = [popleft() for _ in range(n)]
            self._taken += n
            self._write_part(rows)
        self._flush_metadata()

    def _write_part(self, rows: list[tuple]) -> None:
        path = os.path.join(self.directory, f"part-{self.files:06d}.parquet")
        try:
            table = _table(rows)
            meta.atomic_write(path, lambda f: pq.write_table(table, f, compression="zstd"))
        except Exception as exc:  # disk full, directory gone, a bad field: keep serving
            self._failed(exc, f"{len(rows)} records", len(rows))
        else:
            self.files += 1
            self.records += len(rows)

    def _failed(self, exc: Exception, what: str, lost: int = 0) -> None:
        self.write_errors += 1
        self.lost += lost
        text = f"{type(exc).__name__}: {exc}"
        if text != self.last_error:
            log.warning("fusetrace: trace %s: cannot write %s: %s", self.directory, what, text)
        self.last_error = text

    def _counters(self) -> dict:
        return {"records": self.records, "dropped": self.dropped, "lost": self.lost,
                "files": self.files, "write_errors": self.write_errors, "last_error": self.last_error}

    def _flush_metadata(self) -> None:
        """Rewrite the metadata if keys were added or something went wrong since the
        last write, so a killed server's metadata still tells of drops and errors."""
        counts = (self.dropped, self.lost, self.write_errors)
        if not self._meta_dirty and counts == self._meta_counts:
            return
        try:
            self._write_metadata()
        except Exception as exc:
            self._failed(exc, meta.NAME)

    def _write_metadata(self) -> None:
        counters = self._counters()
        with self._meta_lock:
            data = {**self._meta, **counters}
            self._meta_dirty = False
        self._meta_counts = (counters["dropped"], counters["lost"], counters["write_errors"])
        meta.write(self.directory, data)


def _table(rows: list[tuple]) -> pa.Table:
    """Rows to a Table, converted row-wise by pyarrow (measured faster than
    transposing with zip(*rows) and converting column by column)."""
    batches = []
    for i in range(0, len(rows), _CHUNK):
        chunk = rows[i:i + _CHUNK]
        try:
            array = pa.array(chunk, type=_ROW)
        except UnicodeEncodeError:  # a name that is not UTF-8 (os.fsdecode's surrogates)
            array = pa.array([_utf8_paths(r) for r in chunk], type=_ROW)
        batches.append(pa.RecordBatch.from_struct_array(array))
    return pa.Table.from_batches(batches, schema=SCHEMA)


def _utf8_paths(row: tuple) -> tuple:
    """The row with undecodable bytes in its paths written as \\xNN."""
    out = list(row)
    for i in _PATHS:
        if out[i] is not None:
            out[i] = out[i].encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return tuple(out)


def _prepare(directory: str) -> None:
    """Create the trace directory (0700) or check an existing one holds nothing that
    readers of the directory would mix up with this trace."""
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        names = os.listdir(directory)
    except OSError as exc:
        raise TraceDirError(f"trace directory {directory}: {_reason(exc, directory)}") from None
    parts = [n for n in names if n.endswith(".parquet") and not n.startswith(".")]
    if parts or meta.NAME in names:
        raise TraceDirError(f"trace directory {directory}: already holds a trace ({len(parts)} parts); "
                            f"give a new or empty directory")
    visible = sorted(n for n in names if not n.startswith("."))
    if visible:
        raise TraceDirError(f"trace directory {directory}: not empty (holds {visible[0]!r}); "
                            f"give a new or empty directory")


def _reason(exc: OSError, path: str | None = None) -> str:
    if isinstance(exc, FileExistsError):
        return "exists and is not a directory"
    if exc.errno == errno.ENOTDIR and path:
        parent = os.path.dirname(path)
        while parent and not os.path.exists(parent):
            parent = os.path.dirname(parent)
        if parent and not os.path.isdir(parent):
            return f"{parent} is not a directory"
    return (exc.strerror or str(exc)).lower()
