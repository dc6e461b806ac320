"""The fault injector's state: the rules in force, how often each matched and fired, the
outages in progress, the files made stale and the write-back errors waiting for an fsync
or close.  Pure: the server asks it what to do with each request (Injector.check) and
the server's fault stage does it (fusetrace/server/faulting.py), with the clock handed in."""

import dataclasses
import errno as E
import hashlib
import logging
import random
from collections.abc import Callable
from typing import Any, NamedTuple, TypeAlias, TypedDict

from ..errors import BadValue
from ..request import Kind
from .durations import say_s
from .rules import CREATES, Rule, RuleTable, errno_name, parse_rule

log = logging.getLogger(__name__)

LOGGED_FIRINGS = 20  # firings of one rule logged one by one; the rest are counted
_SEEN_LIMIT = 1 << 18  # (op, path) pairs a probability rule remembers; beyond, it starts over


class Firing(NamedTuple):
    """What a rule does to one request.  `effect`: errno (fail with `errno`, not run below),
    stall (wait until `until_ns`, or fail with `errno` at `fail_ns` if that comes first),
    delay (wait until `until_ns`, then run: this request alone),
    stale (fail with ESTALE), write_error (a buffered write runs, its error waits for fsync
    and close; any other write fails at once with `errno`), short (carry at most `short`
    bytes)."""

    rule: str
    effect: str
    errno: int = 0
    until_ns: int = 0
    fail_ns: int = 0
    short: int = 0


# the caller's (process id, name), then whatever the asker keeps with them (the server: when)
Who: TypeAlias = tuple[int, str, *tuple[Any, ...]]


class FaultCounters(TypedDict):
    """The injector's part of the server's stats (and `fusetrace fault list`)."""

    fired: int
    in_force: int
    stale_files: int
    pending_write_errors: int


class _State:
    __slots__ = ("added_ns", "fired", "held", "logged", "matched", "outage_ns", "rule", "seen", "used")

    def __init__(self, rule: Rule, now_ns: int):
        self.rule, self.added_ns = rule, now_ns
        self.matched = self.fired = self.held = self.logged = 0
        self.outage_ns = 0  # stall: when the outage in progress ends
        self.used = 0  # full: bytes written so far
        self.seen: dict[tuple[str, str], int] = {}  # probability: matches so far per (op, path)


