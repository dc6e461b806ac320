"""The inode table: FUSE node ids over the backing file system's inodes.

Each known inode is reached through an O_PATH descriptor on the backing object,
so an inode stays right when its file is renamed or removed behind the mount's
back: operations reach the object itself, never a path string that may have moved.
Entries are keyed by the backing (st_dev, st_ino); the node id shown to the
kernel is the backing st_ino where that is unambiguous, so `ls -i`, tar and
rsync see stable inode numbers.

The kernel may know far more inodes than the process may hold descriptors (a
100,000-entry tree under a limit of 1,024), so at most `max_open` descriptors are
held (the table's part of the limit: fdbudget.py), least recently used closed
first.  A descriptor in use by a request, or under an open file, is pinned and
never closed under it.  Closing one gives up
what kept the object's inode number from being reused below, so a closed inode
keeps its file handle (name_to_handle_at, which carries the inode's generation)
as its identity; an object that cannot give one is never closed.  It is opened
again by that handle (open_by_handle_at, which needs root) or, without root, by
walking its best known path from the root one component at a time without
following symbolic links, and is then the same object only if its handle is the
same.  A new object found under a closed inode's number (the number reused) is
another inode with another node id; the old one answers ESTALE until the kernel
forgets it.  ESTALE is also the answer when the object is gone: the kernel's path
walk retries it with a fresh lookup.

All methods but `reopen` run on the trio thread; no locks are needed.
"""

import errno
import os
import stat
from collections import OrderedDict

import pyfuse3

from . import syscalls

ROOT = pyfuse3.ROOT_INODE
_SYNTHETIC = 1 << 63  # node ids for objects on other devices, or backing ino 1
_O_PATH = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


def version(st: os.stat_result) -> tuple[int, int, int]:
    """What tells a file changed (NFS's close-to-open check): mtime, ctime, size."""
    return st.st_mtime_ns, st.st_ctime_ns, st.st_size


class Inode:
    __slots__ = (
        "dentry",
        "fd",
        "handle",
        "handovers",
        "id",
        "kernel_mtime",
        "key",
        "mode",
        "nlookup",
        "path",
        "pins",
        "retired",
        "seen",
        "size",
    )

    def __init__(self, id: int, key: tuple[int, int], fd: int, path: str, st: os.stat_result):
        self.id = id
        self.key = key
        self.fd = fd  # O_PATH|O_NOFOLLOW descriptor of the backing object; -1 while closed
        self.nlookup = 0
        self.path = path  # best known path below the mount root: traces, and reopening
        # (directory's node id, name) it was last looked up, listed or made by: the entry
        # an open of it then holds, as far as the server knows (openfiles.py, OpenFiles.open_at)
        self.dentry: tuple[int, str] = (0, "")
        self.mode = st.st_mode
        self.handle: bytes | None = None  # file handle, taken when the descriptor is closed
        self.pins = 0  # requests using the descriptor now, and open files on it
        self.retired = False  # its number now belongs to another object below
        self.seen = version(st)  # the attributes the kernel was last told
        # The mtime the kernel keeps with FUSE's write-back cache, which then takes a
        # file's times from the server only for a new inode: this first one, then each it
        # sets (handlers.py, setattr).
        self.kernel_mtime = st.st_mtime_ns
        # hand-overs of its times the kernel owes for changes of its names and extended
        # attributes, with that cache (handlers.py, setattr)
        self.handovers = 0
        # The size the kernel holds: the last it was told, raised by the writes since (it
        # extends the file itself on a write's reply).  A write past it is one the kernel
        # treats as extending the file (handlers.py, write).
        self.size = st.st_size

    @property
    def is_symlink(self) -> bool:
        return stat.S_ISLNK(self.mode)


