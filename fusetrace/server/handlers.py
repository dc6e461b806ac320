"""The FUSE operations: a passthrough to a source directory, traced and shaped.

Every handler goes the same way (Operations._call): it names its request (a
Request: fusetrace/request.py) and where the trace should place it; the
shaper says when the operation may complete (emulation only); the real syscall
is placed on the loop or in a worker thread (fusetrace/server/inline.py); the
reply waits out the shaper's deadline; the trace record is queued.  Only
pyfuse3.FUSEError leaves a handler; an OSError from below becomes the same
errno.
"""

import contextlib
import errno as E
import functools
import logging
import os
import resource
import stat
from collections.abc import Awaitable, Callable, Iterator
from time import monotonic_ns, time_ns
from typing import TYPE_CHECKING, Any, NamedTuple

import pyfuse3
import trio
from pyfuse3 import FUSEError

from ..faults.injector import Firing, Injector
from ..request import Kind, Request, WriteMode
from . import nofollow, syscalls
from .fdbudget import Budget, Spares
from .inline import InlinePolicy
from .inodes import ROOT, Inode, InodeTable, version
from .kills import Kills
from .openfiles import NO_TRUNCATION, DirHandle, Handle, OpenFiles
from .setattrs import Change
from .workers import Workers

if TYPE_CHECKING:  # a mount that neither traces nor emulates imports neither
    from ..shaping.shaper import Shaper, Ticket
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
    ):
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
        self.workers = workers
        self.inline = inline
        self._cached_pread: Callable[[int, int, int], bytes | None] | None = self._nowait_pread
        self.tracer = tracer
        self.shaper = shaper
        self.attr_timeout = attr_timeout
        self.dir_attr_timeout = attr_timeout if dir_attr_timeout is None else dir_attr_timeout
        self.entry_timeout = entry_timeout
        self.negative_timeout = negative_timeout  # how long the kernel may trust an absent name (0: not at all)
        self._tgids: dict[int, tuple[int, str, int]] = {}  # thread id: (process id, its name, when read)
        self.untraced_pid = -1  # fusetrace's own probe at mount (measure_round_trip): not traced, no faults
        self.faults = Injector(write_back=writeback_cache)
        self.faults_changed = trio.Event()  # set when rules are cleared: stalled requests look again
        self.stopping = False
        # requests being handled: read from the kernel and not yet answered (see _guarded;
        # shaping/kernelqueue.py tells from it how many the kernel holds unread)
        self.serving = 0
        self.holding: dict[object, _Held] = {}  # requests held long (_holding), for stats and umount
        self.kills = Kills()  # held requests whose caller is killed go at once (_holding); main.py runs it

    # ---- the common path of every request -------------------------------------------

    async def _call(self, req: Request, site: "_Site", who, fn, *args, nowait=None, reply=None):
        """Run fn(*args) for `req`: admitted by the shaper, placed on the loop or in a
        worker, held until the shaper's deadline, traced at `site` on behalf of `who`
        (a request context or an open handle).  An OSError from fn answers its errno.
        `nowait(*args)`, if given, is tried first on the loop (see _place).  `reply(out)`,
        if given, turns fn's result into the handler's answer before the record is made
        (so the record can name the handle or node id the kernel is given).  While fault
        rules or what they left behind are in force, _faulted takes the request."""
        start = monotonic_ns()
        # (NFS sends nothing for the kernel's own; fusetrace's probe at mount is not the application's)
        if self.faults.active and not req.kernel_only and who.pid != self.untraced_pid:
            return await self._faulted(req, site, who, fn, args, nowait, reply, start)
        ticket = None if self.shaper is None else self.shaper.admit(req, start, who.uid)
        done = self._now(req, fn, args, nowait)  # _place, without a coroutine of its own when it can
        if done is _IN_WORKER or done is _CLOSED:
            done = await self._elsewhere(done, req, fn, args, nowait)
        out, err = done
        try:
            held = 0 if self.shaper is None else await self._hold(req, ticket, start, site, who, reply)
        except _Killed as killed:
            held, err = killed.held, E.EINTR
        if reply is not None and not err:
            out = reply(out)
        if self.tracer is not None and who.pid != self.untraced_pid:
            self._trace(self.tracer, req, site, who, start, out, err, held, ticket)
        if err:
            raise FUSEError(err)
        return out

    async def _faulted(self, req: Request, site: "_Site", who, fn, args: tuple, nowait, reply, start: int):
        """_call with the fault rules applied (fusetrace/faults/): the request may wait out
        a stall, fail without reaching the source, carry fewer bytes, or leave a write-back
        error for the file's next fsync and close; its record names the rule."""
        faults = self.faults
        firing = _NO_FIRING
        if req.op not in _CLOSES:
            rid = faults.stale_rule(req.file, req.directory) if faults.stale else None
            if rid is not None:
                firing = Firing(rid, "stale", E.ESTALE)
            elif faults.rules:
                firing = faults.check(req.op, req.kind, req.file, req.directory, site.path, req.size,
                                      functools.partial(self._who, who.pid, start), start) or _NO_FIRING
        effect = firing.effect
        err = 0
        if effect == "stall":
            until = min(firing.until_ns, firing.fail_ns) if firing.fail_ns else firing.until_ns
            with self._holding(req, site, who, start, f"fault rule {firing.rule} (a stall)", until, rule=True,
                               killable=self._waited_on(req, who)) as scope:
                err = await self._stalled(firing)
            if scope is not None and scope.cancelled_caught:  # its caller is being killed: nothing is sent
                if self.tracer is not None:
                    self._trace(self.tracer, req, site, who, start, None, E.EINTR, 0, None, firing.rule)
                raise FUSEError(E.EINTR)
        now = monotonic_ns()
        ticket = None if self.shaper is None else self.shaper.admit(req, now, who.uid)
        out = None
        if err:
            pass
        elif effect in ("errno", "stale") or (effect == "write_error" and req.write_mode is not WriteMode.BUFFERED):
            err = firing.errno  # the server answered with it: nothing reaches the source
        else:
            if effect == "short":
                args, nowait = _shortened(req.op, args, firing.short), None
            out, err = await self._place(req, fn, args, nowait)
            if effect == "write_error" and not err:  # NFS: the write-back fails later, the write does not
                faults.write_failed(req.file, firing.rule, firing.errno,
                                    {fh for fh, h in self.files.handles.items() if h.inode.id == req.file})
            elif faults.pending and not err and req.op in _REPORTS:
                late = faults.reported(req.file, site.fh)
                if late is not None:
                    err, firing = late[0], Firing(late[1], "write_error", late[0])
        try:
            held = 0 if self.shaper is None else await self._hold(req, ticket, now, site, who, reply)
        except _Killed as killed:
            held, err = killed.held, E.EINTR
        if reply is not None and not err:
            out = reply(out)
        if self.tracer is not None and who.pid != self.untraced_pid:
            self._trace(self.tracer, req, site, who, start, out, err, held, ticket, firing.rule or None)
        if err:
            raise FUSEError(err)
        return out

    def _hold(self, req: Request, ticket: "Ticket | None", since: int, site: "_Site", who,
              reply=None) -> Awaitable[int]:
        """The shaper's hold of the request admitted at `since` (Shaper.hold), listed as
        held long (_holding) when its deadline is over a second away.  (A plain call that
        returns the coroutine to await: no frame of its own on the hot path.)"""
        assert self.shaper is not None
        if ticket is None or ticket.deadline_ns is None or ticket.deadline_ns - since < _LONG_HOLD_NS:
            return self.shaper.hold(req, ticket, since)
        return self._hold_listed(req, ticket, since, site, who, ticket.deadline_ns, reply)

    async def _hold_listed(self, req: Request, ticket: "Ticket", since: int, site: "_Site", who, until: int,
                           reply) -> int:
        """_hold's long case: raises _Killed if the caller is being killed meanwhile.  The
        call has run on the source by now, so one whose answer the server or the kernel
        must act on is not let go: one whose `reply` hands the kernel something new (a
        handle, a node id), and a namespace or attribute change (its handler then moves
        its own tables: open files by name, hidden names)."""
        assert self.shaper is not None
        entered = monotonic_ns()
        killable = reply is None and req.kind is not Kind.META_WRITE and self._waited_on(req, who)
        with self._holding(req, site, who, since, f"the emulated file system ({ticket.gate})", until,
                           killable=killable):
            return await self.shaper.hold(req, ticket, since)
        raise _Killed(monotonic_ns() - entered)  # reached only when the caller's kill let it go

    def _waited_on(self, req: Request, who) -> bool:
        """Whether a caller waits on `req` and so may be killed out of its wait: not the
        kernel's own requests (its page fills; a release, which nobody awaits), nor the
        write-back cache's WRITEs (the kernel sends them for data already written, and
        they must complete, as an NFS client's write-back does), nor a request the kernel
        names no process for (pid 0)."""
        return not (req.kernel_only or who.pid <= 0 or req.op in _CLOSES
                    or (req.op == "write" and self.enable_writeback_cache and req.write_mode is not WriteMode.DIRECT))

    @contextlib.contextmanager
    def _holding(self, req: Request, site: "_Site", who, start: int, why: str, until: int,
                 rule: bool = False, killable: bool = False) -> Iterator["trio.CancelScope | None"]:
        """While inside: the request is listed as held long, by `why` (a fault rule's stall
        when `rule`), until `until` at the latest (monotonic ns).  A caller waiting in one holds no descriptor in the
        mount yet keeps it busy (its path walk holds the mount): `fusetrace umount` and
        `stats` name it from this list.  When `killable`, the block is left early if the
        caller is being killed (fusetrace/server/kills.py): the scope given, its
        `cancelled_caught` true then."""
        token = object()
        pid, name, _ = self._who(who.pid, start)
        self.holding[token] = _Held(pid, name, req.op, site.path, why, start, until, rule)
        try:
            if not killable:
                yield None
                return
            # the calling thread itself; for an open file's request (no context), the process
            # that opened it, which outlives the thread that did
            itself = isinstance(who, pyfuse3.RequestContext)
            with self.kills.watched(who.pid if itself else pid, itself, start) as scope:
                yield scope
        finally:
            del self.holding[token]

    def held_long(self, now: int, most: int = 20) -> list[dict]:
        """The requests held long (see _holding), the longest held first, up to `most`:
        who waits, in what, on what, for how many seconds so far and at most how many more
        (a fault rule cleared lets its own go at once)."""
        held = sorted(self.holding.values(), key=lambda h: h.since)[:most]
        return [{"pid": h.pid, "name": h.name, "op": h.op, "path": h.path, "why": h.why,
                 "for_s": round((now - h.since) / 1e9, 1), "left_s": round(max(0, h.until - now) / 1e9, 1),
                 "rule": h.rule} for h in held]

    async def _stalled(self, firing: Firing) -> int:
        """Wait out a stall: until the outage ends (0), or, on a soft mount, until the
        call times out first (its errno); at once when the rule is cleared."""
        end, fail = firing.until_ns, firing.fail_ns
        limit = min(end, fail) if fail else end
        while not self.stopping and self.faults.in_force(firing.rule):
            now = monotonic_ns()
            if now >= limit:
                return firing.errno if fail and fail < end else 0
            changed = self.faults_changed
            with trio.move_on_after((limit - now) / 1e9):
                await changed.wait()
        return 0

    def add_fault(self, raw: dict, where: str = "fault add") -> dict:
        return self.faults.add(raw, monotonic_ns(), where)

    def end_stalls(self) -> None:
        """The server is stopping: every stalled request goes on now, those a fault rule
        holds and those the emulated file system holds (pyfuse3's main loop returns only
        once every request it started has been answered)."""
        self.stopping = True
        self.faults_changed.set()
        if self.shaper is not None and self.shaper.timer is not None:
            self.shaper.timer.release_all()

    def clear_faults(self, ids: list[str] | None = None) -> list[str]:
        """Remove fault rules; requests their stalls hold go on at once."""
        removed = self.faults.clear(ids)
        self.faults_changed.set()
        self.faults_changed = trio.Event()
        return removed

    async def _place(self, req: Request, fn, args: tuple, nowait=None) -> tuple[Any, int]:
        """Run fn(*args) where it belongs: on the loop while the inline policy finds
        `req`'s calls quick, else in a worker thread.  Returns (result, errno).  An
        Inode among args reaches fn as its O_PATH descriptor, opened again if it was
        closed.  `nowait(*args)`, if given, is tried first on the loop: it must not
        block, and returns None when it cannot answer at once (the call then always
        goes to a worker)."""
        done = self._now(req, fn, args, nowait)
        if done is _IN_WORKER or done is _CLOSED:
            done = await self._elsewhere(done, req, fn, args, nowait)
        return done

    def _now(self, req: Request, fn, args: tuple, nowait) -> tuple[Any, int]:
        """_place's first half, on the loop: (result, errno) when fn (or nowait) ran
        here; _CLOSED when an Inode among args has no descriptor open; _IN_WORKER when
        the call belongs in a worker.  Nothing can close a descriptor while this runs
        (no await), so no Inode needs pinning."""
        fds = self._descriptors(args)
        return _CLOSED if fds is None else self._here(req, fn, fds, nowait)

    def _here(self, req: Request, fn, fds: tuple, nowait) -> tuple[Any, int]:
        """fn(*fds) (or nowait) on the loop, if the inline policy lets it: (result,
        errno), or _IN_WORKER."""
        try:
            if nowait is not None:
                out = nowait(*fds)
                return _IN_WORKER if out is None else (out, 0)
            out = self._timed((req.op, req.label), req.size if req.kind is Kind.WRITE else 0, fn, fds)
            return out if out is _IN_WORKER else (out, 0)
        except OSError as exc:
            return None, exc.errno or E.EIO

    def _timed(self, key: tuple[str, str], size: int, fn, args: tuple) -> Any:
        """fn(*args) on the loop, timed for the inline policy under `key` (`size`: the
        bytes a write carries), if the policy lets it; else _IN_WORKER.  A calm key's
        call (see InlinePolicy.calm) asks the policy nothing unless it took longer than
        the threshold."""
        inline = self.inline
        calm = key in inline.calm
        if not calm and not inline.inline(key):
            return _IN_WORKER
        t0 = monotonic_ns()
        try:
            return fn(*args)
        finally:
            ns = monotonic_ns() - t0
            if not calm or ns > inline.threshold_ns:
                inline.observe(key, ns, size)

    async def _elsewhere(self, why: tuple, req: Request, fn, args: tuple, nowait) -> tuple[Any, int]:
        """_place's second half: every Inode among args pinned (so attach's trim cannot
        close it) and opened again if it was closed; then the call runs as _now decides
        (why is _CLOSED) or in a worker thread (_IN_WORKER)."""
        held: list[Inode] = []
        try:
            for node in args:
                if type(node) is Inode:
                    self.inodes.pin(node)  # first, so attach's trim cannot take it
                    held.append(node)
                    if node.fd < 0:
                        self.inodes.attach(node, await self.workers.run(self.inodes.reopen, node))
            fds = self._descriptors(args)
            if fds is None:  # one was forgotten while it was reopened: attach did not keep it
                return None, E.ESTALE
            if why is _CLOSED:
                done = self._here(req, fn, fds, nowait)
                if done is not _IN_WORKER:
                    return done
            return await self.workers.run(fn, *fds), 0
        except OSError as exc:
            return None, exc.errno or E.EIO
        finally:
            for node in held:
                self.inodes.unpin(node)

    def _descriptors(self, args: tuple) -> tuple | None:
        """args with each Inode replaced by its descriptor, and marked as just used (the
        table closes the least recently used first); None if one has none open."""
        out = []
        for a in args:
            if type(a) is Inode:
                if a.fd < 0:
                    return None
                self.inodes.touch(a)
                a = a.fd
            out.append(a)
        return tuple(out)

    def _trace(self, tracer: "TraceWriter", req: Request, site: "_Site", who, start: int, out, err: int,
               held: int, ticket: "Ticket | None", fault: str | None = None) -> None:
        """Queue the request's trace record, with the model's account of it if it was shaped."""
        fh, mode, entry, result = site.fh, 0, 0, 0
        flags = site.flags if req.op == "rename" else 0  # renameat2's, whatever the outcome (replay issues them)
        if req.busy:  # unlink, rename: the open file whose name goes (NFS renames it away), charged
            entry = req.busy  # at admission, so named even if the call then fails
        elif err:
            pass
        elif req.op in _OPENS:  # the handle: open, opendir (an int), create (with its entry)
            fh, flags = _new_handle(out), site.flags
            if req.op == "create":
                mode, entry = out[1].st_mode, out[1].st_ino
        else:
            kind = type(out)
            if kind is bytes or kind is str or kind is list or kind is nofollow.Listing:
                result = len(out)  # bytes read, link length, xattr names, entries
            elif kind is int:
                result = out  # bytes written
            elif kind is pyfuse3.EntryAttributes:  # lookup, mknod, mkdir, symlink, link
                mode, entry = out.st_mode, out.st_ino
            elif kind is os.stat_result:  # getattr, setattr
                mode = out.st_mode
        t = _UNSHAPED if ticket is None else ticket
        who_is = self._who(who.pid, start)
        tracer.add(start, monotonic_ns() - start, req.op, site.inode, site.path, site.path2, fh, site.offset,
                   req.size, result, err, who_is[0], who.uid, who.gid, held, t.gate, t.wait_ns, t.latency_ns,
                   t.transfer_ns, t.nfs, who_is[1], req.label, flags, mode, entry, fault)

    def stats(self) -> dict:
        """For `fusetrace stats`: the inode table, the open files, the requests being
        handled and where calls run."""
        table = self.inodes.stats()
        return {"inodes": table.pop("known"), "open_files": len(self.files.handles), "inode_fds": table,
                "descriptors": {**self.fds.stats(), "inode_table": table["held"], "in_use": _in_use(),
                                "flush_spares_used": self.spares.used},
                "serving": self.serving, "inline": self.inline.describe(), "resized_beside": self.files.resized_beside,
                "rmdirs_nfs_refuses": self.files.rmdirs_nfs_refuses, "killed_released": self.kills.released,
                "held_long": self.held_long(monotonic_ns())}

    def _nowait_pread(self, fd: int, size: int, offset: int) -> bytes | None:
        try:
            return nofollow.cached_pread(fd, size, offset)
        except nofollow.NowaitUnsupported:
            self._cached_pread = None  # tmpfs, for one: reads follow the inline policy from now on
            return None

    def _who(self, tid: int, now: int) -> tuple[int, str, int]:
        """The process and its name of thread `tid` (see _process_of), from the cache."""
        who_is = self._tgids.get(tid)
        if who_is is None or now - who_is[2] > _WHO_FOR_NS:
            who_is = self._process_of(tid, now)
        return who_is

    def _process_of(self, tid: int, now: int) -> tuple[int, str, int]:
        """FUSE names the calling thread; traces name its process (thread group) and
        the process's name, read from /proc at most once a second per thread (a name
        changes at exec, and a shell's child opens its redirections before it): (pid,
        name, when read)."""
        if len(self._tgids) > 4096:
            self._tgids.clear()  # thread ids get reused; keep the cache small and fresh
        known = self._tgids[tid] = (*_thread_group(tid), now)
        return known

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

    def _new_entry(self, parent: Inode, name: str, found) -> pyfuse3.EntryAttributes:
        """Register a (stat, O_PATH fd) pair the kernel is about to learn of."""
        st, fd = found
        return self._entry(st, self._remember(parent, name, st, fd).id)

    def _remember(self, parent: Inode, name: str, st: os.stat_result, fd: int, node_id: int | None = None) -> Inode:
        """InodeTable.remember of the object at `name` in `parent`, which is then its
        best known path and the entry an open of it holds (Inode.dentry)."""
        inode = self.inodes.remember(st, fd, _join(parent.path, name), node_id)
        inode.dentry = (parent.id, name)
        return inode

    # ---- names --------------------------------------------------------------------

    async def lookup(self, parent_inode, name, ctx):
        parent = self._inode(parent_inode)
        name = os.fsdecode(name)
        if name in (".", ".."):
            raise FUSEError(E.EINVAL)  # never sent without export support
        try:
            return await self._call(Request("lookup", Kind.META_READ, parent.id, directory=parent.id, name=name),
                                    _at(parent, name), ctx, nofollow.open_path, parent, name,
                                    reply=functools.partial(self._new_entry, parent, name))
        except FUSEError as exc:
            if exc.errno != E.ENOENT or not self.negative_timeout:
                raise
            absent = pyfuse3.EntryAttributes()  # inode 0: the kernel keeps the name as absent
            absent.entry_timeout = self.negative_timeout
            return absent

    async def forget(self, inode_list):
        for node_id, nlookup in inode_list:
            self.inodes.forget(node_id, nlookup)

    async def getattr(self, inode, ctx=None):
        node = self._inode(inode)
        st = await self._call(Request("getattr", Kind.META_READ, node.id, is_dir=stat.S_ISDIR(node.mode)), _at(node),
                              ctx or _NOBODY, os.stat, node)
        node.seen = version(st)
        if not self._kernel_keeps_size(node):
            node.size = st.st_size
        return self._entry(st, node.id)

    def _kernel_keeps_size(self, node: Inode) -> bool:
        """With the write-back cache the kernel takes a regular file's size from the
        server only for a new inode, and sets it itself on writes and truncations
        (fs/fuse: fuse_get_cache_mask), so replies do not change the size it holds."""
        return self.enable_writeback_cache and stat.S_ISREG(node.mode)

    async def setattr(self, inode, attr, fields, fh, ctx):
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
        kernel = (self.enable_writeback_cache and change.names == "mtime" and fields.update_ctime
                  and stat.S_ISREG(node.mode)
                  and (h is not None or (node.handovers > 0 and change.mtime == node.kernel_mtime)))
        if kernel:
            # one owed is paid, whether it came on no handle or, the file being open for
            # writing, on one (fuse_write_inode passes a writable handle where there is one)
            node.handovers = max(0, node.handovers - 1)
            node.kernel_mtime = attr.st_mtime_ns  # the kernel's already, whatever the source answers
        req = Request("setattr", Kind.META_WRITE, node.id, size=attr.st_size if fields.update_size else 0,
                      is_dir=stat.S_ISDIR(node.mode), kernel_only=kernel)
        call = (change.hand_over, node) if kernel else (change.apply, node, _owner_for(ctx))
        with self.files.truncations if fields.update_size and self.enable_writeback_cache else NO_TRUNCATION:
            st = await self._call(req, _at(node, path2=change.names, fh=fh or 0), ctx, *call)
            if change.mtime is not None:
                node.kernel_mtime = change.mtime
            node.seen = version(st)
            if fields.update_size or not self._kernel_keeps_size(node):
                node.size = st.st_size
        return self._entry(st, node.id)

    async def readlink(self, inode, ctx):
        node = self._inode(inode)
        target = await self._call(Request("readlink", Kind.META_READ, node.id), _at(node), ctx, nofollow.readlink, node)
        return os.fsencode(target)

    async def mknod(self, parent_inode, name, mode, rdev, ctx):
        return await self._make("mknod", parent_inode, name, ctx, nofollow.mknod, mode, rdev)

    async def mkdir(self, parent_inode, name, mode, ctx):
        return await self._make("mkdir", parent_inode, name, ctx, nofollow.mkdir, mode | stat.S_IFDIR)

    async def symlink(self, parent_inode, name, target, ctx):
        target = os.fsdecode(target)
        return await self._make("symlink", parent_inode, name, ctx, nofollow.symlink, target, path2=target)

    async def _make(self, op, parent_inode, name, ctx, fn, *args, path2=None):
        parent = self._inode(parent_inode)
        name = os.fsdecode(name)
        return await self._call(Request(op, Kind.META_WRITE, directory=parent.id, name=name), _at(parent, name, path2),
                                ctx, fn, parent, name, *args, _owner_for(ctx),
                                reply=functools.partial(self._new_entry, parent, name))

    async def unlink(self, parent_inode, name, ctx):
        parent = self._inode(parent_inode)
        name = os.fsdecode(name)
        busy = self._busy(parent, name)
        if busy:  # before the call's wait: a release during it (munmap, exit) must find it
            self.files.hidden[busy] = parent.id
        try:
            gone = await self._call(Request("unlink", Kind.META_WRITE, directory=parent.id, name=name, busy=busy),
                                    _at(parent, name), ctx,
                                    nofollow.unlink_known if self.enable_writeback_cache else nofollow.unlink,
                                    name, parent, _owner_for(ctx))
        except FUSEError:
            if busy:  # NFS's failed RENAME left no hidden name
                self.files.hidden.pop(busy, None)
            raise
        self._times_owed(gone)

    async def rmdir(self, parent_inode, name, ctx):
        parent = self._inode(parent_inode)
        name = os.fsdecode(name)
        await self._call(Request("rmdir", Kind.META_WRITE, directory=parent.id, name=name), _at(parent, name), ctx,
                         nofollow.rmdir, name, parent, _owner_for(ctx))
        if self.files.hidden and self.shaper is not None:
            self.files.kept_hidden(_join(parent.path, name))

    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        old_dir, new_dir = self._inode(parent_inode_old), self._inode(parent_inode_new)
        old, new = os.fsdecode(name_old), os.fsdecode(name_new)
        old_path, new_path = _join(old_dir.path, old), _join(new_dir.path, new)
        exchange = flags & syscalls.RENAME_EXCHANGE
        if flags and self.shaper is not None and not self._said_rename_flags:
            self._said_rename_flags = True
            log.warning("%r: renamed with renameat2 flags (%#x), which an NFS client refuses (EINVAL, nothing sent): "
                        "done here as the source does; a program relying on them fails on EFS", old_path, flags)
        busy = 0 if exchange or new_path == old_path else self._busy(new_dir, new)
        if busy:  # before the call's wait, as unlink's; kept if the RENAME fails: NFS hid the target first
            self.files.hidden[busy] = new_dir.id
        # charged to the directory the entry leaves, as the trace names it
        moved, owed = await self._call(Request("rename", Kind.META_WRITE, directory=old_dir.id, name=old,
                                         new_directory=new_dir.id, new_name=new, busy=busy),
                                 _Site(old_dir.id, old_path, new_path, flags=flags), ctx,
                                 nofollow.rename, old_dir, old, new_dir, new, flags, _owner_for(ctx),
                                 self.enable_writeback_cache)
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

    async def link(self, inode, new_parent_inode, new_name, ctx):
        node = self._inode(inode)
        parent = self._inode(new_parent_inode)
        name = os.fsdecode(new_name)
        owner = _owner_for(ctx)
        if node.is_symlink and (owner is not None or not nofollow.AS_ROOT) and not self.proc_reaches_links:
            raise FUSEError(E.EPERM)  # linkat through /proc/self/fd would follow the link here
        # a new entry in `parent`: its directory's slot, like every namespace change
        entry = await self._call(Request("link", Kind.META_WRITE, node.id, directory=parent.id, name=name),
                                 _at(node, path2=_join(parent.path, name)), ctx,
                                 nofollow.link, node, parent, name, owner,
                                 reply=functools.partial(self._new_entry, parent, name))
        self._times_owed(node.key)
        return entry

    # ---- files --------------------------------------------------------------------

    async def open(self, inode, flags, ctx):
        node = self._inode(inode)
        if node.is_symlink:
            raise FUSEError(E.ELOOP)  # the kernel follows links itself; never open one below
        epoch = self.files.truncations.ended
        with self.files.truncations if flags & os.O_TRUNC and self.enable_writeback_cache else NO_TRUNCATION:
            # size: what an O_TRUNC cuts (the emulated NFS client then owes a SETATTR, see NfsClient._open)
            cut = node.size if flags & os.O_TRUNC else 0
            return await self._opening(Request("open", Kind.META_READ, node.id, size=cut), _at(node, flags=flags), ctx,
                                       functools.partial(self._open_reply, node, flags, ctx, epoch),
                                       nofollow.open_checked, node, self._backing_flags(flags & ~_OPEN_STRIP),
                                       ctx.uid != 0, _owner_for(ctx))

    async def _opening(self, req: Request, site: "_Site", ctx, reply, fn, *args):
        """_call for a request that makes a handle (open, create, opendir): one of the
        caller's share of descriptors is taken first (fdbudget.py), and given back if no
        handle is made.  Beyond the share or the budget: EMFILE, traced, nothing placed
        below or charged by the model."""
        if not self.fds.take(ctx.uid):
            if self.tracer is not None and ctx.pid != self.untraced_pid:
                self._trace(self.tracer, req, site, ctx, monotonic_ns(), None, E.EMFILE, 0, None)
            raise FUSEError(E.EMFILE)
        try:
            return await self._call(req, site, ctx, fn, *args, reply=reply)
        except BaseException:
            self.fds.give(ctx.uid)  # no handle was made
            raise

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

    def _open_reply(self, node: Inode, flags: int, ctx, epoch: int,
                    opened: tuple[int, os.stat_result]) -> pyfuse3.FileInfo:
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

    async def create(self, parent_inode, name, mode, flags, ctx):
        parent = self._inode(parent_inode)
        name = os.fsdecode(name)
        return await self._opening(
            Request("create", Kind.META_WRITE, directory=parent.id, name=name), _at(parent, name, flags=flags), ctx,
            functools.partial(self._create_reply, parent, name, flags, ctx),
            nofollow.create, parent, name, self._backing_flags(flags & ~(os.O_DIRECT | os.O_NOCTTY)), mode,
            _owner_for(ctx))

    def _create_reply(self, parent: Inode, name: str, flags: int, ctx,
                      made: tuple[int, os.stat_result, int]) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        fd, st, path_fd = made
        try:
            inode = self._remember(parent, name, st, path_fd)
        except BaseException:
            os.close(fd)
            raise
        self.files.opened(Handle(fd, inode, flags, ctx))
        return pyfuse3.FileInfo(fh=fd, direct_io=bool(flags & os.O_DIRECT)), self._entry(st, inode.id)

    async def read(self, fh, off, size):
        """A read on a handle the caller opened write-only is the write-back cache's
        page fill (see _backing_flags), which an NFS client does not send: it writes
        the part of the page written (nfs_want_read_modify_write asks a descriptor open
        for reading), so the emulated client charges it nothing (`kernel_only`)."""
        h = self.files.file(fh)
        req = Request("read", Kind.READ, h.inode.id, size=size,
                      kernel_only=self.enable_writeback_cache and h.flags & os.O_ACCMODE == os.O_WRONLY)
        return await self._call(req, _at(h.inode, fh=fh, offset=off), h, os.pread, fh, size, off,
                                nowait=self._cached_pread)

    async def write(self, fh, off, buf):
        h = self.files.file(fh)
        h.dirty = True
        node = h.inode
        if self.shaper is None and self.tracer is None and not self.faults.active:
            # Nothing to shape, record or inject: no Request or site is made for it (that
            # took a fifth of a 4 KiB write's time through the mount), only the placement.
            args = (fh, buf, off)
            try:
                written = self._timed(("write", h.write_mode), len(buf), os.pwrite, args)  # (op, label)
                if written is _IN_WORKER:
                    written = await self.workers.run(os.pwrite, *args)
            except OSError as exc:
                raise FUSEError(exc.errno or E.EIO) from None
        else:
            if off + len(buf) > node.size and h.flags & os.O_DIRECT and self.shaper is not None:
                self.shaper.extending_writes += 1  # the kernel sent it alone: see Shaper.extending_writes
            req = Request("write", Kind.WRITE, h.inode.id, size=len(buf), write_mode=h.write_mode)
            written = await self._call(req, _at(h.inode, fh=fh, offset=off), h, os.pwrite, fh, buf, off)
        node.size = max(node.size, off + written)  # as the kernel extends it on this reply
        return written

    async def flush(self, fh):
        h = self.files.file(fh)
        commit, h.dirty = h.dirty, False
        first, h.closed = not h.closed, True
        req = Request("flush", Kind.COMMIT if commit else Kind.META_READ, h.inode.id, closes=first,
                      writable=h.flags & os.O_ACCMODE != os.O_RDONLY)
        await self._call(req, _at(h.inode, fh=fh), h, self.spares.close_dup, fh)

    async def release(self, fh):
        h, hidden = self.files.released(fh)
        try:
            req = Request("release", Kind.COMMIT if h.dirty else Kind.NONE, h.inode.id, directory=hidden)
            await self._call(req, _at(h.inode, fh=fh), h, os.close, fh)
        finally:
            self.inodes.unpin(h.inode)
            self.fds.give(h.uid)

    async def fsync(self, fh, datasync):
        h = self.files.file(fh)
        commit, h.dirty = h.dirty, False  # NFS sends no COMMIT for a handle with nothing written
        req = Request("fsync", Kind.COMMIT if commit else Kind.NONE, h.inode.id)
        await self._call(req, _at(h.inode, fh=fh), h, os.fdatasync if datasync else os.fsync, fh)

    # ---- directories ----------------------------------------------------------------

    async def opendir(self, inode, ctx):
        node = self._inode(inode)
        return await self._opening(Request("opendir", Kind.META_READ, node.id), _at(node), ctx,
                                   functools.partial(self._opendir_reply, node, ctx),
                                   nofollow.reopen, node, os.O_RDONLY | os.O_DIRECTORY, _owner_for(ctx))

    def _opendir_reply(self, node: Inode, ctx, fd: int) -> int:
        self.files.opened_dir(DirHandle(fd, node, ctx))
        return fd

    async def readdir(self, fh, start_id, token):
        d = self.files.dir(fh)
        # Offset 0 (opendir or rewinddir) takes a fresh listing; later calls go on
        # through the same one by index, so no entry is skipped or repeated.
        names = None if start_id == 0 else d.names
        # the entries this call can return (the kernel asks once more at the end, for none)
        asked = d.fit if names is None else max(0, min(d.fit, len(names) - start_id))
        listing = await self._call(Request("readdir", Kind.META_READ, d.inode.id, size=asked, offset=start_id,
                                           handle=fh),
                                   _at(d.inode, fh=fh, offset=start_id), d,
                                   nofollow.list_chunk, d.fd, names, start_id, d.fit)
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

    async def releasedir(self, fh):
        d = self.files.released_dir(fh)
        try:
            await self._call(Request("releasedir", Kind.NONE, d.inode.id), _at(d.inode, fh=fh), d, os.close, fh)
        finally:
            self.inodes.unpin(d.inode)
            self.fds.give(d.uid)

    async def fsyncdir(self, fh, datasync):
        d = self.files.dir(fh)
        await self._call(Request("fsyncdir", Kind.COMMIT, d.inode.id), _at(d.inode, fh=fh), d, os.fsync, fh)

    # ---- everything else -------------------------------------------------------------

    async def statfs(self, ctx):
        root = self._inode(ROOT)
        sv = await self._call(Request("statfs", Kind.META_READ, root.id), _at(root), ctx, os.statvfs, root)
        out = pyfuse3.StatvfsData()
        for field in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_favail",
                      "f_namemax"):
            setattr(out, field, getattr(sv, field))
        return out

    async def access(self, inode, mode, ctx):
        node = self._inode(inode)
        if node.is_symlink:
            return True  # a link itself is rwx for all; the kernel follows links before asking
        return await self._call(Request("access", Kind.META_READ, node.id, is_dir=stat.S_ISDIR(node.mode)), _at(node),
                                ctx, nofollow.access, node, mode)

    async def setxattr(self, inode, name, value, ctx):
        node = self._inode(inode)
        await self._call(Request("setxattr", Kind.META_WRITE, node.id, size=len(value)),
                         _at(node, path2=os.fsdecode(name)), ctx,
                         self._xattr_fn(node, nofollow.setxattr), node, name, value)
        self._times_owed(node.key)

    async def getxattr(self, inode, name, ctx):
        node = self._inode(inode)
        return await self._call(Request("getxattr", Kind.META_READ, node.id), _at(node, path2=os.fsdecode(name)),
                                ctx, self._xattr_fn(node, nofollow.getxattr), node, name)

    async def listxattr(self, inode, ctx):
        node = self._inode(inode)
        names = await self._call(Request("listxattr", Kind.META_READ, node.id), _at(node), ctx,
                                 nofollow.listxattr if self._xattrs_at(node) else nofollow.no_xattr_names, node)
        return [os.fsencode(n) for n in names]

    async def removexattr(self, inode, name, ctx):
        node = self._inode(inode)
        await self._call(Request("removexattr", Kind.META_WRITE, node.id), _at(node, path2=os.fsdecode(name)),
                         ctx, self._xattr_fn(node, nofollow.removexattr), node, name)
        self._times_owed(node.key)

    def _xattr_fn(self, node: Inode, fn):
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


def _guarded(handler):
    """The last line of defence: a bug in a handler answers EIO and is logged,
    rather than taking the whole mount down with it.  Also counts the requests the
    server holds (Operations.serving)."""

    @functools.wraps(handler)
    async def guarded(ops, *args):
        ops.serving += 1
        try:
            return await handler(ops, *args)
        except FUSEError:
            raise
        except Exception:
            log.exception("%s failed", handler.__name__)
            if handler.__name__ == "forget":
                return None  # forget has no reply: pyfuse3 would end the session on any exception
            raise FUSEError(E.EIO) from None
        finally:
            ops.serving -= 1

    return guarded


HANDLED = ("lookup", "forget", "getattr", "setattr", "readlink", "mknod", "mkdir", "symlink",
           "unlink", "rmdir", "rename", "link", "open", "create", "read", "write", "flush",
           "release", "fsync", "opendir", "readdir", "releasedir", "fsyncdir", "statfs",
           "access", "setxattr", "getxattr", "listxattr", "removexattr")  # each one's Request is named so
for _name in HANDLED:
    setattr(Operations, _name, _guarded(getattr(Operations, _name)))


class _Site(NamedTuple):
    """Where a request is, as its trace record names it: the inode (the directory, for
    an entry in it), the path, a second name, the file handle, the offset and the open
    flags (open, create) or renameat2's (rename)."""

    inode: int
    path: str
    path2: str | None = None
    fh: int = 0
    offset: int = 0
    flags: int = 0


def _at(node: Inode, name: str | None = None, path2: str | None = None, fh: int = 0, offset: int = 0,
        flags: int = 0) -> _Site:
    """The site of a request on `node`, or on the entry `name` in directory `node`
    (made as a plain tuple is: the named tuple's own __new__ costs twice as much)."""
    return _new_tuple(_Site, (node.id, node.path if name is None else _join(node.path, name), path2, fh, offset,
                              flags))


class _Nobody:
    pid = uid = gid = 0


_NOBODY = _Nobody()


class _Held(NamedTuple):
    """A request held long (Operations._holding): the caller's process and its name,
    the operation, its path, what holds it and since when (monotonic ns)."""

    pid: int
    name: str
    op: str
    path: str
    why: str
    since: int
    until: int  # when it goes on at the latest
    rule: bool  # held by a fault rule's stall (fault clear lets it go)


class _Killed(Exception):
    """A hold let go because its caller is being killed (Operations._hold_listed):
    `held`, the time it was held after its real completion."""

    def __init__(self, held: int) -> None:
        super().__init__(held)
        self.held = held


# a reply held this long by the model is listed (Operations._holding): a stall event, a
# cliff, a long queue; a fault rule's stall is listed however long
_LONG_HOLD_NS = 1_000_000_000


class _Unshaped:
    """The model's account of an operation it was not shown (trace mode, calibrating)."""

    gate = nfs = None
    wait_ns = latency_ns = transfer_ns = 0


