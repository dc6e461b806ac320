"""The fault stage of the request pipeline: what the fault rules do to one request.

The rules themselves (fusetrace/faults/) are pure; this stage asks them, waits out a
stall or a delay, and reports the write-back errors they left behind.  The pipeline
(fusetrace/server/pipeline.py) enters it only while rules or what they left are in
force (Injector.active).
"""

import errno as E
import functools
from time import monotonic_ns
from typing import Any

import trio

from ..faults.durations import say_s
from ..faults.injector import Firing, Injector
from ..faults.rules import RuleTable
from ..request import Request, WriteMode
from .callers import Callers
from .openfiles import OpenFiles

CLOSES = frozenset(("release", "releasedir"))  # always run: no rule takes them
_REPORTS = frozenset(("fsync", "flush"))  # where a write-back error reaches the application
NO_FIRING = Firing("", "")


class FaultStage:
    """The fault rules in force, and the event that wakes the requests their stalls hold."""

    def __init__(self, faults: Injector, callers: Callers, files: OpenFiles) -> None:
        self.faults = faults
        self.callers = callers
        self.files = files
        self.changed = trio.Event()  # set when rules are cleared: stalled requests look again
        self.stopping = False

    def firing(self, req: Request, path: str, pid: int, start: int) -> Firing:
        """What the rules do to `req` (NO_FIRING: nothing)."""
        faults = self.faults
        if req.op in CLOSES:
            return NO_FIRING
        rid = faults.stale_rule(req.file, req.directory) if faults.stale else None
        if rid is not None:
            return Firing(rid, "stale", E.ESTALE)
        if faults.rules:
            return (
                faults.check(
                    req.op,
                    req.kind,
                    req.file,
                    req.directory,
                    path,
                    req.size,
                    functools.partial(self.callers.who, pid, start),
                    start,
                )
                or NO_FIRING
            )
        return NO_FIRING

    @staticmethod
    def answered(req: Request, firing: Firing) -> int:
        """The errno the server answers with itself, nothing reaching the source (0: none)."""
        effect = firing.effect
        if effect in ("errno", "stale") or (effect == "write_error" and req.write_mode is not WriteMode.BUFFERED):
            return firing.errno
        return 0

    async def stalled(self, firing: Firing) -> int:
        """Wait out a stall or a delay: until the outage or the delay ends (0), or, on a
        soft mount, until the call times out first (its errno); at once when the rule is
        cleared.  On trio's clock (a millisecond's grain): never before `until_ns`."""
        end, fail = firing.until_ns, firing.fail_ns
        limit = min(end, fail) if fail else end
        while not self.stopping and self.faults.in_force(firing.rule):
            now = monotonic_ns()
            if now >= limit:
                return firing.errno if fail and fail < end else 0
            changed = self.changed
            with trio.move_on_after((limit - now) / 1e9):
                await changed.wait()
        return 0

    def ran(self, req: Request, fh: int, firing: Firing) -> Firing | None:
        """After the call ran on the source without error: a buffered write's write-back
        fails later (NFS), not the write; an fsync or flush reports a write-back error its
        handle has yet to see: the firing returned, which carries its errno."""
        faults = self.faults
        if firing.effect == "write_error":
            faults.write_failed(
                req.file,
                firing.rule,
                firing.errno,
                {h.fd for h in self.files.handles.values() if h.inode.id == req.file},
            )
        elif faults.pending and req.op in _REPORTS:
            late = faults.reported(req.file, fh)
            if late is not None:
                return Firing(late[1], "write_error", late[0])
        return None

    def add(self, raw: dict[str, Any], where: str = "fault add") -> RuleTable:
        return self.faults.add(raw, monotonic_ns(), where)

    def clear(self, ids: list[str] | None = None) -> list[str]:
        """Remove fault rules; requests their stalls hold go on at once."""
        removed = self.faults.clear(ids)
        self.changed.set()
        self.changed = trio.Event()
        return removed

    def stop(self) -> None:
        """The server is stopping: every stalled request goes on now."""
        self.stopping = True
        self.changed.set()


def fault_why(firing: Firing, start: int) -> str:
    """What holds a request a rule stalls or delays, as `fusetrace stats` lists it."""
    if firing.effect == "delay":
        return f"fault rule {firing.rule} (a delay of {say_s((firing.until_ns - start) / 1e9)})"
    return f"fault rule {firing.rule} (a stall)"


def shortened(op: str, args: tuple[Any, ...], most: int) -> tuple[Any, ...]:
    """The arguments of a read (fh, size, offset) or write (fh, buffer, offset) that
    carries at most `most` bytes."""
    fh, what, offset = args
    return (fh, min(what, most), offset) if op == "read" else (fh, what[:most], offset)
