"""The *at system calls Python's os module does not offer, through libc.

renameat2 (RENAME_NOREPLACE / RENAME_EXCHANGE), and the AT_EMPTY_PATH forms
of fchownat and linkat that act on an O_PATH descriptor itself (needed for
symbolic links, which /proc/self/fd/N would follow), and utimensat with
UTIME_OMIT so one timestamp can change without a read-modify-write race.
"""

import ctypes
import ctypes.util
import os

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)

AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW = 0x100
AT_EMPTY_PATH = 0x1000
UTIME_OMIT = (1 << 30) - 2


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _check(ret: int, *names) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), *names)


def renameat2(olddirfd: int, old: bytes, newdirfd: int, new: bytes, flags: int) -> None:
    _check(_libc.renameat2(olddirfd, old, newdirfd, new, ctypes.c_uint(flags)), old, None, new)


def fchown_empty(fd: int, uid: int, gid: int) -> None:
    """fchownat(fd, "", ..., AT_EMPTY_PATH): change the owner of what fd refers to."""
    _check(_libc.fchownat(fd, b"", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW))


def link_empty(fd: int, newdirfd: int, new: bytes) -> None:
    """linkat(fd, "", ..., AT_EMPTY_PATH): a new name for what fd refers to (needs root)."""
    _check(_libc.linkat(fd, b"", newdirfd, new, AT_EMPTY_PATH), None, None, new)


def utimensat(dirfd: int, path: bytes, atime_ns: int | None, mtime_ns: int | None, flags: int = 0) -> None:
    """Set either timestamp; None leaves it as it is (UTIME_OMIT)."""
    times = (_Timespec * 2)()
    for i, ns in enumerate((atime_ns, mtime_ns)):
        if ns is None:
            times[i].tv_sec, times[i].tv_nsec = 0, UTIME_OMIT
        else:
            times[i].tv_sec, times[i].tv_nsec = divmod(ns, 1_000_000_000)
    _check(_libc.utimensat(dirfd, path, times, flags), path)
