"""The part files of a trace being written, as its writer thread keeps them.

Each part the writer writes is added here; between flushes and at close they are merged
as compact.plan says (fusetrace/trace/compact.py), and kept within the trace's limits
(fusetrace/trace/limits.py): past --trace-max or --trace-max-age the oldest files are
rotated out, or (--trace-full stop) the part that passed the size goes too and nothing
more is written; so too, limits or none, when the disk's free space falls under its floor.
What went is counted for _metadata.json (`counts`).  Everything here runs in the writer
thread, never on the trio loop.
"""

import errno
import logging
import os
import sys
import time

from . import compact
from .limits import Limits

log = logging.getLogger(__name__)

MERGE_ROOM = 16 << 20  # free disk a merge leaves besides its new file (the trace's reserve and more)
# The trace never takes the disk's last space, limits or none: below this much free (a
# twentieth of a small file system) it rotates its oldest files out, or stops, as for a limit.
DISK_FLOOR = 256 << 20
RETRY_S = 60.0  # after a failed merge, the next is tried this much later


class PartFiles:
    """The trace's files, oldest first, and what merging and the limits did to them."""

    def __init__(self, directory: str, dir_fd: int, limits: Limits, start_monotonic_ns: int):
        self.directory = directory  # for the log
        self.dir_fd = dir_fd
        try:
            self.readers: int | None = compact.readers_lock(dir_fd)
        except OSError as exc:  # merges then go ahead whoever reads
            self.readers = None
            log.warning(
                "trace %s: no %s file (%s): a reader of the live trace may meet a merge",
                directory,
                compact.READERS,
                exc,
            )
        self.limits = limits
        self.start_ns = start_monotonic_ns
        self.files: list[compact.Part] = []
        self.full = False  # --trace-full stop, and the limit reached: nothing more is written
        self.merges = 0
        self.rotated = 0  # records in the files rotated out
        self.stopped = 0  # records not kept: the trace reached its limit with --trace-full stop
        self._first: int | None = None  # the first start_ns left, once some records were rotated out
        self._stopped_at: int | None = None
        self._merge_after = 0.0  # monotonic time before which no merge is tried (after a failed one)
        self._low_disk = False  # the disk's floor was reached (warned once)

    def added(self, name: str) -> int:
        """A part just written: kept within the limits.  Returns how many of its records
        were not kept after all (--trace-full stop: it passed the size limit)."""
        self.files.append(compact.describe(name, self.dir_fd))
        lim = self.limits
        now = time.monotonic_ns()
        short = self._short()
        over = sum(p.bytes for p in self.files) > lim.budget() or short > 0
        if lim.full == "stop":
            dropped = 0
            if over:  # the part that passed the limit goes too: what is kept is what fits
                last = self.files.pop()
                compact.remove(self.dir_fd, [last.name])
                dropped = last.rows
            if over or (lim.max_age_ns is not None and now - self.start_ns > lim.max_age_ns):
                self.full = True
                self._stopped_at = now
            self.stopped += dropped
            return dropped
        size = sum(p.bytes for p in self.files)
        rotated = []
        with compact.excluding_readers(self.readers) as alone:
            while self.files:
                first = self.files[0]
                if alone:
                    due = size > lim.budget() or lim.aged(first.max_start, now)
                else:  # a reader keeps what it listed, within the limit itself and the disk's floor
                    due = size > (lim.max_bytes or sys.maxsize)
                if not (due or short > 0):
                    break
                rotated.append(self.files.pop(0))
                size -= first.bytes
                short -= first.bytes
            compact.remove(self.dir_fd, [p.name for p in rotated])
        self.rotated += sum(p.rows for p in rotated)
        if self.rotated and self.files:  # when the trace now starts (all rotated out: from this part on)
            self._first = self.files[0].min_start
        return 0

    def _short(self) -> int:
        """Bytes the disk is short of its floor (DISK_FLOOR, or a twentieth of a smaller
        file system), warned of once; 0 when it has room or cannot say."""
        try:
            st = os.fstatvfs(self.dir_fd)
        except OSError:
            return 0
        floor = min(DISK_FLOOR, st.f_blocks * st.f_frsize // 20)
        short = max(0, floor - st.f_bavail * st.f_frsize)
        if short and not self._low_disk:
            self._low_disk = True
            log.warning(
                "trace %s: under %d MiB free on its disk: its oldest parts are rotated out (--trace-full "
                "stop: recording stops) rather than fill it",
                self.directory,
                floor >> 20,
            )
        return short

    def merge(self, final: bool) -> None:
        """Merge what the plan says, unless a merge failed in the last minute (at close,
        whatever the last did), or a fusetrace reader is reading the trace (compact.READERS)."""
        if not final and time.monotonic() < self._merge_after:
            return
        with compact.excluding_readers(self.readers) as alone:
            if not alone:
                if final:
                    log.warning("trace %s: being read at close: its parts are left unmerged", self.directory)
                return
            while runs := compact.plan(self.files, self.limits.cap_bytes(), self.limits.cap_span_ns(), final):
                if not all(self._merged(run) for run in runs) or final:
                    return

    def _merged(self, run: list[compact.Part]) -> bool:
        """Merge `run` unless the disk has no room for its new file and MERGE_ROOM besides;
        False when it was not merged (its files stay as they are: nothing lost)."""
        try:
            st = os.fstatvfs(self.dir_fd)
            if st.f_bavail * st.f_frsize < sum(p.bytes for p in run) + MERGE_ROOM:
                raise OSError(errno.ENOSPC, "too little free space to merge parts")
            merged = compact.merge(self.dir_fd, run)
        except Exception as exc:
            self._merge_after = time.monotonic() + RETRY_S
            log.warning("trace %s: cannot merge %d parts (kept as they are): %s", self.directory, len(run), exc)
            return False
        i = self.files.index(run[0])
        self.files[i : i + len(run)] = [merged]
        self.merges += 1
        return True

    def close(self) -> None:
        """The trace is finished: its files no longer change, so readers need no lock."""
        if self.readers is not None:
            compact.remove(self.dir_fd, [compact.READERS])
            os.close(self.readers)
            self.readers = None

    def counts(self) -> dict[str, int]:
        """What merging and the limits did, as _metadata.json keeps it (only what happened)."""
        said = {"merges": self.merges, "rotated": self.rotated, "first_start_ns": self._first}
        said.update(stopped=self.stopped, stopped_at_ns=self._stopped_at)
        return {k: v for k, v in said.items() if v}
