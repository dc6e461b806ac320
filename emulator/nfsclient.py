"""The Linux NFS 4.1 client between an application's system calls and EFS.

The model (model.py) times the RPCs a server is sent.  This decides which RPCs a
Linux NFS client sends for each VFS operation, given what it keeps
(docs/EMULATOR.md, "What NFS sends", has the table and the kernel functions):

- attributes, trusted for acregmin..acregmax (files) or acdirmin..acdirmax
  (directories) after they were fetched, the period doubling each time they are
  fetched again unchanged; a setattr's or a namespace change's reply, and a
  WRITE's, bring them afresh; a stat of a file whose written data is still on
  its way to the server waits for it first (Linux flushes before GETATTR: how
  `ls` freezes behind queued data);
- permission to search a directory, asked (ACCESS) at its first search and kept;
- names (positive and negative dentries), trusted while their directory's
  attributes are; an exclusive create skips the LOOKUP (the kernel's FUSE path
  sends one first: a create right after it is timed from the LOOKUP's start);
- directory listings, reused while the directory has not changed and its
  attributes are trusted;
- close-to-open: every open sends OPEN (EFS grants no delegations), which brings
  fresh attributes (an opendir a GETATTR); close(2) sends CLOSE and waits for it
  (FUSE's flush of close(2); FUSE's release, which nobody waits for, is free);
- written data: buffered writes go into the page cache and are written back as
  WRITEs of up to wsize, several in flight; O_SYNC/O_DSYNC writes go into the
  page cache too, and the flush the kernel makes after each of them sends them as
  parallel WRITEs of up to wsize; a flush (fsync, fdatasync, msync, close, and
  that one) waits for the file's WRITEs, then sends one COMMIT, unless all
  written since the last commit fitted in one WRITE, which then went FILE_SYNC
  and needs none (FLUSH_COND_STABLE).  Nothing written: no RPC.  O_DIRECT writes
  go as sent, each its own stable WRITE;
- silly rename: unlinking, or renaming over, a regular file open here renames it to a
  hidden name (a LOOKUP of that name, then RENAME) instead of removing it; the last
  close of the file then sends the REMOVE, which nobody waits for.

Operations are named as the VFS (and FUSE, which mirrors it) names them:
VFS_OPS.  Pure and clock-free, like the model.
"""

import math
from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

from .call import Call
from .model import Model
from .ops import Admission, Gate, Op, OpClass

_META_READ, _META_WRITE, _READ, _WRITE, _COMMIT = (
    OpClass.META_READ,
    OpClass.META_WRITE,
    OpClass.DATA_READ,
    OpClass.DATA_WRITE,
    OpClass.COMMIT,
)
_CAP = 1 << 17  # entries a cache keeps before it starts afresh (a client's memory is finite too)
# A create this soon after the reply to a LOOKUP of its name is the kernel's FUSE path
# asking first for the one open(O_CREAT) the NFS client sends as OPEN alone.
_ABSORB_S = 0.002

# namespace changes: the RPC each sends
_NAMESPACE = {
    "create": "OPEN(create)",
    "mknod": "CREATE",
    "mkdir": "CREATE",
    "symlink": "CREATE",
    "link": "LINK",
    "unlink": "REMOVE",
    "rmdir": "REMOVE",
    "rename": "RENAME",
}
_K = TypeVar("_K")
_V = TypeVar("_V")
_MAKES = frozenset(("create", "mknod", "mkdir", "symlink", "link"))


