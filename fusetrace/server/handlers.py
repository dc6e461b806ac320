"""The FUSE surface: a passthrough to a source directory, each operation one handler.

A handler names its request (a Request: fusetrace/request.py), where the trace should
place it (pipeline.at) and the no-follow call that does it (nofollow.py), and hands
them to the one request pipeline (pipeline.py: admit, fault, place, hold, trace,
reply); around that call it keeps the kernel's view: node ids (inodes.py), open files
and hidden names (openfiles.py).  A new operation is a handler here, named in HANDLED
(docs/ARCHITECTURE.md, "The request pipeline").
"""

import errno as E
import functools
import logging
import os
import resource
import stat
from collections.abc import Callable, Sequence
from time import monotonic_ns, time_ns
from typing import TYPE_CHECKING, Any, TypedDict

import pyfuse3
from pyfuse3 import FUSEError

from ..request import Kind, Request
from . import nofollow, syscalls
from .callers import Caller
from .fdbudget import Budget, Descriptors, Spares, in_use
from .holds import HeldReport
from .inline import InlinePolicy, Placement
from .inodes import ROOT, Inode, InodeTable, version
from .openfiles import NO_TRUNCATION, DirHandle, Handle, OpenFiles
from .pipeline import IN_WORKER, Call, Pipeline, Site, T, at, guarded, join
from .setattrs import Change
from .workers import Workers

if TYPE_CHECKING:  # a mount that neither traces nor emulates imports neither
    from ..shaping.shaper import Shaper
    from ..trace.writer import TraceWriter

log = logging.getLogger(__name__)

# Flags the kernel sends that must not reach the backing open(2) of an existing file.
_OPEN_STRIP = os.O_CREAT | os.O_EXCL | os.O_NOCTTY | os.O_NOFOLLOW | os.O_DIRECT


