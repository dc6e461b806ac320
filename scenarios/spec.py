"""Scenario data files (scenarios/<id>.toml): loading and checking them.

The format is documented in docs/SCENARIO_FORMAT.md.  Every mistake in a file is one line
naming the file, the step and the key, before anything is mounted.
"""

import string
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fusetrace.emulator.events import parse_event
from fusetrace.errors import BadValue
from fusetrace.faults.injector import Injector

DIRECTORY = Path(__file__).resolve().parent  # the data files live beside the code

_TOP = {
    "title",
    "system",
    "source",
    "profile",
    "scaling",
    "fast",
    "tools",
    "credits",
    "set",
    "vars",
    "fast_vars",
    "setup",
    "shell",
    "steps",
    "events",
    "faults",
}
_FIGURES = {"published", "inconsistent", "also_published"}
_FIO = {"name", "fio", "runtime", "fast_runtime", "clients", "set", "needs"} | _FIGURES
_SHELL = {"name", "run", "setup", "cleanup", "count", "unit", "repeat", "fast_repeat", "set", "needs", "host_check"}
_SHELL |= _FIGURES
# Phases of a run a step may need (its `needs`); the runner checks the emulated mount before the
# step and, where the run has not reached the phase, does not run it (runner.phase_missing).
PHASES = {"cliff": "the burst credits are spent: BurstCreditBalance under 1% of what the run started with"}


@dataclass(frozen=True)
class Step:
    name: str
    kind: str  # "fio" or "shell"
    fio: str = ""
    runtime: float = 10.0
    fast_runtime: float = 2.0
    clients: int = 1
    run: str = ""
    setup: str = ""
    cleanup: str = ""
    count: str = ""
    unit: str = ""
    repeat: int = 1
    fast_repeat: int = 1
    set: dict = field(default_factory=dict)
    needs: str = ""  # a phase of the run (PHASES) the step is run in only
    host_check: bool = False  # run it again on a plain mount: how much of its pace is this host's
    published: dict = field(default_factory=dict)
    inconsistent: dict = field(default_factory=dict)
    also_published: dict = field(default_factory=dict)  # figures of the source that are not metrics

    def iterations(self, fast: bool) -> int:
        return self.fast_repeat if fast else self.repeat

    def seconds(self, fast: bool) -> float:
        return self.fast_runtime if fast else self.runtime


@dataclass(frozen=True)
class Scenario:
    id: str
    path: Path
    title: str
    system: str
    source: str
    profile: str
    scaling: str
    fast: str
    tools: tuple[str, ...]
    credits: bool
    set: dict
    vars: dict
    fast_vars: dict
    setup: str
    shell: str
    steps: tuple[Step, ...]
    events: tuple[dict, ...] = ()  # on the model's timeline from the first step's start (emulator/events.py)
    faults: tuple[dict, ...] = ()  # fault rules in force from the first step's start (docs/FAULTS.md)

    def variables(self, fast: bool) -> dict[str, str]:
        return {**self.vars, **(self.fast_vars if fast else {})}

    def timeline(self, fast: bool) -> list[dict]:
        """The events with the run's variables put into their text values ("$STALL")."""
        return [_expanded(e, self.variables(fast)) for e in self.events]

    def rules(self, fast: bool) -> list[dict]:
        """The fault rules with the run's variables put into their text values."""
        return [_expanded(r, self.variables(fast)) for r in self.faults]

    def overrides(self, extra: Sequence[str] = ()) -> list[str]:
        """The file's [set] as KEY=VALUE items, then the user's --set items."""
        return [f"{k}={v}" for k, v in self.set.items()] + list(extra)


def ids() -> list[str]:
    return sorted(p.stem for p in DIRECTORY.glob("*.toml"))


def load(name: str) -> Scenario:
    """The scenario `name` (an id, or a path to a .toml file), checked."""
    path = Path(name) if name.endswith(".toml") else DIRECTORY / f"{name}.toml"
    if not path.is_file():
        raise BadValue(f"scenario {name}: no such scenario (have: {', '.join(ids())})")
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise BadValue(f"{path}: {exc}") from None
    return _scenario(path, data)


def _scenario(path: Path, data: dict) -> Scenario:
    where = str(path)
    _known(where, data, _TOP)
    for key in ("title", "system", "source", "profile", "steps"):
        if key not in data:
            raise BadValue(f"{where}: missing key '{key}'")
    steps = tuple(_step(where, i, raw) for i, raw in enumerate(data["steps"], 1))
    if not steps:
        raise BadValue(f"{where}: no steps")
    shell = data.get("shell", "sh")
    if shell not in ("sh", "bash"):
        raise BadValue(f"{where}: shell = {shell!r}: must be 'sh' or 'bash'")
    return Scenario(
        id=path.stem,
        path=path,
        title=data["title"],
        system=data["system"],
        source=data["source"],
        profile=data["profile"],
        scaling=data.get("scaling", ""),
        fast=data.get("fast", ""),
        tools=tuple(data.get("tools", ())),
        credits=bool(data.get("credits", False)),
        set=dict(data.get("set", {})),
        vars=_strings(where, "vars", data.get("vars", {})),
        fast_vars=_strings(where, "fast_vars", data.get("fast_vars", {})),
        setup=data.get("setup", ""),
        shell=shell,
        steps=steps,
        events=_events(where, data, steps),
        faults=_faults(where, data),
    )


