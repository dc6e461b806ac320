"""The trace's `_metadata.json`, and writing files so readers never see half of one.

The name starts with "_" because pyarrow (so pandas) skips such files when it reads a
directory of Parquet parts; a plain `metadata.json` would be taken for a part and fail the
read.  (Spark does not skip names starting with `_metadata`: docs/TRACE_FORMAT.md says how
to read a trace there.)
"""

import json
import math
import os
import time
from collections.abc import Callable
from typing import Any, BinaryIO

from ..private import read_regular

NAME = "_metadata.json"
# 2: the model's account of each operation (gate, wait_ns ... nfs); 3: the process name and the
# request's details (comm, kind, flags, mode, entry), open's handle in fh, setattr's attributes in
# path2; 4: the fault rule that acted on the operation (fault); 5: the host the trace was taken on
# (host), so that a fleet's traces read as one; 6: names that are not UTF-8 kept exactly
# (path_raw, path2_raw), their text with U+FFFD for those bytes (before: \xNN, ambiguous); 7:
# each record's wall-clock time (time, TIMESTAMP ns UTC) and sampling factor (sample), and the
# records left out by --trace-only and --trace-sample counted per operation (left_out); 8: the
# thread that made each request (tid), and `source` "syscalls" for a trace captured without
# FUSE (`fusetrace capture`: trace_kind)
FORMAT_VERSION = 8


_INT, _NONE, _STR, _DICT, _LIST = (int,), (type(None),), (str,), (dict,), (list,)
# What each key a reader uses must be (JSON's types): a hand-made or hostile file's other
# values are refused in read(), once, rather than each reader meeting them as a traceback.
_TYPES: dict[str, tuple[type, ...]] = {
    **dict.fromkeys(
        (
            "format_version",
            "start_wall_ns",
            "start_monotonic_ns",
            "end_wall_ns",
            "end_monotonic_ns",
            "fuse_round_trip_ns",
            "records",
            "dropped",
            "lost",
            "files",
            "write_errors",
            "pid",
            "merges",
            "rotated",
            "stopped",
            "stopped_at_ns",
        ),
        _INT,
    ),
    **dict.fromkeys(("max_pending", "max_pending_bytes"), _INT + _NONE),
    **dict.fromkeys(("trace_max", "trace_max_age_s", "first_start_ns"), _INT + _NONE),
    **dict.fromkeys(("source", "mountpoint", "host", "hostname", "clock", "locks", "trace_full"), _STR),
    "last_error": _STR + _NONE,
    "flush_interval": (int, float),
    **dict.fromkeys(("options", "versions", "host_load", "left_out", "capture"), _DICT),
    "emulation": _DICT + _NONE,
    **dict.fromkeys(("warnings", "metrics_per_minute", "credits_at_zero", "crashes"), _LIST),
}


# What _metadata.json holds: a JSON object, its keys as docs/TRACE_FORMAT.md lists them (a
# trace's options and counts, and for an emulated mount its metrics: open-ended by design).
Metadata = dict[str, Any]
MAX_BYTES = 64 << 20  # a month's metrics_per_minute is a few MB; more is no trace's
MAX_INT = 2**63  # every integer key is a count, an id or ns below int64's limit
_MOST = {"fuse_round_trip_ns": 2**53}  # a duration, bounded as the records' (reader.MAX_DURATION_NS)


def _checked(data: object) -> Metadata:
    """`data` as read from the file, if each known key has its type (ValueError if not)."""
    if not isinstance(data, dict):
        raise ValueError(f"{NAME} is not a JSON object")
    for key, value in data.items():
        want = _TYPES.get(key)
        if want is None:
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, want)
            or (isinstance(value, float) and not math.isfinite(value))
        ):
            raise ValueError(f"{NAME}: {key} {str(value)[:40]!r}: expected {' or '.join(t.__name__ for t in want)}")
        most = _MOST.get(key, MAX_INT - 1)
        if isinstance(value, int) and not 0 <= value <= most:
            raise ValueError(
                f"{NAME}: {key} {str(value)[:40]}{'...' if len(str(value)) > 40 else ''}: out of range (0 to {most:,})"
            )
    return data


def clock_pair() -> tuple[int, int]:
    """(wall-clock ns, CLOCK_MONOTONIC ns) taken at the same instant, to map trace
    times (monotonic) to wall time: the monotonic reading is the midpoint of two
    taken either side of the wall-clock one."""
    before = time.monotonic_ns()
    wall = time.time_ns()
    after = time.monotonic_ns()
    return wall, (before + after) // 2