class InodeTable:
    def __init__(self, root_fd: int, *, max_open: int, by_handle: bool):
        """root_fd: an O_PATH descriptor of the source root, owned by the caller.
        by_handle: closed inodes are reopened by file handle (needs CAP_DAC_READ_SEARCH),
        else by path."""
        st = os.fstat(root_fd)
        self._root_fd = root_fd
        self._root_dev = st.st_dev
        self._next_synthetic = _SYNTHETIC
        self.max_open = max(16, max_open)
        self._mount_fd = -1
        self._mount_id = None
        if by_handle:
            try:
                _, self._mount_id = syscalls.name_to_handle(root_fd)
                # open_by_handle_at takes no O_PATH descriptor for its mount
                self._mount_fd = os.open(f"/proc/self/fd/{root_fd}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                self._mount_id = None  # no file handles here (EOPNOTSUPP): nothing is closed
        root = Inode(ROOT, (st.st_dev, st.st_ino), root_fd, "/", st)
        root.nlookup = 1  # never forgotten, never closed
        self._by_id: dict[int, Inode] = {ROOT: root}
        self._by_key: dict[tuple[int, int], Inode] = {root.key: root}
        self._open: OrderedDict[int, Inode] = OrderedDict()  # holding a descriptor, oldest first
        self._closable = True  # False where the file system gives no handles: nothing is closed
        self.reopened = 0
        self.kernel_keeps_size = False  # FUSE's write-back cache: a held regular file's size is the kernel's

    def stats(self) -> dict[str, int]:
        """For `fusetrace stats`: inodes known, descriptors held on them, the most held
        at once, and how many closed ones were opened again."""
        return {"known": len(self._by_id), "held": len(self._open), "most": self.max_open, "reopened": self.reopened}

    def get(self, node_id: int) -> Inode | None:
        return self._by_id.get(node_id)

    def by_key(self, key: tuple[int, int]) -> Inode | None:
        return self._by_key.get(key)

    def identify(self, st: os.stat_result, fd: int) -> int:
        """The node id of the object `fd` holds (with stat `st`): a known inode's, or
        the one a new inode would get."""
        known = self._known(st, fd)
        if known is not None:
            return known.id
        if (
            st.st_dev == self._root_dev
            and st.st_ino != ROOT
            and st.st_ino < _SYNTHETIC
            and st.st_ino not in self._by_id
        ):  # a retired inode may hold the number yet
            return st.st_ino
        self._next_synthetic += 1
        return self._next_synthetic

    def remember(self, st: os.stat_result, fd: int, path: str, node_id: int | None = None) -> Inode:
        """Count one kernel lookup of the object `fd` refers to (node_id: from identify()).

        Takes ownership of fd: it is kept for a new inode or one whose descriptor was
        closed, else closed.
        """
        key = (st.st_dev, st.st_ino)
        inode = self._known(st, fd)
        if inode is None:
            if node_id is None:
                node_id = self.identify(st, fd)
            inode = Inode(node_id, key, -1, path, st)
            self._by_id[node_id] = inode
            self._by_key[key] = inode
        else:
            inode.path = path
            inode.seen = version(st)
            # with the write-back cache, an inode the kernel holds keeps its own size; it
            # takes this one only for a new inode
            if not (self.kernel_keeps_size and inode.nlookup > 0 and stat.S_ISREG(st.st_mode)):
                inode.size = st.st_size
        if inode.fd < 0:
            self._attach(inode, fd)
        else:
            os.close(fd)
            self.touch(inode)
        inode.nlookup += 1
        return inode

    def forget(self, node_id: int, nlookup: int) -> None:
        inode = self._by_id.get(node_id)
        if inode is None or node_id == ROOT:
            return
        inode.nlookup -= nlookup
        if inode.nlookup <= 0:
            del self._by_id[node_id]
            if self._by_key.get(inode.key) is inode:
                del self._by_key[inode.key]
            if inode.pins == 0:
                self._close(inode)

    def retire(self, inode: Inode) -> None:
        """The kernel's copy of this object is no longer to be trusted (a crash fault with
        the write-back cache, whose kernel keeps a held file's size as its own): its next
        lookup makes a new inode with a new node id, the kernel's old one answered as
        before until the kernel forgets it."""
        inode.retired = True
        if self._by_key.get(inode.key) is inode:
            del self._by_key[inode.key]

    # ---- descriptors -----------------------------------------------------------------

    def pin(self, inode: Inode) -> None:
        """Keep inode's descriptor open, once it is (attach), until unpin."""
        inode.pins += 1
        self.touch(inode)

    def unpin(self, inode: Inode) -> None:
        inode.pins -= 1
        if inode.pins == 0:
            if inode.nlookup <= 0 and inode.id != ROOT:
                self._close(inode)  # forgotten while in use
            elif len(self._open) > self.max_open:
                self._trim()

    def reopen(self, inode: Inode) -> int:
        """A new O_PATH descriptor of a closed inode (blocking: run it in a worker).
        Hand it to attach() on the trio thread.  ESTALE when the object is gone or its
        number belongs to another object now."""
        if inode.retired or inode.handle is None:
            raise OSError(errno.ESTALE, "no longer the object the kernel knows")
        if self._mount_id is not None:
            fd = syscalls.open_by_handle(self._mount_fd, inode.handle, _O_PATH)
        else:
            try:
                fd = _walk(self._root_fd, inode.path)
            except OSError as exc:
                raise OSError(errno.ESTALE, f"not at its last known path ({exc.strerror})") from None
        try:
            if syscalls.name_to_handle(fd)[0] != inode.handle:
                raise OSError(errno.ESTALE, "the object at its last known path is another one")
        except BaseException:
            os.close(fd)
            raise
        return fd

    def attach(self, inode: Inode, fd: int) -> None:
        """Take a descriptor from reopen(); kept unless another arrived first."""
        if inode.fd >= 0 or (inode.nlookup <= 0 and inode.id != ROOT):
            os.close(fd)
            return
        self.reopened += 1
        self._attach(inode, fd)

    def close_all(self) -> None:
        for inode in list(self._open.values()):
            self._close(inode)
        self._by_id.clear()
        self._by_key.clear()
        if self._mount_fd >= 0:
            os.close(self._mount_fd)
            self._mount_fd = -1

    def _known(self, st: os.stat_result, fd: int) -> Inode | None:
        """The known inode of the object fd holds.  One whose descriptor was closed is
        that object only if their handles agree; else its number was reused below, and
        it is retired: it keeps its node id, and answers ESTALE, until forgotten."""
        known = self._by_key.get((st.st_dev, st.st_ino))
        if known is None or known.fd >= 0:
            return known  # a held descriptor keeps its object's number from reuse
        try:
            same = syscalls.name_to_handle(fd)[0] == known.handle
        except OSError:
            same = False
        if not same:
            known.retired = True
            del self._by_key[known.key]
            return None
        return known

    def _attach(self, inode: Inode, fd: int) -> None:
        inode.fd = fd
        self._open[inode.id] = inode
        if len(self._open) > self.max_open:
            self._trim()

    def touch(self, inode: Inode) -> None:
        """Mark inode's descriptor as just used: the last to be closed."""
        if inode.id in self._open:
            self._open.move_to_end(inode.id)

    def _trim(self) -> None:
        """Close least recently used descriptors, down to max_open, skipping pinned ones."""
        excess = len(self._open) - self.max_open
        if not self._closable:
            return
        victims: list[Inode] = []
        for inode in self._open.values():
            if len(victims) >= excess:
                break
            if inode.pins == 0:
                victims.append(inode)
        for inode in victims:
            if inode.handle is None:
                try:
                    handle, mount_id = syscalls.name_to_handle(inode.fd)
                except OSError as exc:
                    if exc.errno in (errno.EOPNOTSUPP, errno.ENOSYS):
                        self._closable = False  # none will have one: stop trying
                        return
                    continue  # no identity to know it again by: kept open
                if self._mount_id is not None and mount_id != self._mount_id:
                    continue  # on a mount below the source: no handle opens it here
                inode.handle = handle
            self._close(inode)

    def _close(self, inode: Inode) -> None:
        if inode.fd >= 0 and inode.id != ROOT:
            if self._open.get(inode.id) is inode:
                del self._open[inode.id]
            os.close(inode.fd)
            inode.fd = -1


def _walk(root_fd: int, path: str) -> int:
    """An O_PATH descriptor of `path` below root_fd, no component followed if it is a
    symbolic link (O_NOFOLLOW at each step)."""
    fd = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=root_fd)
    try:
        for part in [p for p in path.split("/") if p]:
            nxt = os.open(part, _O_PATH, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd
