"""Fault rules: what a rule matches, when it fires and what it does, read from a TOML
table, a `fusetrace fault add` or a control request, each mistake one line naming
where and the key.  docs/FAULTS.md documents every key."""

import dataclasses
import errno as E
import math
import os
import re
import tomllib
from dataclasses import dataclass
from typing import Any, Required, TypedDict

from ..emulator.simulate import parse_size
from ..errors import BadValue
from ..globs import glob_regex
from ..private import read_regular
from ..request import TRACED_OPERATIONS, Kind
from .durations import Delay, parse_delay, parse_duration, say_s

# Operations a rule may match: every request a handler sends through the shaper but the
# closes of a handle (release, releasedir), which must always run and whose errors the
# kernel drops; close(2)'s own error comes from flush.
OPERATIONS = tuple(op for op in TRACED_OPERATIONS if op not in ("release", "releasedir"))
CLASSES: dict[str, frozenset[Kind]] = {
    "meta_read": frozenset({Kind.META_READ}),
    "meta_write": frozenset({Kind.META_WRITE}),
    "metadata": frozenset({Kind.META_READ, Kind.META_WRITE}),
    "read": frozenset({Kind.READ}),
    "write": frozenset({Kind.WRITE}),
    "data": frozenset({Kind.READ, Kind.WRITE}),
    "commit": frozenset({Kind.COMMIT}),
    "all": frozenset({Kind.META_READ, Kind.META_WRITE, Kind.READ, Kind.WRITE, Kind.COMMIT, Kind.NONE}),
}
CREATES = frozenset(("create", "mknod", "mkdir", "symlink", "link"))  # what a full file system refuses too
_COMM_MAX = 15  # TASK_COMM_LEN less its terminating zero
EFFECTS = ("errno", "stall", "delay", "stale", "write_error", "full", "short")
_KEYS = {
    "id",
    "op",
    "path",
    "pid",
    "comm",
    "probability",
    "seed",
    "count",
    "every",
    "after",
    "until",
    *EFFECTS,
    "soft",
    "timeo",
    "retrans",
}
_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
EVENT_ID = re.compile(r"e\d+")  # the model's events' ids (e1, e2, ...), not the rules' (r1, r2, ... or the user's)


class RuleTable(TypedDict, total=False):
    """A rule as Rule.describe() gives it: the keys of a faults file's table, normalised;
    what `fusetrace fault list` and the control socket show."""

    id: Required[str]
    op: list[str]
    path: str
    pid: list[int]
    comm: list[str]
    probability: float
    seed: int | None
    count: int
    every: int
    after: str
    until: str
    errno: str
    stall: str
    delay: str
    soft: bool
    timeo: int
    retrans: int
    stale: bool
    write_error: str
    full: int
    short: int


