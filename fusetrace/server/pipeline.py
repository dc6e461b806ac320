"""The one request pipeline every FUSE handler calls: admit, fault, place, hold, trace, reply.

A handler names its request (a Request: fusetrace/request.py), where the trace should
place it (a Site) and the call that does it on the source; Pipeline.call then

1. admits it: a handle-making request first takes a descriptor of the caller's share
   (`opening`, fdbudget.py), and the shaper charges it to the emulated client;
2. applies the fault rules, only while some are in force (faulting.py);
3. places the call on the loop or in a worker thread (inline.py, workers.py);
4. holds the reply until the shaper's deadline, listed when long and let go when its
   caller is killed (holds.py, kills.py);
5. queues the trace record, and counts the request where metrics are served
   (shaping/opmetrics.py);
6. replies: `reply(out)` turns the call's result into the handler's answer, and an
   OSError from below answers its errno (only pyfuse3.FUSEError leaves).

Stages that are off cost a test each: with no shaper, no tracer and no fault rule a
request allocates nothing here beyond what the call returns.  A write with all three off
skips even the Request: its handler calls the place stage (Pipeline.timed) itself.
"""

import errno as E
import functools
import logging
import os
from collections.abc import Awaitable, Callable
from time import monotonic_ns
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar, overload

import pyfuse3
from pyfuse3 import FUSEError

from ..faults.injector import Firing, Injector
from ..request import Kind, Request, WriteMode
from . import nofollow
from .callers import Caller, Callers
from .faulting import CLOSES, FaultStage, fault_why, shortened
from .fdbudget import Budget
from .holds import LONG_HOLD_NS, Holds, Killed
from .inline import InlinePolicy
from .inodes import Inode, InodeTable
from .openfiles import Handle, OpenFiles
from .workers import Workers

if TYPE_CHECKING:  # a mount that neither traces nor emulates imports neither
    from ..shaping.opmetrics import OpCounts
    from ..shaping.shaper import Shaper, Ticket
    from ..trace.writer import TraceWriter

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")
Call = Callable[..., Any]  # the call on the source: its Inode arguments reach it as descriptors
Reply = Callable[[Any], Any]  # turns the call's result into the handler's answer
Placed = tuple[Any, int]  # (result, errno)

_OPENS = frozenset(("open", "opendir", "create"))
IN_WORKER: Any = ("worker",)  # _now's answers when the call must leave the loop
_CLOSED: Any = ("closed",)


class Site(NamedTuple):
    """Where a request is, as its trace record names it: the inode (the directory, for
    an entry in it), the path, a second name, the file handle, the offset and the open
    flags (open, create) or renameat2's (rename)."""

    inode: int
    path: str
    path2: str | None = None
    fh: int = 0
    offset: int = 0
    flags: int = 0


_new_tuple = tuple.__new__


def at(
    node: Inode, name: str | None = None, path2: str | None = None, fh: int = 0, offset: int = 0, flags: int = 0
) -> Site:
    """The site of a request on `node`, or on the entry `name` in directory `node`
    (made as a plain tuple is, which is cheaper than the named tuple's own __new__)."""
    return _new_tuple(Site, (node.id, node.path if name is None else join(node.path, name), path2, fh, offset, flags))


def join(parent: str, name: str) -> str:
    """The path of `name` in the directory at `parent`, as traces name it."""
    return parent + name if parent == "/" else f"{parent}/{name}"


class _Unshaped:
    """The model's account of an operation it was not shown (trace mode, calibrating)."""

    gate = nfs = None
    wait_ns = latency_ns = transfer_ns = 0


_UNSHAPED = _Unshaped()


class _Write(NamedTuple):
    """A write, as its trace record names it (traced_write): its kind is its mode; it names
    no open file whose name goes (busy: 0, as _trace reads a Request's)."""

    op: str
    size: int
    label: str
    busy: int


