"""The server's descriptors, shared out so that no user can take them all.

Everything the server does takes descriptors from one limit (RLIMIT_NOFILE): the inode
table's O_PATH descriptors, every file and directory a user holds open through the mount,
and the server's own (the trace writer's part files and _metadata.json, the control
socket's connections, /dev/fuse, a listing's or lookup's descriptors in flight).  Left
unshared, one user holding about half the limit in open files (each also pins its inode's
descriptor) took them all: other users' opens failed, then close(2) (FLUSH's dup), then the
trace writer lost records.  So the limit is split (docs/RELIABILITY.md, "Hardening, second
pass: descriptors"):

- a reserve, never handed to the table or to open files: the server's own descriptors and
  those in flight (an eighth of the limit, at least 64, at most 4,096);
- the inode table: half of the rest (InodeTable.max_open; least recently used closed
  first past it);
- open files and directories: the other half, each user (root too) at most half of it;
  an open beyond a user's share, or beyond the budget, answers EMFILE to that user alone.

A held open file pins its inode's descriptor, which the table cannot close: the table
holds at most max(its half, the open files + requests in flight), so table and open files
together stay within the limit less the reserve, plus what is in flight.

All methods but those of Spares run on the trio thread.
"""

import errno
import os
import threading
from typing import TypedDict

RESERVE_MIN = 64
RESERVE_MAX = 4096
_SPARES = 8  # slots kept for FLUSH's duplicate (more flushes at once with no descriptor free: fsync)
_SHORT = (errno.EMFILE, errno.ENFILE)


def reserve_for(limit: int) -> int:
    """The descriptors kept for the server's own use under `limit` (see the module's doc)."""
    return min(max(RESERVE_MIN, limit // 8), RESERVE_MAX)


class Budget:
    """Descriptors of open files and directories, counted per user."""

    def __init__(self, limit: int):
        self.limit = limit
        self.reserve = min(reserve_for(limit), limit // 2)
        usable = limit - self.reserve
        self.table = usable // 2  # the inode table's most (InodeTable.max_open)
        self.files = max(2, usable - self.table)  # open files and directories, all users
        self.share = self.files // 2  # open files and directories, each user
        self.open = 0
        self.by_user: dict[int, int] = {}
        self.refused = 0  # opens answered EMFILE for want of a share or of the budget

    def take(self, uid: int) -> bool:
        """Count one more open file or directory of `uid`; False (nothing counted) when
        that user is at their share or the budget is spent."""
        held = self.by_user.get(uid, 0)
        if held >= self.share or self.open >= self.files:
            self.refused += 1
            return False
        self.by_user[uid] = held + 1
        self.open += 1
        return True

    def give(self, uid: int) -> None:
        """One open file or directory of `uid` closed (or its open failed)."""
        held = self.by_user[uid] - 1
        if held:
            self.by_user[uid] = held
        else:
            del self.by_user[uid]
        self.open -= 1

    def stats(self) -> "BudgetStats":
        """For `fusetrace stats`: the split of the limit and what each user holds."""
        return {
            "limit": self.limit,
            "reserve": self.reserve,
            "table_most": self.table,
            "open": self.open,
            "open_most": self.files,
            "share": self.share,
            "open_by_user": dict(sorted(self.by_user.items())),
            "refused": self.refused,
        }


class Spares:
    """Descriptor slots kept open (on /dev/null) so that FLUSH's close of a duplicate never
    needs a new one.  close(dup(fd)) is what a close(2) by the application does to the file
    below: its file system's flush, which on NFS writes back and reports write-back errors.
    When dup finds the table full, the open file is duplicated onto a kept slot instead
    (dup2 replaces what the slot held without taking another), and that is closed; the slot
    is then opened again.  Used from worker threads as well as the loop."""

    def __init__(self, count: int = _SPARES):
        self._lock = threading.Lock()
        self._count = count
        self._fds: list[int] = []
        self.used = 0  # flushes that found no descriptor free (a kept slot, or fsync, served)
        self.refill()

    def refill(self) -> None:
        """Open slots again up to the count kept, while descriptors are free."""
        with self._lock:
            try:
                while len(self._fds) < self._count:
                    self._fds.append(os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC))
            except OSError as exc:
                if exc.errno not in _SHORT:
                    raise

    def close_dup(self, fd: int) -> None:
        """close(dup(fd)), with a kept slot when no descriptor is free; fsync(fd), which
        reports the same write-back errors, when no slot is kept either (never EMFILE)."""
        try:
            dup = os.dup(fd)
        except OSError as exc:
            if exc.errno not in _SHORT:
                raise
            self._close_kept(fd)
        else:
            os.close(dup)  # its errors are the file's (a lower FUSE's EMFILE too): not retried

    def _close_kept(self, fd: int) -> None:
        """close_dup's way when dup finds no descriptor free."""
        with self._lock:
            slot = self._fds.pop() if self._fds else -1
            self.used += 1
        if slot < 0:
            os.fsync(fd)
            return
        try:
            os.dup2(fd, slot, inheritable=False)  # what the slot held (/dev/null) goes; no descriptor taken
        except BaseException:
            with self._lock:
                self._fds.append(slot)  # still on /dev/null
            raise
        try:
            os.close(slot)
        finally:
            self.refill()

    def close(self) -> None:
        with self._lock:
            for fd in self._fds:
                os.close(fd)
            self._fds.clear()


def in_use() -> int | None:
    """Descriptors the process holds now (for `fusetrace stats`; None if /proc cannot say)."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # less the listing's own
    except OSError:
        return None


class BudgetStats(TypedDict):
    """The descriptor budget, for `fusetrace stats`: the split of the limit and what each user holds."""

    limit: int
    reserve: int
    table_most: int
    open: int
    open_most: int
    share: int
    open_by_user: dict[int, int]
    refused: int


class Descriptors(BudgetStats):
    """The descriptor budget, with what the inode table, the process and FLUSH's spares hold."""

    inode_table: int
    in_use: int | None
    flush_spares_used: int
