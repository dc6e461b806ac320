"""TraceWriter: one record per FUSE operation, written as Parquet parts in the background.

The trio loop only packs a record into the queue (`add`): its integer fields as one
fixed-size row of a bytearray, its strings as references in a list, a pair of which holds
`_ROW_GROUP` records (a block; the queue is a deque of them).  A daemon thread takes
them every `flush_interval` seconds into a new `part-NNNNNN.parquet`, so a record reaches
disk within about a second and a killed server loses at most that.  Between flushes the
same thread merges parts into fewer, larger files, and at close into files of up to
128 MiB, and keeps the trace within its size and age limits, rotating its oldest files out
or stopping (fusetrace/trace/compact.py).  docs/TRACE_FORMAT.md describes the files.

Packed, a queued record is two short runs of memory instead of a tuple and a dozen int
objects: the loop keeps no object of its own for it, and the writer turns the integer rows
into Arrow columns with numpy rather than reading a Python object per field.  Nothing queued
is moved by the writer: the loop appends each record to the last block, the writer reads
records where they are and lets a block go once it has read all of it.  (Taking from the
front of one growing bytearray instead made the loop copy the whole queue, tens of MiB,
whenever it grew again.)

Memory is bounded in bytes: records are dropped (and counted) once the queue's estimated
size reaches `max_pending_bytes` (64 MiB), and the writer takes and converts at most
`_ROW_GROUP` records at a time, so a stalled disk costs tens of MiB, not gigabytes.
The counters are each written by one thread: `dropped` and the bytes queued by the loop
(`add`), everything else by the writer thread (and by `close` once it has stopped).

The directory is private (0700, ours, no symlink: see fusetrace/private.py; made or
checked by fusetrace/trace/directory.py) and every file is made relative to a descriptor
of it, exclusively and never through a link.
"""

import collections
import errno
import logging
import os
import struct
import sys
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple, TypedDict

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from . import compact, names
from . import metadata as meta
from .directory import RESERVE, TraceDirError, prepare, reason, reserve
from .limits import Limits
from .parts import PartFiles
from .schema import HOST, RAW_NAMES, RECORD_SCHEMA, SAMPLE, SCHEMA, TIME, TraceRecord
from .sources import Account, Operation, Place, Process, User

if TYPE_CHECKING:
    from .capture import Capture

log = logging.getLogger(__name__)

# A queued record's integer fields, packed as one row of `_PACK.size` bytes in the order of
# `_INT_COLUMNS` (native byte order, no padding: numpy reads them back as `_INT_ROWS`), and
# its other fields, `_WIDTH` references a row in the order of `_STR_COLUMNS`.
_INT_CODES = {pa.int64(): "q", pa.uint64(): "Q", pa.int32(): "i", pa.uint32(): "I"}
_INT_COLUMNS = [f for f in RECORD_SCHEMA if f.type in _INT_CODES]
_STR_COLUMNS = [f for f in RECORD_SCHEMA if f.type not in _INT_CODES]
_PACK = struct.Struct("=" + "".join(_INT_CODES[f.type] for f in _INT_COLUMNS))
_INT_ROWS = np.dtype([(f.name, f.type.to_pandas_dtype()) for f in _INT_COLUMNS])
_WIDTH = len(_STR_COLUMNS)
_PATH, _PATH2, _GATE = ([f.name for f in _STR_COLUMNS].index(n) for n in ("path", "path2", "gate"))
# Records in a block of the queue, and the most the writer takes, converts and writes at a
# time (one Parquet row group): its own memory stays a few MiB however far behind it is, and
# no conversion call holds the GIL for long (see docs/BENCHMARKS.md, "Figures behind design
# choices: trace/writer.py").
_ROW_GROUP = 16_384
_BLOCK_REFS = _ROW_GROUP * _WIDTH  # a block's references (and 1.9 MiB of integer rows)
_NONES = (None,) * _BLOCK_REFS

