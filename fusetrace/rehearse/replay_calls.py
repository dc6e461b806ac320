"""What each traced FUSE operation becomes on a replay's target: the system call (or few)
that makes a kernel send the target that request, on TARGET + the record's path.

Paths in a trace were resolved by the kernel, below the mount; here every one is walked
below TARGET without following a symbolic link: opens are one openat2(2) with
RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS (so the target is sent the recorded open flags,
no O_NOFOLLOW added); other calls open the directory so and act on the last name
relative to it, never following it (fstatat AT_SYMLINK_NOFOLLOW, lchown, lsetxattr, an
O_PATH descriptor for truncate and chmod).  A path with a "." or ".." component is refused.

Handles: open, create and opendir bind a new Handle to the record's (pid, fh), which the
operations on the handle name, and release unbinds it; `bind` does this in start order,
before the record is issued, so an open that reuses the number of a handle whose release
is still under way gets a Handle of its own.  A flush is a close(2) of one descriptor of the
file: it is held back until the handle's next operation, and is a close(dup(fd)) unless
that operation is the release, when the one close(fd) makes both requests, as the
original close did (one flush, one release, not two flushes).  A readdir is one
getdents64(2) call, which a FUSE kernel turns into one readdir request (a page of entries),
from the start again at offset 0; the entries are counted over the listing and compared
with the recording's when it reached the end (its last, empty, batch), so a target that
returns them in other batches (a local file system: all in one) still matches.

A captured trace (`source` "syscalls": docs/TRACE_FORMAT.md) has no release: its handle
numbers are the capture's, one per open file description whichever process uses it (so
bound by number alone), and its flush is a close(2), which closes the descriptor here when
it is the last close of that number (`rows.last_closes`; earlier ones, of a duplicate or a
forked child's copy, are held back as above).  Its readdir's result is getdents64's bytes,
compared as bytes (a listing's bytes are its names', whatever the file system).

The system calls the os module lacks are in fusetrace/rehearse/replay_syscalls.py.
"""

import errno
import os
import stat
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from ..emulator.ops import Gate
from ..errors import UserError
from ..texttable import printable
from .replay_syscalls import (
    RESOLVE_BENEATH,
    RESOLVE_NO_SYMLINKS,
    ReadBuffer,
    aligned,
    getdents,
    openat2,
    read_past_cache,
    renameat2,
    set_at,
    set_fd,
)
from .rows import last_close

# The columns a replay reads, in Rec's order.
COLUMNS = [
    "start_ns",
    "dur_ns",
    "op",
    "path",
    "path2",
    "fh",
    "offset",
    "size",
    "result",
    "errno",
    "pid",
    "flags",
    "mode",
    "gate",
]


class Rec(NamedTuple):
    """The part of a trace record a replay needs (docs/TRACE_FORMAT.md)."""

    start_ns: int
    dur_ns: int
    op: str
    path: str
    path2: str | None
    fh: int
    offset: int
    size: int
    result: int
    errno: int
    pid: int
    flags: int
    mode: int
    gate: str | None


class Refused(Exception):
    """A record the replay does not issue: the message is the reason, counted."""


# A difference between the replay's outcome and the recording: (record, kind, detail).
Difference = tuple[Rec, str, str]

_NOT_IN_OPEN = os.O_CREAT | os.O_EXCL | os.O_NOCTTY  # the kernel sends an open none of these (it would be a create)
# What open(2) takes (openat2 refuses other bits, such as the kernel's own __FMODE_EXEC a record may hold).
_OPEN_FLAGS = (
    os.O_ACCMODE
    | os.O_CREAT
    | os.O_EXCL
    | os.O_NOCTTY
    | os.O_TRUNC
    | os.O_APPEND
    | os.O_NONBLOCK
    | os.O_DSYNC
    | os.O_ASYNC
    | os.O_DIRECT
    | os.O_LARGEFILE
    | os.O_DIRECTORY
    | os.O_NOFOLLOW
    | os.O_NOATIME
    | os.O_CLOEXEC
    | os.O_SYNC
)
# Asked by the kernel before every write to a file (to drop file capabilities): a replayed
# write makes the target's kernel ask again, so issuing the record too would ask twice.
KERNEL_XATTR = "security.capability"

