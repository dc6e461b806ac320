"""A trace's data operations as a fio iolog, version 3, that `fio --read_iolog` replays.

The format, as fio (3.31 and later) reads it (iolog.c, read_iolog):

    fio version 3 iolog
    TIMESTAMP NAME add|open|close
    TIMESTAMP NAME read|write|sync|datasync OFFSET LENGTH

TIMESTAMP is in microseconds (fio sleeps the difference between a line's and the previous
line's); a line split on white space (sscanf "%llu %256s %256s %llu %u").  Here it counts
from the trace's first operation, and is at least 1: fio gives the line after a timestamp
of 0 no delay at all.  NAME is the trace's path without its leading "/", so fio resolves
it against the directory it runs in (`--directory` cannot be used: fio adds it to the name
on `add` but looks the bare name up for every later line, and crashes).  NAME is written
as the exact bytes of the traced name, UTF-8 or not (fio reads the file as bytes and opens
what it reads), so the iolog is not always UTF-8 text.

Reads and writes keep their offsets and the bytes they moved (`result`: a read past the
end of the file fails fio's job, so a read's length is what it returned, not what was
asked); fsync is `sync` (the trace does not say which fsyncs were fdatasync).  A file is
added and opened at its traced open or create (or at its first operation, when the trace
holds no open for its handle) and closed at the release of its last handle, so a file
two processes hold open is opened once.  Opens of files the trace never reads, writes or
syncs are left out: fio would open (and create) them for nothing.  A captured trace
(`source` "syscalls") has no release: its handle is closed at its last close(2), its
last flush (rows.last_closes).
"""

import os
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import TextIO

import duckdb

from ..texttable import count
from ..trace import names, reader
from .rows import Outcome, examples, last_close

COLUMNS = ["start_ns", "op", "path", "fh", "offset", "result", "errno"]
WHERE = "op in ('open', 'create', 'release', 'flush', 'read', 'write', 'fsync')"
NAME_MAX = 256  # sscanf's "%256s" in read_iolog
_SPACE = frozenset(" \t\n\v\f\r")  # isspace() in the C locale fio parses in
_SHOWN = 3  # names quoted per reason a name is left out


def unfit(name: str) -> str | None:
    """Why fio cannot take `name` (a path without its leading "/"), or None."""
    if any(part in ("", ".", "..") for part in name.split("/")):  # fio would reach outside its directory
        return "a '.', '..' or empty component, or no leading '/' (fio would reach outside its directory)"
    if _SPACE.intersection(name):
        return "white space (fio splits iolog lines on it)"
    if len(os.fsencode(name)) > NAME_MAX:
        return f"longer than {NAME_MAX} bytes (fio reads at most that much of a name)"
    return None


def survey(trace_dir: str) -> tuple[int, set[str]]:
    """When the trace's first operation started, and the paths it reads, writes or syncs
    successfully: the files whose opens matter.  A pass of its own, before the ordered
    one, because an open comes before the operations that show it mattered."""
    db = duckdb.connect()
    try:
        db.read_parquet(reader.checked_parts(trace_dir), union_by_name=True).create_view("trace")
        first = db.execute("select min(start_ns) from trace").fetchone()
        have = {row[0] for row in db.execute("describe trace").fetchall()}
        raw = "path_raw" if "path_raw" in have else "null"  # format 6
        paths = db.execute(
            f"select distinct path, {raw} from trace where op in ('read', 'write', 'fsync') and errno = 0"
        ).fetchall()
    finally:
        db.close()
    assert first is not None  # an aggregate always has its one row
    return first[0], {names.exact(path, raw) for path, raw in paths}


