"""The inode table: FUSE node ids over the backing file system's inodes.

Each known inode holds an O_PATH descriptor on the backing object, so an
inode stays right when its file is renamed or removed behind the mount's back:
operations reach the object itself, never a path string that may have moved.
Entries are keyed by the backing (st_dev, st_ino); the node id shown to the
kernel is the backing st_ino where that is unambiguous, so `ls -i`, tar and
rsync see stable inode numbers.

All methods run on the trio thread; no locks are needed.
"""

import os
import stat

import pyfuse3

ROOT = pyfuse3.ROOT_INODE
_SYNTHETIC = 1 << 63  # node ids for objects on other devices, or backing ino 1


class Inode:
    __slots__ = ("id", "key", "fd", "nlookup", "path", "mode")

    def __init__(self, id: int, key: tuple[int, int], fd: int, path: str, mode: int):
        self.id = id
        self.key = key
        self.fd = fd  # O_PATH|O_NOFOLLOW descriptor of the backing object
        self.nlookup = 0
        self.path = path  # best known path below the mount root, for traces
        self.mode = mode

    @property
    def is_symlink(self) -> bool:
        return stat.S_ISLNK(self.mode)

    @property
    def proc_path(self) -> str:
        """A path that reaches the object through its descriptor (follows symlinks)."""
        return f"/proc/self/fd/{self.fd}"


class InodeTable:
    def __init__(self, root_fd: int):
        st = os.fstat(root_fd)
        self._root_dev = st.st_dev
        self._next_synthetic = _SYNTHETIC
        root = Inode(ROOT, (st.st_dev, st.st_ino), root_fd, "/", st.st_mode)
        root.nlookup = 1  # never forgotten
        self._by_id: dict[int, Inode] = {ROOT: root}
        self._by_key: dict[tuple[int, int], Inode] = {root.key: root}

    def __len__(self) -> int:
        return len(self._by_id)

    def get(self, node_id: int) -> Inode | None:
        return self._by_id.get(node_id)

    def by_key(self, key) -> Inode | None:
        return self._by_key.get(key)

    def node_id_for(self, st: os.stat_result) -> int:
        """The node id an object with this stat would get (existing or new)."""
        known = self._by_key.get((st.st_dev, st.st_ino))
        if known is not None:
            return known.id
        if st.st_dev == self._root_dev and st.st_ino != ROOT and st.st_ino < _SYNTHETIC:
            return st.st_ino
        self._next_synthetic += 1
        return self._next_synthetic

    def remember(self, st: os.stat_result, fd: int, path: str, node_id: int | None = None) -> Inode:
        """Count one kernel lookup of the object `fd` refers to.

        Takes ownership of fd: it is kept for a new inode, closed for a known one.
        """
        key = (st.st_dev, st.st_ino)
        inode = self._by_key.get(key)
        if inode is None:
            if node_id is None:
                node_id = self.node_id_for(st)
            inode = Inode(node_id, key, fd, path, st.st_mode)
            self._by_id[node_id] = inode
            self._by_key[key] = inode
        else:
            os.close(fd)
            inode.path = path
        inode.nlookup += 1
        return inode

    def forget(self, node_id: int, nlookup: int) -> None:
        inode = self._by_id.get(node_id)
        if inode is None or node_id == ROOT:
            return
        inode.nlookup -= nlookup
        if inode.nlookup <= 0:
            del self._by_id[node_id]
            del self._by_key[inode.key]
            os.close(inode.fd)

    def close_all(self) -> None:
        for inode in self._by_id.values():
            if inode.id != ROOT:
                os.close(inode.fd)
        self._by_id.clear()
        self._by_key.clear()
