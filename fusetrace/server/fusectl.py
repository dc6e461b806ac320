"""Raise a FUSE connection's request limits under /sys/fs/fuse/connections; find the
server's own /dev/fuse descriptor.

The kernel lets only max_background (default 12) asynchronous requests, such
as libaio reads and writes, be outstanding on a connection; past
congestion_threshold it holds more back.  At 12, fio at iodepth 64 gets 12.
"""

import os
import subprocess

CONNECTIONS = "/sys/fs/fuse/connections"


def _ensure_fusectl() -> None:
    if os.path.isdir(CONNECTIONS) and os.listdir(CONNECTIONS):
        return
    with open("/proc/self/mounts", encoding="utf-8", errors="surrogateescape") as f:  # names not UTF-8 too
        if any(line.split()[1] == CONNECTIONS for line in f):
            return
    subprocess.run(["mount", "-t", "fusectl", "fusectl", CONNECTIONS], check=True, capture_output=True, text=True)


def connection(dev_minor: int) -> str:
    """The directory of a connection's counters and limits."""
    return os.path.join(CONNECTIONS, str(dev_minor))


def session_fd() -> int | None:
    """This process's /dev/fuse descriptor, which pyfuse3 keeps to itself (None unless
    exactly one is open): polled to tell whether requests wait for the server, and
    by the reader before it waits (fuseread)."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == "/dev/fuse":
                found.append(int(name))
        except OSError:
            pass  # closed meanwhile (the listing's own descriptor)
    return found[0] if len(found) == 1 else None


def raise_limits(dev_minor: int, max_background: int) -> str | None:
    """Set max_background and congestion_threshold (3/4 of it) for the connection.

    Returns None on success, or why it could not be done (not root, no fusectl).
    """
    try:
        _ensure_fusectl()
        conn = connection(dev_minor)
        for name, value in (("max_background", max_background), ("congestion_threshold", max_background * 3 // 4)):
            with open(os.path.join(conn, name), "w") as f:
                f.write(str(value))
    except (OSError, subprocess.CalledProcessError) as exc:
        return f"could not raise FUSE request limits ({exc}); the kernel keeps 12 in flight"
    return None
