"""Events on the emulated file system's timeline: profile keys changed at an instant
(burst credits to zero: "the day credits ran out"), or the server answering nothing for
a while (a failover).  Scheduled on the model (Model.schedule) in its own time, so a
scenario, `fusetrace simulate` and a mount agree on when each happened."""

import math
import re
from dataclasses import dataclass, field

from .params import ParamValue, coerce

_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*")
_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
LONGEST = 366 * 86400.0  # a year: the most an event's `at` or `stall` may be


def seconds(value: object) -> float:
    """Seconds from a number or text such as "250ms", "40s", "2m"; ValueError if neither,
    or negative."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        out = float(value)
    elif isinstance(value, str) and (m := _DURATION.fullmatch(value)):
        out = float(m.group(1)) * _UNITS[m.group(2)]
    else:
        raise ValueError(f"{value!r}: expected seconds, or a duration such as 250ms, 40s, 2m")
    if not math.isfinite(out) or out < 0:
        raise ValueError(f"{value!r}: must be a finite duration, 0 or more")
    return out


def event_at(value: object, where: str, origin: str) -> float:
    """An event's `at` in seconds: a duration (seconds()) of at most a year from `origin`;
    ValueError naming `where` otherwise."""
    try:
        at = seconds(value)
    except ValueError as exc:
        raise ValueError(f"{where}: at {exc}") from None
    if at > LONGEST:
        raise ValueError(f"{where}: at {value!r}: at most a year from {origin}")
    return at


@dataclass(frozen=True)
class Event:
    """At `at` seconds after an origin: profile keys `set` to values, or a `stall` of
    that many seconds (exactly one of the two)."""

    at: float
    set: dict[str, ParamValue] = field(default_factory=dict)
    stall: float = 0.0

    def describe(self) -> dict[str, object]:
        out: dict[str, object] = {"at": self.at}
        if self.stall:
            out["stall"] = self.stall
        else:
            out["set"] = dict(self.set)
        return out


def parse_event(raw: object, where: str) -> Event:
    """An Event from a table (a faults file's [[event]], a scenario's [[events]], a control
    request); ValueError naming `where` and the key on any mistake."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected a table with at, and set or stall")
    unknown = sorted(set(raw) - {"at", "set", "stall"})
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r} (an event has at, and set or stall)")
    if "at" not in raw:
        raise ValueError(f'{where}: at: missing (when the event happens, e.g. at = "10s")')
    if ("set" in raw) == ("stall" in raw):
        raise ValueError(f"{where}: an event has exactly one of set (profile keys) and stall (a duration)")
    at = event_at(raw["at"], where, "now")
    if "stall" in raw:
        try:
            stall = seconds(raw["stall"])
        except ValueError as exc:
            raise ValueError(f"{where}: stall {exc}") from None
        if not 0 < stall <= LONGEST:
            raise ValueError(f"{where}: stall {raw['stall']!r}: must be longer than 0 and at most a year")
        return Event(at, stall=stall)
    keys = raw["set"]
    if not isinstance(keys, dict) or not keys:
        raise ValueError(f"{where}: set: expected profile keys and values, e.g. set = {{burst_credit_balance = 0}}")
    checked = {}
    for key, value in keys.items():
        try:
            checked[key] = coerce(key, value, from_text=isinstance(value, str))
        except ValueError as exc:
            raise ValueError(f"{where}: set {exc}") from None
    return Event(at, set=checked)
