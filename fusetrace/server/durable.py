"""What a crash of the client would keep, on a mount armed for it (`--crashable`).

A passthrough write reaches the source at once, so to be able to undo what a crash
would lose, an armed mount saves, before the first write to each 4 KiB page of a file
since the file was last made durable, what that page held then (an undo log, in
memory).  Made durable, as a Linux NFS client makes it, is: an fsync or fdatasync; a
close of a descriptor open for writing (close-to-open: the client writes back and
commits); a write through an O_SYNC, O_DSYNC or O_DIRECT descriptor; a truncation (a
SETATTR, which the client sends after writing back); the last close of the file.  A
crash (`crash`) puts each file written since back as it was made durable, tearing at
page granularity a file whose commit was in flight (each page it wrote kept or lost, by
a seeded draw), and makes every handle then open stale.  Names are not touched: every
namespace call of an NFS client (OPEN with create, MKDIR, REMOVE, RENAME, LINK, SYMLINK,
SETATTR) is on the server when it returns.

An unarmed mount has no Durability and pays nothing; an armed one pays a read of each
page before its first write after a commit, through the writer's own descriptor.
"""

import contextlib
import errno as E
import os
import random
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from .openfiles import Handle

PAGE = 4096


class _Written:
    """One file written since it was last made durable: what its pages held then."""

    __slots__ = ("committing", "durable_size", "lock", "node_id", "pages", "size")

    def __init__(self, node_id: int, size: int) -> None:
        self.node_id = node_id
        self.lock = threading.Lock()  # a write's save and pwrite, a commit, the crash's undo
        self.durable_size = size
        self.size = size  # as the writes and truncations through the mount left it
        self.pages: dict[int, bytes] = {}  # page index: its durable bytes (below durable_size)
        self.committing = 0  # commits (fsync, close, sync writes) under way


@dataclass
class Crashed:
    """What a crash undid."""

    files: int = 0  # files put back as they were made durable
    pages_lost: int = 0  # pages written since, undone
    pages_torn: int = 0  # pages of a commit in flight that reached the server anyway
    bytes_cut: int = 0  # bytes a file lost at its end (written past its durable size)
    handles: int = 0  # open files made stale

    def describe(self) -> dict[str, int]:
        return dict(self.__dict__)


