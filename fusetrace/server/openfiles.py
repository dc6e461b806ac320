"""The open files and directories of a mount, by handle and by name, with NFS's silly renames.

FUSE's open names no file, yet an NFS client hides (renames away, .nfsXXXX) a file whose
name is unlinked or renamed over while it is open by that name (Request.busy), and
removes the hidden name at its last close.  The table keeps which entry each open file
was opened by, moved by renames as the kernel moves its dentries, and the files whose
name went while open, so the handlers can name both to the model and the trace.
"""

import contextlib
import errno
import logging
import os
import stat

from pyfuse3 import FUSEError

from ..request import WriteMode
from .callers import Caller
from .inodes import Inode, InodeTable

log = logging.getLogger(__name__)


Entry = tuple[int, str]  # (directory's node id, name)


class Handle:
    """An open file: its own backing descriptor with the caller's flags."""

    __slots__ = ("closed", "dentry", "dirty", "fd", "flags", "gid", "inode", "pid", "stale", "uid", "write_mode")

    def __init__(self, fd: int, inode: Inode, flags: int, ctx: Caller) -> None:
        self.fd = fd
        self.inode = inode
        # the entry (directory's node id, name) it was opened by, as far as the server knows
        # (FUSE's open names no file: Inode.dentry), moved by renames as the kernel's dentry is
        self.dentry = inode.dentry
        self.flags = flags
        self.pid, self.uid, self.gid = ctx.pid, ctx.uid, ctx.gid
        self.dirty = False  # written since the last commit (flush/fsync)
        self.closed = False  # a close(2) of it has been seen (a flush): the rest close duplicates
        self.stale = False  # the client crashed while it was open (durable.py): only its release works
        # how its writes reach the server (worked out once: every write asks)
        self.write_mode = WriteMode.of(flags)


class DirHandle:
    """An open directory: its descriptor, and the listing readdir goes through by index."""

    __slots__ = ("fd", "fit", "gid", "inode", "names", "pid", "uid")

    def __init__(self, fd: int, inode: Inode, ctx: Caller) -> None:
        self.fd = fd
        self.inode = inode
        self.names: list[str] | None = None  # the listing taken at offset 0
        self.fit = 32  # entries per readdir call; learnt from the kernel's buffer size
        self.pid, self.uid, self.gid = ctx.pid, ctx.uid, ctx.gid