class NfsClient:
    """One Linux NFS client of the file system `model` emulates."""

    def __init__(self, model: Model):
        self.model = model
        self._attrs: dict[int, tuple[float, float]] = {}  # inode: (fetched at, trusted for)
        self._names: dict[tuple[int, str], None] = {}  # dentries, positive or negative
        self._listed: dict[int, None] = {}  # directories whose listing is cached
        self._charged: dict[tuple[int, int], bool] = {}  # (directory, open handle): its pass sends RPCs
        self._asked: dict[tuple[int, str, int], None] = {}  # ACCESS and READLINK answers, kept with the attributes
        self._uid = 0  # the caller of the operation being admitted (ACCESS answers are kept per user)
        self._unstable: dict[int, int] = {}  # file: bytes written back since its last commit
        # file: (first at, bytes, least offset) of the O_SYNC data its flush sends
        self._staged: dict[int, tuple[float, int, int]] = {}
        self._lookups: dict[tuple[int, str], tuple[float, float]] = {}  # name: (LOOKUP sent at, its time)
        # Read by trusted() alone (what admit() decides never depends on them): name: when the
        # RPC whose reply last brought its object's attributes completed (a LOOKUP, OPEN(create),
        # CREATE, LINK: each compounds a GETATTR); directory: when its cached listing's
        # READDIRPLUS pass began (its replies brought every entry's attributes)
        self._brought: dict[tuple[int, str], float] = {}
        self._listed_at: dict[int, float] = {}

    def admit(self, call: Call, now: float) -> Admission:
        """What `call` (emulator/call.py says what each field means), made at `now`, costs
        the caller.  The answer's `rpcs` names what was sent."""
        self._uid = call.uid
        if call.kernel_only:  # the times of written data NFS takes from the WRITE replies, a page fill
            return Admission(now, Gate.KERNEL, 0.0, 0.0, 0.0)
        op, file, directory = call.op, call.file, call.directory
        if op == "flush":
            flushed = self._flush_data(now, file) if call.writable else self._none(now)
            if not call.closes:
                return flushed
            return _joined(flushed, self._rpc(_META_READ, "CLOSE", now, file, after=flushed.done_at), now)
        if op == "readdir":
            return self._readdir(now, file, call.handle, call.size, call.offset)
        if call.busy and op == "unlink":
            self._names.pop((directory, call.name), None)  # the name moved to the hidden one (d_move)
            return self._silly(now, directory)
        if op == "release" and directory:
            return self._remove_hidden(now, directory)
        if op == "rename":
            hidden = self._silly(now, call.new_directory or directory) if call.busy else None
            a = self._namespace(
                now, file, directory, call.name, op, after=-math.inf if hidden is None else hidden.done_at
            )
            if call.new_directory:
                _room(self._names)[(call.new_directory, call.new_name)] = None
                self._dir_changed(call.new_directory, a.done_at)
            return a if hidden is None else _joined(hidden, a, now)
        try:
            serve = _SERVE[op]
        except KeyError:
            raise ValueError(f"unknown VFS operation {op!r}") from None
        return serve(self, now, call)

    # ---- what the kernel may keep -------------------------------------------------

    def trusted(
        self, inode: int, is_dir: bool, now: float, directory: int = 0, name: str = "", handle: int | None = None
    ) -> tuple[float, float]:
        """How long from `now` this client goes on trusting, with no RPC, what a reply just
        handed the caller: (the name `name` in `directory`, the attributes of `inode`), 0
        where it would ask the server at its next use.  The kernel's FUSE path, told these
        as its entry and attribute timeouts, then asks the mount again only when this
        client would send an RPC: never for a stat it answers from its cache (whose trust
        grows to acregmax while the file is unchanged, where a fixed timeout would expire
        at acregmin).
        Attributes it holds none of, or stale, that came with the name (the RPC that last
        found or made it, `_brought`; with `handle`, a listing pass, the READDIRPLUS replies
        that filled the listing, nfs_prime_dcache) are trusted for the least period from
        then.  The client itself does not count them as fetched: its decisions stay those
        of the requests alone, which `fusetrace simulate` replays from a trace (the trace
        does not say what each listing brought), and its first GETATTR of them starts
        their period.
        Inode 0: an absent name (a negative dentry, trusted as a name is)."""
        key = (directory, name)
        left = self._trust_left(inode, now)
        if inode and not left and directory:  # inode 0: the name is absent
            at = self._brought.get(key, -math.inf)
            if handle is not None:
                at = max(at, self._listed_at.get(directory, -math.inf))
            p = self.model.params
            left = max(0.0, at + (p.nfs_acdirmin_s if is_dir else p.nfs_acregmin_s) - now)
        # a listing's names are trusted as looked-up ones are (nfs_prime_dcache makes their dentries)
        named = self._trust_left(directory, now) if key in self._names or handle is not None else 0.0
        return named, left

    def _trust_left(self, inode: int, now: float) -> float:
        seen = self._attrs.get(inode)
        return 0.0 if seen is None else max(0.0, seen[0] + seen[1] - now)

    # ---- the caches --------------------------------------------------------------

    def _fresh(self, inode: int, now: float) -> bool:
        seen = self._attrs.get(inode)
        return seen is not None and now < seen[0] + seen[1]

    def _fetched(self, inode: int, at: float, is_dir: bool) -> None:
        p = self.model.params
        least, most = (p.nfs_acdirmin_s, p.nfs_acdirmax_s) if is_dir else (p.nfs_acregmin_s, p.nfs_acregmax_s)
        seen = self._attrs.get(inode)
        _room(self._attrs)[inode] = (at, least if seen is None else min(2 * seen[1], most))

    def _changed(self, inode: int) -> None:
        self._attrs.pop(inode, None)

    def _refreshed(self, inode: int, at: float, is_dir: bool) -> None:
        """A change of ours whose reply brings the new attributes: trusted afresh, from
        the least period (changed attributes do not earn a longer one)."""
        self._changed(inode)
        self._fetched(inode, at, is_dir)

    def _dir_changed(self, directory: int, at: float) -> None:
        """A namespace change of ours: the reply brings the directory's new attributes,
        and its cached listing is stale.  The walk to the change searched the directory:
        its ACCESS went with the lookup FUSE sends first, or was cached (_searched)."""
        self._refreshed(directory, at, True)
        self._listed.pop(directory, None)
        _room(self._asked)[self._answer(directory, "access")] = None

    def _answer(self, file: int, op: str) -> tuple[int, str, int]:
        """The key of an answer the client keeps: ACCESS per user, READLINK for all."""
        return file, op, self._uid if op == "access" else 0

    # ---- RPCs --------------------------------------------------------------------

    def _rpc(
        self,
        cls: OpClass,
        rpc: str,
        now: float,
        file: int = 0,
        directory: int = 0,
        nbytes: int = 0,
        write_mode: str = "buffered",
        after: float = -math.inf,
        offset: int = 0,
    ) -> Admission:
        a = self.model.admit(Op(cls, nbytes, file, directory, write_mode, offset, rpc), now, after)
        a.rpcs = rpc  # the model's answer is made for this call alone: named, not copied
        return a

    @staticmethod
    def _none(now: float, rpcs: str = "") -> Admission:
        return Admission(now, Gate.CACHE, 0.0, 0.0, 0.0, rpcs)

    def _getattr(self, now: float, inode: int, is_dir: bool, after: float = -math.inf) -> Admission:
        a = self._rpc(_META_READ, "GETATTR", now, inode, after=after)
        self._fetched(inode, a.done_at, is_dir)
        return a

    # ---- the operations ------------------------------------------------------------

    def _searched(self, now: float, directory: int) -> Admission | None:
        """The ACCESS a path walk's first search of `directory` sends (nfs_permission: the
        kernel checks the caller may search it; the FUSE mount's default_permissions
        checks mode bits itself and sends nothing).  The answer is cached: an expired
        directory is revalidated by GETATTR (its lookup's), which keeps it.  ACCESS
        brings the attributes too.  None when nothing is sent.  The answer is the
        caller's user's: another user's first search asks again."""
        key = self._answer(directory, "access")
        if key in self._asked:
            return None
        a = self._rpc(_META_READ, "ACCESS", now, directory)
        _room(self._asked)[key] = None
        self._fetched(directory, a.done_at, True)
        return a

    def _lookup(self, now: float, c: Call) -> Admission:
        directory = c.directory
        searched = self._searched(now, directory)
        then = now if searched is None else searched.done_at  # what follows waits for the ACCESS
        key = (directory, c.name)
        if key in self._names:
            if self._fresh(directory, then):
                return self._none(now) if searched is None else searched
            found = self._getattr(now, directory, True, after=then)
        else:
            found = self._rpc(_META_READ, "LOOKUP", now, directory, after=then)
            _room(self._names)[key] = None
            _room(self._brought)[key] = found.done_at
            _room(self._lookups, 4096)[key] = (then, found.done_at - then)  # only the last moments' (_ABSORB_S)
        return found if searched is None else _joined(searched, found, now)

    def _getattr_op(self, now: float, c: Call) -> Admission:
        file = c.file
        drained = self.model.drained_at(file)
        if drained > now:  # nfs_getattr flushes first; the WRITEs' replies bring the attributes
            if self._unstable.get(file, 0) <= self.model.params.nfs_io_size:
                # its flush (FLUSH_COND_STABLE) sent what fits one WRITE FILE_SYNC: no COMMIT owed
                self._unstable.pop(file, None)
                return _until_drained(now, drained, "WRITE(FILE_SYNC)")
            return _until_drained(now, drained, "")
        if self._fresh(file, now):
            return self._none(now)
        return self._getattr(now, file, c.is_dir)

    def _setattr(self, now: float, c: Call) -> Admission:
        # nfs_setattr syncs the file first (its WRITEs and a COMMIT); SETATTR brings attributes
        flushed = self._flush_data(now, c.file)
        a = self._rpc(_META_WRITE, "SETATTR", now, c.file, after=flushed.done_at)
        self._refreshed(c.file, a.done_at, c.is_dir)
        return _joined(flushed, a, now)

    def _open(self, now: float, c: Call) -> Admission:
        """OPEN; `size`: the bytes an O_TRUNC of the file cuts, which NFS cuts with a SETATTR
        after the OPEN (FUSE hands the truncation to the server inside its open)."""
        file = c.file
        a = self._rpc(_META_READ, "OPEN", now, file)
        self._fetched(file, a.done_at, False)
        _room(self._asked)[self._answer(file, "access")] = None  # OPEN asks ACCESS in the same compound
        if c.size <= 0:  # nothing to cut (nfs_setattr sends nothing for an unchanged size)
            return a
        cut = self._rpc(_META_WRITE, "SETATTR", now, file, after=a.done_at)
        self._refreshed(file, cut.done_at, False)
        return _joined(a, cut, now)

    def _namespace(
        self, now: float, file: int, directory: int, name: str, op: str, after: float = -math.inf
    ) -> Admission:
        a = self._rpc(_META_WRITE, _NAMESPACE[op], now, file, directory, after=after)
        key = (directory, name)
        _room(self._names)[key] = None
        self._dir_changed(directory, a.done_at)
        if op == "link":
            self._changed(file)
        if op in _MAKES:
            _room(self._brought)[key] = a.done_at
        looked = self._lookups.pop(key, None)
        if op in _MAKES and looked is not None and now - (looked[0] + looked[1]) <= _ABSORB_S:
            return _earlier(a, now, min(now - looked[0], looked[1]))
        return a

    def _silly(self, now: float, directory: int) -> Admission:
        """nfs_sillyrename: a name of a file still open here is not removed but renamed to a
        hidden one (.nfsXXXX), after a LOOKUP makes sure that name is free; the caller waits
        for both.  (The server keeps the file for this client's open; the hidden name stays
        visible in the directory until the last close.  A server that sets
        OPEN4_RESULT_PRESERVE_UNLINKED spares an unlink this in Linux 6.0 on; EFS is taken
        not to.)"""
        free = self._rpc(_META_READ, "LOOKUP", now, directory)
        moved = self._rpc(_META_WRITE, "RENAME", now, 0, directory, after=free.done_at)
        self._dir_changed(directory, moved.done_at)
        return _joined(free, moved, now)

    def _remove_hidden(self, now: float, directory: int) -> Admission:
        """The last close of a file renamed by _silly: its hidden name's REMOVE, sent in
        the background (nfs_complete_unlink); it loads the server, nobody waits for it."""
        a = self._rpc(_META_WRITE, "REMOVE", now, 0, directory)
        self._dir_changed(directory, a.done_at)
        return self._none(now, a.rpcs)

    def _read(self, now: float, c: Call) -> Admission:
        return self._rpc(_READ, "READ", now, c.file, nbytes=c.size)

    def _write(self, now: float, c: Call) -> Admission:
        file, size, write_mode = c.file, c.size, c.write_mode
        self._refreshed(file, now, False)  # the WRITE replies bring the attributes
        if write_mode == "direct":
            return self._rpc(_WRITE, "WRITE", now, file, nbytes=size, write_mode="direct", offset=c.offset)
        if write_mode == "sync":  # into the page cache; the flush that follows sends it
            first, staged, offset = self._staged.get(file, (now, 0, c.offset))
            self._staged[file] = (first, staged + size, min(offset, c.offset))
            cost = self.model.params.buffered_write_ms / 1000
            return Admission(now + cost, Gate.BUFFERED, cost, 0.0, 0.0, "")
        self._unstable[file] = self._unstable.get(file, 0) + size
        return self._rpc(_WRITE, "WRITE(write-back)", now, file, nbytes=size, offset=c.offset)

    def _fsync(self, now: float, c: Call) -> Admission:
        """fsync, fdatasync, msync, and the flush the kernel makes after an O_SYNC write."""
        return self._flush_data(now, c.file)

    def _flush_data(self, now: float, file: int) -> Admission:
        """Send what was written since the last commit and wait for it: nothing, one WRITE
        sent FILE_SYNC, or the WRITEs and one COMMIT (FLUSH_COND_STABLE)."""
        written = self._unstable.pop(file, 0)
        staged = self._staged.pop(file, None)
        if not written and staged is None:
            return self._none(now)
        wsize = int(self.model.params.nfs_io_size)
        last: Admission | None = None  # the last of the O_SYNC data's WRITEs to complete
        if staged is not None:  # O_SYNC data: its WRITEs all go now, in parallel
            _, nbytes, offset = staged
            written += nbytes
            for at in range(0, nbytes, wsize):
                w = self._rpc(
                    _WRITE, "WRITE", now, file, nbytes=min(wsize, nbytes - at), write_mode="direct", offset=offset + at
                )
                if last is None or w.done_at > last.done_at:
                    last = w
        drained = self.model.drained_at(file)
        if written > wsize:
            a = self._rpc(_COMMIT, "COMMIT", now, file, after=last.done_at if last else -math.inf)
            if staged is not None:
                a = replace(a, rpcs=f"WRITE x{-(-staged[1] // wsize)},COMMIT")
        elif last is not None:  # one WRITE, sent FILE_SYNC: no COMMIT
            a = replace(last, rpcs="WRITE(FILE_SYNC)")
        elif drained > now:  # the buffered data's one WRITE, still on its way: FILE_SYNC
            a = _until_drained(now, drained, "WRITE(FILE_SYNC)")
        else:  # written back (UNSTABLE) already, while Linux would have held it dirty: a COMMIT
            a = self._rpc(_COMMIT, "COMMIT", now, file)
        # The kernel's FUSE path hands an O_SYNC write over in pieces, one after another; the
        # NFS client would have started its WRITEs when the write began.
        return a if staged is None else _earlier(a, now, now - staged[0])

    def _opendir(self, now: float, c: Call) -> Admission:
        file = c.file
        searched = self._searched(now, file)  # the open's permission check (MAY_READ), as a search's
        if searched is None:
            return self._getattr(now, file, True)  # close-to-open holds for directories too
        return _joined(searched, self._getattr(now, file, True, after=searched.done_at), now)

    def _readdir(self, now: float, file: int, handle: int, size: int, offset: int) -> Admission:
        pass_ = (file, handle)
        if offset == 0:
            # A new pass: the cached listing serves it while the directory is unchanged and
            # its attributes trusted.  Once they are stale, Linux revalidates the directory
            # and its entries' attributes (a GETATTR each, or a READDIRPLUS refill after a
            # few misses), which the mount cannot tell apart: it lists again, a READDIRPLUS
            # per reply, which gives the kernel's FUSE path the entries' attributes too.
            cached = file in self._listed and self._fresh(file, now)
            _room(self._charged)[pass_] = not cached
            if cached:
                return self._none(now)
            _room(self._listed)[file] = None
            _room(self._listed_at)[file] = now
            self._fetched(file, now, True)
        if not self._charged.get(pass_, True):
            return self._none(now)
        first = self.model.params.nfs_readdir_entries
        rpcs = _replies(offset + size, first) - _replies(offset, first)  # READDIRPLUS replies it reaches into
        if rpcs <= 0:
            return self._none(now)
        a = self._rpc(_META_READ, "READDIRPLUS", now, file)
        latency = a.latency
        for _ in range(rpcs - 1):  # one after another, as the kernel fills its listing
            a = self._rpc(_META_READ, "READDIRPLUS", now, file, after=a.done_at)
            latency += a.latency
        total = a.done_at - now
        return Admission(
            a.done_at,
            a.gate,
            min(latency, total),
            0.0,
            max(total - latency, 0.0),
            "READDIRPLUS" if rpcs == 1 else f"READDIRPLUS x{rpcs}",
        )

    def _statfs(self, now: float, c: Call) -> Admission:
        return self._rpc(_META_READ, "STATFS", now, c.file)

    def _asked_once(self, now: float, file: int, op: str, rpc: str, is_dir: bool) -> Admission:
        """ACCESS and READLINK: answered from the client's cache while the file's attributes are trusted."""
        key = self._answer(file, op)
        if key in self._asked and self._fresh(file, now):
            return self._none(now)
        a = self._rpc(_META_READ, rpc, now, file)
        _room(self._asked)[key] = None
        self._fetched(file, a.done_at, is_dir)
        return a

    def _xattr(self, now: float, file: int, op: str) -> Admission:
        """NFS 4.1 has no extended attributes: the client answers alone (the profile's `xattrs`)."""
        if not self.model.params.xattrs:
            return self._none(now)
        cls = _META_WRITE if op in ("setxattr", "removexattr") else _META_READ
        return self._rpc(cls, op.upper(), now, file)

    def _nothing(self, now: float, c: Call) -> Admission:
        return self._none(now)


