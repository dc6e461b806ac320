"""Part files: their names, merging many small ones into a few large ones, and which to read.

The writer thread writes a small part every flush (`part-NNNNNN.parquet`, numbered in
order); merged, the parts `first` to `last` become one file `part-FIRST-LAST.parquet`.  A
merge writes its file under a hidden name (`.part-FIRST-LAST.parquet.tmp`, which readers
skip), fsyncs it, renames it into place, fsyncs the directory, then unlinks its inputs.
A crash at any point leaves either the inputs alone (and a hidden temporary, removed by
the next merge) or the merged file and some of its inputs: the rule `leftovers` applies
then, that a part whose numbers lie within another's range is already in that other, so
fusetrace's reader skips it and the next merge (or `fusetrace compact`) unlinks it.
Nothing is lost and nothing is read twice.  docs/TRACE_FORMAT.md, "Parts", says what an
outside reader sees meanwhile.

While the mount runs, parts are merged size-tiered, as an LSM tree's levels are: FAN_IN
adjacent files covering as many parts each (a tier: log_FAN_IN of the parts a file
covers) become one of the next tier, so a day of one operation a second (170,000 parts
unmerged) stays at tens of files and each record is rewritten about five times.  At
close, and by `fusetrace compact`, every run of files under the target size is merged
into files of up to `cap_bytes` (128 MiB) or TARGET_ROWS records.
"""

import errno
import fcntl
import json
import logging
import os
import re
import stat
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from .. import processes
from ..errors import UserError
from ..private import NotPrivate, open_private_dir
from ..texttable import count, printable
from . import metadata as meta
from .limits import TARGET_BYTES

log = logging.getLogger(__name__)

PART = re.compile(r"part-(\d{6,})(?:-(\d{6,}))?\.parquet")
FAN_IN = 16  # files of one tier merged into one of the next
TARGET_ROWS = 4 << 20  # a merged file's records at most
ROW_GROUP = 128 << 10  # records per row group of a merged file: fewer, larger reads than the parts' 16,384


def part_name(first: int, last: int) -> str:
    """The name of the file holding parts `first` to `last`."""
    return f"part-{first:06d}.parquet" if first == last else f"part-{first:06d}-{last:06d}.parquet"


def numbers(name: str) -> tuple[int, int] | None:
    """(first, last) of the parts a file of this name holds; None for a name no writer gives."""
    m = PART.fullmatch(name)
    if m is None:
        return None
    first = int(m[1])
    last = first if m[2] is None else int(m[2])
    return (first, last) if first <= last else None


def leftovers(names: Iterable[str]) -> set[str]:
    """The names among `names` whose parts another name's wider range also holds: the inputs
    of a merge that a crash kept from being unlinked (read the merged file instead)."""
    ranges = sorted(((r, n) for n in names if (r := numbers(n)) is not None), key=lambda x: (x[0][0], -x[0][1]))
    covered: set[str] = set()
    reach = -1  # the last part the files so far hold
    for (_, last), name in ranges:
        if last <= reach:
            covered.add(name)
        reach = max(reach, last)
    return covered


@dataclass(frozen=True)
class Part:
    """A part file as a merge plan needs it, from its footer."""

    name: str
    first: int
    last: int
    bytes: int
    rows: int
    min_start: int | None  # start_ns's least and greatest (monotonic ns), None if the footer has no statistics
    max_start: int | None
    schema: pa.Schema

    @property
    def tier(self) -> int:
        """log_FAN_IN of the parts it holds: 0 for a flush's part, 1 for a merge of FAN_IN of them ..."""
        tier, width = 0, self.last - self.first + 1
        while width >= FAN_IN:
            width //= FAN_IN
            tier += 1
        return tier