class OpenFiles:
    """The open files and directories by handle, the files by the entry they were opened
    by (open_at), and the files whose name went while open (hidden)."""

    def __init__(self, inodes: InodeTable) -> None:
        self.inodes = inodes
        self.handles: dict[int, Handle] = {}
        self.crashed: dict[int, Handle] = {}  # handles open at a crash (stale): ESTALE until released
        self.dirs: dict[int, DirHandle] = {}
        self._by_entry: dict[Entry, dict[int, Handle]] = {}  # open files by Handle.dentry (open_at)
        # files whose name went while they were open (NFS renames them away: Request.busy):
        # node id: the directory of the hidden name their last release removes
        self.hidden: dict[int, int] = {}
        self.rmdirs_nfs_refuses = 0  # rmdirs of a directory holding a hidden name (kept_hidden)
        self.truncations = Truncations()  # an open that overlaps one does not judge the size
        self.resized_beside = 0  # opens that found a file resized beside the mount (resized)
        self._said_resized: set[tuple[int, int]] = set()  # the files it was logged for

    def file(self, fh: int) -> Handle:
        h = self.handles.get(fh)
        if h is None:
            raise FUSEError(errno.ESTALE if fh in self.crashed else errno.EBADF)
        return h

    def dir(self, fh: int) -> DirHandle:
        d = self.dirs.get(fh)
        if d is None:
            raise FUSEError(errno.EBADF)
        return d

    def opened(self, h: Handle) -> None:
        """Register an open file; its inode's descriptor stays open while it is."""
        self.handles[h.fd] = h
        self._by_entry.setdefault(h.dentry, {})[h.fd] = h
        self.inodes.pin(h.inode)

    def opened_dir(self, d: DirHandle) -> None:
        self.dirs[d.fd] = d
        self.inodes.pin(d.inode)

    def released(self, fh: int) -> tuple[Handle, int]:
        """Forget the open file `fh`: it, and the directory of its hidden name when this is
        the file's last release after its name went (NFS removes the hidden name), else 0.
        The caller unpins its inode once the close is done."""
        h = self.handles.pop(fh, None) or self.crashed.pop(fh, None)
        if h is None:
            raise FUSEError(errno.EBADF)
        named = self._by_entry.get(h.dentry)
        if named is not None and named.pop(fh, None) is not None and not named:
            del self._by_entry[h.dentry]
        node = h.inode
        hidden = 0
        if self.hidden and node.id in self.hidden and all(o.inode is not node for o in self.handles.values()):
            hidden = self.hidden.pop(node.id)
        return h, hidden

    def crash(self) -> list[Handle]:
        """The client crashed: every open file is stale (its release still closes it)."""
        stale = list(self.handles.values())
        for h in stale:
            h.stale = True
        self.crashed.update(self.handles)
        self.handles.clear()
        return stale

    def released_dir(self, fh: int) -> DirHandle:
        d = self.dirs.pop(fh, None)
        if d is None:
            raise FUSEError(errno.EBADF)
        return d

    def open_at(self, parent: Inode, name: str) -> int:
        """The node id of the file at `name` in `parent` while a handle opened by that entry
        is open here and the file's name has not gone before (Request.busy), else 0: NFS
        hides a name still in use (its dentry held by an open file), so a file open only
        through another hard link is removed plainly.  Entries are keyed by their
        directory's node id, which no rename of a directory changes."""
        if not self._by_entry:
            return 0
        for h in self._by_entry.get((parent.id, name), {}).values():
            if h.inode.id not in self.hidden:
                return h.inode.id
        return 0

    def kept_hidden(self, path: str) -> None:
        """An emulated mount removed the directory at `path` while it held the hidden name
        of a file unlinked or renamed over while open (Request.busy).  NFS keeps that name
        (.nfsXXXX) until the file's last close and refuses the rmdir (ENOTEMPTY; `rm -rf`
        also fails to unlink the name, EBUSY); the mount cannot show a name the source does
        not have, so it is counted, and said once a directory."""
        for directory in set(self.hidden.values()):
            node = self.inodes.get(directory)
            if node is not None and node.path == path:
                self.rmdirs_nfs_refuses += 1
                log.warning(
                    "%r: removed, where NFS would refuse (ENOTEMPTY): a file in it was unlinked while "
                    "open, and NFS keeps it there as .nfsXXXX until its last close",
                    path,
                )
                return

    def renamed(
        self, moved: list[tuple[int, int] | None], old: Entry, new: Entry, old_path: str, new_path: str, exchange: bool
    ) -> None:
        """A rename (or exchange) of `old` to `new` moved the objects whose keys are
        `moved` (now at the new name, now at the old): keep their best known paths (for
        traces) and the entries they and their open files hold, as the kernel moves its
        dentries (d_move)."""
        if moved[0] is not None and moved[0] == moved[1]:
            return  # a rename onto another link of its file does nothing
        at_old, at_new = self._by_entry.pop(old, {}), self._by_entry.pop(new, {})
        self._enter(at_old, new)
        if exchange:
            self._enter(at_new, old)
        # (else what was at the new name has gone: hidden, if open there (busy), or removed)
        for key, path, entry in zip(moved, (new_path, old_path), (new, old)):
            known = self.inodes.by_key(key) if key is not None else None
            if known is not None:
                known.path, known.dentry = path, entry
                if not exchange and stat.S_ISDIR(known.mode):
                    self._moved_below(old_path, new_path)

    def _enter(self, handles: dict[int, Handle], entry: Entry) -> None:
        """Index these open files as open by `entry` (open_at)."""
        if handles:
            for h in handles.values():
                h.dentry = entry
            self._by_entry.setdefault(entry, {}).update(handles)

    def _moved_below(self, old: str, new: str) -> None:
        """A directory moved from `old` to `new`: the open files and directories below it
        are there now (for their traces).  Other objects below it keep
        the path they were last looked up by until the kernel looks them up again."""
        below = old + "/"
        opened: list[Inode] = [h.inode for h in self.handles.values()]
        for node in opened + [d.inode for d in self.dirs.values()]:
            if node.path.startswith(below):
                node.path = new + node.path[len(old) :]

    def resized(self, node: Inode, size: int) -> None:
        """An open found a file resized beside the mount (in the source, or through another
        mount of it) while the kernel holds its inode: with the write-back cache the kernel
        keeps the size it holds (fs/fuse: fuse_get_cache_mask), so reads stop at it or are
        padded with zeros, and writes and appends land at its end, the padding with them.
        NFS would see the new size at open.  No server can make the kernel take it without
        retiring the inode under whoever else holds it (an O_PATH descriptor, a bind mount,
        an open in flight: they would get EIO), so it is counted, and said once a file."""
        self.resized_beside += 1
        if node.key not in self._said_resized:
            self._said_resized.add(node.key)
            log.warning(
                "%r: resized beside the mount (%d bytes, the kernel holds %d): with the write-back cache "
                "the kernel keeps its own size; mount with --no-writeback-cache if the source changes beside "
                "the mount",
                node.path,
                size,
                node.size,
            )  # (%r: a writer of the source names files)
            if len(self._said_resized) > 100_000:
                self._said_resized.clear()

    def close(self) -> None:
        for fd in list(self.handles) + list(self.crashed) + list(self.dirs):
            os.close(fd)
        self.handles.clear()
        self.crashed.clear()
        self._by_entry.clear()
        self.hidden.clear()
        self.dirs.clear()


class Truncations:
    """Truncations through a mount with the write-back cache (a setattr of a size, an
    O_TRUNC open), as a context around each: they change the source's size before the
    size the kernel holds (Inode.size) follows, so an open that overlaps one, or began
    before one ended, cannot tell a size changed beside the mount from them."""

    __slots__ = ("ended", "under_way")

    def __init__(self) -> None:
        self.under_way = 0
        self.ended = 0

    def __enter__(self) -> None:
        self.under_way += 1

    def __exit__(self, *exc: object) -> None:
        self.under_way -= 1
        self.ended += 1

    def none_since(self, ended: int) -> bool:
        """No truncation is under way, and none has ended since `ended` was read."""
        return not self.under_way and self.ended == ended


NO_TRUNCATION = contextlib.nullcontext()