class Durability:
    """The undo log of an armed mount, by node id.  Its methods run in worker threads
    or on the loop; each file's own lock orders a write against a commit and the crash."""

    def __init__(self, seed: int | None = None) -> None:
        self._files: dict[int, _Written] = {}
        self._guard = threading.Lock()  # _files' membership
        self.seed = random.randrange(2**32) if seed is None else seed
        self.crashes: list[dict[str, int]] = []  # each crash: when (wall ns) and what it undid

    def pwrite(self, h: "Handle", buf: bytes, off: int) -> int:
        """pwrite(2) of `buf` at `off` on the open file `h`, the durable bytes of the pages
        it covers saved first.  ESTALE once a crash made the handle stale (a write queued
        in a worker before the crash reaches here after it)."""
        if h.stale:
            raise OSError(E.ESTALE, "stale after a crash")
        w = self._written(h)
        with w.lock:
            if h.stale:
                raise OSError(E.ESTALE, "stale after a crash")
            if buf:
                self._save(w, h.fd, off, len(buf))
            n = os.pwrite(h.fd, buf, off)
            w.size = max(w.size, off + n)
            return n

    def _written(self, h: "Handle") -> _Written:
        w = self._files.get(h.inode.id)
        if w is not None:
            return w
        with self._guard:
            w = self._files.get(h.inode.id)
            if w is None:
                w = self._files[h.inode.id] = _Written(h.inode.id, os.fstat(h.fd).st_size)
            return w

    @staticmethod
    def _save(w: _Written, fd: int, off: int, n: int) -> None:
        """The durable bytes of the pages [off, off + n) covers not saved yet, read through
        the writer's own descriptor (an armed mount opens writers for reading too, as the
        write-back cache does: FileHandlers._backing_flags), no descriptor of the log's own."""
        durable = w.durable_size
        for page in range(off // PAGE, (off + n - 1) // PAGE + 1):
            if page not in w.pages:
                lo = page * PAGE
                w.pages[page] = _pread(fd, min(PAGE, durable - lo), lo) if lo < durable else b""

    def begin(self, node_id: int) -> None:
        """A commit of the file starts (it tears if the client crashes before it ends)."""
        w = self._files.get(node_id)
        if w is not None:
            w.committing += 1

    async def end(self, node_id: int, done: bool) -> None:
        """The commit begun is answered: `done`, everything written to the file so far is
        durable (writes that overlapped it included, as NFS may have sent them with it)."""
        w = self._files.get(node_id)
        if w is not None:
            async with _held(w.lock):
                w.committing = max(0, w.committing - 1)
                if done:
                    w.pages.clear()
                    w.durable_size = w.size

    async def truncated(self, node_id: int, size: int) -> None:
        """A truncation (a SETATTR of the size; an O_TRUNC open) is on the server, and the
        data written before it too (the NFS client writes back first)."""
        w = self._files.get(node_id)
        if w is not None:
            async with _held(w.lock):
                w.pages.clear()
                w.durable_size = w.size = size

    def closed(self, node_id: int) -> None:
        """The file's last handle is closed: its data is on the server."""
        self._files.pop(node_id, None)  # (one dict operation: _guard orders only the making of one)

    def crash(self, stale: dict[int, int]) -> Crashed:
        """Put every file written since it was last made durable back as it was then,
        tearing those with a commit in flight.  Blocking: for a worker thread.  `stale`:
        the descriptor of a handle open on each file (the caller made them stale), which
        every file written since its last close has."""
        with self._guard:
            files, self._files = list(self._files.values()), {}
        draw = random.Random(f"{self.seed}:{len(self.crashes)}")
        at = time.time_ns()
        out = Crashed(handles=len(stale))
        for w in files:
            if w.node_id not in stale or (not w.pages and w.size == w.durable_size):
                continue
            with w.lock:
                # a descriptor of its own for the undo (the handle's may append), held only now
                fd = os.open(f"/proc/self/fd/{stale[w.node_id]}", os.O_WRONLY | os.O_CLOEXEC)
                try:
                    self._undo(w, fd, draw if w.committing else None, out)
                finally:
                    os.close(fd)
            out.files += 1
        self.crashes.append({"at_ns": at, **out.describe()})
        return out

    @staticmethod
    def _undo(w: _Written, fd: int, tear: random.Random | None, out: Crashed) -> None:
        kept = {p for p in sorted(w.pages) if tear is not None and tear.random() < 0.5}
        final = w.durable_size
        for page in kept:  # a page the server got extends the file as its WRITE did
            final = max(final, min((page + 1) * PAGE, w.size))
        for page in sorted(w.pages):
            lo = page * PAGE
            if page in kept or lo >= final:
                continue
            old = w.pages[page]
            end = min(lo + PAGE, final)
            os.pwrite(fd, old + bytes(end - lo - len(old)), lo)  # beyond the durable end: zeros
        os.ftruncate(fd, final)
        os.fsync(fd)
        out.pages_lost += len(w.pages) - len(kept)
        out.pages_torn += len(kept)
        out.bytes_cut += max(0, w.size - final)


def _pread(fd: int, size: int, offset: int) -> bytes:
    """pread(2), through a descriptor opened for reading just for it where `fd` is
    write-only (a source that refused the server's read access to a writer's file)."""
    try:
        return os.pread(fd, size, offset)
    except OSError as exc:
        if exc.errno != E.EBADF:
            raise
    own = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.pread(own, size, offset)
    finally:
        os.close(own)


@contextlib.asynccontextmanager
async def _held(lock: threading.Lock) -> AsyncIterator[None]:
    """`lock`, taken on the loop: at once if free, else from a thread (a write in a worker
    holds it while it saves and writes, which the loop must not wait for)."""
    if not lock.acquire(blocking=False):
        await trio.to_thread.run_sync(lock.acquire)
    try:
        yield
    finally:
        lock.release()


def crash_events(events: list[Any], where: str) -> tuple[list[float], list[tuple[int, Any]]]:
    """A faults file's [[event]] tables split: the seconds after the mount of each crash
    (`at = "30s"`, `crash = true`), and the rest with their numbers (the model's events).
    ValueError naming `where`, the event and the key on a mistake."""
    from ..emulator.events import event_at  # (a mount that does not emulate imports no model)

    crashes, rest = [], []
    for i, raw in enumerate(events, 1):
        if not (isinstance(raw, dict) and "crash" in raw):
            rest.append((i, raw))
            continue
        unknown = sorted(set(raw) - {"at", "crash"})
        if unknown:
            raise ValueError(f"{where}: event {i}: unknown key {unknown[0]!r} (a crash event has at and crash = true)")
        if raw["crash"] is not True:
            raise ValueError(f"{where}: event {i}: crash: write crash = true, got {raw['crash']!r}")
        if "at" not in raw:
            raise ValueError(f'{where}: event {i}: at: missing (when the client crashes, e.g. at = "30s")')
        crashes.append(event_at(raw["at"], f"{where}: event {i}", "the mount"))
    return crashes, rest
