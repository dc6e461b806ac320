"""The blocking halves of the FUSE operations: system calls that never follow a planted link.

Run in worker threads, or on the loop when the inline policy finds them quick
(fusetrace/server/inline.py).  None of them follows a symbolic link planted in the
source (docs/SECURITY.md lists every call): an existing object is reached through its
own O_PATH descriptor (or, where a call takes only a path, /proc/self/fd/N of it, which
resolves to that very object, and only for objects that are not links); a name is only
ever looked up in its parent's descriptor with O_NOFOLLOW or by a call that does not
follow the last component (mkdirat, mknodat, symlinkat, unlinkat, renameat, linkat); an
object made for another user is made as that user, so nothing is changed by name after it.
"""

import errno as E
import os
import stat
import tempfile
from collections.abc import Callable
from typing import NoReturn

import pyfuse3

from . import syscalls
from .callers import Caller

# Not a flag of open(2): marks an O_RDWR that Operations._backing_flags made of an O_WRONLY,
# which as_asked tries, then the O_WRONLY asked for if the source refuses reading (EACCES:
# root squashed on an NFS source).  Bit 30: no open flag of Linux uses it, and as_asked
# takes it off before any open(2).
WRONLY_ASKED = 1 << 30
O_PATH = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
AS_ROOT = os.geteuid() == 0

Owner = tuple[int, int, tuple[int, ...]] | None  # who a call acts as (syscalls.credentials); None: the server
Key = tuple[int, int]  # (st_dev, st_ino)
Entry = tuple[int, str, os.stat_result, int | None]  # a listing's (index, name, attributes, O_PATH descriptor)


def open_path(dirfd: int, name: str) -> tuple[os.stat_result, int]:
    fd = os.open(name, O_PATH, dir_fd=dirfd)
    try:
        return os.stat(fd), fd
    except BaseException:
        os.close(fd)
        raise


def mknod(dirfd: int, name: str, mode: int, rdev: int, owner: Owner) -> tuple[os.stat_result, int]:
    with syscalls.credentials(owner):
        os.mknod(name, mode, rdev, dir_fd=dirfd)
    return open_path(dirfd, name)


def mkdir(dirfd: int, name: str, mode: int, owner: Owner) -> tuple[os.stat_result, int]:
    with syscalls.credentials(owner):
        os.mkdir(name, stat.S_IMODE(mode), dir_fd=dirfd)
    return open_path(dirfd, name)


def symlink(dirfd: int, name: str, target: str, owner: Owner) -> tuple[os.stat_result, int]:
    with syscalls.credentials(owner):
        os.symlink(target, name, dir_fd=dirfd)
    return open_path(dirfd, name)


def create(dirfd: int, name: str, flags: int, mode: int, owner: Owner) -> tuple[int, os.stat_result, int]:
    if owner is not None:
        # Created for another user: only a file made here may be given to them.  If one
        # appeared since the kernel's lookup, opening it as root would skip the caller's
        # permission check, so that race answers EEXIST.
        flags |= os.O_EXCL
    with syscalls.credentials(owner):
        # O_NONBLOCK: a FIFO planted at the name since the kernel's lookup must not block
        # the server; anything but a regular file is refused.
        fd = as_asked(
            flags,
            lambda f: os.open(
                name, f | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, stat.S_IMODE(mode), dir_fd=dirfd
            ),
        )
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(E.EEXIST, "not a regular file")
        if not flags & os.O_NONBLOCK:
            os.set_blocking(fd, True)
        path_fd = os.open(f"/proc/self/fd/{fd}", os.O_PATH | os.O_CLOEXEC)
        return fd, os.stat(path_fd), path_fd
    except BaseException:
        os.close(fd)
        raise


def reopen(path_fd: int, flags: int, owner: Owner = None) -> int:
    """A descriptor with `flags` on the object path_fd holds (never a link: callers check),
    opened as `owner` (the caller: the source checks their access to what it holds now,
    which may be newer than the attributes the kernel checked; None: as the server)."""
    path = f"/proc/self/fd/{path_fd}"
    with syscalls.credentials(owner):
        return as_asked(flags, lambda f: os.open(path, f | os.O_CLOEXEC))


def as_asked(flags: int, opener: Callable[[int], int]) -> int:
    """opener(flags); with WRONLY_ASKED, first for reading and writing, then, where the
    source refuses reading, for writing only, as the caller asked."""
    if flags & WRONLY_ASKED:
        flags &= ~WRONLY_ASKED
        try:
            return opener(flags)
        except PermissionError:
            flags = flags & ~os.O_ACCMODE | os.O_WRONLY
    return opener(flags)


