"""TraceWriter: one record per FUSE operation, written as Parquet parts in the background.

The trio loop only appends a TraceRecord to a deque (`record`); a daemon thread drains it every
`flush_interval` seconds into a new `part-NNNNNN.parquet`, so a record reaches disk
within about a second and a killed server loses at most that.  docs/TRACE_FORMAT.md
describes the files.

Memory is bounded in bytes: records are dropped (and counted) once the queue's estimated
size reaches `max_pending_bytes` (64 MiB), and the writer takes and converts at most
`_ROW_GROUP` records at a time, so a stalled disk costs tens of MiB, not gigabytes.
The counters are each written by one thread: `dropped` and the bytes queued by the loop
(`record`), everything else by the writer thread (and by `close` once it has stopped).

The directory is private (0700, ours, no symlink: see fusetrace/private.py) and every
file is made relative to a descriptor of it, exclusively and never through a link.
"""

import collections
import errno
import logging
import os
import sys
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import UserError
from ..private import NotPrivate, open_private_dir
from . import metadata as meta
from .schema import HOST, RECORD_SCHEMA, SCHEMA, TraceRecord

log = logging.getLogger(__name__)

_ROW = pa.struct(list(RECORD_SCHEMA))
# Rows converted per pyarrow call.  Conversion holds the GIL for the whole call
# (~1 us a row here), so small chunks keep the trio loop from stalling behind it.
_CHUNK = 2048
# Records the writer takes from the queue, converts and writes at a time (one Parquet row
# group each): its own memory stays a few MiB however far behind it is.
_ROW_GROUP = 16_384

# The columns Parquet keeps a dictionary of: the names, and the numbers that repeat by
# nature (a file's inode and handle, sizes, ids, flags).  Times and offsets rarely repeat:
# a dictionary of them costs the writer thread time before Parquet gives up on it, and the
# file bytes (the 100,346 records of a traced fio run with creates and ls -l, written both
# ways: 1.54-1.79 -> 1.40-1.45 µs and 11.1 -> 7.9 bytes per record).
_DICTIONARY = [f.name for f in SCHEMA if pa.types.is_dictionary(f.type) or pa.types.is_string(f.type)] + [
    "inode", "fh", "size", "result", "errno", "pid", "uid", "gid", "flags", "mode", "entry"]

MAX_PENDING_BYTES = 64 << 20
# Disk space held back (a hidden file, freed at close) so that a trace whose disk filled up
# can still write its final _metadata.json, with the counts of what was lost.
_RESERVE = ".reserve"
_RESERVE_BYTES = 64 << 10
# Estimated bytes of one queued record, its path's characters aside.  Measured with
# tracemalloc (20,000 records appended to a deque, CPython 3.11): 592 bytes when every
# int field is its own object (tuple of 20: 216, 13 ints of 28-32, the deque's slot 8)
# and the path shared; a shaped record's account adds 196 (three ints, and the gate's and
# the NFS RPCs' strings made for it).  A path is charged as its own str (49 bytes + 1 a
# character), even when shared with the inode, and the account's two strings as up to 32
# characters between them: the estimate errs high.  Format 3's five request details add
# 40 to the tuple and up to three ints of 32 (flags, mode, entry; comm and kind are
# strings shared per process and per kind): 136.
_RECORD_BYTES = 600 + 56 + 136  # 792, written out in TraceWriter.record
_STR_BYTES = 56
_SHAPED_BYTES = 3 * 32 + 2 * _STR_BYTES + 32  # 240, written out in TraceWriter.record


def _cost(rec: TraceRecord) -> int:
    """Estimated bytes a queued record holds (see _RECORD_BYTES)."""
    path2 = rec.path2
    return (_RECORD_BYTES + len(rec.path or "") + (0 if path2 is None else _STR_BYTES + len(path2))
            + (0 if rec.gate is None else _SHAPED_BYTES))


class TraceDirError(UserError):
    """The trace directory cannot be used; the message is one line naming it and why."""


