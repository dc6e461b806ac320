"""The trace's `_metadata.json`, and writing files so readers never see half of one.

The name starts with "_" because pyarrow (so pandas) and Spark skip such files when
they read a directory of Parquet parts; a plain `metadata.json` would be taken for a
part and fail the read.
"""

import json
import os
import time
from collections.abc import Callable
from typing import BinaryIO

NAME = "_metadata.json"
FORMAT_VERSION = 1


def clock_pair() -> tuple[int, int]:
    """(wall-clock ns, CLOCK_MONOTONIC ns) taken at the same instant, to map trace
    times (monotonic) to wall time: the monotonic reading is the midpoint of two
    taken either side of the wall-clock one."""
    before = time.monotonic_ns()
    wall = time.time_ns()
    after = time.monotonic_ns()
    return wall, (before + after) // 2


def to_wall_ns(metadata: dict, monotonic_ns: int) -> int:
    """Wall-clock ns (since the Unix epoch) of a trace time such as start_ns."""
    return metadata["start_wall_ns"] + (monotonic_ns - metadata["start_monotonic_ns"])


def atomic_write(path: str, fill: Callable[[BinaryIO], None]) -> None:
    """Write `path` (mode 0600) through a hidden temporary name and rename it into place,
    so a reader sees the whole file or none of it, even after a crash (fsync first)."""
    directory, name = os.path.split(path)
    tmp = os.path.join(directory, f".{name}.tmp")
    try:
        os.unlink(tmp)  # left by a crash: O_EXCL below must create it with our mode
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with open(fd, "wb") as f:
            fill(f)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write(directory: str, metadata: dict) -> None:
    data = json.dumps(metadata, indent=2, default=str).encode() + b"\n"
    atomic_write(os.path.join(directory, NAME), lambda f: f.write(data))


def read(directory: str) -> dict:
    """The trace's metadata; {} if it has none. A corrupt file raises ValueError."""
    try:
        with open(os.path.join(directory, NAME), "rb") as f:
            return json.load(f)
    except FileNotFoundError:
        return {}