class Injector:
    """The rules in force and what they left behind.  `write_back`: the mount has FUSE's
    write-back cache, whose kernel takes a short reply to its write-back as done and
    drops the rest (an NFS client sends the rest again), and a short read for a hole, of
    zeros it may then write back (fs/fuse: fuse_short_read): there no rule cuts a read or
    a write short, and a full file system fails the write that crosses instead."""

    def __init__(self, write_back: bool = False) -> None:
        self.write_back = write_back
        self.rules: list[_State] = []  # empty: no request is checked at all
        self.stale: dict[int, str] = {}  # node id: the rule that made its file stale
        self.pending: dict[int, tuple[int, str, set[int]]] = {}  # node id: (errno, rule, handles yet to see it)
        self.needs_process = False  # whether any rule matches on pid or process name
        self.active = False  # any of the three above: the handlers ask nothing while it is not
        self.fired = 0
        self._next = 1
        self._takers: dict[tuple[str, Kind], list[_State]] = {}  # per (op, kind): the rules that take it

    # ---- control ------------------------------------------------------------------

    def add(self, raw: dict[str, Any], now_ns: int, where: str = "fault add", *, trial: bool = False) -> RuleTable:
        """Check and add a rule (a table of the faults file, a control request's "rule");
        its window counts from `now_ns`.  Returns it normalised.  `trial`: a check of a
        faults file before mounting, not logged."""
        rule = parse_rule(raw, where, f"r{self._next}")
        if self.write_back and rule.effect == "short":
            raise BadValue(
                f"{where}: short: the write-back cache's kernel would drop the rest of a short "
                f"write-back and read zeros past a short read (mount with --no-writeback-cache to "
                f"cut reads and writes short)"
            )
        if any(s.rule.id == rule.id for s in self.rules):
            if trial:  # a faults file, checked before mounting: the other rule is in the file
                raise BadValue(f"{where}: id {rule.id!r}: an earlier rule of the file has that id")
            raise BadValue(f"{where}: id {rule.id!r}: a rule with that id is in force (fault clear {rule.id})")
        if rule.drawn and rule.seed is None:
            rule = dataclasses.replace(rule, seed=random.SystemRandom().randrange(1 << 31))  # listed: rerun with it
        self._next += 1
        self.rules.append(_State(rule, now_ns))
        self._changed()
        if not trial:
            log.info("fault rule %s added: %s", rule.id, rule.summary())
        return rule.describe()

    def clear(self, ids: list[str] | None = None) -> list[str]:
        """Remove the rules `ids` (all when None) and what they left behind: stale files,
        write-back errors not yet reported; an outage they hold ends (the caller wakes
        the waiting requests)."""
        known = [s.rule.id for s in self.rules]
        if ids is not None:
            missing = [i for i in ids if i not in known]
            if missing:
                raise BadValue(f"fault clear {missing[0]}: no such rule (in force: {', '.join(known) or 'none'})")
        gone = set(known if ids is None else ids)
        self.rules = [s for s in self.rules if s.rule.id not in gone]
        self.stale = {node: rid for node, rid in self.stale.items() if rid not in gone}
        self.pending = {node: p for node, p in self.pending.items() if p[1] not in gone}
        self._changed()
        for rid in sorted(gone):
            log.info("fault rule %s cleared", rid)
        return [i for i in known if i in gone]

    def _changed(self) -> None:
        self._takers.clear()
        self.needs_process = any(s.rule.needs_process for s in self.rules)
        self.active = bool(self.rules or self.stale or self.pending)

    def in_force(self, rid: str) -> bool:
        return any(s.rule.id == rid for s in self.rules)

    def listing(self) -> list[dict[str, Any]]:
        """Every rule, normalised, with how often it matched, fired and held a request."""
        return [
            {**s.rule.describe(), "summary": s.rule.summary(), "matched": s.matched, "fired": s.fired, "held": s.held}
            for s in self.rules
        ]

    def counters(self) -> FaultCounters:
        return {
            "fired": self.fired,
            "in_force": len(self.rules),
            "stale_files": len(self.stale),
            "pending_write_errors": len(self.pending),
        }

    # ---- requests -----------------------------------------------------------------

    def check(
        self, op: str, kind: Kind, file: int, directory: int, path: str, size: int, who: Callable[[], Who], now_ns: int
    ) -> Firing | None:
        """What the rules do to this request, if anything: the first rule that fires (or
        whose outage holds it) wins.  `who()` gives the caller's (process id, name), asked
        only when a rule matches on them."""
        process: Who | None = None
        takers = self._takers.get((op, kind))
        if takers is None:  # worked out once per kind of request while the rules stay the same
            takers = self._takers[(op, kind)] = [s for s in self.rules if s.rule.takes(op, kind)]
        for s in takers:
            rule = s.rule
            if not rule.matches(path):
                continue
            if rule.needs_process:
                process = process or who()
                if (rule.pids and process[0] not in rule.pids) or (rule.comms and process[1] not in rule.comms):
                    continue
            s.matched += 1
            if s.outage_ns > now_ns:
                s.held += 1
                return Firing(rule.id, "stall", rule.errno, s.outage_ns, self._soft_fail(rule, now_ns))
            since_s = (now_ns - s.added_ns) / 1e9
            if not rule.after_s <= since_s <= rule.until_s:
                continue
            firing = self._fire(s, op, file, directory, path, size, now_ns)
            if firing is not None:
                s.fired += 1
                self.fired += 1
                self._log(s, op, path, firing, process, now_ns)
                return firing
        return None

    def _fire(self, s: _State, op: str, file: int, directory: int, path: str, size: int, now_ns: int) -> Firing | None:
        rule = s.rule
        if rule.effect == "full":
            return self._full(s, op, size, self.write_back)
        if rule.effect == "stale" and (not file or directory):
            return None  # stale takes the object an operation is on, never an entry being named
        if rule.every is not None and s.matched % rule.every:
            return None
        if rule.count is not None and s.fired >= rule.count:
            return None
        n = self._nth(s, op, path) if rule.drawn else 0
        if rule.probability is not None and _hash(rule, op, path, n, "") / 2**64 >= rule.probability:
            return None
        if rule.effect == "delay":
            assert rule.delay is not None
            u = point(_hash(rule, op, path, n, "\0delay")) if rule.delay.drawn else 0.5
            return Firing(rule.id, "delay", until_ns=now_ns + int(rule.delay.at(u) * 1e9))
        if rule.effect == "stall":
            s.outage_ns = now_ns + int(rule.stall_s * 1e9)
            return Firing(rule.id, "stall", rule.errno, s.outage_ns, self._soft_fail(rule, now_ns))
        if rule.effect == "stale":
            self.stale[file] = rule.id
            return Firing(rule.id, "stale", E.ESTALE)
        return Firing(rule.id, rule.effect, rule.errno, short=rule.short_bytes)

    @staticmethod
    def _full(s: _State, op: str, size: int, write_back: bool) -> Firing | None:
        """A file system that fills up: writes go through while they fit, the one that
        crosses the size is cut short (with `write_back`, fails), later ones (and
        creates) fail."""
        rule = s.rule
        room = rule.full_bytes - s.used
        if op == "write":
            if size <= room:
                s.used += size
                return None
            s.used = rule.full_bytes
            if room > 0 and not write_back:
                return Firing(rule.id, "short", short=room)
            return Firing(rule.id, "errno", rule.errno)
        if op in CREATES and room <= 0:
            return Firing(rule.id, "errno", rule.errno)
        return None

    @staticmethod
    def _soft_fail(rule: Rule, now_ns: int) -> int:
        return now_ns + int(rule.soft_timeout_s() * 1e9) if rule.soft else 0

    @staticmethod
    def _nth(s: _State, op: str, path: str) -> int:
        """How many matches of this op and path came before (those a draw was made for)."""
        if len(s.seen) >= _SEEN_LIMIT:
            s.seen.clear()
        n = s.seen.get((op, path), 0)
        s.seen[(op, path)] = n + 1
        return n

    def _log(self, s: _State, op: str, path: str, firing: Firing, process: Who | None, now_ns: int) -> None:
        s.logged += 1
        if s.logged > LOGGED_FIRINGS:
            return
        who = f" by {process[1] or '?'!r} ({process[0]})" if process else ""  # names others chose: %r
        what = firing.effect if not firing.errno else f"{firing.effect} {errno_name(firing.errno)}"
        if firing.effect == "delay":  # a drawn one: which
            what = f"delay {say_s((firing.until_ns - now_ns) / 1e9)}"
        log.info(
            "fault %s fired on %s %r%s: %s%s",
            s.rule.id,
            op,
            path,
            who,
            what,
            f" (further firings of {s.rule.id} are counted, not logged)" if s.logged == LOGGED_FIRINGS else "",
        )

    # ---- state the firings leave --------------------------------------------------

    def stale_rule(self, file: int, directory: int) -> str | None:
        """The rule that made the object of a request (or the directory it names an entry
        in) stale, if one did."""
        return self.stale.get(file) or (self.stale.get(directory) if directory else None)

    def write_failed(self, node: int, rule: str, errno: int, handles: set[int]) -> None:
        """A buffered write's write-back failed: every handle open on the file now sees
        `errno` once, at its next fsync or close."""
        self.pending[node] = (errno, rule, set(handles))
        self.active = True

    def reported(self, node: int, fh: int) -> tuple[int, str] | None:
        """The write-back error handle `fh` has yet to see, if any (seen from now on)."""
        waiting = self.pending.get(node)
        if waiting is None or fh not in waiting[2]:
            return None
        waiting[2].discard(fh)
        if not waiting[2]:
            del self.pending[node]
            self._changed()
        return waiting[0], waiting[1]


def _hash(rule: Rule, op: str, path: str, n: int, salt: str) -> int:
    """64 bits hashed from (seed, rule, op, path, how many matches of that op and path came
    before): whether a probability rule fires (salt "") and a drawn delay (its own salt:
    independent of the first) are reproducible for the same workload, whatever other
    files' operations interleave with it."""
    key = f"{rule.seed}\0{rule.id}\0{op}\0{path}\0{n}{salt}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")


def point(h: int) -> float:
    """A 64-bit hash as a point strictly inside (0, 1), where a quantile is defined: its top
    52 bits, centred (h / 2**64 may be 0, and (h + 0.5) / 2**64 rounds to 1.0 near the top)."""
    return ((h >> 12) + 0.5) / 2**52
