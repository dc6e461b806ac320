"""A trace's records back into the Requests the mount's handlers made of them (whose
`call(uid)` is the NFS client's `Call`, as the shaper asked it: `fusetrace simulate`).

A record names what its handler's `Request` (fusetrace/request.py) held, but some of it
only through the records before it, so the rebuilding is stateful over the stream, in
start order (fusetrace/server/handlers.py is what it mirrors):

- `kind` is the request's label (format 3): its Kind, or a write's mode;
- an open file's flags come from its open or create (`flags`, the new handle in `fh`):
  they give a write's mode where `kind` is missing and whether a flush's file was opened
  for writing (`writable`); its first flush is the one that `closes` it;
- a directory: `mode` of a lookup, create, mkdir, ... (the new entry) or getattr and
  setattr (the object), the directory operations (opendir, readdir, releasedir,
  fsyncdir), and the directory an entry operation names; `is_dir` comes from these;
- the entry a lookup or namespace change is about: `inode` (its directory) and the
  basename of `path`;
- an unlink's or rename's `busy` file (its `entry`), and so the release that closes that
  file's last handle, which names the directory of its hidden name (each handle's node
  id comes from its open or create);
- where a rename or link puts its entry (its new directory's node id): from a map of
  directory paths to node ids, learnt from every record that names a directory with its
  path (a removed directory's id stays with its path until another is made there, as a
  rename into it still names it).  A directory the trace never named by that path before (the kernel learnt it
  from a READDIRPLUS reply, which the trace does not list) gets a synthetic id of its
  own, above every FUSE node id (`UNKNOWN_DIRECTORY`), the same for the same path: the
  emulated client then keeps that directory's caches under that id, so its own later
  operations do not see the change.

Traces before format 3 lack `kind`, `flags`, `mode` and `entry`: kinds are worked out
from the handles' writes, writes taken as buffered, and directories known only from the
operations on them.  `Rebuilder.gaps` counts what had to be guessed.

A captured trace (`source` "syscalls") holds system calls, not requests: syscalls.py
makes them into the requests the kernel passed on, and hands those to a Rebuilder.
"""

import os
import stat
from dataclasses import dataclass

from ..emulator.ops import Gate
from ..request import Kind, Request, WriteMode

# The columns a Rebuilder reads, in the order rebuild() takes them.
COLUMNS = ["op", "inode", "path", "path2", "fh", "offset", "size", "errno", "kind", "flags", "mode", "entry", "gate"]

ROOT = 1  # FUSE's root node id (FUSE_ROOT_ID)
UNKNOWN_DIRECTORY = 1 << 64  # synthetic node ids of directories never named before: above any FUSE node id

# Operations on an entry of a directory: the record's inode is the directory, its path the entry's.
_ENTRY_OPS = frozenset(("lookup", "mknod", "mkdir", "symlink", "create", "unlink", "rmdir", "rename"))
_DIRECTORY_OPS = frozenset(("opendir", "readdir", "releasedir", "fsyncdir"))
_HANDLE_OPS = frozenset(("write", "flush", "fsync", "release"))  # their kinds follow the handle's writes
# The other operations' kinds, where a record does not say.
_KINDS = {
    **dict.fromkeys(
        ("getattr", "readlink", "open", "opendir", "readdir", "statfs", "access", "getxattr", "listxattr"),
        Kind.META_READ,
    ),
    **dict.fromkeys(("setattr", "link", "setxattr", "removexattr"), Kind.META_WRITE),
    "read": Kind.READ,
    "releasedir": Kind.NONE,
    "fsyncdir": Kind.COMMIT,
}
_OPS = _ENTRY_OPS | _HANDLE_OPS | set(_KINDS)
_TYPED = frozenset(("getattr", "setattr", "access"))  # the requests that say whether their object is a directory
_WRITE_MODES = {m.value: m for m in WriteMode}
_LABELS = {k.value: k for k in Kind}
_SYNC = os.O_SYNC | os.O_DSYNC