def describe(name: str, dir_fd: int) -> Part:
    """A part file of the directory `dir_fd`, read from its footer (OSError, ArrowException
    if it cannot be read).  Opened without following a link, as everything made here."""
    first, last = numbers(name) or (0, -1)
    with _open_read(name, dir_fd) as f:
        size = os.fstat(f.fileno()).st_size
        footer = pq.ParquetFile(f).metadata
        lo = hi = None
        if "start_ns" in footer.schema.names:
            column = footer.schema.names.index("start_ns")
            for i in range(footer.num_row_groups):
                st = footer.row_group(i).column(column).statistics
                if st is None or not st.has_min_max:
                    lo = hi = None
                    break
                lo = st.min if lo is None else min(lo, st.min)
                hi = st.max if hi is None else max(hi, st.max)
        return Part(name, first, last, size, footer.num_rows, lo, hi, footer.schema.to_arrow_schema())


def plan(parts: list[Part], cap_bytes: int, cap_span_ns: int | None, final: bool) -> list[list[Part]]:
    """Runs of adjacent files to merge, oldest first, each at most `cap_bytes` and
    TARGET_ROWS (and records at most `cap_span_ns` apart, so that an age limit rotates
    fine-grained).  Running (not `final`): the first run of FAN_IN files of one tier.
    Final: every run of two or more files that fit together."""
    runs: list[list[Part]] = []
    run: list[Part] = []

    def fits(p: Part) -> bool:
        if not run:
            return p.bytes < cap_bytes and p.rows < TARGET_ROWS
        span_ok = cap_span_ns is None or (
            None not in (p.max_start, run[0].min_start) and p.max_start - run[0].min_start <= cap_span_ns  # type: ignore[operator]
        )
        return (
            span_ok
            and p.schema.equals(run[0].schema)
            and (final or p.tier == run[0].tier)
            and sum(q.bytes for q in run) + p.bytes <= cap_bytes
            and sum(q.rows for q in run) + p.rows <= TARGET_ROWS
        )

    for p in parts:
        if not fits(p):
            if final and len(run) > 1:
                runs.append(run)
            run = []
            if not fits(p):
                continue
        run.append(p)
        if not final and len(run) == FAN_IN:
            return [run]
    if final and len(run) > 1:
        runs.append(run)
    return runs


class Damaged(Exception):
    """A part whose pages cannot be read (a merge stops, its inputs kept)."""

    def __init__(self, name: str, why: str):
        super().__init__(f"{name}: not a readable trace part ({why})")
        self.name, self.why = name, why


def merge(dir_fd: int, inputs: list[Part]) -> Part:
    """Merge `inputs` (adjacent, one schema) into one file, as the module says: the merged
    file is in place, and the directory synced, before any input goes.  Each column is
    dictionary-encoded as the inputs' first row group has it, so a merged file is encoded
    as its writer chose."""
    name = part_name(inputs[0].first, inputs[-1].last)
    schema = inputs[0].schema
    first = _open(inputs[0].name, dir_fd)
    try:
        footer = pq.ParquetFile(first).metadata
        dictionary = [
            footer.schema.column(i).path
            for i in range(footer.num_columns)
            if footer.num_row_groups and footer.row_group(0).column(i).has_dictionary_page
        ]
    finally:
        first.close()

    def fill(f: BinaryIO) -> None:
        with pq.ParquetWriter(f, schema, compression="zstd", use_dictionary=dictionary) as out:
            batches: list[pa.RecordBatch] = []
            held = 0
            for p in inputs:
                for batch in _batches(p.name, dir_fd):
                    batches.append(batch)
                    held += batch.num_rows
                    if held >= ROW_GROUP:
                        out.write_table(pa.Table.from_batches(batches, schema), row_group_size=ROW_GROUP)
                        batches, held = [], 0
            if batches:
                out.write_table(pa.Table.from_batches(batches, schema), row_group_size=ROW_GROUP)

    meta.atomic_write(name, fill, dir_fd=dir_fd)
    os.fsync(dir_fd)  # the merged file's name on disk before any input's goes
    merged = describe(name, dir_fd)
    remove(dir_fd, [p.name for p in inputs])
    return merged


