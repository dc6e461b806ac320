"""What every family of handlers stands on: the server's state, declared for the
mixins (namespace.py, files.py) that Operations (handlers.py) inherits, and the helpers
that turn node ids and stats into replies.

Operations.__init__ sets these attributes; they are declared here so that each mixin is
checked on its own (mypy --strict) without importing handlers.py, which imports it.
"""

import errno as E
import os
import stat
from typing import TYPE_CHECKING

import pyfuse3
from pyfuse3 import FUSEError

from .durable import Durability
from .fdbudget import Budget, Spares
from .inodes import Inode, InodeTable
from .openfiles import OpenFiles
from .pipeline import Pipeline, join

if TYPE_CHECKING:  # a mount that neither traces nor emulates imports neither
    from ..shaping.shaper import Shaper
    from ..trace.writer import TraceWriter


class HandlerBase(pyfuse3.Operations):
    inodes: InodeTable
    files: OpenFiles
    fds: Budget
    spares: Spares
    pipeline: Pipeline
    tracer: "TraceWriter | None"
    shaper: "Shaper | None"
    durability: Durability | None  # armed for a crash (--crashable): what a crash would keep
    attr_timeout: float
    dir_attr_timeout: float
    entry_timeout: float
    proc_reaches_links: bool  # /proc/self/fd/N of a symbolic link acts on the link (nofollow.py)

    def _inode(self, node_id: int) -> Inode:
        inode = self.inodes.get(node_id)
        if inode is None:
            raise FUSEError(E.ESTALE)
        return inode

    def _busy(self, parent: Inode, name: str) -> int:
        """OpenFiles.open_at, when the name's going is shaped or traced (Request.busy)."""
        return 0 if self.shaper is None and self.tracer is None else self.files.open_at(parent, name)

    def _entry(
        self, st: os.stat_result, node_id: int, parent: int = 0, name: str = "", handle: int | None = None
    ) -> pyfuse3.EntryAttributes:
        """The reply about `node_id`, found as `name` in `parent` (or listed there by the pass
        `handle`), or asked of alone.  An emulated mount gives the kernel the time the
        emulated NFS client trusts each (Shaper.trusted), so that the kernel asks again
        when that client would send an RPC, and not before (docs/EMULATOR.md, "What the
        kernel is told")."""
        a = pyfuse3.EntryAttributes()
        a.st_ino = node_id
        a.generation = 0
        is_dir = stat.S_ISDIR(st.st_mode)
        if self.shaper is None:
            a.entry_timeout = self.entry_timeout
            a.attr_timeout = self.dir_attr_timeout if is_dir else self.attr_timeout
        else:
            a.entry_timeout, a.attr_timeout = self.shaper.trusted(node_id, is_dir, parent, name, handle)
        a.st_mode = st.st_mode
        a.st_nlink = st.st_nlink
        a.st_uid = st.st_uid
        a.st_gid = st.st_gid
        a.st_rdev = st.st_rdev
        a.st_size = st.st_size
        a.st_blksize = st.st_blksize
        a.st_blocks = st.st_blocks
        a.st_atime_ns = st.st_atime_ns
        a.st_mtime_ns = st.st_mtime_ns
        a.st_ctime_ns = st.st_ctime_ns
        return a

    def _new_entry(self, parent: Inode, name: str, found: tuple[os.stat_result, int]) -> pyfuse3.EntryAttributes:
        """Register a (stat, O_PATH fd) pair the kernel is about to learn of."""
        st, fd = found
        return self._entry(st, self._remember(parent, name, st, fd).id, parent.id, name)

    def _remember(self, parent: Inode, name: str, st: os.stat_result, fd: int, node_id: int | None = None) -> Inode:
        """InodeTable.remember of the object at `name` in `parent`, which is then its
        best known path and the entry an open of it holds (Inode.dentry)."""
        inode = self.inodes.remember(st, fd, join(parent.path, name), node_id)
        inode.dentry = (parent.id, name)
        return inode

    def _kernel_keeps_size(self, node: Inode) -> bool:
        """With the write-back cache the kernel takes a regular file's size from the
        server only for a new inode, and sets it itself on writes and truncations
        (fs/fuse: fuse_get_cache_mask), so replies do not change the size it holds."""
        return self.enable_writeback_cache and stat.S_ISREG(node.mode)