# The columns Parquet keeps a dictionary of: the names, and the numbers that repeat by
# nature (a file's inode and handle, sizes, ids, flags).  Times and offsets rarely repeat:
# a dictionary of them costs the writer thread time before Parquet gives up on it, and the
# file bytes (see docs/BENCHMARKS.md, "Figures behind design choices: trace/writer.py").
_DICTIONARY = [
    f.name for f in SCHEMA if pa.types.is_dictionary(f.type) or pa.types.is_string(f.type) or pa.types.is_binary(f.type)
] + ["inode", "fh", "size", "result", "errno", "pid", "uid", "gid", "flags", "mode", "entry", "tid"]

MAX_PENDING_BYTES = 64 << 20
# Estimated bytes of one queued record, its path's characters aside: its packed row and its
# references, with the eighth more that a growing bytearray and list allocate ahead
# (tests/trace/test_trace_memory.py holds the estimate above what tracemalloc sees).  A path is
# charged as its own str (49 bytes + 1 a character), even when shared with the inode (the
# record keeps it once the inode is forgotten); a second name too.  A shaped record's account
# adds the gate's and the NFS RPCs' strings made for it, charged as up to 32 characters
# between them.  Every other string is one shared by all the records of a process or kind.
_STR_BYTES = 56
_RECORD_BYTES = (_PACK.size + 8 * _WIDTH) * 9 // 8 + _STR_BYTES
_SHAPED_BYTES = 2 * _STR_BYTES + 32


def _cost(strs: list[str | None]) -> int:
    """Estimated bytes of the queued records whose references are `strs` (see _RECORD_BYTES)."""
    path2s = strs[_PATH2::_WIDTH]
    gates = strs[_GATE::_WIDTH]
    return (
        len(gates) * _RECORD_BYTES
        + sum(map(len, filter(None, strs[_PATH::_WIDTH])))
        + sum(_STR_BYTES + len(p) for p in path2s if p is not None)
        + (len(gates) - gates.count(None)) * _SHAPED_BYTES
    )


class Counters(TypedDict):
    """What a writer did: records written, dropped and lost, parts, failed writes."""

    records: int
    dropped: int
    lost: int
    files: int
    write_errors: int
    last_error: str | None


class WriterStats(Counters):
    """Counters, and the queue now, for `fusetrace stats`."""

    queued: int
    recorded: int
    queued_bytes: int
    max_pending_bytes: int | None
    deferred: int


class _Labelled(NamedTuple):
    """A TraceRecord's request, as add reads it (see record)."""

    op: str
    size: int
    label: str | None