class _Log:
    """fio's view of the files: each added once, opened while any traced handle is."""

    def __init__(self, out: TextIO):
        self.out = out
        self.added: set[str] = set()
        self.holders: dict[str, int] = {}  # name -> traced handles open on it
        self.handles: dict[int, str] = {}  # traced handle -> name fio knows it by
        self.written: set[str] = set()
        self.needed: dict[str, int] = {}  # read before the log writes it -> bytes it must have
        self.counts = {"read": 0, "write": 0, "sync": 0}
        self.bytes = {"read": 0, "write": 0}

    def open(self, ts: int, fh: int, name: str) -> None:
        if fh in self.handles:  # its release is missing from the trace
            self.release(ts, fh)
        if name not in self.added:
            self.added.add(name)
            self.out.write(f"{ts} {name} add\n")
        if not self.holders.get(name):
            self.out.write(f"{ts} {name} open\n")
        self.holders[name] = self.holders.get(name, 0) + 1
        self.handles[fh] = name

    def release(self, ts: int, fh: int) -> None:
        name = self.handles.pop(fh, None)
        if name is None:
            return
        self.holders[name] -= 1
        if not self.holders[name]:
            self.out.write(f"{ts} {name} close\n")

    def io(self, ts: int, name: str, op: str, offset: int, length: int) -> None:
        if op == "fsync":
            self.counts["sync"] += 1
            self.out.write(f"{ts} {name} sync 0 0\n")
            return
        self.counts[op] += 1
        self.bytes[op] += length
        if op == "write":
            self.written.add(name)
        elif name not in self.written:
            self.needed[name] = max(self.needed.get(name, 0), offset + length)
        self.out.write(f"{ts} {name} {op} {offset} {length}\n")


def write(
    rows: Iterable[tuple], out: TextIO, t0: int, wanted: set[str], closes: dict[int, int] | None = None
) -> Outcome:
    """Write the iolog of `rows` (COLUMNS, in start order) to `out`, its timestamps
    counted from `t0` (ns); `wanted`: the paths whose opens are kept (see survey);
    `closes`: a captured trace's rows.last_closes (None: a FUSE trace's, closed at release)."""
    log = _Log(out)
    out.write("fio version 3 iolog\n")
    refused: dict[str, dict[str, None]] = {}  # reason -> the names, in the order first met
    refused_ops = failed = 0
    for start_ns, op, path, fh, offset, result, errno in rows:
        ts = max(1, (start_ns - t0) // 1000)
        name = path[1:] if path.startswith("/") else f"/{path}"  # a path not from the root: refused
        if op == "release" or (op == "flush" and closes is not None and last_close(closes, fh, start_ns)):
            log.release(ts, fh)
        elif op == "flush":
            continue  # a FUSE trace's close(2) of one descriptor, or a captured one's not last
        elif op in ("open", "create"):
            fh = fh or (result if op == "open" else 0)  # format 2 kept open's handle in result
            if not errno and fh and path in wanted and unfit(name) is None:
                log.open(ts, fh, name)
        elif errno or (op != "fsync" and result <= 0):
            failed += 1  # nothing moved: a failed call, or a read at the end of the file
        else:
            if fh not in log.handles:
                reason = unfit(name)
                if reason is not None:
                    refused.setdefault(reason, {})[name] = None
                    refused_ops += 1
                    continue
                log.open(ts, fh, name)
            log.io(ts, log.handles[fh], op, offset, result)
    c, b = log.counts, log.bytes
    summary = (
        f"fio iolog v3: {count(c['read'], 'read')} ({b['read']:,} bytes), {count(c['write'], 'write')} "
        f"({b['write']:,} bytes), {count(c['sync'], 'sync')} on {count(len(log.added), 'file')}"
    )
    folders = sorted({os.path.dirname(n) for n in log.added} - {""})
    return Outcome(summary, list(_notes(refused, refused_ops, failed, log.needed, folders)))


def _notes(
    refused: dict[str, dict[str, None]], refused_ops: int, failed: int, needed: dict[str, int], folders: list[str]
) -> Iterator[str]:
    if refused:
        files = sum(len(names) for names in refused.values())
        yield f"left out {count(refused_ops, 'operation')} whose file names fio cannot take ({count(files, 'file')}):"
        for reason, names in refused.items():
            yield f"  {len(names):,} with {reason}: {examples([repr(n) for n in islice(names, _SHOWN)], len(names))}"
    if failed:
        yield f"left out {count(failed, 'operation')} (read, write, fsync) that failed or moved no bytes"
    if needed:
        first = sorted(needed)[:_SHOWN]
        yield (
            f"the directory fio replays in must hold {count(len(needed), 'file')} the log reads before it "
            f"writes them, each at least as large as read: "
            + examples([f"{n!r} ({needed[n]:,} bytes)" for n in first], len(needed))
        )
    if folders:
        n = len(folders)
        yield (
            f"fio makes the files the log writes first, not directories: the directory it replays in must "
            f"hold {n:,} director{'y' if n == 1 else 'ies'} (mkdir -p): "
            + examples([repr(d) for d in folders[:_SHOWN]], n)
        )