OPENS = frozenset(("open", "create", "opendir"))
REFUSED_PATH = "its path leaves TARGET (a '.' or '..' component, a NUL, or not '/'-rooted)"
REFUSED_HANDLE = "its handle is not open here (the open failed or was not replayed)"
REFUSED_DEVICE = "a device node (its device number is not traced)"
REFUSED_SIZE = "a read or write larger than any FUSE request carries (64 MiB; a damaged or hostile trace)"
_MOST_DATA = 1 << 26  # FUSE requests carry at most max_pages (256, or 1 MiB) of data
REFUSED_XATTR = f"getxattr {KERNEL_XATTR}: the target's kernel asks it itself before each replayed write"
REFUSED_WRITEBACK = (
    "the kernel's own, for FUSE's write-back cache (a page filled through a write-only handle, "
    "or a file's times handed over): no call makes it"
)


def errno_name(code: int) -> str:
    return "ok" if code == 0 else errno.errorcode.get(code, str(code))


class Handle:
    """A descriptor the replay opened for a traced handle; its flush held back (the
    record, or None), and for a directory the entries listed since offset 0, here and
    in the recording."""

    __slots__ = ("fd", "flush", "listed", "recorded")

    def __init__(self) -> None:
        self.fd = -1  # until its open has succeeded here
        self.flush: Rec | None = None
        self.listed = self.recorded = 0