@dataclass(frozen=True)
class Rule:
    """One fault rule, checked.  `ops` are operation names and `kinds` the request kinds
    its classes stand for (both empty: every operation); `effect` is one of EFFECTS."""

    id: str
    effect: str
    ops: frozenset[str] = frozenset()
    kinds: frozenset[Kind] = frozenset()
    op_names: tuple[str, ...] = ()  # as given, for listing
    path: str | None = None
    path_re: re.Pattern[str] | None = None
    pids: frozenset[int] = frozenset()
    comms: frozenset[str] = frozenset()
    probability: float | None = None
    seed: int | None = None  # None until the injector draws one
    count: int | None = None
    every: int | None = None
    after_s: float = 0.0
    until_s: float = math.inf
    errno: int = 0
    stall_s: float = 0.0
    delay: Delay | None = None
    soft: bool = False
    timeo: int = 600  # deciseconds, as nfs(5) and EFS's recommended mount options
    retrans: int = 2
    full_bytes: int = 0
    short_bytes: int = 0
    # whether firings hash a draw (a probability, a delay from a distribution): then the rule
    # has a seed, and counts the matches of each operation and path.  A field, set once, as
    # every firing asks it (a property cost the firing path a third more)
    drawn: bool = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        drawn = self.probability is not None or (self.delay is not None and self.delay.drawn)
        object.__setattr__(self, "drawn", drawn)  # (frozen: the dataclasses idiom)

    def takes(self, op: str, kind: Kind) -> bool:
        """Whether the rule's operations include this one (of this kind)."""
        return not (self.ops or self.kinds) or op in self.ops or kind in self.kinds

    def matches(self, path: str) -> bool:
        """Whether the rule's glob takes this path (pids and process names are checked by
        the caller, which only looks them up for rules that ask)."""
        return self.path_re is None or self.path_re.fullmatch(path) is not None

    @property
    def needs_process(self) -> bool:
        return bool(self.pids or self.comms)

    def soft_timeout_s(self) -> float:
        """How long a soft NFS mount waits for an answer before it fails the call: timeo,
        then linear back-off (TCP) for `retrans` retransmissions, each timeout capped at
        600 s (nfs(5))."""
        tries = self.retrans + 1
        below = min(tries, 6000 // self.timeo)  # the tries whose timeout is under the cap
        return self.timeo / 10 * below * (below + 1) / 2 + 600.0 * (tries - below)  # in closed form: any retrans

    def describe(self) -> RuleTable:
        """The rule as a table of the faults file would give it (normalised)."""
        out = RuleTable(id=self.id)
        if self.op_names:
            out["op"] = list(self.op_names)
        if self.path is not None:
            out["path"] = self.path
        if self.pids:
            out["pid"] = sorted(self.pids)
        if self.comms:
            out["comm"] = sorted(self.comms)
        if self.probability is not None:
            out["probability"] = self.probability
        if self.drawn:
            out["seed"] = self.seed
        if self.count is not None:
            out["count"] = self.count
        if self.every is not None:
            out["every"] = self.every
        if self.after_s:
            out["after"] = say_s(self.after_s)
        if self.until_s != math.inf:
            out["until"] = say_s(self.until_s)
        if self.effect == "errno":
            out["errno"] = errno_name(self.errno)
        elif self.effect == "stall":
            out["stall"] = say_s(self.stall_s)
            if self.soft:
                out["soft"] = True
                out["timeo"] = self.timeo
                out["retrans"] = self.retrans
                out["errno"] = errno_name(self.errno)
        elif self.effect == "delay":
            assert self.delay is not None
            out["delay"] = self.delay.describe()
        elif self.effect == "stale":
            out["stale"] = True
        elif self.effect == "write_error":
            out["write_error"] = errno_name(self.errno)
        elif self.effect == "full":
            out["full"] = self.full_bytes
            out["errno"] = errno_name(self.errno)
        else:
            out["short"] = self.short_bytes
        return out

    def summary(self) -> str:
        """One line for `fusetrace fault list`: what it does, to what, when."""
        d = self.describe()
        effect = {
            "errno": f"errno {d.get('errno')}",
            "stall": f"stall {d.get('stall')}"
            + (f" soft → {d['errno']} after {say_s(self.soft_timeout_s())}" if self.soft else ""),
            "delay": f"delay {d.get('delay')}",
            "stale": "ESTALE (file removed by another client)",
            "write_error": f"write-back error {d.get('write_error')} at fsync and close",
            "full": f"{d.get('errno')} past {self.full_bytes:,} bytes written",
            "short": f"short: at most {self.short_bytes:,} bytes",
        }[self.effect]
        what = [",".join(self.op_names) or "all ops"]
        if self.path is not None:
            what.append(f"path {self.path}")
        if self.pids:
            what.append("pid " + ",".join(map(str, sorted(self.pids))))
        if self.comms:
            what.append("comm " + ",".join(sorted(self.comms)))
        when = []
        if self.probability is not None:
            when.append(f"p={self.probability:g} seed {self.seed}")
        elif self.drawn:
            when.append(f"seed {self.seed}")
        if self.every is not None:
            when.append(f"every {_ordinal(self.every)} match")
        if self.count is not None:
            when.append(f"at most {self.count}x")
        if self.after_s or self.until_s != math.inf:
            until = "" if self.until_s == math.inf else f" to {say_s(self.until_s)}"
            when.append(f"from {say_s(self.after_s)}{until}")
        return f"{effect}; {' '.join(what)}" + (f"; {', '.join(when)}" if when else "")


def errno_name(number: int) -> str:
    return E.errorcode.get(number, str(number))


def parse_errno(value: object, where: str, key: str = "errno") -> int:
    """An errno from its name ("EIO") or number."""
    if isinstance(value, bool):
        raise BadValue(f"{where}: {key} {value!r}: expected an errno name such as EIO, or its number")
    if isinstance(value, int):
        if value in E.errorcode:
            return value
        raise BadValue(f"{where}: {key} {value}: not an errno number on this system")
    if isinstance(value, str):
        number = getattr(E, value.strip().upper(), None)
        if isinstance(number, int) and value.strip().upper().startswith("E"):
            return number
        if value.strip().isdigit():
            return parse_errno(int(value), where, key)
    raise BadValue(f"{where}: {key} {value!r}: not an errno name (e.g. EIO, ENOSPC, ESTALE, ETIMEDOUT)")


def parse_rule(raw: dict[str, Any], where: str, default_id: str) -> Rule:
    """A Rule from a table of the faults file or a control request; every mistake is a
    BadValue naming `where` and the key."""
    if not isinstance(raw, dict):
        raise BadValue(f"{where}: expected a table of keys, got {type(raw).__name__}")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise BadValue(f"{where}: unknown key {unknown[0]!r} (keys: {', '.join(sorted(_KEYS))})")
    effects = [k for k in EFFECTS if k in raw and not (k == "errno" and ("soft" in raw or "full" in raw))]
    if len(effects) != 1:
        said = " and ".join(effects) if effects else "none"
        raise BadValue(f"{where}: a rule has exactly one effect of {', '.join(EFFECTS)} (got {said})")
    effect = effects[0]
    rid = str(raw.get("id", default_id))
    if not _ID.fullmatch(rid):
        raise BadValue(f"{where}: id {rid!r}: letters, digits, '_', '.' and '-' only, at most 64")
    if EVENT_ID.fullmatch(rid):
        raise BadValue(f"{where}: id {rid!r}: e and a number name the model's events; give the rule another")
    ops, kinds, names = _ops(raw.get("op"), where)
    if effect == "full" and not names:
        ops, names = frozenset({"write", *CREATES}), ("write", *sorted(CREATES))
    kw: dict[str, Any] = {"id": rid, "effect": effect, "ops": ops, "kinds": kinds, "op_names": names}
    if "path" in raw:
        path = raw["path"]
        if not isinstance(path, str) or not path:
            raise BadValue(f"{where}: path {path!r}: expected a glob such as '*.db' or '/data/**'")
        kw["path"], kw["path_re"] = path, re.compile(glob_regex(path, f"{where}: path"), re.DOTALL)
    kw["pids"] = frozenset(_list_of(raw, "pid", int, where))
    kw["comms"] = frozenset(_list_of(raw, "comm", str, where))
    for pid in kw["pids"]:
        if pid <= 0:
            raise BadValue(f"{where}: pid {pid}: a process id is a number above 0")
    for comm in kw["comms"]:
        name = os.fsencode(comm)  # (as the command line gave it: undecodable bytes kept)
        if not 0 < len(name) <= _COMM_MAX:
            kept = os.fsdecode(name[:_COMM_MAX])
            raise BadValue(
                f"{where}: comm {comm!r}: Linux keeps 1 to {_COMM_MAX} bytes of a process's name "
                f"(/proc/PID/comm), so no process is named so; give {kept!r}"
            )
    if "probability" in raw:
        p = raw["probability"]
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1:
            raise BadValue(f"{where}: probability {p!r}: must be a number above 0 and at most 1")
        kw["probability"] = float(p)
    for key in ("count", "every"):
        if key in raw:
            kw[key] = _whole(raw, key, where, 1)
    if "after" in raw:
        kw["after_s"] = parse_duration(raw["after"], where, "after")
    if "until" in raw:
        kw["until_s"] = parse_duration(raw["until"], where, "until")
        if kw["until_s"] <= kw.get("after_s", 0.0):
            raise BadValue(f"{where}: until {raw['until']!r}: must be later than after")
    _effect(raw, effect, kw, where)
    rule = Rule(**kw)
    if "seed" in raw:
        if not rule.drawn:
            raise BadValue(f"{where}: seed: only with probability or a drawn delay (uniform:, lognormal:)")
        rule = dataclasses.replace(rule, seed=_whole(raw, "seed", where, 0))
    return rule


def _effect(raw: dict[str, Any], effect: str, kw: dict[str, Any], where: str) -> None:
    """The effect's own keys into kw."""
    for key in ("soft", "timeo", "retrans"):
        if key in raw and effect != "stall":
            raise BadValue(f"{where}: {key}: only with stall")
    if effect == "errno":
        kw["errno"] = parse_errno(raw["errno"], where)
    elif effect == "stall":
        kw["stall_s"] = parse_duration(raw["stall"], where, "stall")
        if kw["stall_s"] <= 0:
            raise BadValue(f"{where}: stall {raw['stall']!r}: must be longer than 0")
        kw.setdefault("count", 1)  # one outage unless asked for more
        soft = raw.get("soft", False)
        if not isinstance(soft, bool):
            raise BadValue(f"{where}: soft {soft!r}: expected true or false")
        kw["soft"] = soft
        if not soft and any(k in raw for k in ("timeo", "retrans", "errno")):
            raise BadValue(f"{where}: timeo, retrans and errno go with soft = true (a hard mount waits)")
        if soft:
            kw["timeo"] = _whole(raw, "timeo", where, 1) if "timeo" in raw else 600
            kw["retrans"] = _whole(raw, "retrans", where, 0) if "retrans" in raw else 2
            kw["errno"] = parse_errno(raw.get("errno", "EIO"), where)
    elif effect == "delay":
        kw["delay"] = parse_delay(raw["delay"], where)
    elif effect == "stale":
        if raw["stale"] is not True:
            raise BadValue(f"{where}: stale {raw['stale']!r}: write stale = true")
    elif effect == "write_error":
        kw["errno"] = parse_errno(raw["write_error"], where, "write_error")
        _only_ops(kw, {"write"}, "write_error", where)
    elif effect == "full":
        for key in ("probability", "every", "count"):
            if key in raw:
                raise BadValue(f"{where}: {key}: a full rule counts every matched write; it takes no {key}")
        kw["full_bytes"] = _bytes(raw["full"], where, "full", 0)
        kw["errno"] = parse_errno(raw.get("errno", "ENOSPC"), where)
        if kw["errno"] not in (E.ENOSPC, E.EDQUOT):
            raise BadValue(f"{where}: errno {raw['errno']!r}: a full file system answers ENOSPC, or EDQUOT over quota")
    else:
        kw["short_bytes"] = _bytes(raw["short"], where, "short", 1)
        _only_ops(kw, {"read", "write"}, "short", where)


def _only_ops(kw: dict[str, Any], allowed: set[str], effect: str, where: str) -> None:
    """Limit a rule whose effect only applies to some operations to those; refuse one
    that names none of them."""
    said = set(kw["ops"]) | {op for op in OPERATIONS if _kind_of(op) & kw["kinds"]}
    if kw["op_names"] and not said & allowed:
        raise BadValue(f"{where}: {effect} applies to {' and '.join(sorted(allowed))} only")
    kw["ops"], kw["kinds"] = frozenset(allowed & said if kw["op_names"] else allowed), frozenset()
    kw["op_names"] = kw["op_names"] or tuple(sorted(allowed))


def _kind_of(op: str) -> set[Kind]:
    """The kinds an operation's requests can have (for _only_ops: read and write only)."""
    return {Kind.READ} if op == "read" else {Kind.WRITE} if op == "write" else set()


def _ops(value: object, where: str) -> tuple[frozenset[str], frozenset[Kind], tuple[str, ...]]:
    if value is None:
        return frozenset(), frozenset(), ()
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise BadValue(f'{where}: op {value!r}: expected names such as "write,fsync" or a list of them')
    names = tuple(dict.fromkeys(i.strip() for i in items if i.strip()))
    ops: set[str] = set()
    kinds: set[Kind] = set()
    for name in names:
        if name in CLASSES:
            kinds |= CLASSES[name]
        elif name in OPERATIONS:
            ops.add(name)
        else:
            raise BadValue(
                f"{where}: op {name!r}: not an operation ({', '.join(OPERATIONS)}) nor a class ({', '.join(CLASSES)})"
            )
    if not names:
        raise BadValue(f"{where}: op {value!r}: names no operation")
    return frozenset(ops), frozenset(kinds), names


def _list_of(raw: dict[str, Any], key: str, kind: type, where: str) -> list[Any]:
    if key not in raw:
        return []
    value = raw[key]
    items = value if isinstance(value, list) else [value]
    if kind is str and isinstance(value, str):
        items = [v.strip() for v in value.split(",") if v.strip()]
    if not items or not all(isinstance(i, kind) and not isinstance(i, bool) for i in items):
        raise BadValue(f"{where}: {key} {value!r}: expected {'process ids' if kind is int else 'names'}")
    return items


def _whole(raw: dict[str, Any], key: str, where: str, least: int) -> int:
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise BadValue(f"{where}: {key} {value!r}: must be a whole number, {least} or more")
    return value


def _bytes(value: object, where: str, key: str, least: int) -> int:
    try:
        n = value if isinstance(value, int) and not isinstance(value, bool) else parse_size(str(value))
    except (ValueError, IndexError):
        n = -1
    if n < least:
        raise BadValue(f"{where}: {key} {value!r}: expected bytes ({least} or more), or a size such as 4k, 10M")
    return n


MAX_FILE_BYTES = 1 << 20  # rules and events by the thousand; a larger file is no faults file


def load_file(path: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The [[rule]] and [[event]] tables of a faults file, unchecked (the injector and the
    emulation check them); a file that cannot be read or parsed is one line."""
    try:
        raw = read_regular(path, MAX_FILE_BYTES)
    except OSError as exc:
        raise BadValue(f"--faults {path}: {(exc.strerror or str(exc)).lower()}") from None
    except ValueError as exc:
        raise BadValue(f"--faults {path}: {exc}, so not a faults file") from None
    try:
        data = tomllib.loads(raw.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise BadValue(f"--faults {path}: not TOML: {exc}") from None
    except ValueError:  # tomllib's int() of over 4,300 digits
        raise BadValue(f"--faults {path}: a number too long to read (over 4,300 digits)") from None
    except RecursionError:  # tomllib recurses once per level of arrays or inline tables
        raise BadValue(f"--faults {path}: arrays or tables nested too deep to read") from None
    unknown = sorted(set(data) - {"rule", "event"})
    if unknown:
        raise BadValue(
            f"--faults {path}: unknown table {unknown[0]!r} (a faults file has [[rule]] and [[event]] tables)"
        )
    rules, events = data.get("rule", []), data.get("event", [])
    for name, tables in (("rule", rules), ("event", events)):
        if not isinstance(tables, list):
            raise BadValue(f"--faults {path}: write [[{name}]], one table per {name}")
    return rules, events


def _ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st ..."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
