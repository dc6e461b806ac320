"""The handlers that change the namespace: make, link, unlink, rename and remove
names in the source, keeping the inode table and the hidden names of open files
(openfiles.py) as the kernel sees them.  A mixin of Operations (handlers.py)."""

import errno as E
import functools
import logging
import os
import stat
from typing import Any

import pyfuse3
from pyfuse3 import FUSEError

from ..request import Kind, Request
from . import nofollow, syscalls
from .callers import Caller
from .handlerbase import HandlerBase
from .pipeline import Call, Site, at, join

log = logging.getLogger(__name__)


class NamespaceHandlers(HandlerBase):
    _said_rename_flags: bool  # an emulated rename with flags NFS refuses was logged

    async def mknod(self, parent_inode: int, name: bytes, mode: int, rdev: int, ctx: Caller) -> pyfuse3.EntryAttributes:
        return await self._make("mknod", parent_inode, name, ctx, nofollow.mknod, mode, rdev)

    async def mkdir(self, parent_inode: int, name: bytes, mode: int, ctx: Caller) -> pyfuse3.EntryAttributes:
        return await self._make("mkdir", parent_inode, name, ctx, nofollow.mkdir, mode | stat.S_IFDIR)

    async def symlink(self, parent_inode: int, name: bytes, raw_target: bytes, ctx: Caller) -> pyfuse3.EntryAttributes:
        target = os.fsdecode(raw_target)
        return await self._make("symlink", parent_inode, name, ctx, nofollow.symlink, target, path2=target)

    async def _make(
        self, op: str, parent_inode: int, raw_name: bytes, ctx: Caller, fn: Call, *args: Any, path2: str | None = None
    ) -> pyfuse3.EntryAttributes:
        parent = self._inode(parent_inode)
        name = os.fsdecode(raw_name)
        return await self.pipeline.call(
            Request(op, Kind.META_WRITE, directory=parent.id, name=name),
            at(parent, name, path2),
            ctx,
            fn,
            parent,
            name,
            *args,
            nofollow.owner_for(ctx),
            reply=functools.partial(self._new_entry, parent, name),
        )

    async def unlink(self, parent_inode: int, raw_name: bytes, ctx: Caller) -> None:
        parent = self._inode(parent_inode)
        name = os.fsdecode(raw_name)
        busy = self._busy(parent, name)
        if busy:  # before the call's wait: a release during it (munmap, exit) must find it
            self.files.hidden[busy] = parent.id
        try:
            gone = await self.pipeline.call(
                Request("unlink", Kind.META_WRITE, directory=parent.id, name=name, busy=busy),
                at(parent, name),
                ctx,
                nofollow.unlink_known if self.enable_writeback_cache else nofollow.unlink,
                name,
                parent,
                nofollow.owner_for(ctx),
            )
        except FUSEError:
            if busy:  # NFS's failed RENAME left no hidden name
                self.files.hidden.pop(busy, None)
            raise
        self._times_owed(gone)

    async def rmdir(self, parent_inode: int, raw_name: bytes, ctx: Caller) -> None:
        parent = self._inode(parent_inode)
        name = os.fsdecode(raw_name)
        await self.pipeline.call(
            Request("rmdir", Kind.META_WRITE, directory=parent.id, name=name),
            at(parent, name),
            ctx,
            nofollow.rmdir,
            name,
            parent,
            nofollow.owner_for(ctx),
        )
        if self.files.hidden and self.shaper is not None:
            self.files.kept_hidden(join(parent.path, name))

    async def rename(
        self, parent_inode_old: int, name_old: bytes, parent_inode_new: int, name_new: bytes, flags: int, ctx: Caller
    ) -> None:
        old_dir, new_dir = self._inode(parent_inode_old), self._inode(parent_inode_new)
        old, new = os.fsdecode(name_old), os.fsdecode(name_new)
        old_path, new_path = join(old_dir.path, old), join(new_dir.path, new)
        exchange = flags & syscalls.RENAME_EXCHANGE
        if flags and self.shaper is not None and not self._said_rename_flags:
            self._said_rename_flags = True
            log.warning(
                "%r: renamed with renameat2 flags (%#x), which an NFS client refuses (EINVAL, nothing sent): "
                "done here as the source does; a program relying on them fails on EFS",
                old_path,
                flags,
            )
        busy = 0 if exchange or new_path == old_path else self._busy(new_dir, new)
        if busy:  # before the call's wait, as unlink's; kept if the RENAME fails: NFS hid the target first
            self.files.hidden[busy] = new_dir.id
        # charged to the directory the entry leaves, as the trace names it
        moved, owed = await self.pipeline.call(
            Request(
                "rename",
                Kind.META_WRITE,
                directory=old_dir.id,
                name=old,
                new_directory=new_dir.id,
                new_name=new,
                busy=busy,
            ),
            Site(old_dir.id, old_path, new_path, flags=flags),
            ctx,
            nofollow.rename,
            old_dir,
            old,
            new_dir,
            new,
            flags,
            nofollow.owner_for(ctx),
            self.enable_writeback_cache,
        )
        self.files.renamed(moved, (old_dir.id, old), (new_dir.id, new), old_path, new_path, bool(exchange))
        self._times_owed(*owed)

    def _times_owed(self, *keys: tuple[int, int] | None) -> None:
        """With the write-back cache, the kernel hands over the times of a regular file
        whose names it changed (see setattr): count one owed by each of these."""
        if not self.enable_writeback_cache:
            return
        for key in keys:
            node = self.inodes.by_key(key) if key is not None else None
            if node is not None and stat.S_ISREG(node.mode):
                node.handovers += 1

    async def link(self, inode: int, new_parent_inode: int, new_name: bytes, ctx: Caller) -> pyfuse3.EntryAttributes:
        node = self._inode(inode)
        parent = self._inode(new_parent_inode)
        name = os.fsdecode(new_name)
        owner = nofollow.owner_for(ctx)
        if node.is_symlink and (owner is not None or not nofollow.AS_ROOT) and not self.proc_reaches_links:
            raise FUSEError(E.EPERM)  # linkat through /proc/self/fd would follow the link here
        # a new entry in `parent`: its directory's slot, like every namespace change
        entry = await self.pipeline.call(
            Request("link", Kind.META_WRITE, node.id, directory=parent.id, name=name),
            at(node, path2=join(parent.path, name)),
            ctx,
            nofollow.link,
            node,
            parent,
            name,
            owner,
            reply=functools.partial(self._new_entry, parent, name),
        )
        self._times_owed(node.key)
        return entry
