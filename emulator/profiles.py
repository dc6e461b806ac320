"""Profiles: TOML files of parameters, one per emulated system.

A profile is flat `key = value` lines (keys in emulator/params.py) plus an
optional `base = "other-profile"` whose values it starts from.  Errors name
the file and line of the offending key, or `--set` for command-line overrides.
"""

import dataclasses
import re
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .params import Params, ProfileError, check_consistent, coerce

_Setting = tuple[str, object, str, bool]  # (key, value, origin, from text)

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
_MAX_BASES = 8
_POSITION = re.compile(r"\s*\(at line (\d+), column \d+\)")


def load_profile(name_or_path: str | Path) -> Params:
    """The parameters of a shipped profile (by name) or of a .toml file (by path)."""
    return _apply(Params(), _settings(_resolve(str(name_or_path), PROFILE_DIR), 0))


def list_profiles() -> list[tuple[str, str]]:
    """(name, one-line description) of every shipped profile, by name."""
    return [(p.stem, load_profile(p).description) for p in sorted(PROFILE_DIR.glob("*.toml"))]


def apply_overrides(params: Params, items: list[str]) -> Params:
    """params with "key=value" overrides applied, values typed as on a command line."""
    settings = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ProfileError(f"--set {item}: expected KEY=VALUE")
        settings.append((key.strip(), value.strip(), "--set ", True))
    return _apply(params, settings)


def replace_checked(params: Params, key: str, value: object, origin: str) -> Params:
    """params with one key changed at run time; `value` may be text as typed."""
    return replace_keys(params, {key: value}, origin)


def replace_keys(params: Params, keys: Mapping[str, object], origin: str) -> Params:
    """params with several keys changed at one instant, checked together."""
    return _apply(params, [(key, value, origin, isinstance(value, str)) for key, value in keys.items()])


def _apply(params: Params, settings: Iterable[_Setting]) -> Params:
    """Check and apply (key, value, origin, from_text) settings in order."""
    changes: dict[str, Any] = {}  # dataclasses.replace takes each key at its own type
    where: dict[str, str] = {}
    for key, value, origin, from_text in settings:
        try:
            changes[key] = coerce(key, value, from_text=from_text)
        except ValueError as exc:
            raise ProfileError(f"{origin}{exc}") from None
        where[key] = origin
    new = dataclasses.replace(params, **changes)
    try:
        check_consistent(new)
    except ValueError as exc:
        # blame a key of this batch that the message names, else the batch's last
        named = [k for k in where if k in str(exc)] or list(where)[-1:]
        origin = where[named[0]] if named else ""
        raise ProfileError(f"{origin}{exc}") from None
    return new


def _resolve(name: str, here: Path) -> Path:
    if name.endswith(".toml") or "/" in name:
        path = Path(name) if Path(name).is_absolute() or here == PROFILE_DIR else here / name
    else:
        path = PROFILE_DIR / f"{name}.toml"
    if path.is_dir():
        raise ProfileError(f"{path}: a directory, not a profile file")
    if path.exists() and not path.is_file():
        raise ProfileError(f"{path}: not a regular file")
    if not path.is_file():
        known = ", ".join(p.stem for p in sorted(PROFILE_DIR.glob("*.toml")))
        raise ProfileError(f"{name}: no such profile (shipped: {known}; or give a .toml file)")
    return path


MAX_BYTES = 1 << 20  # a profile is a few dozen keys: a larger file is no profile


def _read(path: Path, label: str) -> str:
    """The file's text; ProfileError naming the file if it cannot be read as UTF-8, or is
    over MAX_BYTES."""
    try:
        if path.exists() and not path.is_file():  # a FIFO would hold the open for good
            raise ProfileError(f"{label}: not a regular file, so not a profile")
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ProfileError(f"{label}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_BYTES:
        raise ProfileError(f"{label}: over {MAX_BYTES:,} bytes, so not a profile")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ProfileError(
            f"{label}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x}); profiles are TOML, which is UTF-8"
        ) from None


def _settings(path: Path, depth: int) -> list[_Setting]:
    """The file's settings after those of its base, each with its file:line."""
    label = path.name if path.parent == PROFILE_DIR else str(path)
    text = _read(path, label)
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        line = _POSITION.search(msg)
        raise ProfileError(f"{label}:{line.group(1) if line else '?'}: {_POSITION.sub('', msg)}") from None
    except ValueError:  # (after TOMLDecodeError, one) tomllib's int() of over 4,300 digits
        raise ProfileError(f"{label}: a number too long to read (over 4,300 digits)") from None
    except RecursionError:  # tomllib recurses once per level of arrays or inline tables
        raise ProfileError(f"{label}: arrays or tables nested too deep to read") from None
    lines = text.splitlines()

    def origin(key: str) -> str:
        pattern = re.compile(rf"\s*(\[\s*)?[\"']?{re.escape(key)}[\"']?\s*[=\]]")
        number = next((i for i, ln in enumerate(lines, 1) if pattern.match(ln)), "?")
        return f"{label}:{number}: "

    out = []
    base = table.pop("base", None)
    if base is not None:
        if not isinstance(base, str):
            raise ProfileError(f"{origin('base')}base: expected a profile name or file, got {base!r}")
        if depth >= _MAX_BASES:
            raise ProfileError(f"{origin('base')}base: profiles based on one another too deeply (a loop?)")
        try:
            out = _settings(_resolve(base, path.parent), depth + 1)
        except ProfileError as exc:
            raise ProfileError(f"{origin('base')}base: {exc}") from None
    for key, value in table.items():
        if isinstance(value, (dict, list)):
            raise ProfileError(f"{origin(key)}{key}: expected a single value (profiles are flat key = value lines)")
        out.append((key, value, origin(key), False))
    return out
