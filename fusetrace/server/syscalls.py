"""The *at system calls Python's os module does not offer, through libc.

renameat2 (RENAME_NOREPLACE / RENAME_EXCHANGE), and the AT_EMPTY_PATH forms
of fchownat and linkat that act on an O_PATH descriptor itself (needed for
symbolic links, which /proc/self/fd/N would follow), and utimensat with
UTIME_OMIT so one timestamp can change without a read-modify-write race.
"""

import ctypes
import ctypes.util
import errno
import os
import platform
from collections.abc import Sequence

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)

AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW = 0x100
AT_EMPTY_PATH = 0x1000
RENAME_EXCHANGE = 2  # renameat2's flag (linux/fs.h)
UTIME_OMIT = (1 << 30) - 2


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _check(ret: int, *names: bytes | None) -> None:
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


def utimensat_now(dirfd: int, path: bytes, flags: int = 0) -> None:
    """Set both timestamps to the file system's now (times NULL): unlike explicit
    times, which only the owner may set, this needs only write permission."""
    _check(_libc.utimensat(dirfd, path, None, flags), path)


# ---- credentials of one thread -------------------------------------------------------
#
# A file made for another user is made *as* that user: the thread's file-system uid
# and gid, and its supplementary groups, are switched to the caller's for the one call,
# so the object is born with its owner and no chown or chmod by name follows, which a
# name swapped for a symbolic link in between could redirect.  setfsuid and setfsgid
# act on the calling thread only, and so does the raw setgroups system call (glibc's
# wrapper would change every thread).  Switching fsuid away from 0 drops the thread's
# file capabilities, so the file system below (an NFS server too, which never sees
# local capabilities) decides with the caller's own credentials, as it would natively;
# switching back restores them.

_SYS_SETGROUPS = {"x86_64": 116, "aarch64": 159}.get(platform.machine())


def _set_thread_groups(groups: Sequence[int]) -> None:
    if _SYS_SETGROUPS is None:
        raise OSError(errno.ENOSYS, f"setgroups: no system call number known for {platform.machine()}")
    array = (ctypes.c_uint32 * max(len(groups), 1))(*groups)
    _check(_libc.syscall(_SYS_SETGROUPS, ctypes.c_size_t(len(groups)), array))


class credentials:
    """`with credentials((uid, gid, groups)):` this thread acts as that user in the file
    system (None: as it is)."""

    __slots__ = ("gid", "groups", "saved", "uid")

    def __init__(self, owner: tuple[int, int, tuple[int, ...]] | None):
        self.uid: int | None
        self.gid: int | None
        self.groups: tuple[int, ...]
        self.uid, self.gid, self.groups = owner if owner is not None else (None, None, ())
        self.saved: tuple[int, int, list[int]] | None = None

    def __enter__(self) -> None:
        if self.uid is None:
            return
        try:
            self.saved = (_libc.setfsuid(-1) & 0xFFFFFFFF, _libc.setfsgid(-1) & 0xFFFFFFFF, os.getgroups())
            _set_thread_groups(self.groups)
            _libc.setfsgid(self.gid)
            _libc.setfsuid(self.uid)
            if (_libc.setfsuid(-1) & 0xFFFFFFFF, _libc.setfsgid(-1) & 0xFFFFFFFF) != (self.uid, self.gid):
                raise OSError(errno.EPERM, "cannot act as the calling user")
        except BaseException:
            self.__exit__()
            raise

    def __exit__(self, *exc: object) -> None:
        if self.saved is None:
            return
        uid, gid, groups = self.saved
        self.saved = None
        _libc.setfsuid(uid)
        _libc.setfsgid(gid)
        _set_thread_groups(groups)


# ---- file handles: reaching an inode again without a descriptor held open --------------

MAX_HANDLE_SZ = 128


class _FileHandle(ctypes.Structure):
    _fields_ = [
        ("handle_bytes", ctypes.c_uint),
        ("handle_type", ctypes.c_int),
        ("f_handle", ctypes.c_ubyte * MAX_HANDLE_SZ),
    ]


def name_to_handle(fd: int) -> tuple[bytes, int]:
    """(handle, mount id) of the object an O_PATH descriptor holds (AT_EMPTY_PATH)."""
    fh = _FileHandle()
    fh.handle_bytes = MAX_HANDLE_SZ
    mount_id = ctypes.c_int()
    _check(_libc.name_to_handle_at(fd, b"", ctypes.byref(fh), ctypes.byref(mount_id), AT_EMPTY_PATH))
    return ctypes.string_at(ctypes.addressof(fh), 8 + fh.handle_bytes), mount_id.value


def open_by_handle(mount_fd: int, handle: bytes, flags: int) -> int:
    """open_by_handle_at(2): needs CAP_DAC_READ_SEARCH; ESTALE when the object is gone."""
    buf = ctypes.create_string_buffer(handle, len(handle))
    fd: int = _libc.open_by_handle_at(mount_fd, buf, flags)
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return fd