def open_checked(path_fd: int, flags: int, unprivileged: bool, owner: Owner) -> tuple[int, os.stat_result]:
    """Open the object path_fd holds with `flags`, as `owner` (reopen).  The kernel
    hands O_TRUNC to the server (atomic_o_trunc); a truncation by a caller without
    CAP_FSETID (`unprivileged`: not root) drops the set-user-ID bit, and the
    set-group-ID bit of a group-executable file, as the kernel does natively (and, the
    open made as the caller, as the kernel below already has)."""
    fd = reopen(path_fd, flags, owner)
    try:
        st = os.stat(fd)
        if flags & os.O_TRUNC and unprivileged and stat.S_ISREG(st.st_mode):
            drop = stat.S_ISUID | (stat.S_ISGID if st.st_mode & stat.S_IXGRP else 0)
            if st.st_mode & drop:
                os.fchmod(fd, stat.S_IMODE(st.st_mode) & ~drop)
                st = os.stat(fd)
        return fd, st
    except BaseException:
        os.close(fd)
        raise


def readlink(fd: int) -> str:
    return os.readlink("", dir_fd=fd)


def access(fd: int, mode: int) -> bool:
    if not os.access(f"/proc/self/fd/{fd}", mode):
        raise OSError(E.EACCES, "permission denied")
    return True


def has_xattrs(root_fd: int) -> bool:
    """False when the file system of the source supports no extended attribute
    namespace (each probe answers EOPNOTSUPP)."""
    for name in ("user.fusetrace.probe", "security.capability"):
        try:
            os.getxattr(f"/proc/self/fd/{root_fd}", name)
        except OSError as exc:
            if exc.errno != E.EOPNOTSUPP:
                return True
        else:
            return True
    return False


def proc_reaches_links() -> bool:
    """Whether a path call through /proc/self/fd/N, N an O_PATH descriptor of a
    symbolic link, acts on the link itself (as Linux 6 does) rather than following it:
    probed on a dangling link, whose target would answer ENOENT."""
    with tempfile.TemporaryDirectory(prefix="fusetrace-probe-") as tmp:
        os.symlink("no-such-target", os.path.join(tmp, "link"))
        fd = os.open(os.path.join(tmp, "link"), O_PATH)
        try:
            os.getxattr(f"/proc/self/fd/{fd}", "user.fusetrace.probe")
        except OSError as exc:
            return exc.errno != E.ENOENT
        finally:
            os.close(fd)
    return True


def no_xattrs(*_args: object) -> NoReturn:
    raise OSError(E.ENOSYS, "no extended attributes below")


def link_xattrs_unsupported(*_args: object) -> NoReturn:
    raise OSError(E.EOPNOTSUPP, "extended attributes of a symbolic link cannot be reached safely here")


def no_xattr_names(_fd: int) -> list[str]:
    return []


# Through /proc/self/fd/N: the object N holds itself (for a link, only where
# proc_reaches_links() said so).
def setxattr(fd: int, name: bytes, value: bytes) -> None:
    os.setxattr(f"/proc/self/fd/{fd}", name, value)


def getxattr(fd: int, name: bytes) -> bytes:
    return os.getxattr(f"/proc/self/fd/{fd}", name)


def listxattr(fd: int) -> list[str]:
    return os.listxattr(f"/proc/self/fd/{fd}")


def removexattr(fd: int, name: bytes) -> None:
    os.removexattr(f"/proc/self/fd/{fd}", name)


# Removals run as the caller too: the kernel checked the sticky bit against the owner it
# holds, which may be older than the source's (a file chowned below since), and the
# source checks again, as natively.
def unlink(name: str, dirfd: int, owner: Owner) -> None:
    with syscalls.credentials(owner):
        os.unlink(name, dir_fd=dirfd)


def unlink_known(name: str, dirfd: int, owner: Owner) -> tuple[int, int]:
    """Unlink; return the key of what it unlinked (whose times the write-back cache's
    kernel then hands over)."""
    st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    unlink(name, dirfd, owner)
    return st.st_dev, st.st_ino


def rmdir(name: str, dirfd: int, owner: Owner) -> None:
    with syscalls.credentials(owner):
        os.rmdir(name, dir_fd=dirfd)