def remove(dir_fd: int, names: Iterable[str]) -> None:
    """Unlink `names` (parts merged or rotated out); one already gone is no error."""
    for name in names:
        try:
            os.unlink(name, dir_fd=dir_fd)
        except FileNotFoundError:
            pass


READERS = (
    ".readers"  # a live trace's lock for fusetrace's readers: shared while they read, exclusive while a merge renames
)
READ_WAIT_S = 60  # a reader waits at most this long for a merge (of up to 128 MiB, on a loaded host) to end
_reading: dict[str, int] = {}  # the directories this process reads, and their READERS descriptor, held until exit


def readers_lock(dir_fd: int) -> int:
    """The writer's READERS file, made afresh (mode 0600, exclusively, no link followed):
    its descriptor, for `excluding_readers`."""
    remove(dir_fd, [READERS])
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.open(READERS, flags, 0o600, dir_fd=dir_fd)


@contextmanager
def excluding_readers(fd: int | None) -> Iterator[bool]:
    """Whether no fusetrace reader is reading the trace (then none starts until the block
    ends): a merge or a rotation goes ahead only then, so what a reader listed stays."""
    if fd is None:
        yield True
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        yield False
        return
    try:
        yield True
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def hold_for_reading(directory: str) -> None:
    """Keep the trace's files as they are while this process reads them: a shared lock on
    a live trace's READERS file (waiting out a merge's rename and unlinks), held until the
    process exits.  A finished trace has none: its files no longer change."""
    if directory in _reading:
        return
    try:
        fd = os.open(os.path.join(directory, READERS), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return
    deadline = time.monotonic() + READ_WAIT_S
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        while True:  # bounded: a hostile trace's lock holder must not hold the reader for good
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
    except OSError as exc:
        os.close(fd)
        if isinstance(exc, BlockingIOError):
            log.warning("fusetrace: warning: %s: merged for over %d s; read as is", printable(directory), READ_WAIT_S)
        return
    _reading[directory] = fd


def lock(dir_fd: int) -> bool:
    """Take the trace's lock (an exclusive flock on its directory, held by a writer, or by
    `fusetrace compact`, until it closes the descriptor or dies); False if another holds it."""
    try:
        fcntl.flock(dir_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise
    return True


def _batches(name: str, dir_fd: int) -> Iterator[pa.RecordBatch]:
    """A part's records, ROW_GROUP at a time; Damaged names it if its pages cannot be read
    (an error of the merged file's own writing is not caught here: it is no part's)."""
    with _open(name, dir_fd) as source:
        try:
            yield from pq.ParquetFile(source).iter_batches(batch_size=ROW_GROUP)
        except (OSError, pa.ArrowException) as exc:
            raise Damaged(name, _first_line(exc)) from None


def _open(name: str, dir_fd: int) -> "pa.PythonFile":
    return pa.PythonFile(_open_read(name, dir_fd), mode="r")


def _open_read(name: str, dir_fd: int) -> BinaryIO:
    """The file `name` of the directory `dir_fd`, opened to read, never through a link."""
    return open(os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd), "rb")


class Refused(UserError):
    """`fusetrace compact` will not touch the directory: one line naming it and why."""

    exit_code = 2


def compact_trace(directory: str) -> str:
    """`fusetrace compact DIR`: merge a finished trace's parts as a writer does at close
    (files of up to TARGET_BYTES), first unlinking what a crash left (the inputs of a
    merged file, hidden temporaries).  Refused (Refused) for a directory that is not ours
    or not a trace, a trace a running server holds, or one with a damaged part; each merge
    makes its new file before its inputs go, so a failure loses nothing.  Returns one line
    saying what it did."""
    shown = printable(directory)
    try:
        dir_fd = open_private_dir(directory, create=False)
    except FileNotFoundError:
        raise Refused(f"{shown}: no such trace directory") from None
    except (NotPrivate, OSError) as exc:
        why = str(exc) if isinstance(exc, NotPrivate) else (exc.strerror or str(exc)).lower()
        raise Refused(f"{shown}: {why}") from None
    try:
        running = _running(dir_fd)
        if not lock(dir_fd) or running:  # the lock, or a writer from before it (no end in its metadata)
            pid = running or _pid(dir_fd)
            raise Refused(
                f"{shown}: a running fusetrace server{f' (pid {pid})' if pid else ''} is writing this "
                f"trace; compact it once it is unmounted (its writer merges as it goes)"
            )
        names = os.listdir(dir_fd)
        strangers = sorted(n for n in names if n.endswith(".parquet") and not n.startswith(".") and not numbers(n))
        if strangers:
            raise Refused(f"{shown}: holds {printable(strangers[0])}, which no fusetrace writer names: not a trace")
        found = sorted((n for n in names if numbers(n)), key=lambda n: numbers(n) or (0, 0))
        if not found:
            if meta.NAME in names:
                return f"{shown}: no parts (the mount recorded no operation): nothing to compact"
            raise Refused(f"{shown}: not a trace directory (no part-*.parquet, no {meta.NAME})")
        gone = leftovers(found)
        hidden = [
            n for n in names if n == READERS or (n.startswith(".part-") and n.endswith(".tmp"))
        ]  # a killed writer's
        remove(dir_fd, sorted(gone) + hidden)
        kept = [n for n in found if n not in gone]
        parts = []
        for name in kept:
            try:
                parts.append(describe(name, dir_fd))
            except (OSError, pa.ArrowException) as exc:
                raise Refused(
                    f"{shown}/{printable(name)}: not a readable trace part ({_first_line(exc)}); nothing changed"
                ) from None
        before = sum(p.bytes for p in parts)
        for run in plan(parts, TARGET_BYTES, None, final=True):
            st = os.fstatvfs(dir_fd)
            if st.f_bavail * st.f_frsize < sum(p.bytes for p in run) + (16 << 20):
                raise Refused(
                    f"{shown}: too little free space to merge {len(run)} parts; the parts merged so far are kept"
                )
            i = parts.index(run[0])
            try:
                parts[i : i + len(run)] = [merge(dir_fd, run)]
            except Damaged as exc:
                raise Refused(
                    f"{shown}/{printable(exc.name)}: not a readable trace part ({exc.why}); "
                    f"the parts merged before it are kept, the others as they were"
                ) from None
        after = sum(p.bytes for p in parts)
        return (
            f"{shown}: {count(len(found), 'part file')} now {count(len(parts), 'file')}, "
            f"{count(sum(p.rows for p in parts), 'record')}, {_size(before)} now {_size(after)}"
            + (f" ({count(len(gone), 'leftover')} of an interrupted merge removed)" if gone else "")
        )
    finally:
        os.close(dir_fd)


def _metadata(dir_fd: int) -> dict[str, object]:
    """The trace's metadata as far as it can be read ({} if not)."""
    try:
        with _open_read(meta.NAME, dir_fd) as f:
            data = json.loads(f.read(meta.MAX_BYTES))
    except (OSError, ValueError, RecursionError):  # RecursionError: a hostile file's nesting
        return {}
    return data if isinstance(data, dict) else {}


def _pid(dir_fd: int) -> int | None:
    """The server pid the trace's metadata names, if it can be read."""
    pid = _metadata(dir_fd).get("pid")
    return pid if isinstance(pid, int) else None


def _running(dir_fd: int) -> int | None:
    """The pid of a fusetrace server that may still write the trace although it holds no
    lock (one from before the lock): its metadata has no end and names a live fusetrace."""
    data = _metadata(dir_fd)
    pid = data.get("pid")
    return pid if "end_wall_ns" not in data and processes.is_fusetrace(pid) and isinstance(pid, int) else None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _size(n: int) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 1e6 else f"{n / 1e3:,.1f} kB"