class TraceWriter:
    def __init__(
        self,
        directory: str | os.PathLike[str],
        metadata: meta.Metadata,
        *,
        flush_interval: float = 0.5,
        max_pending: int | None = None,
        max_pending_bytes: int | None = MAX_PENDING_BYTES,
        capture: "Capture | None" = None,
        limits: Limits | None = None,
    ):
        """metadata: what _metadata.json says of the trace; its `host` is also every
        record's host column.  max_pending: at most this many records wait (None: no count
        limit); max_pending_bytes: at most this many estimated bytes wait (None: no limit).
        capture: the --trace-only and --trace-sample settings the loop applies (Pipeline),
        whose counts of records left out the metadata keeps and whose rates fill `sample`.
        limits: the trace's size and age, and what happens there (None: none)."""
        self.directory = os.path.abspath(directory)
        self._host = pa.array([str(metadata.get("host") or "")], pa.string())
        self.flush_interval = flush_interval
        self._max_pending = sys.maxsize if max_pending is None else max_pending
        self._max_bytes = sys.maxsize if max_pending_bytes is None else max_pending_bytes
        # The queue: blocks of _ROW_GROUP records, appended to by the loop only (add: the last
        # block) and read by the writer only (_take: from record `_read` of the first block
        # on).  The loop counts a record in `_added` once all of it is in place, and the
        # writer reads only records counted there.
        self._ints = bytearray()
        self._strs: list[str | None] = []
        self._blocks = collections.deque([(self._ints, self._strs)])
        self._read = 0
        self._added = 0  # records queued so far (the loop's)
        self._bad_field: str | None = None  # the last bad field warned of (the loop's)
        # the loop's (add) counters
        self.dropped = 0  # refused: the queue was full (max_pending, max_pending_bytes), closed, or a field bad
        self._bytes_in = 0  # estimated bytes of every record queued
        # the writer thread's counters
        self.records = 0  # written to parts
        self._taken = 0  # taken from the queue to be written
        self._bytes_out = 0  # estimated bytes of every record taken from the queue
        self.lost = 0  # taken from the queue but lost to a failed write
        self.files = 0
        self.write_errors = 0
        self.deferred = 0  # writes put off for want of a descriptor: their records kept, written later
        self._deferring = False  # the last write was put off (warned once a run)
        self.last_error: str | None = None
        self.final_metadata_written: bool | None = None  # known at close
        self._closed = False
        self._summary: Counters | None = None
        limits = limits or Limits()

        self._dirfd = prepare(self.directory)
        self.capture = capture
        compact.lock(self._dirfd)  # held until close: `fusetrace compact` refuses a trace being written
        wall, mono = meta.clock_pair()
        self._meta: meta.Metadata = {
            "start_wall_ns": wall,
            "start_monotonic_ns": mono,
            **metadata,
            "format_version": meta.FORMAT_VERSION,
            "clock": "CLOCK_MONOTONIC",
            "flush_interval": flush_interval,
            "max_pending": max_pending,
            "max_pending_bytes": max_pending_bytes,
            **limits.metadata(),
        }
        # (the metadata's clock pair, as given or taken now: records' time agrees with it)
        offset = self._meta["start_wall_ns"] - self._meta["start_monotonic_ns"]
        self._derived = _Derived(self._host, offset, capture.factors if capture else {})
        # pyarrow's first conversion imports pandas, GIL held: pay it now, not mid-trace
        # (see docs/BENCHMARKS.md, "Figures behind design choices: trace/writer.py")
        _table(b"", [], self._derived)
        self._files = PartFiles(self.directory, self._dirfd, limits, mono)
        self._file_counts: dict[str, int] = {}
        self._meta_lock = threading.Lock()
        self._meta_dirty = False
        self._meta_counts: tuple[int, ...] | None = None
        try:
            self._write_metadata()
        except OSError as exc:
            os.close(self._dirfd)
            raise TraceDirError(f"trace directory {self.directory}: {reason(exc)}") from None
        self._reserved = reserve(self._dirfd)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fusetrace-trace-writer", daemon=True)
        self._thread.start()

    def add(
        self,
        start_ns: int,
        dur_ns: int,
        request: Operation,
        site: Place,
        user: User,
        process: Process,
        model: Account,
        fh: int,
        result: int,
        errno: int,
        flags: int,
        mode: int,
        entry: int,
        shaped_ns: int,
        fault: str | None,
    ) -> None:
        """Queue one record, each column read from the attribute or the parameter of its name
        (see sources.py).  Never blocks: when the queue is full (max_pending records or
        max_pending_bytes waiting), the record is counted in `dropped` instead, as is one
        with a field its column cannot hold (with a warning: that is a bug).  Called from
        one thread (the trio loop).  What the caller works out (fh to fault) comes by
        position, each given as a name of the same spelling (tests/checks/test_where_to_add.py):
        as keywords they would cost every record about 100 ns more (docs/BENCHMARKS.md,
        "Figures behind design choices: trace/writer.py")."""
        path, path2, gate = site.path, site.path2, model.gate
        after = (
            self._bytes_in
            + _RECORD_BYTES
            + len(path or "")  # _cost, inline: this runs for every operation
            + (0 if path2 is None else _STR_BYTES + len(path2))
            + (0 if gate is None else _SHAPED_BYTES)
        )
        if after - self._bytes_out <= self._max_bytes and self._added - self._taken < self._max_pending:
            try:
                row = _PACK.pack(
                    start_ns,
                    dur_ns,
                    site.inode,
                    fh,
                    site.offset,
                    request.size,
                    result,
                    errno,
                    process.pid,
                    user.uid,
                    user.gid,
                    shaped_ns,
                    model.wait_ns,
                    model.latency_ns,
                    model.transfer_ns,
                    flags,
                    mode,
                    entry,
                    process.tid,
                )  # as _INT_COLUMNS
            except struct.error as exc:
                self._bad(request.op, exc)
                return
            strs = self._strs
            if len(strs) == _BLOCK_REFS:
                strs = self._next_block()
            self._ints += row
            kind = request.label  # the kind column: the request's kind, a write's by its mode
            strs.extend((request.op, path, path2, gate, model.nfs, process.comm, kind, fault))  # as _STR_COLUMNS
            self._bytes_in = after
            self._added += 1  # last: the writer may take it from now on
        else:
            self.dropped += 1

    def _next_block(self) -> list[str | None]:
        """Start a new block for the records to come (the loop's); its references."""
        self._ints, self._strs = bytearray(), []
        self._blocks.append((self._ints, self._strs))
        return self._strs

    def _bad(self, op: str, exc: struct.error) -> None:
        """A record with a field its column cannot hold (a bug): dropped, and said unless said last."""
        self.dropped += 1
        text = f"a {op} record was dropped: {exc}"
        if text != self._bad_field:
            self._bad_field = text
            log.warning("trace %s: %s", self.directory, text)

    def record(self, rec: TraceRecord) -> None:
        """Queue one record given as a TraceRecord (tests, benchmarks): it is all of add's
        parts itself, but that it names the request's kind `kind`."""
        self.add(
            rec.start_ns,
            rec.dur_ns,
            _Labelled(rec.op, rec.size, rec.kind),
            rec,
            rec,
            rec,
            rec,
            rec.fh,
            rec.result,
            rec.errno,
            rec.flags,
            rec.mode,
            rec.entry,
            rec.shaped_ns,
            rec.fault,
        )

    @property
    def queued(self) -> int:
        """Records waiting for the writer thread."""
        return self._added - self._taken

    @property
    def queued_bytes(self) -> int:
        """Estimated bytes of the records waiting (at most max_pending_bytes)."""
        return max(0, self._bytes_in - self._bytes_out)

    @property
    def recorded(self) -> int:
        """Records given so far (and not dropped): written, being written or queued."""
        return self._added

    def stats(self) -> WriterStats:
        """The counters, for `fusetrace stats`."""
        return {
            "records": self.records,
            "queued": self.queued,
            "recorded": self.recorded,
            "queued_bytes": self.queued_bytes,
            "max_pending_bytes": None if self._max_bytes == sys.maxsize else self._max_bytes,
            "dropped": self.dropped,
            "lost": self.lost,
            "files": self.files,
            "write_errors": self.write_errors,
            "deferred": self.deferred,
            "last_error": self.last_error,
        }

    def update_metadata(self, **extra: Any) -> None:
        """Add keys to _metadata.json; they are written at the next flush or at close."""
        with self._meta_lock:
            self._meta.update(extra)
            self._meta_dirty = True

    def close(self) -> Counters:
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
            self._files.close()
            os.close(self._dirfd)
            self._summary = self._counters()
            log.info("%s", self.closing_line())
        assert self._summary is not None
        return self._summary

    def closing_line(self) -> str:
        """The counters in one line, as the server logs them at exit."""
        line = (
            f"trace {self.directory} closed: {self.records:,} records in {self.files:,} parts, "
            f"{self.dropped:,} dropped, {self.lost:,} lost, {self.write_errors:,} failed writes"
        )
        if self.last_error:
            line += f" (last: {self.last_error})"
        if self.final_metadata_written is False:
            line += f"; its final {meta.NAME} could not be written: it holds the counts of an earlier flush"
        return line

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, *exc: object) -> None:
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
        self._flush(last=True)

    def _flush(self, last: bool = False) -> None:
        n = self.queued  # a part holds what is waiting now; later records wait for the next
        if n and self._files.full:
            self._discard(n)
        elif n:
            self._write_part(n, last)
        self._files.merge(final=last)
        counts = self._files.counts()
        if counts != self._file_counts:
            self._file_counts = counts
            self.update_metadata(**counts)
        self._flush_metadata()

    def _discard(self, n: int) -> None:
        """Take `n` records off the queue unwritten: the trace is full (--trace-full stop)."""
        for count, _, _ in self._row_groups(n):
            self._files.stopped += count

    def _take(self, n: int) -> tuple[bytes, list[str | None]]:
        """The next `n` queued records, taken off the queue: their packed integers and
        their references.  Their references in the block are cleared (the same number of
        Nones: the loop may be extending the list), so that what they alone kept alive goes
        now; their integer rows stay until the block goes (at most 1.9 MiB)."""
        ints, strs = [], []
        left = n
        while left:
            block_ints, block_strs = self._blocks[0]
            first = self._read
            last = min(first + left, _ROW_GROUP)
            ints.append(block_ints[first * _PACK.size : last * _PACK.size])  # a copy: a view would stop it growing
            refs = slice(first * _WIDTH, last * _WIDTH)
            strs += block_strs[refs]
            block_strs[refs] = _NONES[: refs.stop - refs.start]  # its paths go with it, not with the block
            left -= last - first
            if last == _ROW_GROUP:  # all of it read: the loop has moved on to another block
                self._blocks.popleft()
                last = 0
            self._read = last
        self._taken += n
        self._bytes_out += _cost(strs)
        return b"".join(ints), strs

    def _row_groups(self, n: int) -> Iterator[tuple[int, bytes, list[str | None]]]:
        """The next `n` queued records, taken `_ROW_GROUP` at a time as they are asked for:
        (how many, their packed integers, their references)."""
        while n:
            count = min(_ROW_GROUP, n)
            n -= count
            yield count, *self._take(count)

    def _write_part(self, n: int, last: bool = False) -> None:
        """Write the next `n` queued records as one part, taken, converted and written
        `_ROW_GROUP` at a time.  A failed write loses all `n` (those not yet taken are
        discarded too: a full disk must not keep the queue full), but for one that found
        no descriptor to open the part with: its records stay queued for the next flush,
        unless this is the `last`."""
        taken = 0

        def fill(f: BinaryIO) -> None:
            nonlocal taken
            with pq.ParquetWriter(f, SCHEMA, compression="zstd", use_dictionary=_DICTIONARY) as out:
                for count, rows, strs in self._row_groups(n):
                    taken += count
                    out.write_table(_table(rows, strs, self._derived))
                    del rows, strs  # before the next group is taken

        name = compact.part_name(self.files, self.files)
        try:
            meta.atomic_write(name, fill, dir_fd=self._dirfd)
        except Exception as exc:  # disk full, directory gone: keep serving
            if taken == 0 and not last and _no_descriptor(exc):
                self._defer(exc)  # nothing taken yet: the records wait for the next flush
                return
            for _ in self._row_groups(n - taken):
                pass
            self._failed(exc, f"{n} records", n)
        else:
            self.files += 1
            self.records += taken
            self._deferring = False
            try:
                self.records -= self._files.added(name)
            except Exception as exc:  # written, but its footer unreadable now: left out of merges and limits
                self._failed(exc, f"{name}'s footer")

    def _defer(self, exc: Exception) -> None:
        """A write put off for want of a descriptor (the server's are shared out so that
        this is rare: fusetrace/server/fdbudget.py); said once a run of them."""
        self.deferred += 1
        if not self._deferring:
            self._deferring = True
            log.warning("trace %s: no descriptor free (%s): writes put off, their records kept", self.directory, exc)

    def _failed(self, exc: Exception, what: str, lost: int = 0) -> None:
        self.write_errors += 1
        self.lost += lost
        text = f"{type(exc).__name__}: {exc}"
        if text != self.last_error:
            log.warning("trace %s: cannot write %s: %s", self.directory, what, text)
        self.last_error = text

    def _counters(self) -> Counters:
        return {
            "records": self.records,
            "dropped": self.dropped,
            "lost": self.lost,
            "files": self.files,
            "write_errors": self.write_errors,
            "last_error": self.last_error,
        }

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
            os.unlink(RESERVE, dir_fd=self._dirfd)
        except OSError:
            return False
        return True

    def _flush_metadata(self) -> None:
        """Rewrite the metadata if keys were added or something went wrong since the
        last write, so a killed server's metadata still tells of drops and errors."""
        if not self._meta_dirty and self._counts() == self._meta_counts:
            return
        try:
            self._write_metadata()
        except Exception as exc:
            if _no_descriptor(exc):
                self._meta_dirty = True  # written at the next flush
                self._defer(exc)
            else:
                self._failed(exc, meta.NAME)

    def _write_metadata(self) -> None:
        counters = self._counters()
        counts = self._counts()
        with self._meta_lock:
            data = {**self._meta, **counters}
            self._meta_dirty = False
        if self.capture is not None:
            data["left_out"] = self.capture.left_out()
        self._meta_counts = counts
        meta.write(self.directory, data, dir_fd=self._dirfd)

    def _counts(self) -> tuple[int, ...]:
        """What the metadata must be rewritten for when it changes: drops, losses, failed
        writes, records left out (kept up to date, so a killed server's metadata tells)."""
        left = self.capture
        out = (self.dropped, self.lost, self.write_errors)
        return out if left is None else (*out, sum(left.filtered.values()), sum(left.sampled.values()))


