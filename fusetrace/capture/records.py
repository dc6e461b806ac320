"""The probes' records (events.py) as trace records: the operation's name, the path
below the mount point, a number for each open file, the request's kind.

Paths are rebuilt here, from what the probes send: a name as the caller gave it, and for
a relative one the inode of the directory it starts from (a descriptor's or the working
directory); for a call on a descriptor, the open file, whose path its open gave.  The
book of what is known (an open file's path, a directory inode's path) is filled by the
calls themselves: opens, chdir, and renames and removals, which move or drop its
entries.  Where the book does not know (a descriptor opened before the capture began, a
working directory entered before it), /proc/PID/fd/N or /proc/PID/cwd is read, while the
process still has it.  What cannot be rebuilt is left "" and its records counted (`unknown_paths`):
a descriptor closed and a process gone before its records were read (records are read a
slot, 0.2 s, after they happen), a directory renamed since the book learnt it (its
files' paths keep the old name), a name cut at the probes' STRLEN - 1 bytes (`cut_names`).

Nothing the kernel keeps private leaves: an open file's address is only a key here; the
trace's `fh` is a number given in order of first sight.
"""

import functools
import os
import stat
from collections import OrderedDict

from ..request import Kind, WriteMode
from ..trace.schema import TraceRecord
from .calls import FD_CALLS, NAMED_CALLS, OPS
from .events import Call, FdCall
from .program import ABOVE, STRLEN

MAX_KNOWN = 1 << 20  # paths the book keeps (open files, directories), oldest forgotten first
# A TraceRecord from its fields in order (TraceRecord._fields), without NamedTuple's
# keyword handling: one is made per call, up to hundreds of thousands a second.
_record = functools.partial(tuple.__new__, TraceRecord)

_KINDS = {
    "read": Kind.READ,
    "fsync": Kind.COMMIT,
    "fsyncdir": Kind.COMMIT,
    "releasedir": Kind.NONE,
    **dict.fromkeys(
        ["open", "opendir", "getattr", "access", "readlink", "readdir", "statfs", "getxattr", "listxattr"],
        Kind.META_READ,
    ),
    **dict.fromkeys(
        [
            "create",
            "mkdir",
            "mknod",
            "unlink",
            "rmdir",
            "rename",
            "link",
            "symlink",
            "setattr",
            "setxattr",
            "removexattr",
        ],
        Kind.META_WRITE,
    ),
}
# the operations whose size column is the call's `y` (the bytes asked for), and the one
# call whose `y` is a length (the rest of the setattrs' is a mode, or nothing)
_SIZED = frozenset({"getxattr", "setxattr", "listxattr", "readlink"})
# what a setattr sets, as a FUSE trace's path2 names it (docs/TRACE_FORMAT.md), by call
_SETS = {
    **dict.fromkeys(("truncate", "ftruncate"), "size"),
    **dict.fromkeys(("chmod", "fchmod", "fchmodat", "fchmodat2"), "mode"),
    **dict.fromkeys(("chown", "fchown", "fchownat", "lchown"), "uid,gid"),
    **dict.fromkeys(("utimensat", "utimes"), "atime,mtime"),
}
# A call interrupted by a signal exits with the kernel's own "restart" codes (ERESTARTSYS
# 512, ERESTARTNOINTR 513, ERESTARTNOHAND 514, ERESTART_RESTARTBLOCK 516): the caller sees
# EINTR, or the call made again (a second record).
_RESTART = frozenset({512, 513, 514, 516})
_EINTR = 4


class _File:
    __slots__ = ("fh", "mode", "path", "wrote")

    def __init__(self, fh: int, path: str, mode: int):
        self.fh, self.path, self.mode, self.wrote = fh, path, mode, False