def to_wall_ns(metadata: Metadata, monotonic_ns: int) -> int:
    """Wall-clock ns (since the Unix epoch) of a trace time such as start_ns."""
    wall: int = metadata["start_wall_ns"] + (monotonic_ns - metadata["start_monotonic_ns"])
    return wall


def atomic_write(path: str, fill: Callable[[BinaryIO], object], dir_fd: int | None = None) -> None:
    """Write `path` (mode 0600) through a hidden temporary name and rename it into place,
    so a reader sees the whole file or none of it, even after a crash (fsync first).

    With `dir_fd`, `path` is a name in that directory (the TraceWriter's private trace
    directory, where nobody else can create files).  The temporary file is created
    exclusively and never through a symlink (O_EXCL|O_NOFOLLOW)."""
    directory, name = os.path.split(path)
    tmp = os.path.join(directory, f".{name}.tmp")
    try:
        os.unlink(tmp, dir_fd=dir_fd)  # left by a crash: O_EXCL below must create it with our mode
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        with open(fd, "wb") as f:
            fill(f)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise


def write(directory: str, metadata: Metadata, dir_fd: int | None = None) -> None:
    """Write the metadata into `directory` (or, given `dir_fd`, the directory it opens)."""
    data = json.dumps(metadata, indent=2, default=str).encode() + b"\n"
    atomic_write(
        NAME if dir_fd is not None else os.path.join(directory, NAME), lambda f: _write_all(f, data), dir_fd=dir_fd
    )


def read(directory: str) -> Metadata:
    """The trace's metadata; {} if it has none. A corrupt file raises ValueError: not JSON,
    nested too deep for the parser, over MAX_BYTES, or a known key of the wrong type or
    range."""
    try:
        data = read_regular(os.path.join(directory, NAME), MAX_BYTES)
    except FileNotFoundError:
        return {}
    except ValueError as exc:
        raise ValueError(f"{NAME} is {exc}") from None
    try:
        return _checked(json.loads(data))
    except RecursionError:
        raise ValueError(f"{NAME}: nested too deep") from None


def trace_kind(metadata: Metadata) -> str:
    """ "syscalls" for a trace captured by eBPF (`fusetrace capture`), else "fuse"."""
    return "syscalls" if metadata.get("source") == "syscalls" else "fuse"


def capture_lost(metadata: Metadata) -> dict[str, int]:
    """A captured trace's calls the probes counted but whose records never reached the
    capture, by operation (`capture.lost`); {} for none, or for a FUSE trace.  An entry
    that is not a count is left out (the file may be hand-made)."""
    lost = (metadata.get("capture") or {}).get("lost")
    if not isinstance(lost, dict):
        return {}
    return {str(op): n for op, n in lost.items() if isinstance(n, int) and not isinstance(n, bool) and n > 0}


def loss_summary(directory: str | os.PathLike[str]) -> str | None:
    """One line on what a finished trace lost (dropped, lost, failed writes, and whether
    its final metadata was written), from its _metadata.json; None when it lost nothing
    and was closed.  For `fusetrace umount`, once the server has exited.  Imports no
    pyarrow."""
    directory = os.path.abspath(directory)
    try:
        m = read(directory)
    except (OSError, ValueError) as exc:
        return f"trace {directory}: {NAME} unreadable ({exc}): losses unknown"
    if not m:
        return f"trace {directory}: no {NAME}: losses unknown"
    dropped, lost, errors = m.get("dropped") or 0, m.get("lost") or 0, m.get("write_errors") or 0
    closed = "end_wall_ns" in m
    if closed and not (dropped or lost or errors):
        return None
    said = []
    if dropped:
        said.append(
            f"{dropped:,} records dropped (the writer's queue was full, or a field was bad: the "
            f"server's log says which)"
        )
    if lost or errors:
        said.append(f"{lost:,} records lost in {errors:,} failed writes (last: {m.get('last_error')})")
    text = "; ".join(said) or "nothing dropped or lost as of its last flush"
    if not closed:
        text += (
            f"; its final {NAME} was not written (the trace disk full, or the server killed): "
            f"the counts are from an earlier flush"
        )
    return f"trace {directory}: {text}"


def _write_all(f: BinaryIO, data: bytes) -> None:
    f.write(data)