class Pipeline:
    """The stages of every request, and what they need: the inode table (descriptors),
    the placement, the shaper, the tracer, the fault rules, the held requests."""

    def __init__(
        self,
        *,
        inodes: InodeTable,
        files: OpenFiles,
        fds: Budget,
        workers: Workers,
        inline: InlinePolicy,
        tracer: "TraceWriter | None",
        shaper: "Shaper | None",
        writeback_cache: bool,
        counts: "OpCounts | None" = None,
    ) -> None:
        self.inodes = inodes
        self.fds = fds
        self.workers = workers
        self.inline = inline
        self.tracer = tracer
        # what the trace leaves out (--trace-only, --trace-sample): None keeps every record
        self.capture = None if tracer is None else tracer.capture
        self.shaper = shaper
        self.writeback_cache = writeback_cache
        self.callers = Callers()
        self.holds = Holds(self.callers)
        self.faults = Injector(write_back=writeback_cache)
        self.fault_stage = FaultStage(self.faults, self.callers, files)
        self.counts = counts  # per-operation figures for Prometheus (shaping/opmetrics.py)
        self.untraced_pid = -1  # fusetrace's own probe at mount (measure_round_trip): not traced, no faults
        self.watched = tracer is not None or shaper is not None or counts is not None  # else a write may skip to timed
        # whether the server has no request but the current one, in hand or queued (set once
        # mounted: see InlinePolicy.inline); never, until then
        self.alone: Callable[[], bool] = _never
        # the tracer is the one stage on, and keeps every record: a write may skip to traced_write
        self.lone_tracer = tracer is not None and shaper is None and counts is None and self.capture is None

    @overload
    async def call(
        self,
        req: Request,
        site: Site,
        who: Caller,
        fn: Callable[..., T],
        *args: Any,
        nowait: Call | None = None,
        reply: None = None,
    ) -> T: ...
    @overload
    async def call(
        self,
        req: Request,
        site: Site,
        who: Caller,
        fn: Call,
        *args: Any,
        nowait: Call | None = None,
        reply: Callable[[Any], R],
    ) -> R: ...

    async def call(
        self,
        req: Request,
        site: Site,
        who: Caller,
        fn: Call,
        *args: Any,
        nowait: Call | None = None,
        reply: Reply | None = None,
    ) -> Any:
        """Run fn(*args) for `req` through every stage switched on (the module's
        docstring), on behalf of `who` (a request context or an open handle).
        `nowait(*args)`, if given, is tried first on the loop (see place)."""
        start = admitted = monotonic_ns()
        firing: Firing | None = None
        err = 0
        # (NFS sends nothing for the kernel's own; fusetrace's probe at mount is not the application's)
        if self.faults.active and not req.kernel_only and who.pid != self.untraced_pid:
            firing = self.fault_stage.firing(req, site.path, who.pid, start)
            if firing.effect:
                err, args, nowait = await self._faulted(req, site, who, start, firing, args, nowait)
            admitted = monotonic_ns()
        ticket = None if self.shaper is None else self.shaper.admit(req, admitted, who.uid)
        out = None
        if not err:
            done = self._now(req, fn, args, nowait)  # place, without a coroutine of its own when it can
            if done is IN_WORKER or done is _CLOSED:
                done = await self._elsewhere(done, req, fn, args, nowait)
            out, err = done
            if firing is not None and not err:
                late = self.fault_stage.ran(req, site.fh, firing)
                if late is not None:
                    firing, err = late, late.errno
        try:
            held = 0 if self.shaper is None else await self._hold(req, ticket, admitted, site, who, reply)
        except Killed as killed:
            held, err = killed.held, E.EINTR
        if reply is not None and not err:
            out = reply(out)
        if self.tracer is not None and who.pid != self.untraced_pid:
            self._trace(
                self.tracer,
                req,
                site,
                who,
                start,
                out,
                err,
                held,
                ticket,
                None if firing is None else firing.rule or None,
            )
        if self.counts is not None and who.pid != self.untraced_pid:
            self.counts.add(req.op, start, out, err)
        if err:
            raise FUSEError(err)
        return out

    async def _faulted(
        self,
        req: Request,
        site: Site,
        who: Caller,
        start: int,
        firing: Firing,
        args: tuple[Any, ...],
        nowait: Call | None,
    ) -> tuple[int, tuple[Any, ...], Call | None]:
        """The fault stage before the call: wait out a stall or a delay, or answer without
        reaching the source, or carry fewer bytes.  Returns (errno, args, nowait) for the
        rest.  A delay under a second is neither listed nor watched, as the model's holds."""
        if firing.effect in ("stall", "delay"):
            until = min(firing.until_ns, firing.fail_ns) if firing.fail_ns else firing.until_ns
            if firing.effect == "delay" and until - start < LONG_HOLD_NS:
                return await self.fault_stage.stalled(firing), args, nowait
            with self.holds.holding_of(
                req.op,
                site.path,
                who,
                start,
                fault_why(firing, start),
                until,
                rule=True,
                killable=self._waited_on(req, who),
            ) as scope:
                err = await self.fault_stage.stalled(firing)
            if scope is not None and scope.cancelled_caught:  # its caller is being killed: nothing is sent
                if self.tracer is not None:
                    self._trace(self.tracer, req, site, who, start, None, E.EINTR, 0, None, firing.rule)
                if self.counts is not None:
                    self.counts.add(req.op, start, None, E.EINTR)
                raise FUSEError(E.EINTR)
            return err, args, nowait
        if firing.effect == "short":
            return 0, shortened(req.op, args, firing.short), None
        return self.fault_stage.answered(req, firing), args, nowait

    async def opening(
        self, req: Request, site: Site, ctx: Caller, reply: Callable[[Any], R], fn: Call, *args: Any
    ) -> R:
        """call for a request that makes a handle (open, create, opendir): one of the
        caller's share of descriptors is taken first (fdbudget.py), and given back if no
        handle is made.  Beyond the share or the budget: EMFILE, traced, nothing placed
        below or charged by the model."""
        if not self.fds.take(ctx.uid):
            if self.tracer is not None and ctx.pid != self.untraced_pid:
                self._trace(self.tracer, req, site, ctx, monotonic_ns(), None, E.EMFILE, 0, None)
            if self.counts is not None and ctx.pid != self.untraced_pid:
                self.counts.add(req.op, monotonic_ns(), None, E.EMFILE)
            raise FUSEError(E.EMFILE)
        try:
            return await self.call(req, site, ctx, fn, *args, reply=reply)
        except BaseException:
            self.fds.give(ctx.uid)  # no handle was made
            raise

    # ---- hold: the shaper's deadline -------------------------------------------------

    def _hold(
        self, req: Request, ticket: "Ticket | None", since: int, site: Site, who: Caller, reply: Reply | None
    ) -> Awaitable[int]:
        """The shaper's hold of the request admitted at `since` (Shaper.hold), listed as
        held long (holds.py) when its deadline is over a second away.  (A plain call that
        returns the coroutine to await: no frame of its own on the hot path.)"""
        assert self.shaper is not None
        if ticket is None or ticket.deadline_ns is None or ticket.deadline_ns - since < LONG_HOLD_NS:
            return self.shaper.hold(req, ticket, since)
        return self._hold_listed(req, ticket, since, site, who, ticket.deadline_ns, reply)

    async def _hold_listed(
        self, req: Request, ticket: "Ticket", since: int, site: Site, who: Caller, until: int, reply: Reply | None
    ) -> int:
        """_hold's long case: raises Killed if the caller is being killed meanwhile.  The
        call has run on the source by now, so one whose answer the server or the kernel
        must act on is not let go: one whose `reply` hands the kernel something new (a
        handle, a node id), and a namespace or attribute change (its handler then moves
        its own tables: open files by name, hidden names)."""
        assert self.shaper is not None
        entered = monotonic_ns()
        killable = reply is None and req.kind is not Kind.META_WRITE and self._waited_on(req, who)
        with self.holds.holding_of(
            req.op, site.path, who, since, f"the emulated file system ({ticket.gate})", until, killable=killable
        ):
            return await self.shaper.hold(req, ticket, since)
        raise Killed(monotonic_ns() - entered)  # reached only when the caller's kill let it go

    def _waited_on(self, req: Request, who: Caller) -> bool:
        """Whether a caller waits on `req` and so may be killed out of its wait: not the
        kernel's own requests (its page fills; a release, which nobody awaits), nor the
        write-back cache's WRITEs (the kernel sends them for data already written, and
        they must complete, as an NFS client's write-back does), nor a request the kernel
        names no process for (pid 0)."""
        return not (
            req.kernel_only
            or who.pid <= 0
            or req.op in CLOSES
            or (req.op == "write" and self.writeback_cache and req.write_mode is not WriteMode.DIRECT)
        )

    def end_stalls(self) -> None:
        """The server is stopping: every stalled request goes on now, those a fault rule
        holds and those the emulated file system holds (pyfuse3's main loop returns only
        once every request it started has been answered)."""
        self.fault_stage.stop()
        if self.shaper is not None and self.shaper.timer is not None:
            self.shaper.timer.release_all()

    # ---- place: on the loop or in a worker -------------------------------------------

    async def place(self, req: Request, fn: Call, args: tuple[Any, ...], nowait: Call | None = None) -> Placed:
        """Run fn(*args) where it belongs: on the loop while the inline policy finds
        `req`'s calls quick, else in a worker thread.  Returns (result, errno).  An
        Inode among args reaches fn as its O_PATH descriptor, opened again if it was
        closed.  `nowait(*args)`, if given, is tried first on the loop: it must not
        block, and returns None when it cannot answer at once (the call then always
        goes to a worker)."""
        done = self._now(req, fn, args, nowait)
        if done is IN_WORKER or done is _CLOSED:
            done = await self._elsewhere(done, req, fn, args, nowait)
        return done

    def _now(self, req: Request, fn: Call, args: tuple[Any, ...], nowait: Call | None) -> Placed:
        """place's first half, on the loop: (result, errno) when fn (or nowait) ran
        here; _CLOSED when an Inode among args has no descriptor open; IN_WORKER when
        the call belongs in a worker.  Nothing can close a descriptor while this runs
        (no await), so no Inode needs pinning."""
        fds = self._descriptors(args)
        return _CLOSED if fds is None else self._here(req, fn, fds, nowait)

    def _here(self, req: Request, fn: Call, fds: tuple[Any, ...], nowait: Call | None) -> Placed:
        """fn(*fds) (or nowait) on the loop, if the inline policy lets it: (result,
        errno), or IN_WORKER."""
        try:
            if nowait is not None:
                out = nowait(*fds)
                return IN_WORKER if out is None else (out, 0)
            out = self.timed((req.op, req.label), req.size if req.kind is Kind.WRITE else 0, fn, fds)
            return out if out is IN_WORKER else (out, 0)
        except OSError as exc:
            return None, exc.errno or E.EIO

    def timed(self, key: tuple[str, str], size: int, fn: Call, args: tuple[Any, ...]) -> Any:
        """fn(*args) on the loop, timed for the inline policy under `key` (`size`: the
        bytes a write carries), if the policy lets it; else IN_WORKER.  A calm key's
        call (see InlinePolicy.calm) asks the policy nothing unless it took longer than
        the threshold."""
        inline = self.inline
        calm = key in inline.calm
        if not calm and not inline.inline(key, self.alone):
            return IN_WORKER
        t0 = monotonic_ns()
        try:
            return fn(*args)
        finally:
            ns = monotonic_ns() - t0
            if not calm or ns > inline.threshold_ns:
                inline.observe(key, ns, size)

    async def _elsewhere(
        self, why: tuple[str], req: Request, fn: Call, args: tuple[Any, ...], nowait: Call | None
    ) -> Placed:
        """place's second half: every Inode among args pinned (so attach's trim cannot
        close it) and opened again if it was closed; then the call runs as _now decides
        (why is _CLOSED) or in a worker thread (IN_WORKER)."""
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
                if done is not IN_WORKER:
                    return done
            return await self.workers.run(fn, *fds), 0
        except OSError as exc:
            return None, exc.errno or E.EIO
        finally:
            for node in held:
                self.inodes.unpin(node)

    def _descriptors(self, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
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

    # ---- trace -----------------------------------------------------------------------

    async def traced_write(self, h: Handle, fh: int, buf: bytes, off: int) -> int:
        """pwrite(fh, buf, off) for handle `h` on a mount whose one stage on is the tracer
        (`lone_tracer`), no fault rule in force: placed as call places it and recorded as
        through _trace, without the Request and Site that the other stages read.  A
        write is the commonest request of a small-file run (tar x: 27,000 of 93,000), and
        the two, with call's tests of the stages that are off, were most of what a traced
        write cost the loop (docs/BENCHMARKS.md, "Figures behind design choices: trace/writer.py")."""
        assert self.tracer is not None
        start = monotonic_ns()
        size = len(buf)
        result = errno = 0
        try:
            done = self.timed(("write", h.write_mode), size, os.pwrite, (fh, buf, off))
            result = await self.workers.run(os.pwrite, fh, buf, off) if done is IN_WORKER else done
        except OSError as exc:
            errno = exc.errno or E.EIO
        if h.pid != self.untraced_pid:
            node = h.inode
            self._trace(
                self.tracer,
                _new_tuple(_Write, ("write", size, h.write_mode, 0)),
                _new_tuple(Site, (node.id, node.path, None, fh, off, 0)),
                h,
                start,
                result,
                errno,
                0,
                None,
            )
        if errno:
            raise FUSEError(errno)
        return result

    def _trace(
        self,
        tracer: "TraceWriter",
        req: Request | _Write,
        site: Site,
        who: Caller,
        start: int,
        out: Any,
        errno: int,
        shaped_ns: int,
        ticket: "Ticket | None",
        fault: str | None = None,
    ) -> None:
        """Queue the request's trace record, with the model's account of it if it was
        shaped, unless the capture's filters or sampling leave it out (it counts it)."""
        process = self.callers.who(who.pid, start)
        if self.capture is not None and not self.capture.keep(req, site.path, who.uid, process.comm):
            return
        fh, mode, entry, result = site.fh, 0, 0, 0
        flags = site.flags if req.op == "rename" else 0  # renameat2's, whatever the outcome (replay issues them)
        if req.busy:  # unlink, rename: the open file whose name goes (NFS renames it away), charged
            entry = req.busy  # at admission, so named even if the call then fails
        elif errno:
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
        tracer.add(
            start,
            monotonic_ns() - start,
            req,
            site,
            who,
            process,
            _UNSHAPED if ticket is None else ticket,
            fh,
            result,
            errno,
            flags,
            mode,
            entry,
            shaped_ns,
            fault,
        )  # each by add's name for it


def _never() -> bool:
    return False


def _new_handle(out: Any) -> int:
    """The handle an open (FileInfo), opendir (int) or create ((FileInfo, entry)) gave."""
    if type(out) is int:
        return out
    fh: int = (out[0] if type(out) is tuple else out).fh
    return fh


class Serving(Protocol):
    serving: int  # requests read from the kernel and not yet answered


Handler = Callable[..., Awaitable[Any]]


def guarded(handler: Handler) -> Handler:
    """The reply's last line of defence: a bug in a handler answers EIO and is logged,
    rather than taking the whole mount down with it.  Also counts the requests the
    server holds (Operations.serving)."""

    @functools.wraps(handler)
    async def guard(ops: Serving, *args: Any) -> Any:
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

    return guard
