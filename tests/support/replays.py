"""Traces for replay's tests: synthetic records as the mount writes them, a replay's
--json summary, and a tree's entries to compare."""

import json
import os
import stat
from pathlib import Path

from fusetrace.trace.schema import TraceRecord
from fusetrace.trace.writer import TraceWriter

from . import fusetrace_here

MS = 1_000_000
RDONLY = os.O_RDONLY | os.O_LARGEFILE
DIRECT = RDONLY | os.O_DIRECT  # every read reaches the mount (its direct_io)
CREATE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_LARGEFILE


def rec(
    at_ms: float,
    op: str,
    path: str,
    *,
    dur_ms: float = 1,
    path2: str | None = None,
    fh: int = 0,
    offset: int = 0,
    size: int = 0,
    result: int = 0,
    err: int = 0,
    pid: int = 100,
    flags: int = 0,
    mode: int = 0,
) -> TraceRecord:
    """A record as the mount writes one, `at_ms` into the trace."""
    return TraceRecord(
        10**12 + int(at_ms * MS),
        int(dur_ms * MS),
        op,
        1,
        path,
        path2,
        fh,
        offset,
        size,
        result,
        err,
        pid,
        os.getuid(),
        os.getgid(),
        0,
        comm="test",
        flags=flags,
        mode=mode,
    )


def synthetic(directory: Path, records: list[TraceRecord]) -> Path:
    with TraceWriter(directory, {"source": "/src", "mountpoint": "/mnt"}, flush_interval=3600) as w:
        for r in records:
            w.record(r)
    return directory


def replay(trace: Path, target: Path, *options: str, check: bool = True) -> dict:
    done = fusetrace_here("replay", str(trace), str(target), *options, "--json", check=check)
    return json.loads(done.stdout)


def tree(root: Path) -> dict[str, tuple]:
    """Every entry below root: its type, permissions and size (a link: its target)."""
    out = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        what = os.readlink(path) if path.is_symlink() else (st.st_size if stat.S_ISREG(st.st_mode) else None)
        out[str(path.relative_to(root))] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), what)
    return out
