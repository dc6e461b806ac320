"""The handlers of open files and directories: open, create, read, write, flush,
release, fsync, and list, release and sync directories, keeping the handles
(openfiles.py) the kernel holds.  A mixin of Operations (handlers.py)."""

import errno as E
import functools
import logging
import os
from collections.abc import Callable
from typing import Any

import pyfuse3
import trio
from pyfuse3 import FUSEError

from ..errors import UserError
from ..request import Kind, Request, WriteMode
from . import nofollow
from .callers import Caller
from .handlerbase import HandlerBase
from .inodes import ROOT, Inode, version
from .openfiles import NO_TRUNCATION, DirHandle, Handle
from .pipeline import IN_WORKER, Call, Site, at

log = logging.getLogger(__name__)

_DROP_WAIT_S = 1.0  # how long a crash waits for the kernel to drop its pages before it answers

# Flags the kernel sends that must not reach the backing open(2) of an existing file.
_OPEN_STRIP = os.O_CREAT | os.O_EXCL | os.O_NOCTTY | os.O_NOFOLLOW | os.O_DIRECT


class FileHandlers(HandlerBase):
    # pread without waiting on the page cache, until the source is found not to support it
    _cached_pread: Callable[[int, int, int], bytes | None] | None

    def _nowait_pread(self, fd: int, size: int, offset: int) -> bytes | None:
        try:
            return nofollow.cached_pread(fd, size, offset)
        except nofollow.NowaitUnsupported:
            self._cached_pread = None  # tmpfs, for one: reads follow the inline policy from now on
            return None

    async def open(self, inode: int, flags: int, ctx: Caller) -> pyfuse3.FileInfo:
        node = self._inode(inode)
        if node.is_symlink:
            raise FUSEError(E.ELOOP)  # the kernel follows links itself; never open one below
        epoch = self.files.truncations.ended
        with self.files.truncations if flags & os.O_TRUNC and self.enable_writeback_cache else NO_TRUNCATION:
            # size: what an O_TRUNC cuts (the emulated NFS client then owes a SETATTR, see NfsClient._open)
            cut = node.size if flags & os.O_TRUNC else 0
            info = await self.pipeline.opening(
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
        if flags & os.O_TRUNC and self.durability is not None:
            await self.durability.truncated(node.id, 0)  # a SETATTR: on the server when it returns
        return info

    def _backing_flags(self, flags: int) -> int:
        """The flags of the source's open(2) for a file the kernel opens with `flags`.
        With the write-back cache, the kernel reads the rest of a page a write covers
        in part through whichever handle wrote it, and places appends itself (at the
        end of the file as it knows it): so a write-only file is opened for reading too
        (the kernel has checked the caller's permission; the descriptor is the
        server's alone, and nofollow.as_asked falls back to the caller's mode where the
        source refuses it), and O_APPEND is left to the kernel.  (The kernel also
        keeps the file's modified time while its data is cached, and hands it over in
        a setattr of mtime and ctime alone: see setattr.)  A mount armed for a crash
        opens a writer for reading too, to save the pages it writes (durable.py)."""
        if not self.enable_writeback_cache and self.durability is None:
            return flags
        if flags & os.O_ACCMODE == os.O_WRONLY:
            flags = flags & ~os.O_ACCMODE | os.O_RDWR | nofollow.WRONLY_ASKED
        return flags & ~os.O_APPEND if self.enable_writeback_cache else flags

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
        return pyfuse3.FileInfo(fh=fd, direct_io=bool(flags & os.O_DIRECT)), self._entry(st, inode.id, parent.id, name)

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
        if not p.watched and not p.faults.active and self.durability is None:
            # Every stage but placement off: no Request or Site is made (see docs/BENCHMARKS.md,
            # "Figures behind design choices: server/"), the call placed as Pipeline.call would.
            args = (fh, buf, off)
            try:
                written: int = p.timed(("write", h.write_mode), len(buf), os.pwrite, args)  # (op, label)
                if written is IN_WORKER:
                    written = await p.workers.run(os.pwrite, *args)
            except OSError as exc:
                raise FUSEError(exc.errno or E.EIO) from None
        elif p.lone_tracer and not p.faults.active and self.durability is None:
            written = await p.traced_write(h, fh, buf, off)
        else:
            if off + len(buf) > node.size and h.flags & os.O_DIRECT and self.shaper is not None:
                self.shaper.extending_writes += 1  # the kernel sent it alone: see Shaper.extending_writes
            req = Request("write", Kind.WRITE, h.inode.id, size=len(buf), offset=off, write_mode=h.write_mode)
            site = at(h.inode, fh=fh, offset=off)
            if self.durability is None:
                written = await self.pipeline.call(req, site, h, os.pwrite, fh, buf, off)
            elif h.write_mode is WriteMode.BUFFERED:
                written = await self.pipeline.call(req, site, h, self.durability.pwrite, h, buf, off)
            else:  # on the server when it returns (an O_SYNC, O_DSYNC or O_DIRECT write)
                written = await self._committing(h, req, site, self.durability.pwrite, h, buf, off)
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
        site = at(h.inode, fh=fh)
        if self.durability is not None and req.writable:  # close-to-open: NFS writes back and commits
            await self._committing(h, req, site, self.spares.close_dup, fh)
        else:
            await self.pipeline.call(req, site, h, self.spares.close_dup, fh)

    async def release(self, fh: int) -> None:
        h, hidden = self.files.released(fh)
        try:
            req = Request("release", Kind.COMMIT if h.dirty else Kind.NONE, h.inode.id, directory=hidden)
            await self.pipeline.call(req, at(h.inode, fh=fh), h, os.close, fh)
        finally:
            self.inodes.unpin(h.inode)
            self.fds.give(h.uid)
            if self.durability is not None and not h.inode.pins:
                self.durability.closed(h.inode.id)  # its last close: on the server

    async def fsync(self, fh: int, datasync: bool) -> None:
        h = self.files.file(fh)
        commit, h.dirty = h.dirty, False  # NFS sends no COMMIT for a handle with nothing written
        req = Request("fsync", Kind.COMMIT if commit else Kind.NONE, h.inode.id)
        await self._committing(h, req, at(h.inode, fh=fh), os.fdatasync if datasync else os.fsync, fh)

    async def _committing(self, h: Handle, req: Request, site: Site, fn: Call, *args: Any) -> Any:
        """pipeline.call of a request that makes the file's data durable (an fsync, a close,
        a synchronous write): on an armed mount, what was written before it is durable once
        it is answered, unless the client crashed meanwhile (its commit torn: ESTALE)."""
        d = self.durability
        if d is None:
            return await self.pipeline.call(req, site, h, fn, *args)
        d.begin(h.inode.id)
        done = False
        try:
            out = await self.pipeline.call(req, site, h, fn, *args)
            done = not h.stale
        finally:
            await d.end(h.inode.id, done)
        if not done:
            raise FUSEError(E.ESTALE)
        return out

    async def crash(self) -> dict[str, Any]:
        """The client dies (`fusetrace fault MNT crash`, durable.py): every file back as it
        was last made durable, every open file stale, the kernel's cached pages and
        attributes of them dropped, the emulated NFS client started afresh."""
        d = self.durability
        if d is None:
            raise UserError("this mount is not armed for a crash: mount it with --crashable (docs/FAULTS.md)")
        stale = self.files.crash()
        done = await trio.to_thread.run_sync(d.crash, {h.inode.id: h.fd for h in stale})
        nodes = {h.inode.id: h.inode for h in stale}
        names = []
        if self.enable_writeback_cache:  # the kernel keeps these files' sizes: new inodes, by new lookups
            for node in nodes.values():
                self.inodes.retire(node)
                names.append(node.dentry)
        # from a thread: the kernel may write dirty pages back (to stale handles, refused) first,
        # and waits for the pages a request in flight holds (a write a stall holds): answered
        # after a second at most, the kernel finishing on its own once that request is answered
        with trio.move_on_after(_DROP_WAIT_S) as waited:
            await trio.to_thread.run_sync(_drop_cached, sorted(nodes), names, abandon_on_cancel=True)
        if waited.cancelled_caught:
            log.warning("crash: the kernel is still dropping its cached pages (a request in flight holds some)")
        if self.shaper is not None:
            self.shaper.client_restarted()
        log.warning(
            "crash: %d files put back as last made durable (%d pages undone, %d torn), %d open files stale",
            done.files,
            done.pages_lost,
            done.pages_torn,
            done.handles,
        )
        return done.describe()

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
            attrs = self._entry(st, node_id, d.inode.id, name, fh)
            if not pyfuse3.readdir_reply(token, os.fsencode(name), attrs, index + 1):
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


def _drop_cached(node_ids: list[int], names: list[tuple[int, str]]) -> None:
    """The kernel forgets these names (directory's node id, name), then the pages and
    attributes it holds of these files (which waits for pages a request in flight holds)."""
    for directory, name in names:
        try:
            pyfuse3.invalidate_entry(directory, os.fsencode(name))
        except OSError as exc:
            log.debug("cannot invalidate %r in inode %d: %s", name, directory, exc)
    for node_id in node_ids:
        try:
            pyfuse3.invalidate_inode(node_id, attr_only=False)
        except OSError as exc:  # ENOENT: the kernel has forgotten it already
            log.debug("cannot invalidate inode %d: %s", node_id, exc)