class TraceWriter:
    def __init__(self, directory: str | os.PathLike, metadata: dict, *, flush_interval: float = 0.5,
                 max_pending: int | None = None, max_pending_bytes: int | None = MAX_PENDING_BYTES):
        """metadata: what _metadata.json says of the trace; its `host` is also every
        record's host column.  max_pending: at most this many records wait (None: no count
        limit); max_pending_bytes: at most this many estimated bytes wait (None: no limit)."""
        self.directory = os.path.abspath(directory)
        self._host = pa.array([str(metadata.get("host") or "")], pa.string())
        self.flush_interval = flush_interval
        self._max_pending = sys.maxsize if max_pending is None else max_pending
        self._max_bytes = sys.maxsize if max_pending_bytes is None else max_pending_bytes
        self._pending: collections.deque[TraceRecord] = collections.deque()
        # the loop's (record) counters
        self.dropped = 0  # refused because the queue was full (max_pending or max_pending_bytes)
        self._bytes_in = 0  # estimated bytes of every record queued
        # the writer thread's counters
        self.records = 0  # written to parts
        self._taken = 0  # taken from the queue to be written
        self._bytes_out = 0  # estimated bytes of every record taken from the queue
        self.lost = 0  # taken from the queue but lost to a failed write
        self.files = 0
        self.write_errors = 0
        self.last_error: str | None = None
        self.final_metadata_written: bool | None = None  # known at close
        self._closed = False
        self._summary: dict = {}

        self._dirfd = _prepare(self.directory)
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
            "max_pending_bytes": max_pending_bytes,
        }
        self._meta_lock = threading.Lock()
        self._meta_dirty = False
        self._meta_counts: tuple[int, int, int] | None = None
        try:
            self._write_metadata()
        except OSError as exc:
            os.close(self._dirfd)
            raise TraceDirError(f"trace directory {self.directory}: {_reason(exc)}") from None
        self._reserved = _reserve(self._dirfd)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fusetrace-trace-writer", daemon=True)
        self._thread.start()

    def record(self, rec: TraceRecord) -> None:
        """Queue one record.  Never blocks: when the queue is full (max_pending records
        or max_pending_bytes waiting), the record is counted in `dropped` instead.
        Called from one thread (the trio loop)."""
        path2 = rec.path2  # _cost(rec), inline: this runs on the loop for every operation
        after = (self._bytes_in + len(rec.path or "") + (792 if path2 is None else 848 + len(path2))
                 + (0 if rec.gate is None else 240))
        if after - self._bytes_out <= self._max_bytes and len(self._pending) < self._max_pending:
            self._pending.append(rec)
            self._bytes_in = after
        else:
            self.dropped += 1

    @property
    def queued(self) -> int:
        """Records waiting for the writer thread."""
        return len(self._pending)

    @property
    def queued_bytes(self) -> int:
        """Estimated bytes of the records waiting (at most max_pending_bytes)."""
        return max(0, self._bytes_in - self._bytes_out)

    @property
    def recorded(self) -> int:
        """Records given so far (and not dropped): written, being written or queued."""
        return self._taken + len(self._pending)

    def stats(self) -> dict:
        """The counters, for `fusetrace stats`."""
        return {"records": self.records, "queued": self.queued, "recorded": self.recorded,
                "queued_bytes": self.queued_bytes,
                "max_pending_bytes": None if self._max_bytes == sys.maxsize else self._max_bytes,
                "dropped": self.dropped, "lost": self.lost, "files": self.files,
                "write_errors": self.write_errors, "last_error": self.last_error}

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
            errors = self.write_errors
            self._final_metadata()
            self.final_metadata_written = self.write_errors == errors
            os.close(self._dirfd)
            self._summary = self._counters()
            log.info("%s", self.closing_line())
        return self._summary

    def closing_line(self) -> str:
        """The counters in one line, as the server logs them at exit."""
        line = (f"trace {self.directory} closed: {self.records:,} records in {self.files:,} parts, "
                f"{self.dropped:,} dropped, {self.lost:,} lost, {self.write_errors:,} failed writes")
        if self.last_error:
            line += f" (last: {self.last_error})"
        if self.final_metadata_written is False:
            line += f"; its final {meta.NAME} could not be written: it holds the counts of an earlier flush"
        return line

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
        n = len(self._pending)  # a part holds what is waiting now; later records wait for the next
        if n:
            self._write_part(n)
        self._flush_metadata()

    def _take(self, n: int) -> list[TraceRecord]:
        popleft = self._pending.popleft
        rows = [popleft() for _ in range(n)]
        self._taken += n
        self._bytes_out += sum(map(_cost, rows))
        return rows

    def _write_part(self, n: int) -> None:
        """Write the next `n` queued records as one part, taken, converted and written
        `_ROW_GROUP` at a time.  A failed write loses all `n` (those not yet taken are
        discarded too: a full disk must not keep the queue full)."""
        taken = 0

        def fill(f) -> None:
            nonlocal taken
            with pq.ParquetWriter(f, SCHEMA, compression="zstd", use_dictionary=_DICTIONARY) as out:
                while taken < n:
                    rows = self._take(min(_ROW_GROUP, n - taken))
                    taken += len(rows)
                    out.write_table(_table(rows, self._host))
                    del rows

        try:
            meta.atomic_write(f"part-{self.files:06d}.parquet", fill, dir_fd=self._dirfd)
        except Exception as exc:  # disk full, directory gone, a bad field: keep serving
            if taken < n:
                self._take(n - taken)
            self._failed(exc, f"{n} records", n)
        else:
            self.files += 1
            self.records += taken

    def _failed(self, exc: Exception, what: str, lost: int = 0) -> None:
        self.write_errors += 1
        self.lost += lost
        text = f"{type(exc).__name__}: {exc}"
        if text != self.last_error:
            log.warning("trace %s: cannot write %s: %s", self.directory, what, text)
        self.last_error = text

    def _counters(self) -> dict:
        return {"records": self.records, "dropped": self.dropped, "lost": self.lost,
                "files": self.files, "write_errors": self.write_errors, "last_error": self.last_error}

    def _final_metadata(self) -> None:
        """The closing metadata write.  On a full disk the space kept in `.reserve` since
        the start is given back for it, so the trace still ends with its counts."""
        try:
            try:
                self._write_metadata()
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or not self._release_reserve():
                    raise
                self._write_metadata()
        except Exception as exc:
            self._failed(exc, meta.NAME)
        self._release_reserve()

    def _release_reserve(self) -> bool:
        if not self._reserved:
            return False
        self._reserved = False
        try:
            os.unlink(_RESERVE, dir_fd=self._dirfd)
        except OSError:
            return False
        return True

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
        meta.write(self.directory, data, dir_fd=self._dirfd)