def _room(cache: dict[_K, _V], cap: int = _CAP) -> dict[_K, _V]:
    if len(cache) >= cap:
        cache.clear()
    return cache


def _replies(entries: int, first: int) -> int:
    """READDIRPLUS replies that list `entries` entries: the first holds `first`, each
    next one twice the one before, up to 16 times the first (64 KiB growing to 1 MiB)."""
    replies, listed, size = 0, 0, first
    while listed < entries and size < 16 * first:
        replies, listed, size = replies + 1, listed + size, 2 * size
    return replies + max(0, -(-(entries - listed) // (16 * first)))


def _until_drained(now: float, drained: float, rpcs: str) -> Admission:
    """Waiting, from `now`, for a file's written data to reach the server at `drained`."""
    return Admission(drained, Gate.WRITEBACK, 0.0, 0.0, drained - now, rpcs)


def _joined(before: Admission, after: Admission, now: float) -> Admission:
    """`before` then `after`, one waiting for the other: the caller's account of both."""
    total = after.done_at - now
    latency, transfer = before.latency + after.latency, before.transfer + after.transfer
    rpcs = ",".join(r for r in (before.rpcs, after.rpcs) if r)
    return Admission(
        after.done_at,
        after.gate if after.done_at > before.done_at else before.gate,
        min(latency, total),
        min(transfer, total),
        max(total - latency - transfer, 0.0),
        rpcs,
    )


def _earlier(a: Admission, now: float, by: float) -> Admission:
    """`a` completing `by` seconds sooner (not before now): the time its caller already spent."""
    done = max(now, a.done_at - by)
    total = done - now
    transfer = min(a.transfer, total)
    latency = min(a.latency, total - transfer)
    return Admission(done, a.gate, latency, transfer, max(total - latency - transfer, 0.0), a.rpcs)


# how _SERVE serves an operation
_Serve = Callable[[NfsClient, float, Call], Admission]


def _namespace_op(op: str) -> _Serve:
    def serve(client: NfsClient, now: float, c: Call) -> Admission:
        return client._namespace(now, c.file, c.directory, c.name, op)

    return serve


def _asked_op(op: str, rpc: str) -> _Serve:
    def serve(client: NfsClient, now: float, c: Call) -> Admission:
        return client._asked_once(now, c.file, op, rpc, c.is_dir)

    return serve


def _xattr_op(op: str) -> _Serve:
    def serve(client: NfsClient, now: float, c: Call) -> Admission:
        return client._xattr(now, c.file, op)

    return serve


_SERVE: dict[str, _Serve] = {
    "lookup": NfsClient._lookup,
    "getattr": NfsClient._getattr_op,
    "setattr": NfsClient._setattr,
    "open": NfsClient._open,
    "read": NfsClient._read,
    "write": NfsClient._write,
    "fsync": NfsClient._fsync,
    "release": NfsClient._nothing,  # its CLOSE was charged at the flush close(2) waited for
    "opendir": NfsClient._opendir,
    "releasedir": NfsClient._nothing,
    "fsyncdir": NfsClient._nothing,  # namespace changes are synchronous on NFS: nothing to flush
    "forget": NfsClient._nothing,
    "statfs": NfsClient._statfs,
    "access": _asked_op("access", "ACCESS"),
    "readlink": _asked_op("readlink", "READLINK"),
    **{op: _namespace_op(op) for op in _NAMESPACE if op != "rename"},
    **{op: _xattr_op(op) for op in ("getxattr", "setxattr", "listxattr", "removexattr")},
}
VFS_OPS = frozenset((*_SERVE, "flush", "readdir", "rename"))  # these three are served in admit()
