"""The requests the server holds long (a stall, the emulation's deadline): listed, and let go when killed.

A caller waiting in one holds no descriptor in the mount yet keeps it busy (its path
walk holds the mount): `fusetrace umount` and `stats` name it from this list
(held_long).  A held request whose caller is being killed is let go at once
(fusetrace/server/kills.py), to be answered EINTR by the pipeline.
"""

import contextlib
from collections.abc import Iterator
from typing import NamedTuple, TypedDict

import pyfuse3
import trio

from .callers import Caller, Callers
from .kills import Kills

# a reply held this long by the model is listed (holding): a stall event, a cliff, a long
# queue; a fault rule's stall is listed however long
LONG_HOLD_NS = 1_000_000_000


class Held(NamedTuple):
    """A request held long: the caller's process and its name, the operation, its path,
    what holds it and since when (monotonic ns)."""

    pid: int
    name: str
    op: str
    path: str
    why: str
    since: int
    until: int  # when it goes on at the latest
    rule: bool  # held by a fault rule's stall (fault clear lets it go)


class HeldReport(TypedDict):
    """One request held long, as `fusetrace stats` and `umount` show it."""

    pid: int
    name: str
    op: str
    path: str
    why: str
    for_s: float
    left_s: float
    rule: bool


class Killed(Exception):
    """A hold let go because its caller is being killed: `held`, the time it was held
    after its real completion."""

    def __init__(self, held: int) -> None:
        super().__init__(held)
        self.held = held


class Holds:
    """The requests held long, and the watch on their callers (`kills`: main.py runs it)."""

    def __init__(self, callers: Callers) -> None:
        self.callers = callers
        self.holding: dict[object, Held] = {}
        self.kills = Kills()

    @contextlib.contextmanager
    def holding_of(
        self,
        op: str,
        path: str,
        who: Caller,
        start: int,
        why: str,
        until: int,
        rule: bool = False,
        killable: bool = False,
    ) -> Iterator[trio.CancelScope | None]:
        """While inside: the request is listed as held long, by `why` (a fault rule's stall
        when `rule`), until `until` at the latest (monotonic ns).  When `killable`, the
        block is left early if the caller is being killed: the scope given, its
        `cancelled_caught` true then."""
        token = object()
        pid, name, *_ = self.callers.who(who.pid, start)
        self.holding[token] = Held(pid, name, op, path, why, start, until, rule)
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

    def held_long(self, now: int, most: int = 20) -> list[HeldReport]:
        """The requests held long, the longest held first, up to `most`: who waits, in
        what, on what, for how many seconds so far and at most how many more (a fault rule
        cleared lets its own go at once)."""
        held = sorted(self.holding.values(), key=lambda h: h.since)[:most]
        return [
            {
                "pid": h.pid,
                "name": h.name,
                "op": h.op,
                "path": h.path,
                "why": h.why,
                "for_s": round((now - h.since) / 1e9, 1),
                "left_s": round(max(0, h.until - now) / 1e9, 1),
                "rule": h.rule,
            }
            for h in held
        ]