class _Handle:
    """An open file as its records show it: its open flags (None: its open is not in
    the trace), its node id, whether it was written since its last flush or fsync,
    whether it was ever written, and whether a close(2) of it has been seen."""

    __slots__ = ("closed", "dirty", "flags", "inode", "wrote")

    def __init__(self, flags: int | None, inode: int):
        self.flags = flags
        self.inode = inode
        self.dirty = self.wrote = self.closed = False


@dataclass
class Gaps:
    """What the rebuilding had to guess, counted."""

    new_directories: int = 0  # renames and links into a directory the trace had not named (UNKNOWN_DIRECTORY)
    unknown_handles: int = 0  # handles used without their open in the trace (flags unknown)
    unknown_ops: int = 0  # records of operations no handler makes (skipped)


class Rebuilder:
    """Feed it a trace's records in start order; it gives back each one's Request."""

    def __init__(self) -> None:
        self._handles: dict[int, _Handle] = {}
        self._hidden: dict[int, int] = {}  # files whose name went while open: their hidden name's directory
        self._dirs: set[int] = {ROOT}  # node ids known to be directories
        self._dir_ids: dict[str, int] = {"/": ROOT}  # directory path: node id
        self._unknown = UNKNOWN_DIRECTORY
        self.gaps = Gaps()

    def rebuild(
        self,
        op: str,
        inode: int,
        path: str,
        path2: str | None,
        fh: int,
        offset: int,
        size: int,
        errno: int,
        kind: str | None,
        flags: int,
        mode: int,
        entry: int,
        gate: str | None,
    ) -> Request | None:
        """The Request the handler made for this record (COLUMNS, in order); None for an
        operation no handler makes.  A request the mount judged its kernel's own (gate
        `kernel`: FUSE's write-back cache) is that again."""
        if op not in _OPS:
            self.gaps.unknown_ops += 1
            return None
        self._learn(op, inode, path, mode, entry)
        if op in _ENTRY_OPS:
            return self._entry_op(op, inode, path, path2, fh, errno, flags, entry)
        if op in _HANDLE_OPS:
            return self._handle_op(op, inode, fh, size, offset, kind)
        if op == "link":
            directory, name = self._directory_of(path2 or "")
            return Request("link", Kind.META_WRITE, inode, directory=directory, name=name)
        if op in ("open", "opendir") and fh:
            self._handles[fh] = _Handle(flags, inode)
        elif op == "releasedir":
            self._handles.pop(fh, None)
        label = self._kind(kind, _KINDS[op])
        if op == "readdir":
            return Request(op, label, inode, size=size, offset=offset, handle=fh)
        return Request(
            op, label, inode, size=size, is_dir=op in _TYPED and inode in self._dirs, kernel_only=gate == Gate.KERNEL
        )

    def _handle_op(self, op: str, inode: int, fh: int, size: int, offset: int, kind: str | None) -> Request:
        """A write, flush, fsync or release on an open file, as its handle stands."""
        if op == "release":
            released = self._handles.pop(fh, None)
            dirty = released is not None and released.dirty
            hidden = 0
            if self._hidden and inode in self._hidden and all(o.inode != inode for o in self._handles.values()):
                hidden = self._hidden.pop(inode)
            return Request("release", self._kind(kind, Kind.COMMIT if dirty else Kind.NONE), inode, directory=hidden)
        h = self._handle(fh, inode)
        if op == "write":
            h.dirty = h.wrote = True  # as the handler marks it, before the call
            if kind in _WRITE_MODES:
                write_mode = _WRITE_MODES[kind]
            elif h.flags is not None and h.flags & os.O_DIRECT:
                write_mode = WriteMode.DIRECT
            else:
                write_mode = WriteMode.SYNC if h.flags is not None and h.flags & _SYNC else WriteMode.BUFFERED
            return Request("write", Kind.WRITE, inode, size=size, offset=offset, write_mode=write_mode)
        if op == "fsync":
            req = Request("fsync", self._kind(kind, Kind.COMMIT if h.dirty else Kind.NONE), inode)
        else:
            req = Request(
                "flush",
                self._kind(kind, Kind.COMMIT if h.dirty else Kind.META_READ),
                inode,
                closes=not h.closed,
                writable=h.wrote if h.flags is None else (h.flags & os.O_ACCMODE) != os.O_RDONLY,
            )
            h.closed = True
        h.dirty = False
        return req

    def _entry_op(
        self,
        op: str,
        inode: int,
        path: str,
        path2: str | None,
        fh: int,
        errno: int,
        flags: int,
        entry: int,
    ) -> Request:
        name = path.rpartition("/")[2]
        if op == "create" and fh:
            self._handles[fh] = _Handle(flags, entry)
        if op == "rename":
            new_directory, new_name = self._directory_of(path2 or "")
            if not errno and path in self._dir_ids and path2:  # a directory moved: its path moves with it
                self._dir_ids[path2] = self._dir_ids.pop(path)
            if entry:  # even if it failed: NFS hid the target before its RENAME
                self._hidden[entry] = new_directory
            return Request(
                "rename",
                Kind.META_WRITE,
                directory=inode,
                name=name,
                new_directory=new_directory,
                new_name=new_name,
                busy=entry,
            )
        if op == "lookup":
            return Request("lookup", Kind.META_READ, inode, directory=inode, name=name)
        busy = entry if op == "unlink" else 0  # the others' entry is what they made
        if busy and not errno:
            self._hidden[busy] = inode
        # file 0: not made yet
        return Request(op, Kind.META_WRITE, directory=inode, name=name, busy=busy)

    def _learn(self, op: str, inode: int, path: str, mode: int, entry: int) -> None:
        """What the record says about directories: which node ids are ones, and their paths."""
        if op in _ENTRY_OPS or op in _DIRECTORY_OPS:
            directory = (path.rpartition("/")[0] or "/") if op in _ENTRY_OPS else path
            self._dirs.add(inode)
            self._dir_ids[directory] = inode
        if entry and mode:  # a new entry's node id and its type
            self._is_dir(entry, stat.S_ISDIR(mode), path if op != "link" else None)
        elif mode and op in ("getattr", "setattr"):
            self._is_dir(inode, stat.S_ISDIR(mode), path)

    def _is_dir(self, node: int, yes: bool, path: str | None) -> None:
        if yes:
            self._dirs.add(node)
            if path is not None:
                self._dir_ids[path] = node
        else:
            self._dirs.discard(node)

    def _directory_of(self, path: str, counted: bool = True) -> tuple[int, str]:
        """(node id, name) of the entry at `path`: its directory's id as the trace named it,
        else a synthetic one for that path (see the module's doc), `counted` as a gap."""
        directory, _, name = path.rpartition("/")
        directory = directory or "/"
        node = self._dir_ids.get(directory)
        if node is None:
            self.gaps.new_directories += counted
            self._unknown += 1
            node = self._dir_ids[directory] = self._unknown
        return node, name

    def _handle(self, fh: int, inode: int) -> _Handle:
        h = self._handles.get(fh)
        if h is None:
            self.gaps.unknown_handles += 1
            h = self._handles[fh] = _Handle(None, inode)
        return h

    @staticmethod
    def _kind(label: str | None, default: Kind) -> Kind:
        """The Kind a record's label names (format 3), else `default`.  A write's label on
        another operation (a damaged or hostile trace) is `default` too: a Request of kind
        WRITE is a write.  (Lookups and namespace changes take their kind from what they
        are: a request naming a directory has no other.)"""
        kind = _LABELS.get(label, default) if label is not None else default
        return default if kind is Kind.WRITE else kind