def _no_descriptor(exc: Exception) -> bool:
    """The process (EMFILE) or the system (ENFILE) had no descriptor free."""
    return isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE)


class _Derived(NamedTuple):
    """What the writer adds to the loop's records at conversion: the trace's host (a
    one-value array), the wall clock's offset from CLOCK_MONOTONIC (ns), and the
    sampled operations' factors."""

    host: pa.Array
    wall_offset_ns: int
    factors: dict[str, int]


def _table(rows: bytes, strs: list[str | None], derived: _Derived) -> pa.Table:
    """Queued records to a Table: the integer columns read from the packed rows by numpy,
    the others converted a column at a time, with the trace's `host` as every row's host
    column, `time` the wall clock of start_ns and `sample` the factor of each record's op.
    A text that is not UTF-8 is stored with U+FFFD for those bytes, and a name's bytes
    also in its raw column (null for the others)."""
    ints = np.frombuffer(rows, _INT_ROWS)
    n = len(ints)
    columns = {f.name: pa.array(ints[f.name], f.type) for f in _INT_COLUMNS}
    columns.update((f.name, pa.nulls(n, f.type)) for f in RAW_NAMES)
    for i, f in enumerate(_STR_COLUMNS):
        values = strs[i::_WIDTH]
        try:
            columns[f.name] = pa.array(values, f.type)
        except UnicodeEncodeError:  # a name that is not UTF-8 (os.fsdecode's surrogates): rare, so slower
            kept = [(None, None) if v is None else names.stored(v) for v in values]
            columns[f.name] = pa.array([text for text, _ in kept], f.type)
            if f.name in names.RAW:
                columns[names.RAW[f.name]] = pa.array([raw for _, raw in kept], pa.binary())
    columns[HOST.name] = pa.DictionaryArray.from_arrays(np.zeros(n, np.int32), derived.host)
    columns[TIME.name] = pa.array(ints["start_ns"] + derived.wall_offset_ns, TIME.type)
    columns[SAMPLE.name] = pa.array(_factors(columns["op"], derived.factors), SAMPLE.type)
    return pa.table([columns[name] for name in SCHEMA.names], schema=SCHEMA)


def _factors(ops: pa.DictionaryArray, factors: dict[str, int]) -> np.ndarray:
    """The sample column: each record's op's factor (1 when not sampled), looked up once
    per distinct op and spread to the records by their dictionary indices."""
    if not factors:
        return np.ones(len(ops), np.uint32)
    lookup = np.array([factors.get(op, 1) for op in ops.dictionary.to_pylist()], np.uint32)
    out: np.ndarray = lookup[ops.indices.to_numpy(zero_copy_only=False)]
    return out