def rename(
    olddir: int, old: str, newdir: int, new: str, flags: int, owner: Owner, owed: bool = False
) -> tuple[list[Key | None], list[Key | None]]:
    """Rename as `owner` (the caller: the sticky bit, permissions and the owner of a
    whiteout are the source's, as natively); return the (st_dev, st_ino) keys now at the
    new and the old name, and, if `owed`, those of the regular files whose times the
    kernel's write-back cache then hands over (fs/fuse: fuse_rename_common): what moved,
    and what it replaced or swapped with."""
    replaced: Key | None = None
    if owed and not flags & syscalls.RENAME_EXCHANGE:
        try:
            st = os.stat(new, dir_fd=newdir, follow_symlinks=False)
            replaced = (st.st_dev, st.st_ino)
        except OSError:
            pass
    with syscalls.credentials(owner):
        if flags:
            syscalls.renameat2(olddir, os.fsencode(old), newdir, os.fsencode(new), flags)
        else:
            os.rename(old, new, src_dir_fd=olddir, dst_dir_fd=newdir)
    keys: list[Key | None] = []
    for d, n in ((newdir, new), (olddir, old)):
        try:
            st = os.stat(n, dir_fd=d, follow_symlinks=False)
            keys.append((st.st_dev, st.st_ino))
        except OSError:
            keys.append(None)
    if not owed:
        return keys, []
    return keys, keys if flags & syscalls.RENAME_EXCHANGE else [keys[0], replaced]


def link(fd: int, newdir: int, name: str, owner: Owner) -> tuple[os.stat_result, int]:
    """A new name for the object fd holds, made as `owner` (the caller: the source then
    checks the directory's permissions and protected_hardlinks as natively)."""
    if owner is None and AS_ROOT:
        syscalls.link_empty(fd, newdir, os.fsencode(name))
    else:
        # the magic link resolves to the object fd holds (linkat with AT_EMPTY_PATH needs
        # CAP_DAC_READ_SEARCH, which acting as the caller gives up)
        with syscalls.credentials(owner):
            os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=newdir, follow_symlinks=True)
    return open_path(newdir, name)


class NowaitUnsupported(Exception):
    """The file system below has no RWF_NOWAIT read path."""


def cached_pread(fd: int, size: int, offset: int) -> bytes | None:
    """pread that never blocks: preadv2(RWF_NOWAIT) answers from the page cache below,
    or says it cannot (EAGAIN) and the read goes to a worker; where the file system has
    no such path (EOPNOTSUPP) NowaitUnsupported is raised.  A short answer may be a
    partly cached range rather than the end of the file, so only a whole one is taken."""
    buf = bytearray(size)
    try:
        n = os.preadv(fd, [buf], offset, os.RWF_NOWAIT)
    except OSError as exc:
        if exc.errno == E.EOPNOTSUPP:
            raise NowaitUnsupported from None
        return None
    if n == size:
        return bytes(buf)
    return b"" if n == 0 else None


def list_chunk(dirfd: int, names: list[str] | None, start: int, count: int) -> "Listing":
    """Up to `count` entries from index `start` of the listing, with attributes
    and an O_PATH descriptor each ("." and ".." get none: they are not looked up);
    fewer when descriptors run short.  The listing is taken once per pass (offset 0)."""
    if names is None:
        names = [".", "..", *os.listdir(dirfd)]
    entries: list[Entry] = []
    index = start
    try:
        while index < len(names) and len(entries) < count:
            name = names[index]
            try:
                if index < 2:
                    entries.append((index, name, os.stat(name, dir_fd=dirfd, follow_symlinks=False), None))
                else:
                    entries.append((index, name, *open_path(dirfd, name)))
            except FileNotFoundError:
                pass  # removed since the listing was taken
            except OSError as exc:
                if exc.errno not in (E.EMFILE, E.ENFILE) or not entries:
                    raise
                break  # no descriptor free: a shorter chunk, and the kernel asks on from this entry
            index += 1
    except BaseException:
        for *_, fd in entries:
            if fd is not None:
                os.close(fd)
        raise
    return Listing(names, entries)


class Listing:
    """A readdir chunk; its length (for the trace) is the entries it carries."""

    __slots__ = ("entries", "names")

    def __init__(self, names: list[str], entries: list[Entry]) -> None:
        self.names, self.entries = names, entries

    def __len__(self) -> int:
        return len(self.entries)


def owner_for(ctx: Caller) -> Owner:
    """Who a new object must be made as, where that is not the server's own user: the
    caller with their supplementary groups, as the kernel would make it natively."""
    if not AS_ROOT or (ctx.uid == 0 and ctx.gid == 0):
        return None
    try:
        groups = tuple(pyfuse3.get_sup_groups(ctx.pid))  # /proc/PID/status: from memory
    except OSError:
        groups = ()  # the caller is gone: its own uid and gid decide
    return ctx.uid, ctx.gid, groups
