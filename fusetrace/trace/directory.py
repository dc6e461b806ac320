"""The trace directory: made, or an existing one checked to be private and empty, and a
little of its disk held back so that a trace whose disk fills up can still write its final
metadata.

Apart from fusetrace/trace/writer.py, which writes the trace into it: this is the part a
bad --trace-dir meets first (TraceDirError, one line naming the directory and why).
"""

import errno
import os

from ..errors import UserError
from ..private import NotPrivate, open_private_dir
from . import metadata as meta

# Disk space held back (a hidden file, freed at close) so that a trace whose disk filled up
# can still write its final _metadata.json, with the counts of what was lost.
RESERVE = ".reserve"
RESERVE_BYTES = 64 << 10


class TraceDirError(UserError):
    """The trace directory cannot be used; the message is one line naming it and why."""


def reserve(dirfd: int) -> bool:
    """Keep RESERVE_BYTES of the trace's disk in a hidden file, for the final metadata."""
    try:
        os.unlink(RESERVE, dir_fd=dirfd)  # left by a killed server
    except OSError:
        pass
    try:
        fd = os.open(RESERVE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dirfd)
    except OSError:
        return False
    try:
        os.posix_fallocate(fd, 0, RESERVE_BYTES)
        return True
    except OSError:
        try:
            os.unlink(RESERVE, dir_fd=dirfd)
        except OSError:
            pass
        return False
    finally:
        os.close(fd)


def prepare(directory: str) -> int:
    """Create the trace directory (0700; its missing parents as usual) or check an
    existing one: ours, no symlink, writable by nobody else (fusetrace/private.py),
    holding nothing readers would mix up with this trace.  Returns its descriptor."""
    parent = os.path.dirname(directory)
    try:
        os.makedirs(parent, exist_ok=True)
    except FileExistsError:
        raise TraceDirError(f"trace directory {directory}: {parent} is not a directory") from None
    except OSError as exc:
        raise TraceDirError(f"trace directory {directory}: {reason(exc, directory)}") from None
    try:
        fd = open_private_dir(directory)
    except NotPrivate as exc:
        raise TraceDirError(f"trace directory {directory}: {exc}") from None
    except OSError as exc:
        raise TraceDirError(f"trace directory {directory}: {reason(exc, directory)}") from None
    try:
        try:
            names = os.listdir(fd)
        except OSError as exc:
            raise TraceDirError(f"trace directory {directory}: {reason(exc, directory)}") from None
        parts = [n for n in names if n.endswith(".parquet") and not n.startswith(".")]
        if parts or meta.NAME in names:
            raise TraceDirError(
                f"trace directory {directory}: already holds a trace ({len(parts)} parts); "
                f"give a new or empty directory"
            )
        visible = sorted(n for n in names if not n.startswith("."))
        if visible:
            raise TraceDirError(
                f"trace directory {directory}: not empty (holds {visible[0]!r}); give a new or empty directory"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def reason(exc: OSError, path: str | None = None) -> str:
    """Why `exc` made the directory (at `path`) unusable, in a few lower-case words."""
    if isinstance(exc, FileExistsError):
        return "exists and is not a directory"
    if exc.errno == errno.ENOTDIR and path:
        parent = os.path.dirname(path)
        while parent and not os.path.exists(parent):
            parent = os.path.dirname(parent)
        if parent and not os.path.isdir(parent):
            return f"{parent} is not a directory"
    return (exc.strerror or str(exc)).lower()