def _reserve(dirfd: int) -> bool:
    """Keep _RESERVE_BYTES of the trace's disk in a hidden file, for the final metadata."""
    try:
        os.unlink(_RESERVE, dir_fd=dirfd)  # left by a killed server
    except OSError:
        pass
    try:
        fd = os.open(_RESERVE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=dirfd)
    except OSError:
        return False
    try:
        os.posix_fallocate(fd, 0, _RESERVE_BYTES)
        return True
    except OSError:
        try:
            os.unlink(_RESERVE, dir_fd=dirfd)
        except OSError:
            pass
        return False
    finally:
        os.close(fd)


def _table(rows: list[TraceRecord], host: pa.Array) -> pa.Table:
    """Rows to a Table, converted row-wise by pyarrow (measured faster than
    transposing with zip(*rows) and converting column by column), with the trace's
    `host` (a one-value array) as every row's host column."""
    batches = []
    for i in range(0, len(rows), _CHUNK):
        chunk = rows[i:i + _CHUNK]
        try:
            array = pa.array(chunk, type=_ROW)
        except UnicodeEncodeError:  # a name that is not UTF-8 (os.fsdecode's surrogates)
            array = pa.array([_utf8_paths(r) for r in chunk], type=_ROW)
        batches.append(pa.RecordBatch.from_struct_array(array))
    table = pa.Table.from_batches(batches, schema=RECORD_SCHEMA)
    return table.append_column(HOST, pa.DictionaryArray.from_arrays(np.zeros(table.num_rows, np.int32), host))


def _utf8_paths(row: TraceRecord) -> TraceRecord:
    """The row with undecodable bytes in its paths written as \\xNN."""
    path2 = row.path2
    return row._replace(path=_utf8(row.path), path2=None if path2 is None else _utf8(path2))


def _utf8(path: str) -> str:
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _prepare(directory: str) -> int:
    """Create the trace directory (0700; its missing parents as usual) or check an
    existing one: ours, no symlink, writable by nobody else (fusetrace/private.py),
    holding nothing readers would mix up with this trace.  Returns its descriptor."""
    parent = os.path.dirname(directory)
    try:
        os.makedirs(parent, exist_ok=True)
    except FileExistsError:
        raise TraceDirError(f"trace directory {directory}: {parent} is not a directory") from None
    except OSError as exc:
        raise TraceDirError(f"trace directory {directory}: {_reason(exc, directory)}") from None
    try:
        fd = open_private_dir(directory)
    except NotPrivate as exc:
        raise TraceDirError(f"trace directory {directory}: {exc}") from None
    except OSError as exc:
        raise TraceDirError(f"trace directory {directory}: {_reason(exc, directory)}") from None
    try:
        try:
            names = os.listdir(fd)
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
    except BaseException:
        os.close(fd)
        raise
    return fd


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