_UNSHAPED = _Unshaped()


_new_tuple = tuple.__new__
_WHO_FOR_NS = 1_000_000_000  # how long a thread's process and name are trusted
_OPENS = frozenset(("open", "opendir", "create"))
_CLOSES = frozenset(("release", "releasedir"))  # always run: no rule takes them
_REPORTS = frozenset(("fsync", "flush"))  # where a write-back error reaches the application
_NO_FIRING = Firing("", "")
_IN_WORKER: Any = ("worker",)  # _now's answers when the call must leave the loop
_CLOSED: Any = ("closed",)


def _shortened(op: str, args: tuple, most: int) -> tuple:
    """The arguments of a read (fh, size, offset) or write (fh, buffer, offset) that
    carries at most `most` bytes."""
    fh, what, offset = args
    return (fh, min(what, most), offset) if op == "read" else (fh, what[:most], offset)


def _new_handle(out) -> int:
    """The handle an open (FileInfo), opendir (int) or create ((FileInfo, entry)) gave."""
    if type(out) is int:
        return out
    return (out[0] if type(out) is tuple else out).fh


def _thread_group(tid: int) -> tuple[int, str]:
    """(process id, process name) of thread `tid`; (tid, "") when it is gone."""
    try:
        with open(f"/proc/{tid}/status", "rb") as f:  # procfs: answered from memory
            name = tgid = None
            for line in f:
                if line.startswith(b"Name:"):
                    name = line[5:].strip()
                elif line.startswith(b"Tgid:"):
                    tgid = int(line.split()[1])
                    break
        if tgid is None:
            return tid, ""
        if tgid != tid:  # a thread's Name is its own; the process's is its leader's
            with open(f"/proc/{tgid}/comm", "rb") as f:
                name = f.read().rstrip(b"\n")
        return tgid, os.fsdecode(name or b"")
    except (OSError, ValueError):
        return tid, ""


def _join(parent: str, name: str) -> str:
    return parent + name if parent == "/" else f"{parent}/{name}"


def _owner_for(ctx):
    """Who a new object must be made as, where that is not the server's own user: the
    caller with their supplementary groups, as the kernel would make it natively."""
    if not nofollow.AS_ROOT or (ctx.uid == 0 and ctx.gid == 0):
        return None
    try:
        groups = tuple(pyfuse3.get_sup_groups(ctx.pid))  # /proc/PID/status: from memory
    except OSError:
        groups = ()  # the caller is gone: its own uid and gid decide
    return ctx.uid, ctx.gid, groups


def _in_use() -> int | None:
    """Descriptors the process holds now (for `fusetrace stats`; None if /proc cannot say)."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # less the listing's own
    except OSError:
        return None