class Target:
    """TARGET, the directory the records are issued against.  `last_closes`: for a captured
    trace, when each handle number closed more than once was last closed (start_ns):
    rows.last_closes; None for a FUSE trace."""

    def __init__(self, directory: str, last_closes: dict[int, int] | None = None):
        self.directory = directory
        self.last_closes = last_closes
        try:
            self.fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise UserError(f"{directory}: cannot replay into it: {(exc.strerror or str(exc)).lower()}") from None
        try:
            os.close(openat2(self.fd, ".", os.O_PATH | os.O_CLOEXEC, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS))
        except OSError as exc:
            os.close(self.fd)
            raise UserError(
                f"{directory}: cannot replay into it: openat2 failed ({exc.strerror}); replay needs Linux 5.6 or later"
            ) from None
        self.handles: dict[tuple[int, int], Handle] = {}
        self._orphans: list[Handle] = []  # bound again before their release (the trace lost it)
        self._lock = threading.Lock()  # taking a held-back flush
        self._zeros = aligned(0)  # what writes carry (their data is not traced), never written to
        self._read_into = ReadBuffer()
        self._calls: dict[str, Callable[[Rec], list[Difference]]] = {
            "lookup": self._stat,
            "getattr": self._stat,
            "readlink": self._readlink,
            "mknod": self._mknod,
            "mkdir": self._mkdir,
            "symlink": self._symlink,
            "unlink": self._unlink,
            "rmdir": self._rmdir,
            "rename": self._rename,
            "link": self._link,
            "statfs": self._statfs,
            "access": self._access,
            "getxattr": self._getxattr,
            "setxattr": self._setxattr,
            "listxattr": self._listxattr,
            "removexattr": self._removexattr,
        }
        self._handle_calls: dict[str, Callable[[Rec, Handle], list[Difference]]] = {
            "read": self._read,
            "write": self._write,
            "flush": self._flush,
            "release": self._close,
            "releasedir": self._close,
            "fsync": self._fsync,
            "fsyncdir": self._fsync,
            "readdir": self._readdir,
        }

    def _closes(self, rec: Rec) -> bool:
        """Whether a captured trace's record is the last close(2) of its handle number."""
        last = self.last_closes
        return last is not None and rec.op == "flush" and last_close(last, rec.fh, rec.start_ns)

    def bind(self, rec: Rec) -> Handle | None:
        """The handle a record opens or acts on (None: none), found in start order."""
        key = (rec.pid if self.last_closes is None else 0, rec.fh)
        if rec.op in OPENS:
            if rec.errno:  # it gave no handle
                return None
            h = self.handles.get(key)
            if h is not None:
                self._orphans.append(h)
            h = self.handles[key] = Handle()
            return h
        if rec.op in ("release", "releasedir") or self._closes(rec):
            return self.handles.pop(key, None)
        if rec.op in self._handle_calls or (rec.op == "setattr" and rec.fh):
            return self.handles.get(key)
        return None

    def issue(self, rec: Rec, h: Handle | None) -> list[Difference]:
        """Issue the record's system call(s), on the handle `bind` gave it; the
        differences from its recorded outcome.  Refused (before any call) when the
        record cannot be reproduced."""
        if rec.op in OPENS:
            return self._open(rec, h)
        if rec.gate == Gate.KERNEL:
            raise Refused(REFUSED_WRITEBACK)
        if rec.op == "setattr":
            return self._setattr(rec, h)
        handle_call = self._handle_calls.get(rec.op)
        if handle_call is not None:
            if h is None or h.fd < 0:
                raise Refused(REFUSED_HANDLE)
            return self._close(rec, h) if self._closes(rec) else handle_call(rec, h)
        call = self._calls.get(rec.op)
        if call is None:
            raise Refused(f"{printable(rec.op)}: not an operation replay knows")  # a hostile trace's text
        return call(rec)

    def close(self) -> list[Difference]:
        """Close every handle the trace left open (their held-back flushes are issued
        then), and TARGET.  Returns the differences found on the way."""
        found: list[Difference] = []
        for h in [*self.handles.values(), *self._orphans]:
            if h.fd >= 0:
                found += self._close(None, h)
        self.handles.clear()
        self._orphans.clear()
        os.close(self.fd)
        return found

    # ---- paths ----------------------------------------------------------------------

    def parent(self, path: str) -> tuple[int, str]:
        """(directory descriptor, last name) of a traced path below TARGET; the
        descriptor is TARGET's own or one the caller closes.  The root is (TARGET, ".").
        Refused (before any call) for a path that leaves TARGET; OSError when the walk
        fails (a directory missing, a symbolic link on the way)."""
        parent, name = split_path(path)
        if parent is None:
            return self.fd, name
        return openat2(
            self.fd, parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS
        ), name

    def release_parent(self, dirfd: int) -> None:
        if dirfd != self.fd:
            os.close(dirfd)

    def _path_call(self, path: str, fn: Callable[[int, str], Any]) -> tuple[int, Any]:
        """(errno, fn(directory descriptor, name)) for a traced path; a failed walk is
        the outcome's errno, as the kernel's own walk would have failed."""
        try:
            dirfd, name = self.parent(path)
        except OSError as exc:
            return exc.errno or errno.EIO, None
        try:
            return _value(lambda: fn(dirfd, name))
        finally:
            self.release_parent(dirfd)

    # ---- entries --------------------------------------------------------------------

    def _stat(self, rec: Rec) -> list[Difference]:
        err, st = self._path_call(rec.path, lambda d, n: os.stat(n, dir_fd=d, follow_symlinks=False))
        found = _errno(rec, err)
        if not found and st is not None and rec.mode and stat.S_IFMT(st.st_mode) != stat.S_IFMT(rec.mode):
            found.append((rec, "another file type", f"{_kind(st.st_mode)}, recorded {_kind(rec.mode)}"))
        return found

    def _readlink(self, rec: Rec) -> list[Difference]:
        err, target = self._path_call(rec.path, lambda d, n: os.readlink(n, dir_fd=d))
        return _errno(rec, err) or _count(
            rec, err, None if target is None else len(target), "characters in the link's target"
        )

    def _mknod(self, rec: Rec) -> list[Difference]:
        mode = rec.mode or stat.S_IFREG | 0o644
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            raise Refused(REFUSED_DEVICE)
        return _errno(rec, self._path_call(rec.path, lambda d, n: os.mknod(n, mode, dir_fd=d))[0])

    def _mkdir(self, rec: Rec) -> list[Difference]:
        mode = stat.S_IMODE(rec.mode) if rec.mode else 0o755
        return _errno(rec, self._path_call(rec.path, lambda d, n: os.mkdir(n, mode, dir_fd=d))[0])

    def _symlink(self, rec: Rec) -> list[Difference]:
        target = rec.path2
        if target is None:
            raise Refused("symlink: its target is not in the record")
        return _errno(rec, self._path_call(rec.path, lambda d, n: os.symlink(target, n, dir_fd=d))[0])

    def _unlink(self, rec: Rec) -> list[Difference]:
        return _errno(rec, self._path_call(rec.path, lambda d, n: os.unlink(n, dir_fd=d))[0])

    def _rmdir(self, rec: Rec) -> list[Difference]:
        return _errno(rec, self._path_call(rec.path, lambda d, n: os.rmdir(n, dir_fd=d))[0])

    def _rename(self, rec: Rec) -> list[Difference]:
        """With the recorded renameat2 flags (RENAME_EXCHANGE as a plain rename would
        remove a name)."""
        return self._two(rec, lambda d, n, d2, n2: renameat2(d, n, d2, n2, rec.flags))

    def _link(self, rec: Rec) -> list[Difference]:
        return self._two(rec, lambda d, n, d2, n2: os.link(n, n2, src_dir_fd=d, dst_dir_fd=d2, follow_symlinks=False))

    def _two(self, rec: Rec, fn: Callable[[int, str, int, str], None]) -> list[Difference]:
        """rename and link: from the record's path to its second one (path2)."""
        path2 = rec.path2
        if path2 is None:
            raise Refused(f"{rec.op}: its second path is not in the record")
        split_path(path2)  # Refused before any call

        def to_second(dirfd: int, name: str) -> int:
            return self._path_call(path2, lambda dirfd2, name2: fn(dirfd, name, dirfd2, name2))[0]

        err, second_err = self._path_call(rec.path, to_second)
        return _errno(rec, err or second_err)

    # ---- attributes -----------------------------------------------------------------

    def _setattr(self, rec: Rec, h: Handle | None) -> list[Difference]:
        """What path2 names, in its order: size (truncate), mode (chmod to the mode the
        reply recorded), uid and gid (chown to the current owner: the value is not
        traced), atime and mtime (both set to now)."""
        names = (rec.path2 or "").split(",")
        if h is not None and h.fd >= 0:
            found = self._settle(h)
            return found + _errno(rec, _call(lambda: set_fd(h.fd, names, rec.size, rec.mode)))
        return _errno(rec, self._path_call(rec.path, lambda d, n: set_at(d, n, names, rec.size, rec.mode))[0])

    def _statfs(self, rec: Rec) -> list[Difference]:
        return _errno(rec, _call(lambda: os.statvfs(self.fd)))

    def _access(self, rec: Rec) -> list[Difference]:
        """access(2) of the file's existence: the mask asked is not traced."""
        err, ok = self._path_call(rec.path, lambda d, n: os.access(n, os.F_OK, dir_fd=d, follow_symlinks=False))
        return _errno(rec, err or (0 if ok else errno.EACCES))

    def _xattr_at(self, rec: Rec, fn: Callable[[str], Any]) -> tuple[int, Any]:
        """fn on /proc/self/fd/DIR/NAME: the xattr calls take no directory descriptor."""
        return self._path_call(rec.path, lambda d, n: fn(f"/proc/self/fd/{d}/{n}"))

    def _getxattr(self, rec: Rec) -> list[Difference]:
        if rec.path2 == KERNEL_XATTR:
            raise Refused(REFUSED_XATTR)
        err, value = self._xattr_at(rec, lambda p: os.getxattr(p, rec.path2 or "", follow_symlinks=False))
        return _errno(rec, err) or _count(rec, err, None if value is None else len(value), "bytes of value")

    def _setxattr(self, rec: Rec) -> list[Difference]:
        value = bytes(rec.size)  # the value is not traced: zeros of its length
        err, _ = self._xattr_at(rec, lambda p: os.setxattr(p, rec.path2 or "", value, follow_symlinks=False))
        return _errno(rec, err)

    def _listxattr(self, rec: Rec) -> list[Difference]:
        err, names = self._xattr_at(rec, lambda p: os.listxattr(p, follow_symlinks=False))
        return _errno(rec, err) or _count(rec, err, None if names is None else len(names), "attribute names")

    def _removexattr(self, rec: Rec) -> list[Difference]:
        err, _ = self._xattr_at(rec, lambda p: os.removexattr(p, rec.path2 or "", follow_symlinks=False))
        return _errno(rec, err)

    # ---- handles --------------------------------------------------------------------

    def _open(self, rec: Rec, h: Handle | None) -> list[Difference]:
        """open, create, opendir with the recorded flags, in one openat2 that follows no
        link (so no O_NOFOLLOW is added: the target is sent the flags recorded)."""
        if rec.op == "opendir":
            flags, mode = os.O_RDONLY | os.O_DIRECTORY, 0
        elif rec.op == "create":
            flags, mode = rec.flags & _OPEN_FLAGS | os.O_CREAT, stat.S_IMODE(rec.mode) if rec.mode else 0o644
        else:
            flags, mode = rec.flags & _OPEN_FLAGS & ~_NOT_IN_OPEN, 0
        parent, name = split_path(rec.path)
        err, fd = _value(
            lambda: openat2(
                self.fd,
                name if parent is None else f"{parent}/{name}",
                flags | os.O_CLOEXEC | os.O_NONBLOCK,
                RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS,
                mode,
            )
        )
        if fd is not None:
            # O_NONBLOCK, so that a FIFO (a hostile trace's mknod, or planted in the target)
            # cannot hold the open; FUSE sends no open for one, so a traced open was of a
            # file or directory, and anything else is a difference
            kind = stat.S_IFMT(os.fstat(fd).st_mode)
            if kind not in (stat.S_IFREG, stat.S_IFDIR):
                os.close(fd)
                return [(rec, "another file type", f"{_kind(kind)}: not opened")]
            if not flags & os.O_NONBLOCK:
                os.set_blocking(fd, True)
            if h is None:  # it failed in the recording: no operation uses its handle
                os.close(fd)
            else:
                h.fd = fd
        return _errno(rec, err)

    def _settle(self, h: Handle) -> list[Difference]:
        """Issue the handle's held-back flush, if it has one, as a close of a duplicate."""
        with self._lock:
            flush, h.flush = h.flush, None
        if flush is None:
            return []
        return _errno(flush, _call(lambda: os.close(os.dup(h.fd))))

    def _read(self, rec: Rec, h: Handle) -> list[Difference]:
        if rec.size > _MOST_DATA:
            raise Refused(REFUSED_SIZE)
        found = self._settle(h)
        into = self._read_into.view(rec.size)
        err, n = _value(lambda: read_past_cache(h.fd, into, rec.offset))
        return found + (_errno(rec, err) or _count(rec, err, n, "bytes read"))

    def _write(self, rec: Rec, h: Handle) -> list[Difference]:
        if rec.size > _MOST_DATA:
            raise Refused(REFUSED_SIZE)
        found = self._settle(h)
        if len(self._zeros) < rec.size:
            self._zeros = aligned(rec.size)
        zeros = memoryview(self._zeros)[: rec.size]
        err, n = _value(lambda: os.pwrite(h.fd, zeros, rec.offset))
        return found + (_errno(rec, err) or _count(rec, err, n, "bytes written"))

    def _fsync(self, rec: Rec, h: Handle) -> list[Difference]:
        return self._settle(h) + _errno(rec, _call(lambda: os.fsync(h.fd)))

    def _flush(self, rec: Rec, h: Handle) -> list[Difference]:
        found = self._settle(h)  # an earlier close of a duplicate
        with self._lock:
            h.flush = rec
        return found

    def _close(self, release: Rec | None, h: Handle) -> list[Difference]:
        """release, releasedir, a captured trace's last close (or the end of the replay):
        close(fd), with the held-back flush's outcome (close returns the flush's error)."""
        found: list[Difference] = []
        with self._lock:
            flush, h.flush = h.flush, None
        err = _call(lambda: os.close(h.fd))
        h.fd = -1
        if flush is not None:
            found += _errno(flush, err)
        if release is not None:
            found += _errno(release, 0 if flush is not None else err)
        return found

    def _readdir(self, rec: Rec, h: Handle) -> list[Difference]:
        if rec.offset == 0:  # opendir or rewinddir: the listing starts again
            h.listed = h.recorded = 0
        err, listed = _value(lambda: getdents(h.fd, rewind=rec.offset == 0))
        found = _errno(rec, err)
        if not err and not rec.errno:
            captured = self.last_closes is not None  # its result is getdents64's bytes
            h.listed += listed[1] if captured else listed[0]
            h.recorded += rec.result
            if rec.result == 0:  # the recording's listing ended here: compare it
                what = "bytes of entries listed" if captured else "entries listed"
                found += _count(rec._replace(result=h.recorded), 0, h.listed, what)
        return found