class Operations(pyfuse3.Operations):
    supports_dot_lookup = False
    enable_writeback_cache = False
    enable_acl = False

    def __init__(
        self,
        source: str,
        *,
        workers: Workers,
        inline: InlinePolicy,
        tracer: "TraceWriter | None" = None,
        shaper: "Shaper | None" = None,
        attr_timeout: float = 1.0,
        entry_timeout: float = 1.0,
        dir_attr_timeout: float | None = None,
        negative_timeout: float = 0.0,
        xattrs: bool = True,
        writeback_cache: bool = False,
    ) -> None:
        super().__init__()
        # FUSE's write-back cache (pyfuse3 asks the kernel for it when this is true): see
        # _backing_flags and setattr for what the server must then do differently
        self.enable_writeback_cache = writeback_cache
        self.root_fd = os.open(source, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        # the descriptor limit, split between the inode table, open files (a share a user)
        # and a reserve for the server's own (fdbudget.py)
        self.fds = Budget(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        self.spares = Spares()  # for FLUSH's duplicate when no descriptor is free
        self.inodes = InodeTable(self.root_fd, max_open=self.fds.table, by_handle=nofollow.AS_ROOT)
        self.inodes.kernel_keeps_size = writeback_cache
        self._said_rename_flags = False  # an emulated rename with flags NFS refuses was logged
        self.xattrs = xattrs and nofollow.has_xattrs(self.root_fd)
        # The kernel enforces POSIX ACLs (default_permissions alone checks mode bits, and
        # the server acts as root) and checks who may set them, where there are any.
        self.enable_acl = self.xattrs
        self.proc_reaches_links = nofollow.proc_reaches_links()
        self.files = OpenFiles(self.inodes)
        self.pipeline = Pipeline(
            inodes=self.inodes,
            files=self.files,
            fds=self.fds,
            workers=workers,
            inline=inline,
            tracer=tracer,
            shaper=shaper,
            writeback_cache=writeback_cache,
        )
        self._cached_pread: Callable[[int, int, int], bytes | None] | None = self._nowait_pread
        self.tracer = tracer
        self.shaper = shaper
        self.attr_timeout = attr_timeout
        self.dir_attr_timeout = attr_timeout if dir_attr_timeout is None else dir_attr_timeout
        self.entry_timeout = entry_timeout
        self.negative_timeout = negative_timeout  # how long the kernel may trust an absent name (0: not at all)
        # requests being handled: read from the kernel and not yet answered (see _guarded;
        # shaping/kernelqueue.py tells from it how many the kernel holds unread)
        self.serving = 0

    def stats(self) -> "ServerStats":
        """For `fusetrace stats`: the inode table, the open files, the requests being
        handled and where calls run."""
        p = self.pipeline
        table = self.inodes.stats()
        return {
            "inodes": table.pop("known"),
            "open_files": len(self.files.handles),
            "inode_fds": table,
            "descriptors": {
                **self.fds.stats(),
                "inode_table": table["held"],
                "in_use": in_use(),
                "flush_spares_used": self.spares.used,
            },
            "serving": self.serving,
            "inline": p.inline.describe(),
            "resized_beside": self.files.resized_beside,
            "rmdirs_nfs_refuses": self.files.rmdirs_nfs_refuses,
            "killed_released": p.holds.kills.released,
            "held_long": p.holds.held_long(monotonic_ns()),
        }

    def _nowait_pread(self, fd: int, size: int, offset: int) -> bytes | None:
        try:
            return nofollow.cached_pread(fd, size, offset)
        except nofollow.NowaitUnsupported:
            self._cached_pread = None  # tmpfs, for one: reads follow the inline policy from now on
            return None

    def _inode(self, node_id: int) -> Inode:
        inode = self.inodes.get(node_id)
        if inode is None:
            raise FUSEError(E.ESTALE)
        return inode

    def _busy(self, parent: Inode, name: str) -> int:
        """OpenFiles.open_at, when the name's going is shaped or traced (Request.busy)."""
        return 0 if self.shaper is None and self.tracer is None else self.files.open_at(parent, name)

    def _entry(self, st: os.stat_result, node_id: int) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = node_id
        a.generation = 0
        a.entry_timeout = self.entry_timeout
        a.attr_timeout = self.dir_attr_timeout if stat.S_ISDIR(st.st_mode) else self.attr_timeout
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
        return self._entry(st, self._remember(parent, name, st, fd).id)

    def _remember(self, parent: Inode, name: str, st: os.stat_result, fd: int, node_id: int | None = None) -> Inode:
        """InodeTable.remember of the object at `name` in `parent`, which is then its
        best known path and the entry an open of it holds (Inode.dentry)."""
        inode = self.inodes.remember(st, fd, join(parent.path, name), node_id)
        inode.dentry = (parent.id, name)
        return inode

    # ---- names --------------------------------------------------------------------

    async def lookup(self, parent_inode: int, raw_name: bytes, ctx: Caller) -> pyfuse3.EntryAttributes:
        parent = self._inode(parent_inode)
        name = os.fsdecode(raw_name)
        if name in (".", ".."):
            raise FUSEError(E.EINVAL)  # never sent without export support
        try:
            return await self.pipeline.call(
                Request("lookup", Kind.META_READ, parent.id, directory=parent.id, name=name),
                at(parent, name),
                ctx,
                nofollow.open_path,
                parent,
                name,
                reply=functools.partial(self._new_entry, parent, name),
            )
        except FUSEError as exc:
            if exc.errno != E.ENOENT or not self.negative_timeout:
                raise
            absent = pyfuse3.EntryAttributes()  # inode 0: the kernel keeps the name as absent
            absent.entry_timeout = self.negative_timeout
            return absent

    async def forget(self, inode_list: Sequence[tuple[int, int]]) -> None:
        for node_id, nlookup in inode_list:
            self.inodes.forget(node_id, nlookup)

    async def getattr(self, inode: int, ctx: Caller | None = None) -> pyfuse3.EntryAttributes:
        node = self._inode(inode)
        st = await self.pipeline.call(
            Request("getattr", Kind.META_READ, node.id, is_dir=stat.S_ISDIR(node.mode)),
            at(node),
            ctx or _NOBODY,
            os.stat,
            node,
        )
        node.seen = version(st)
        if not self._kernel_keeps_size(node):
            node.size = st.st_size
        return self._entry(st, node.id)

    def _kernel_keeps_size(self, node: Inode) -> bool:
        """With the write-back cache the kernel takes a regular file's size from the
        server only for a new inode, and sets it itself on writes and truncations
        (fs/fuse: fuse_get_cache_mask), so replies do not change the size it holds."""
        return self.enable_writeback_cache and stat.S_ISREG(node.mode)

    async def setattr(
        self, inode: int, attr: pyfuse3.EntryAttributes, fields: pyfuse3.SetattrFields, fh: int | None, ctx: Caller
    ) -> pyfuse3.EntryAttributes:
        """With the write-back cache, the kernel keeps a regular file's mtime and ctime
        itself and hands them over in a setattr of those two alone (fs/fuse:
        fuse_flush_times), which an NFS client never sends: the emulated client charges
        it nothing (`kernel_only`), and fault rules pass it by.  It hands over on an open
        handle after writes, and with no handle after each link, rename, unlink or
        extended attribute change of the file (fuse_update_ctime: counted in
        Inode.handovers), with the mtime the kernel holds (Inode.kernel_mtime).  A
        caller's own change of times (touch -m, futimens) comes with no handle, and is
        taken for the kernel's only when one is owed and it carries that same mtime.
        Anything else is made as the caller (Change.apply): the kernel checked the
        attributes it holds, the source checks what it holds now."""
        node = self._inode(inode)
        h = self.files.handles.get(fh) if fh is not None else None
        change = Change(node.is_symlink, h.fd if h else None, attr, fields, time_ns())
        kernel = (
            self.enable_writeback_cache
            and change.names == "mtime"
            and fields.update_ctime
            and stat.S_ISREG(node.mode)
            and (h is not None or (node.handovers > 0 and change.mtime == node.kernel_mtime))
        )
        if kernel:
            # one owed is paid, whether it came on no handle or, the file being open for
            # writing, on one (fuse_write_inode passes a writable handle where there is one)
            node.handovers = max(0, node.handovers - 1)
            node.kernel_mtime = attr.st_mtime_ns  # the kernel's already, whatever the source answers
        req = Request(
            "setattr",
            Kind.META_WRITE,
            node.id,
            size=attr.st_size if fields.update_size else 0,
            is_dir=stat.S_ISDIR(node.mode),
            kernel_only=kernel,
        )
        call = (change.hand_over, node) if kernel else (change.apply, node, nofollow.owner_for(ctx))
        with self.files.truncations if fields.update_size and self.enable_writeback_cache else NO_TRUNCATION:
            st = await self.pipeline.call(req, at(node, path2=change.names, fh=fh or 0), ctx, *call)
            if change.mtime is not None:
                node.kernel_mtime = change.mtime
            node.seen = version(st)
            if fields.update_size or not self._kernel_keeps_size(node):
                node.size = st.st_size
        return self._entry(st, node.id)

    async def readlink(self, inode: int, ctx: Caller) -> bytes:
        node = self._inode(inode)
        target = await self.pipeline.call(
            Request("readlink", Kind.META_READ, node.id), at(node), ctx, nofollow.readlink, node
        )
        return os.fsencode(target)

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

    # ---- files --------------------------------------------------------------------

    async def open(self, inode: int, flags: int, ctx: Caller) -> pyfuse3.FileInfo:
        node = self._inode(inode)
        if node.is_symlink:
            raise FUSEError(E.ELOOP)  # the kernel follows links itself; never open one below
        epoch = self.files.truncations.ended
        with self.files.truncations if flags & os.O_TRUNC and self.enable_writeback_cache else NO_TRUNCATION:
            # size: what an O_TRUNC cuts (the emulated NFS client then owes a SETATTR, see NfsClient._open)
            cut = node.size if flags & os.O_TRUNC else 0
            return await self.pipeline.opening(
                Request("open", Kind.META_READ, node.id, size=cut),
                at(node, flags=flags),
                ctx,
                functools.partial(self._open_reply, node, flags, ctx, epoch),
                nofollow.open_checked,
                node,
                self._backing_flags(flags & ~_OPEN_STRIP),
                ctx.uid != 0,
                nofollow.owner_for(ctx),
            )

    def _backing_flags(self, flags: int) -> int:
        """The flags of the source's open(2) for a file the kernel opens with `flags`.
        With the write-back cache, the kernel reads the rest of a page a write covers
        in part through whichever handle wrote it, and places appends itself (at the
        end of the file as it knows it): so a write-only file is opened for reading too
        (the kernel has checked the caller's permission; the descriptor is the
        server's alone, and nofollow.as_asked falls back to the caller's mode where the
        source refuses it), and O_APPEND is left to the kernel.  (The kernel also
        keeps the file's modified time while its data is cached, and hands it over in
        a setattr of mtime and ctime alone: see setattr.)"""
        if not self.enable_writeback_cache:
            return flags
        if flags & os.O_ACCMODE == os.O_WRONLY:
            flags = flags & ~os.O_ACCMODE | os.O_RDWR | nofollow.WRONLY_ASKED
        return flags & ~os.O_APPEND

    def _open_reply(
        self, node: Inode, flags: int, ctx: Caller, epoch: int, opened: tuple[int, os.stat_result]
    ) -> pyfuse3.FileInfo:
        fd, st = opened
        # Close-to-open, as an NFS client keeps it: a file changed since the kernel was
        # last told its attributes (by another client, or below the mount) has its
        # cached pages dropped and its attributes fetched again.
        now = version(st)
        changed, node.seen = now != node.seen, now
        if flags & os.O_TRUNC or not self._kernel_keeps_size(node):  # (the kernel truncates its own)
            node.size = st.st_size
        # (with a handle open, unwritten data may differ; a truncation through the mount under way,
        # or over since this open began, may have changed the size before node.size follows it)
        elif st.st_size != node.size and not node.pins and self.files.truncations.none_since(epoch):
            self.files.resized(node, st.st_size)
        if changed:
            try:
                pyfuse3.invalidate_inode(node.id, attr_only=True)
            except OSError as exc:
                log.warning("cannot invalidate the attributes of inode %d: %s", node.id, exc)
        self.files.opened(Handle(fd, node, flags, ctx))
        return pyfuse3.FileInfo(fh=fd, direct_io=bool(flags & os.O_DIRECT), keep_cache=not changed)

    async def create(
        self, parent_inode: int, raw_name: bytes, mode: int, flags: int, ctx: Caller
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        parent = self._inode(parent_inode)
        name = os.fsdecode(raw_name)
        return await self.pipeline.opening(
            Request("create", Kind.META_WRITE, directory=parent.id, name=name),
            at(parent, name, flags=flags),
            ctx,
            functools.partial(self._create_reply, parent, name, flags, ctx),
            nofollow.create,
            parent,
            name,
            self._backing_flags(flags & ~(os.O_DIRECT | os.O_NOCTTY)),
            mode,
            nofollow.owner_for(ctx),
        )

    def _create_reply(
        self, parent: Inode, name: str, flags: int, ctx: Caller, made: tuple[int, os.stat_result, int]
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        fd, st, path_fd = made
        try:
            inode = self._remember(parent, name, st, path_fd)
        except BaseException:
            os.close(fd)
            raise
        self.files.opened(Handle(fd, inode, flags, ctx))
        return pyfuse3.FileInfo(fh=fd, direct_io=bool(flags & os.O_DIRECT)), self._entry(st, inode.id)

    async def read(self, fh: int, off: int, size: int) -> bytes:
        """A read on a handle the caller opened write-only is the write-back cache's
        page fill (see _backing_flags), which an NFS client does not send: it writes
        the part of the page written (nfs_want_read_modify_write asks a descriptor open
        for reading), so the emulated client charges it nothing (`kernel_only`)."""
        h = self.files.file(fh)
        req = Request(
            "read",
            Kind.READ,
            h.inode.id,
            size=size,
            kernel_only=self.enable_writeback_cache and h.flags & os.O_ACCMODE == os.O_WRONLY,
        )
        return await self.pipeline.call(
            req, at(h.inode, fh=fh, offset=off), h, os.pread, fh, size, off, nowait=self._cached_pread
        )

    async def write(self, fh: int, off: int, buf: bytes) -> int:
        h = self.files.file(fh)
        h.dirty = True
        node = h.inode
        p = self.pipeline
        if not p.watched and not p.faults.active:
            # Every stage but placement off: no Request or Site is made (see docs/BENCHMARKS.md,
            # "Figures behind design choices: server/"), the call placed as Pipeline.call would.
            args = (fh, buf, off)
            try:
                written: int = p.timed(("write", h.write_mode), len(buf), os.pwrite, args)  # (op, label)
                if written is IN_WORKER:
                    written = await p.workers.run(os.pwrite, *args)
            except OSError as exc:
                raise FUSEError(exc.errno or E.EIO) from None
        else:
            if off + len(buf) > node.size and h.flags & os.O_DIRECT and self.shaper is not None:
                self.shaper.extending_writes += 1  # the kernel sent it alone: see Shaper.extending_writes
            req = Request("write", Kind.WRITE, h.inode.id, size=len(buf), write_mode=h.write_mode)
            written = await self.pipeline.call(req, at(h.inode, fh=fh, offset=off), h, os.pwrite, fh, buf, off)
        node.size = max(node.size, off + written)  # as the kernel extends it on this reply
        return written

    async def flush(self, fh: int) -> None:
        h = self.files.file(fh)
        commit, h.dirty = h.dirty, False
        first, h.closed = not h.closed, True
        req = Request(
            "flush",
            Kind.COMMIT if commit else Kind.META_READ,
            h.inode.id,
            closes=first,
            writable=h.flags & os.O_ACCMODE != os.O_RDONLY,
        )
        await self.pipeline.call(req, at(h.inode, fh=fh), h, self.spares.close_dup, fh)

    async def release(self, fh: int) -> None:
        h, hidden = self.files.released(fh)
        try:
            req = Request("release", Kind.COMMIT if h.dirty else Kind.NONE, h.inode.id, directory=hidden)
            await self.pipeline.call(req, at(h.inode, fh=fh), h, os.close, fh)
        finally:
            self.inodes.unpin(h.inode)
            self.fds.give(h.uid)

    async def fsync(self, fh: int, datasync: bool) -> None:
        h = self.files.file(fh)
        commit, h.dirty = h.dirty, False  # NFS sends no COMMIT for a handle with nothing written
        req = Request("fsync", Kind.COMMIT if commit else Kind.NONE, h.inode.id)
        await self.pipeline.call(req, at(h.inode, fh=fh), h, os.fdatasync if datasync else os.fsync, fh)

    # ---- directories ----------------------------------------------------------------

    async def opendir(self, inode: int, ctx: Caller) -> int:
        node = self._inode(inode)
        return await self.pipeline.opening(
            Request("opendir", Kind.META_READ, node.id),
            at(node),
            ctx,
            functools.partial(self._opendir_reply, node, ctx),
            nofollow.reopen,
            node,
            os.O_RDONLY | os.O_DIRECTORY,
            nofollow.owner_for(ctx),
        )

    def _opendir_reply(self, node: Inode, ctx: Caller, fd: int) -> int:
        self.files.opened_dir(DirHandle(fd, node, ctx))
        return fd

    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        d = self.files.dir(fh)
        # Offset 0 (opendir or rewinddir) takes a fresh listing; later calls go on
        # through the same one by index, so no entry is skipped or repeated.
        names = None if start_id == 0 else d.names
        # the entries this call can return (the kernel asks once more at the end, for none)
        asked = d.fit if names is None else max(0, min(d.fit, len(names) - start_id))
        listing = await self.pipeline.call(
            Request("readdir", Kind.META_READ, d.inode.id, size=asked, offset=start_id, handle=fh),
            at(d.inode, fh=fh, offset=start_id),
            d,
            nofollow.list_chunk,
            d.fd,
            names,
            start_id,
            d.fit,
        )
        d.names, entries = listing.names, listing.entries
        for i, (index, name, st, fd) in enumerate(entries):
            if fd is None:  # "." or "..": the kernel takes no lookup of these
                at_self = name == "." or d.inode.id == ROOT  # the root's ".." stays inside
                known = d.inode if at_self else self.inodes.by_key((st.st_dev, st.st_ino))
                node_id = known.id if known is not None else st.st_ino
            else:
                node_id = self.inodes.identify(st, fd)
            if not pyfuse3.readdir_reply(token, os.fsencode(name), self._entry(st, node_id), index + 1):
                for *_, unsent in entries[i:]:
                    if unsent is not None:
                        os.close(unsent)
                d.fit = max(i, 8)  # what the kernel's buffer holds: ask for that many next time
                return
            if fd is not None:
                # under the node id just sent: identify hands out a new synthetic
                # id on every call for an object on another device
                self._remember(d.inode, name, st, fd, node_id)

    async def releasedir(self, fh: int) -> None:
        d = self.files.released_dir(fh)
        try:
            await self.pipeline.call(Request("releasedir", Kind.NONE, d.inode.id), at(d.inode, fh=fh), d, os.close, fh)
        finally:
            self.inodes.unpin(d.inode)
            self.fds.give(d.uid)

    async def fsyncdir(self, fh: int, datasync: bool) -> None:
        d = self.files.dir(fh)
        await self.pipeline.call(Request("fsyncdir", Kind.COMMIT, d.inode.id), at(d.inode, fh=fh), d, os.fsync, fh)

    # ---- everything else -------------------------------------------------------------

    async def statfs(self, ctx: Caller) -> pyfuse3.StatvfsData:
        root = self._inode(ROOT)
        sv = await self.pipeline.call(Request("statfs", Kind.META_READ, root.id), at(root), ctx, os.statvfs, root)
        out = pyfuse3.StatvfsData()
        for field in (
            "f_bsize",
            "f_frsize",
            "f_blocks",
            "f_bfree",
            "f_bavail",
            "f_files",
            "f_ffree",
            "f_favail",
            "f_namemax",
        ):
            setattr(out, field, getattr(sv, field))
        return out

    async def access(self, inode: int, mode: int, ctx: Caller) -> bool:
        node = self._inode(inode)
        if node.is_symlink:
            return True  # a link itself is rwx for all; the kernel follows links before asking
        return await self.pipeline.call(
            Request("access", Kind.META_READ, node.id, is_dir=stat.S_ISDIR(node.mode)),
            at(node),
            ctx,
            nofollow.access,
            node,
            mode,
        )

    async def setxattr(self, inode: int, name: bytes, value: bytes, ctx: Caller) -> None:
        node = self._inode(inode)
        await self.pipeline.call(
            Request("setxattr", Kind.META_WRITE, node.id, size=len(value)),
            at(node, path2=os.fsdecode(name)),
            ctx,
            self._xattr_fn(node, nofollow.setxattr),
            node,
            name,
            value,
        )
        self._times_owed(node.key)

    async def getxattr(self, inode: int, name: bytes, ctx: Caller) -> bytes:
        node = self._inode(inode)
        return await self.pipeline.call(
            Request("getxattr", Kind.META_READ, node.id),
            at(node, path2=os.fsdecode(name)),
            ctx,
            self._xattr_fn(node, nofollow.getxattr),
            node,
            name,
        )

    async def listxattr(self, inode: int, ctx: Caller) -> list[bytes]:
        node = self._inode(inode)
        names = await self.pipeline.call(
            Request("listxattr", Kind.META_READ, node.id),
            at(node),
            ctx,
            nofollow.listxattr if self._xattrs_at(node) else nofollow.no_xattr_names,
            node,
        )
        return [os.fsencode(n) for n in names]

    async def removexattr(self, inode: int, name: bytes, ctx: Caller) -> None:
        node = self._inode(inode)
        await self.pipeline.call(
            Request("removexattr", Kind.META_WRITE, node.id),
            at(node, path2=os.fsdecode(name)),
            ctx,
            self._xattr_fn(node, nofollow.removexattr),
            node,
            name,
        )
        self._times_owed(node.key)

    def _xattr_fn(self, node: Inode, fn: Callable[..., T]) -> Callable[..., T]:
        """What answers an extended attribute request on `node`: `fn`, or, below a file
        system with no extended attributes at all (NFS without RFC 8276 support, so
        EFS) or with --no-xattrs, ENOSYS: the kernel then stops asking (ls -l asks
        twice per file, every buffered write once) and answers callers EOPNOTSUPP
        itself, as the file system below would.  listxattr is always passed through:
        such file systems may list no names rather than fail."""
        if not self.xattrs:
            return nofollow.no_xattrs
        if not self._xattrs_at(node):
            return nofollow.link_xattrs_unsupported
        return fn

    def _xattrs_at(self, node: Inode) -> bool:
        """A symbolic link's attributes are reached through its descriptor only where
        /proc/self/fd/N of a link acts on the link itself (probed at start); never by
        a path name, which a rename in the source could point elsewhere."""
        return self.proc_reaches_links or not node.is_symlink

    def close(self) -> None:
        self.files.close()
        self.inodes.close_all()
        self.spares.close()


HANDLED = (
    "lookup",
    "forget",
    "getattr",
    "setattr",
    "readlink",
    "mknod",
    "mkdir",
    "symlink",
    "unlink",
    "rmdir",
    "rename",
    "link",
    "open",
    "create",
    "read",
    "write",
    "flush",
    "release",
    "fsync",
    "opendir",
    "readdir",
    "releasedir",
    "fsyncdir",
    "statfs",
    "access",
    "setxattr",
    "getxattr",
    "listxattr",
    "removexattr",
)  # each one's Request is named so
for _name in HANDLED:
    setattr(Operations, _name, guarded(getattr(Operations, _name)))


class _Nobody:
    pid = uid = gid = 0


_NOBODY = _Nobody()


class ServerStats(TypedDict):
    """Operations.stats: the server's part of `fusetrace stats` (main.py adds the rest)."""

    inodes: int
    open_files: int
    inode_fds: dict[str, int]
    descriptors: Descriptors
    serving: int
    inline: Placement
    resized_beside: int
    rmdirs_nfs_refuses: int
    killed_released: int
    held_long: list[HeldReport]