class Rebuilder:
    """Turns a capture's calls, in start order, into trace records (None: a call that is
    followed but not recorded, a chdir, or one found not to be on the mount: a name that
    climbs out of it with "..", one below a file system mounted below the mount point)."""

    def __init__(
        self,
        mountpoint: str,
        root_ino: int,
        proc: str = "/proc",
        *,
        dev: int | None = None,
        above: tuple[str, ...] = (),
        submounts: tuple[str, ...] = (),
    ):
        """dev: the mount's device as stat(2) gives it (what /proc's links must lead to;
        None: not checked); above: for each directory above the mount point, the rest of
        the mount point's path below it (program.Above's order); submounts: the mount
        points below the mount point, as the trace names paths."""
        self.mountpoint = mountpoint.rstrip("/") or "/"
        self._proc = proc
        self._dev = dev
        self._above = above
        self._submounts = submounts
        self._files: OrderedDict[int, _File] = OrderedDict()  # by the open file's address
        self._dirs: OrderedDict[int, str] = OrderedDict({root_ino: "/"})  # a path by inode (directories, opened files)
        self._dir_at: dict[str, int] = {"/": root_ino}  # and the inode by path
        self._next_fh = 1
        self.unknown_paths = 0
        self.cut_names = 0
        self.elsewhere = 0  # named calls found to be on another file system

    def record(self, c: Call) -> TraceRecord | None:
        op = OPS[c.op - 1]
        if isinstance(c, FdCall):
            return self._fd_record(op, c)
        errno = -c.ret if c.ret < 0 else 0
        errno = _EINTR if errno in _RESTART else errno
        path = self._path(c.name, c.base, c.dirfd, c.pid)
        path2 = None
        fh = inode = 0
        mode = c.mode
        if op in ("open", "create", "opendir"):
            if not errno:
                if not path:  # its name in the directory it was found in (the probes send both)
                    path = _joined(self._dirs.get(c.base2), c.name2) or ""
                fh = self._opened(c.file, path, c.mode)
                inode = c.ino
                self._know_dir(c.ino, path)
        elif path is None or self._under_submount(path):
            self.elsewhere += 1
            return None
        elif not c.name and c.file:  # a call on the descriptor itself (fstatat "", fgetxattr, futimens)
            inode = c.base  # (the directory a name would start from is the file itself)
            known = self._files.get(c.file)
            if known:
                fh, path, mode = known.fh, known.path or path, known.mode
        path = path or ""
        call = NAMED_CALLS[c.call].name if 0 <= c.call < len(NAMED_CALLS) else ""
        if op in ("rename", "link"):
            path2 = self._path(c.name2, c.base2, c.dirfd2, c.pid) or ""
            if op == "rename" and not errno:
                self._moved(path, path2)
        elif op in ("symlink", "getxattr", "setxattr", "removexattr"):
            path2 = c.name2
        elif op == "setattr":
            path2 = _SETS.get(call, "")
        elif op in ("unlink", "rmdir") and not errno:
            self._moved(path, None)
        if op == "chdir":  # (matched at its exit: by the new working directory, its name and parent's inode)
            if not errno and c.ino not in self._dirs:
                parent = self._dirs.get(c.base2)
                self._know_dir(c.ino, path if c.name.startswith("/") else _joined(parent, c.name2) or "")
            return None
        if op in ("mkdir", "mknod"):
            mode = c.arg | (stat.S_IFDIR if op == "mkdir" else 0)
        size = c.arg if op in _SIZED or call == "truncate" else 0
        result = c.ret if c.ret > 0 and op in ("getxattr", "listxattr", "readlink") else 0
        flags = c.flags if fh or op in ("open", "create", "opendir") else 0
        self.unknown_paths += path == ""
        return _record((
            c.start_ns, c.dur_ns, op, inode, path, path2, fh, 0, size, result, errno, c.pid, c.uid, c.gid,
            0, None, 0, 0, 0, None, c.comm, _KINDS[op], flags, mode, 0, None, c.tid,
        ))  # fmt: skip

    def _fd_record(self, op: str, c: FdCall) -> TraceRecord | None:
        known = self._files.get(c.file)
        if known is None:
            known = self._files[c.file] = _File(self._new_fh(), self._fd_path(c), c.mode)
            self._room(self._files)
        if op == "chdir":
            if c.ret == 0:
                self._know_dir(c.ino, known.path)
            return None
        errno = -c.ret if c.ret < 0 else 0
        errno = _EINTR if errno in _RESTART else errno
        result = c.ret if c.ret > 0 and op in ("read", "write", "readdir") else 0
        size = result if c.size < 0 else c.size
        kind: str = _KINDS.get(op, Kind.NONE)
        path2 = None
        if op == "write":
            kind = WriteMode.of(c.file_flags)
            known.wrote = True
        elif op == "flush":
            kind = Kind.COMMIT if known.wrote else Kind.NONE
        elif op == "setattr" and 0 <= c.call < len(FD_CALLS):
            path2 = _SETS.get(FD_CALLS[c.call].name, "")
        flags = c.file_flags if op == "write" else 0
        self.unknown_paths += known.path == ""
        return _record((
            c.start_ns, c.dur_ns, op, c.ino, known.path, path2, known.fh, c.offset, size, result, errno,
            c.pid, c.uid, c.gid, 0, None, 0, 0, 0, None, c.comm, kind, flags, c.mode, 0, None, c.tid,
        ))  # fmt: skip

    def _new_fh(self) -> int:
        fh, self._next_fh = self._next_fh, self._next_fh + 1
        return fh

    def _opened(self, file: int, path: str, mode: int) -> int:
        """A new open file (an address an open returns is a new one, whatever it was before)."""
        fresh = self._files[file] = _File(self._new_fh(), path, mode)
        self._files.move_to_end(file)
        self._room(self._files)
        return fresh.fh

    def _know_dir(self, ino: int, path: str) -> None:
        if path:
            self._dir_at.pop(self._dirs.get(ino, ""), None)
            self._dirs[ino] = path
            self._dir_at[path] = ino
            self._dirs.move_to_end(ino)
            while len(self._dirs) > MAX_KNOWN:
                self._dir_at.pop(self._dirs.popitem(last=False)[1], None)

    def _moved(self, old: str, new: str | None) -> None:
        """A name renamed (new) or removed (None): the directory book's entry for it
        follows (its subdirectories' entries keep the old name)."""
        ino = self._dir_at.pop(old, None)
        if ino is not None:
            del self._dirs[ino]
            if new is not None:
                self._know_dir(ino, new)

    @staticmethod
    def _room(book: OrderedDict) -> None:
        while len(book) > MAX_KNOWN:
            book.popitem(last=False)

    def _path(self, name: str, base: int, dirfd: int, pid: int) -> str | None:
        """The path below the mount point of `name`, relative to the directory of inode
        `base` (dirfd's, or the working directory's when dirfd is AT_FDCWD; 0 when that
        directory is not on the mount: an open matched by what it opened; ABOVE + i: the
        i-th directory above the mount point); "" unknown, None not on the mount."""
        if len(name.encode(errors="surrogateescape")) >= STRLEN - 1:
            self.cut_names += 1  # (cut by the probes: its end is not known)
            return ""
        if name.startswith("/"):
            return self._below(name)
        if base >= ABOVE:
            rest = self._above[base - ABOVE] if base - ABOVE < len(self._above) else None
            return _joined("/", name[len(rest) :]) if rest is not None and name.startswith(rest) else ""
        path = _joined(self._dirs.get(base), name)
        if path == "":  # the process's own view, while it has one
            link = f"{self._proc}/{pid}/cwd" if dirfd == -100 else f"{self._proc}/{pid}/fd/{dirfd}"
            path = self._joined_below(self._link(link), name)
        return path

    def _under_submount(self, path: str) -> bool:
        return any(path == m or path.startswith(m + "/") for m in self._submounts)

    def seed(self) -> None:
        """What the processes running now have open below the mount point, and where they
        work: the paths of descriptors and working directories from before the capture."""
        try:
            pids = [p for p in os.listdir(self._proc) if p.isdigit()]
        except OSError:
            return
        for pid in pids:
            self.cwd(int(pid))
            try:
                fds = os.listdir(f"{self._proc}/{pid}/fd")
            except OSError:
                continue
            for fd in fds:
                self._learn(f"{self._proc}/{pid}/fd/{fd}")

    def cwd(self, pid: int) -> None:
        """A process's working directory, from /proc while it runs (a program starting on
        the mount: the probes say so at its exec)."""
        self._learn(f"{self._proc}/{pid}/cwd")

    def _learn(self, link: str) -> None:
        st = self._stat(link)
        path = self._below(self._link(link)) if st else None
        if st and path:
            self._know_dir(st.st_ino, path)

    def _fd_path(self, c: FdCall) -> str:
        path = self._dirs.get(c.ino)
        if path is None:
            link = f"{self._proc}/{c.pid}/fd/{c.fd}"
            st = self._stat(link)  # (the descriptor may have been closed and taken again since)
            path = self._below(self._link(link)) if st and st.st_ino == c.ino else None
        return path or ""

    def _stat(self, link: str) -> os.stat_result | None:
        """What a /proc link leads to, if that is on the mount."""
        try:
            st = os.stat(link)
        except OSError:
            return None
        return st if self._dev is None or st.st_dev == self._dev else None

    def _link(self, link: str) -> str:
        """Where a /proc link leads, if that is on the mount and still there ("" else)."""
        target = _readlink(link)
        return "" if target.endswith(" (deleted)") or self._stat(link) is None else target

    def _joined_below(self, start: str, name: str) -> str | None:
        if not start:
            return ""
        return self._below(start + "/" + name) if name else self._below(start)

    def _below(self, path: str) -> str | None:
        """An absolute path as the trace names it, "/"-rooted at the mount point; None when
        it is not below it."""
        if self.mountpoint != "/":
            if path == self.mountpoint or path.startswith(self.mountpoint + "/"):
                path = path[len(self.mountpoint) :] or "/"
            else:
                return None
        return _joined("/", path)


def _joined(start: str | None, name: str) -> str | None:
    """`name` below the directory `start` ("" when that is unknown; None when a ".." climbs
    above "/", the mount point: the name leaves the mount)."""
    if not start:
        return ""
    parts: list[str] = [p for p in start.split("/") if p]
    for part in name.split("/"):
        if part == "..":
            if not parts:
                return None
            parts.pop()
        elif part and part != ".":
            parts.append(part)
    return "/" + "/".join(parts)


def _readlink(link: str) -> str:
    try:
        return os.readlink(link)
    except OSError:
        return ""