def _events(where: str, data: dict, steps: tuple) -> tuple[dict, ...]:
    """The [[events]] tables, each checked as it will run, with and without --fast.  An
    event's `at` counts from the first step's start, or from the start of the step it names
    (`step = "NAME"`)."""
    events = data.get("events", [])
    if not isinstance(events, list):
        raise BadValue(f"{where}: write [[events]], one table per event")
    names = {s.name for s in steps}
    for i, raw in enumerate(events, 1):
        step = raw.get("step") if isinstance(raw, dict) else None
        if step is not None and step not in names:
            raise BadValue(f"{where}: event {i}: step = {step!r}: no such step (have: {', '.join(sorted(names))})")
    _check_each(where, data, events, "event", lambda raw, name: parse_event(split_step(raw)[1], name))
    return tuple(events)


def split_step(raw):
    """(the step an [[events]] table counts from, None for the first; the event itself)."""
    if not isinstance(raw, dict):
        return None, raw
    return raw.get("step"), {k: v for k, v in raw.items() if k != "step"}


def _faults(where: str, data: dict) -> tuple[dict, ...]:
    """The [[faults]] tables, each checked as a fault rule, with and without --fast."""
    rules = data.get("faults", [])
    if not isinstance(rules, list):
        raise BadValue(f"{where}: write [[faults]], one table per rule")
    _check_each(where, data, rules, "fault", lambda raw, name: Injector().add(raw, 0, name))
    return tuple(rules)


def _check_each(where: str, data: dict, tables: list, kind: str, check: Callable[[Any, str], object]) -> None:
    """check(table with the run's variables put in, "FILE: KIND i") for each table as it runs
    with and without --fast; a BadValue naming the table on any mistake."""
    for fast in (False, True):
        variables = {
            **_strings(where, "vars", data.get("vars", {})),
            **(_strings(where, "fast_vars", data.get("fast_vars", {})) if fast else {}),
        }
        for i, raw in enumerate(tables, 1):
            name = f"{where}: {kind} {i}"
            try:
                check(_expanded(raw, variables), name)
            except KeyError as exc:
                raise BadValue(f"{name}: no variable {exc} in [vars]") from None
            except ValueError as exc:
                raise BadValue(str(exc) if str(exc).startswith(name) else f"{name}: {exc}") from None


def _expanded(raw, variables: dict[str, str]):
    """An event table with $NAME in its text values replaced by the run's variables."""
    if not isinstance(raw, dict):
        return raw
    return {
        k: _expanded(v, variables)
        if isinstance(v, dict)
        else string.Template(v).substitute(variables)
        if isinstance(v, str)
        else v
        for k, v in raw.items()
    }


def _step(where: str, i: int, raw: dict) -> Step:
    name = raw.get("name") or f"step {i}"
    where = f"{where}: step '{name}'"
    if ("fio" in raw) == ("run" in raw):
        raise BadValue(f"{where}: needs exactly one of 'fio' (a fio job) or 'run' (a shell command)")
    kind = "fio" if "fio" in raw else "shell"
    _known(where, raw, _FIO if kind == "fio" else _SHELL)
    if raw.get("unit") and not raw.get("count"):
        raise BadValue(f"{where}: 'unit' needs 'count' (how many units the step does)")
    for key in ("runtime", "fast_runtime", "clients", "repeat", "fast_repeat"):
        if key in raw and not (isinstance(raw[key], (int, float)) and raw[key] > 0):
            raise BadValue(f"{where}: {key} = {raw[key]!r}: must be a positive number")
    if not isinstance(raw.get("host_check", False), bool):
        raise BadValue(f"{where}: host_check = {raw['host_check']!r}: must be true or false")
    if "needs" in raw and (not isinstance(raw["needs"], str) or raw["needs"] not in PHASES):
        raise BadValue(f"{where}: needs = {raw['needs']!r}: must be one of {', '.join(map(repr, PHASES))}")
    for key in sorted(_FIGURES):
        if not isinstance(raw.get(key, {}), dict):
            raise BadValue(f"{where}: '{key}' must be a table of metric = value")
    for key, value in raw.get("also_published", {}).items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BadValue(f"{where}: also_published {key!r} = {value!r}: must be a number")
    return Step(kind=kind, **{**raw, "name": name})


def _known(where: str, data: dict, allowed: set) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise BadValue(f"{where}: unknown key '{unknown[0]}' (allowed: {', '.join(sorted(allowed))})")


def _strings(where: str, table: str, values: dict) -> dict[str, str]:
    for key, value in values.items():
        if not isinstance(value, (str, int, float)):
            raise BadValue(f"{where}: [{table}] {key}: must be a string or a number")
    return {k: str(v) for k, v in values.items()}