def split_path(path: str) -> tuple[str | None, str]:
    """(parent below TARGET or None for TARGET itself, last name) of a traced path;
    Refused when it would leave TARGET."""
    if not path.startswith("/"):
        raise Refused(REFUSED_PATH)
    names = path[1:].split("/")
    if "\0" in path or "." in names or ".." in names or "" in names[:-1] or (names[-1] == "" and len(names) > 1):
        raise Refused(REFUSED_PATH)
    if len(names) == 1:
        return None, names[0] or "."
    return "/".join(names[:-1]), names[-1]


def _value(fn: Callable[[], Any]) -> tuple[int, Any]:
    """(0, fn()), or (its errno, None) when it failed."""
    try:
        return 0, fn()
    except OSError as exc:
        return exc.errno or errno.EIO, None


def _call(fn: Callable[[], Any]) -> int:
    """fn's errno (0 when it returned)."""
    return _value(fn)[0]


# The FUSE kernel turns a file system's ENOSYS for an extended-attribute call into
# EOPNOTSUPP for the caller (and stops asking): the outcome the application saw.
_AS_SEEN = {errno.ENOSYS: errno.EOPNOTSUPP}


def _errno(rec: Rec, err: int) -> list[Difference]:
    if err == rec.errno or (rec.op.endswith("xattr") and err == _AS_SEEN.get(rec.errno)):
        return []
    return [(rec, f"{errno_name(err)}, recorded {errno_name(rec.errno)}", "")]


def _count(rec: Rec, err: int, got: int | None, what: str) -> list[Difference]:
    """A result the recording counted (bytes, entries, names) that came out otherwise."""
    if err or got is None or got == rec.result:
        return []
    return [(rec, f"{'fewer' if got < rec.result else 'more'} {what}", f"{got:,}, recorded {rec.result:,}")]


def _kind(mode: int) -> str:
    return {
        stat.S_IFREG: "file",
        stat.S_IFDIR: "directory",
        stat.S_IFLNK: "symbolic link",
        stat.S_IFIFO: "fifo",
        stat.S_IFSOCK: "socket",
        stat.S_IFCHR: "character device",
        stat.S_IFBLK: "block device",
    }.get(stat.S_IFMT(mode), "unknown")
