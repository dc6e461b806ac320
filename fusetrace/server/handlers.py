"""The FUSE surface: a passthrough to a source directory, each operation one handler.

A handler names its request (a Request: fusetrace/request.py), where the trace should
place it (pipeline.at) and the no-follow call that does it (nofollow.py), and hands
them to the one request pipeline (pipeline.py: admit, fault, place, hold, trace,
reply); around that call it keeps the kernel's view: node ids (inodes.py), open files
and hidden names (openfiles.py).  The handlers of names and attributes are here;
those that change the namespace are in namespace.py, those of open files and
directories in files.py: mixins on a shared base (handlerbase.py).  A new operation is
a handler in its family's module, its name in request.FUSE_OPERATIONS (docs/ARCHITECTURE.md,
"Where to add").
"""

import errno as E
import functools
import os
import resource
import stat
from collections.abc import Callable, Sequence
from time import monotonic_ns, time_ns
from typing import TYPE_CHECKING, TypedDict

import pyfuse3
from pyfuse3 import FUSEError

from ..request import FUSE_OPERATIONS, Kind, Request
from . import nofollow
from .callers import Caller
from .durable import Durability
from .fdbudget import Budget, Descriptors, Spares, in_use
from .files import FileHandlers
from .holds import HeldReport
from .inline import InlinePolicy, Placement
from .inodes import ROOT, Inode, InodeTable, version
from .namespace import NamespaceHandlers
from .openfiles import NO_TRUNCATION, OpenFiles
from .pipeline import Pipeline, T, at, guarded
from .setattrs import Change
from .workers import Workers

if TYPE_CHECKING:  # a mount that neither traces nor emulates imports neither
    from ..shaping.opmetrics import OpCounts
    from ..shaping.shaper import Shaper
    from ..trace.writer import TraceWriter


class Operations(NamespaceHandlers, FileHandlers):
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
        counts: "OpCounts | None" = None,
        crashable: bool = False,
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
            counts=counts,
        )
        self._cached_pread = self._nowait_pread
        self.durability = Durability() if crashable else None
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
            absent.entry_timeout = (
                self.negative_timeout if self.shaper is None else self.shaper.trusted(0, False, parent.id, name)[0]
            )
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
        if fields.update_size and self.durability is not None:
            await self.durability.truncated(node.id, st.st_size)  # NFS writes back, then sends the SETATTR
        return self._entry(st, node.id)

    async def readlink(self, inode: int, ctx: Caller) -> bytes:
        node = self._inode(inode)
        target = await self.pipeline.call(
            Request("readlink", Kind.META_READ, node.id), at(node), ctx, nofollow.readlink, node
        )
        return os.fsencode(target)

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


HANDLED = FUSE_OPERATIONS  # each one's handler is wrapped here; its Request is named so
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
