"""The system calls a replay makes that the os module lacks or does not make as a replay
needs them: openat2(2), renameat2(2) with flags, one getdents64(2), a read past the page
cache into aligned memory, and setattr's calls on a descriptor or below a directory
without following the last name.

Apart from fusetrace/rehearse/replay_calls.py, which says what each traced operation
becomes: these know nothing of records, only of descriptors, names and numbers.
"""

import ctypes
import mmap
import os
import stat
import threading

SYS_OPENAT2 = 437  # the same number on every architecture (the unified syscall table, Linux 5.6)
RESOLVE_BENEATH, RESOLVE_NO_SYMLINKS = 0x08, 0x04


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


def openat2(dirfd: int, path: str, flags: int, resolve: int, mode: int = 0) -> int:
    """openat2(2): a descriptor of path below dirfd, walked as `resolve` says (RESOLVE_*);
    OSError as os.open raises it."""
    how = _OpenHow(flags, mode, resolve)
    fd = _syscall(
        ctypes.c_long(SYS_OPENAT2),
        ctypes.c_int(dirfd),
        os.fsencode(path),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), path)
    return fd


def aligned(size: int) -> mmap.mmap:
    """Zeroed, page-aligned memory of at least `size` bytes: an anonymous mapping, as a
    descriptor opened O_DIRECT reads into and writes from no other (a bytes object's
    data is not aligned, and ext4 answers such a call EINVAL)."""
    return mmap.mmap(-1, max(size, mmap.PAGESIZE))


class ReadBuffer(threading.local):
    """Each replaying thread's memory to read into, grown as reads need."""

    memory: mmap.mmap | None = None

    def view(self, size: int) -> memoryview:
        if self.memory is None or len(self.memory) < size:
            self.memory = aligned(size)
        return memoryview(self.memory)[:size]


def read_past_cache(fd: int, into: memoryview, offset: int) -> int:
    """A traced read is one that missed the traced kernel's page cache, whatever emptied
    it (fio's invalidate=1, for one, drops it with posix_fadvise, which reaches no file
    system and no trace).  So the target's pages of the range are dropped first, and
    read without readahead (the record's size already is the traced kernel's), so that
    the target is asked for what the traced mount was, not answered from the pages the
    replayed writes left.  A file that takes no advice is read as it is.  Returns the
    bytes read."""
    try:
        os.posix_fadvise(fd, offset, len(into), os.POSIX_FADV_DONTNEED)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    except OSError:
        pass
    return os.preadv(fd, [into], offset)


_GETDENTS_BUFFER = 32768  # glibc readdir(3)'s
_buffers = threading.local()
_getdents64 = _libc.getdents64
_getdents64.restype = ctypes.c_ssize_t
_getdents64.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t)


def renameat2(dirfd: int, name: str, dirfd2: int, name2: str, flags: int) -> None:
    """os.rename, with renameat2's flags (RENAME_NOREPLACE 1, RENAME_EXCHANGE 2, ...)."""
    if not flags:
        os.rename(name, name2, src_dir_fd=dirfd, dst_dir_fd=dirfd2)
    elif _libc.renameat2(dirfd, os.fsencode(name), dirfd2, os.fsencode(name2), ctypes.c_uint(flags & 0xFFFFFFFF)):
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), name)


def getdents(fd: int, rewind: bool) -> tuple[int, int]:
    """One getdents64(2) call on fd (from its start if `rewind`): how many entries it
    returned, and in how many bytes."""
    if rewind:
        os.lseek(fd, 0, os.SEEK_SET)
    buf = getattr(_buffers, "buf", None)
    if buf is None:
        buf = _buffers.buf = ctypes.create_string_buffer(_GETDENTS_BUFFER)
    n = _getdents64(fd, buf, _GETDENTS_BUFFER)
    if n < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    view, at, entries = memoryview(buf)[:n], 0, 0
    while at < n:  # struct linux_dirent64: d_ino (8), d_off (8), d_reclen (2), ...
        at += int.from_bytes(view[at + 16 : at + 18], "little")
        entries += 1
    return entries, n


def set_fd(fd: int, names: list[str], size: int, mode: int) -> None:
    """setattr through an open handle (ftruncate, fchmod, fchown, futimens): `names` the
    attributes it set, `size` and `mode` its recorded ones (mode 0: the current one)."""
    st = os.fstat(fd) if {"mode", "uid", "gid"} & set(names) else None
    for attr in _setattr_calls(names):
        if attr == "size":
            os.ftruncate(fd, size)
        elif attr == "mode":
            os.fchmod(fd, stat.S_IMODE(mode or st.st_mode))  # type: ignore[union-attr]
        elif attr == "owner":
            os.fchown(fd, *_owner(names, st))  # type: ignore[arg-type]
        else:
            os.utime(fd)


def set_at(dirfd: int, name: str, names: list[str], size: int, mode: int) -> None:
    """setattr on a path: size and mode through an O_PATH descriptor of the object
    (truncate(2) and chmod(2) follow a link; a /proc/self/fd/N of it does not lead past it).
    Arguments as set_fd's."""
    calls = _setattr_calls(names)
    st = (
        os.stat(name, dir_fd=dirfd, follow_symlinks=False)
        if "owner" in calls or ("mode" in calls and not mode)
        else None
    )
    obj = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd) if {"size", "mode"} & set(calls) else -1
    try:
        for attr in calls:
            if attr == "size":
                os.truncate(f"/proc/self/fd/{obj}", size)
            elif attr == "mode":
                os.chmod(f"/proc/self/fd/{obj}", stat.S_IMODE(mode or st.st_mode))  # type: ignore[union-attr]
            elif attr == "owner":
                os.chown(name, *_owner(names, st), dir_fd=dirfd, follow_symlinks=False)  # type: ignore[arg-type]
            else:
                os.utime(name, dir_fd=dirfd, follow_symlinks=False)
    finally:
        if obj >= 0:
            os.close(obj)


def _setattr_calls(names: list[str]) -> list[str]:
    """The calls a setattr's attributes take, in their order: size, mode, owner (uid and
    gid in one chown), times (atime and mtime in one utime, both to now)."""
    calls: list[str] = [a for a in ("size", "mode") if a in names]
    if "uid" in names or "gid" in names:
        calls.append("owner")
    if "atime" in names or "mtime" in names:
        calls.append("times")
    return calls


def _owner(names: list[str], st: os.stat_result) -> tuple[int, int]:
    """chown's arguments: the current owner for what the setattr set (the value is not traced)."""
    return st.st_uid if "uid" in names else -1, st.st_gid if "gid" in names else -1
