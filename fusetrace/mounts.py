"""What the kernel says about mounts: /proc/self/mountinfo and mountpoint states."""

import errno
import os
from dataclasses import dataclass

FSTYPE = "fuse.fusetrace"


@dataclass(frozen=True)
class MountInfo:
    mountpoint: str
    fstype: str
    source: str
    dev_minor: int


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def canonical(path: str) -> str:
    """An absolute path with symlinks resolved in all but its last part, so the mount
    itself is never touched (a stat of a live mount from its own server deadlocks)."""
    path = os.path.abspath(path)
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def mounted_at(path: str) -> MountInfo | None:
    """The topmost mount whose mount point is exactly `path` (absolute), if any."""
    found = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = left.split()
            if _unescape(fields[4]) != path:
                continue
            fstype, source = right.split()[:2]
            found = MountInfo(path, fstype, _unescape(source), int(fields[2].split(":")[1]))
    return found


def fstype_of(path: str) -> str:
    """The type of the file system holding `path` (absolute, resolved): that of the
    longest mount point above it."""
    best, fstype = -1, ""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            point = _unescape(left.split()[4])
            inside = path == point or path.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= best:
                best, fstype = len(point), right.split()[0]
    return fstype


def stale(path: str) -> bool:
    """True when a FUSE server has gone away and left its mount behind."""
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ENOTCONN
    return False
