"""The `efs` fixtures: an emulated EFS mounted for a test, a module or a session, in an
application's own suite.

Installed with the package (entry point `pytest11`), so `def test_x(efs):` needs no
conftest.  `efs` is a fresh mount of an empty directory under the test's own tmp_path;
`efs_module` and `efs_session` mount once for their scope, and before each test that uses
them put the mount back as it was mounted (`fusetrace reset`: model, fault rules, events)
while its files stay.  Each emulates a profile (default `efs-bursting`; the `efs_profile`
ini option, a `@pytest.mark.efs(profile=..., set={...}, faults=...)` marker, or indirect
parametrisation with the same keys), with a trace.  A mount is always taken down: at its
fixture's teardown, and once more at the session's end for any a crash or an interrupt left
behind.  docs/PYTEST.md is the user's guide.
"""

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .client import ask
from .errors import UserError

DEFAULT_PROFILE = "efs-bursting"
TRACE_WAIT = 30.0  # seconds .trace() waits for the server to write what it has queued
# The fixtures' options (docs/PYTEST.md): each key and its default (the profile's is the
# ini option's).  A switch is True or False, and names the mount option it adds when it
# is not at its default: a new one is one line here.
_DEFAULTS: dict[str, Any] = {"profile": DEFAULT_PROFILE, "set": {}, "faults": None}
_SWITCHES = {"writeback_cache": (True, "--no-writeback-cache"), "crashable": (False, "--crashable")}
_KEYS = {*_DEFAULTS, *_SWITCHES}
_WIDER = {"efs_module": "module", "efs_session": "session"}  # the fixtures that reset between tests
_mounted: dict[Path, "EFS"] = {}  # mounts this session made and has not yet taken down


def _fusetrace(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    # -P: the working directory (the user's project) is not put on sys.path
    return subprocess.run(
        [sys.executable, "-P", "-m", "fusetrace", *args], capture_output=True, text=True, timeout=timeout
    )


def _last_line(done: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in (done.stderr or done.stdout).splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit code {done.returncode}"


class Fault:
    """A rule in force for a `with efs.fault(...)` block: its id and counts so far (after
    the block, its counts when the block ended)."""

    def __init__(self, efs: "EFS", rule: dict):
        self.efs, self.rule, self.id = efs, rule, rule["id"]
        self.final: dict | None = None  # the counts when the rule was cleared

    def _listed(self) -> dict[str, Any]:
        if self.final is not None:
            return self.final
        for r in self.efs.faults():
            if r["id"] == self.id:
                return r
        return {"matched": 0, "fired": 0, "held": 0}

    @property
    def fired(self) -> int:
        return self._listed()["fired"]

    @property
    def matched(self) -> int:
        return self._listed()["matched"]


class EFS:
    """One emulated mount: `path` (the mount), `source` (the directory below), `trace_dir`,
    `profile`, `workdir` (the test's own directory in it), `options` (as the fixture
    mounted it)."""

    def __init__(self, root: Path, options: dict[str, Any]):
        self.source, self.path, self.trace_dir = root / "source", root / "mnt", root / "trace"
        self.options, self.profile = options, options["profile"]
        self._up = False
        self._since_ns = 0  # the trace's records from this instant on are the test's (reset)
        self._test = ""  # the test the mount serves now, which names its workdir
        self._workdir: Path | None = None

    def mount(self) -> None:
        self.source.mkdir(parents=True)
        self.path.mkdir()
        o = self.options
        args = ["mount", str(self.source), str(self.path), "--emulate", o["profile"], "--trace", str(self.trace_dir)]
        args += [f"--set={key}={value}" for key, value in o["set"].items()]
        if o["faults"] is not None:
            args += ["--faults", str(o["faults"])]
        args += [flag for key, (default, flag) in _SWITCHES.items() if o[key] != default]
        done = _fusetrace(*args)
        if done.returncode != 0:
            raise UserError(f"efs fixture: {_last_line(done)}")
        self._up = True
        self._workdir = self.path  # a fresh mount is empty: the test's own
        _mounted[self.path] = self

    def reset(self) -> dict[str, Any]:
        """The mount as it was mounted, without remounting (`fusetrace reset`): the
        emulated file system afresh, no fault rule nor event but the faults file's; the
        files stay.  trace() returns the records from here on; the next use of `workdir`
        makes a new one.  What it reset, as `reset`'s answer says."""
        answer = self._ask(cmd="reset")
        self._since_ns, self._workdir = answer["at_ns"], None
        return answer

    @property
    def workdir(self) -> Path:
        """An empty directory of the test's own in the mount: the mount itself for `efs`; for
        efs_module and efs_session one made (through the mount) at its first use in a test."""
        if self._workdir is None:
            name = re.sub(r"[^\w.-]+", "_", self._test)[:80]
            self._workdir = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.path))
        return self._workdir

    def unmount(self) -> None:
        """Take the mount down (the server flushes its trace); detach it if it will not go."""
        if not self._up:
            return
        self._up = False
        _mounted.pop(self.path, None)
        done = _fusetrace("umount", str(self.path))
        if done.returncode != 0 and _is_mounted(self.path):
            subprocess.run(["fusermount3", "-uz", str(self.path)], capture_output=True, timeout=30)
            raise UserError(f"efs fixture: {_last_line(done)}; detached it with fusermount3 -uz")

    def _ask(self, **request) -> dict[str, Any]:
        return ask(str(self.path), **request)

    def crash(self) -> dict[str, int]:
        """The client dies now (docs/FAULTS.md, "A crash of the client"; the mount must be
        armed: `crashable=True`): every file back as it was last made durable, the files
        open through the mount stale.  What it undid, as `fusetrace fault MNT crash --json`."""
        return self._ask(cmd="crash")["crashed"]

    def set(self, **keys: Any) -> dict[str, Any]:
        """Change profile keys now, as `fusetrace set` does (burst_credit_balance=0, ...)."""
        return {key: self._ask(cmd="set", key=key, value=str(value))["value"] for key, value in keys.items()}

    def stats(self) -> dict[str, Any]:
        """`fusetrace stats --json`, with the CloudWatch-named metrics (BurstCreditBalance,
        PermittedThroughput, ...) also at the top level."""
        answer = self._ask(cmd="stats")
        return {**answer, **answer.get("metrics", {})}

    def faults(self) -> list[dict]:
        """The fault rules in force, with how often each matched, fired and held."""
        return self._ask(cmd="fault_list")["rules"]

    @contextlib.contextmanager
    def fault(self, **rule: Any) -> Iterator[Fault]:
        """A fault rule (docs/FAULTS.md: op, path, errno, stall, count, ...) in force for
        the block, cleared at its end however it ends."""
        added = Fault(self, self._ask(cmd="fault_add", rule=rule)["rule"])
        try:
            yield added
        finally:
            if self._up:
                added.final = added._listed()
                self._ask(cmd="fault_clear", ids=[added.id])

    def event(self, **event: Any) -> dict[str, Any]:
        """Schedule an event on the emulated file system's timeline (at=..., set={...} or stall=...)."""
        return self._ask(cmd="event_add", event=event)["event"]

    def trace(self):
        """The test's own trace so far, as a pandas DataFrame (one row per operation;
        docs/TRACE_FORMAT.md), once the server has written what it had queued: on a mount
        shared by several tests, the records since the last reset.  Needs pandas, which
        fusetrace itself does not."""
        try:
            import pandas as pd
        except ImportError:
            raise UserError("efs.trace() needs pandas: pip install pandas") from None

        deadline = time.monotonic() + TRACE_WAIT
        target = self._ask(cmd="stats")["trace"]["recorded"]  # every record given so far
        while True:
            trace = self._ask(cmd="stats")["trace"]
            if trace["records"] + trace["lost"] >= target:
                break
            if time.monotonic() > deadline:
                raise UserError(
                    f"efs fixture: the trace writer had not written the test's records after {TRACE_WAIT:g} s"
                )
            time.sleep(0.05)
        from .trace import reader  # pyarrow and DuckDB only for a test that reads its trace

        # reader.parts: a live trace's files held still (the writer merges them as it runs)
        parts = reader.parts(str(self.trace_dir)) if any(self.trace_dir.glob("*.parquet")) else []
        if not parts:
            return pd.DataFrame()
        since = [("start_ns", ">=", self._since_ns)]
        return pd.concat([pd.read_parquet(p, filters=since) for p in parts], ignore_index=True).sort_values(
            "start_ns", ignore_index=True
        )

    def __repr__(self) -> str:
        return f"EFS({self.profile} at {self.path})"


def _is_mounted(path: Path) -> bool:
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:  # any name
        return any(line.split()[4] == str(path) for line in f)


def _options(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The mount's options: the defaults, the ini option's profile, then the nearest marker
    of the fixture's node (the test, or the module for efs_module; the session has none),
    then the indirect parameter, each key checked (a relative faults file made absolute:
    the fusetrace command runs elsewhere)."""
    options = {
        **_DEFAULTS,
        **{key: default for key, (default, _) in _SWITCHES.items()},
        "profile": request.config.getini("efs_profile") or DEFAULT_PROFILE,
    }
    marker = request.node.get_closest_marker("efs")
    if marker is not None and marker.args:
        raise UserError(
            f"efs fixture: @pytest.mark.efs takes keywords ({', '.join(sorted(_KEYS))}), got "
            f"{', '.join(map(repr, marker.args))}: e.g. @pytest.mark.efs(profile={marker.args[0]!r})"
        )
    given = [
        ("@pytest.mark.efs", marker.kwargs if marker else {}),
        ("the efs parameter", getattr(request, "param", None) or {}),
    ]
    for where, values in given:
        if not isinstance(values, dict):
            raise UserError(f"efs fixture: {where} must be a dict of {sorted(_KEYS)}, got {values!r}")
        unknown = sorted(set(values) - _KEYS)
        if unknown:
            raise UserError(f"efs fixture: {where}: unknown key {unknown[0]!r} (keys: {', '.join(sorted(_KEYS))})")
        for key, value in values.items():
            if key == "set" and not isinstance(value, dict):
                raise UserError(
                    f"efs fixture: {where}: set must be a dict of profile keys, e.g. "
                    f"set={{'burst_credit_balance': 0}}, got {value!r}"
                )
            options[key] = {**options["set"], **value} if key == "set" else value
    for key in _SWITCHES:
        if not isinstance(options[key], bool):
            raise UserError(f"efs fixture: {key} must be True or False, got {options[key]!r}")
    faults = options["faults"]
    if faults is not None and not isinstance(faults, str | os.PathLike):
        raise UserError(f"efs fixture: faults must be the path of a faults file, got {faults!r}")
    if faults is not None and not Path(faults).is_absolute():
        options["faults"] = str(Path(request.config.invocation_params.dir) / faults)
    return options


def _served(request: pytest.FixtureRequest, root: Path) -> Iterator[EFS]:
    """A mount at `root` for the fixture's scope, taken down at its end.  Its errors fail
    the test (every test of the scope) with their one line: pytest.fail outside the except
    clause, so pytest does not print the UserError it handled as well."""
    failed = None
    try:
        mount = EFS(root, _options(request))
        mount._test = request.node.name  # until a test of a wider scope names itself (_efs_reset)
        mount.mount()
    except UserError as exc:
        failed = str(exc)
    if failed is not None:
        pytest.fail(failed, pytrace=False)
    try:
        yield mount
    finally:
        try:
            mount.unmount()
        except UserError as exc:
            failed = str(exc)
        if failed is not None:
            pytest.fail(failed, pytrace=False)


@pytest.fixture
def efs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EFS]:
    """A fresh emulated EFS mounted for this test (see the module's docstring)."""
    yield from _served(request, tmp_path / "efs")


@pytest.fixture(scope="module")
def efs_module(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EFS]:
    """One emulated EFS for the tests of a module (its options: the module's pytestmark),
    reset before each test that uses it; its files stay."""
    yield from _served(request, tmp_path_factory.mktemp("efs_module"))


@pytest.fixture(scope="session")
def efs_session(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EFS]:
    """One emulated EFS for the session (in each pytest-xdist worker: its own), with the
    ini option's profile, reset before each test that uses it; its files stay."""
    yield from _served(request, tmp_path_factory.mktemp("efs_session"))


@pytest.fixture(autouse=True)
def _efs_reset(request: pytest.FixtureRequest) -> None:
    """Before a test of efs_module or efs_session (directly or through another fixture):
    its mount as mounted (EFS.reset), after the mount's own checks.  A marker of the test
    or its class would not reach a mount made before it: one line says so."""
    for name, scope in _WIDER.items():
        if name not in request.fixturenames:
            continue
        failed = None
        marker = request.node.get_closest_marker("efs")
        reach = request.node.getparent(pytest.Module) if scope == "module" else None
        if marker is not None and (reach is None or marker is not reach.get_closest_marker("efs")):
            where = "the module's pytestmark" if reach is not None else "the ini option efs_profile"
            pytest.fail(
                f"efs fixture: {name} is mounted once for its {scope}, before this test: "
                f"@pytest.mark.efs on a test does not reach it (options: {where})",
                pytrace=False,
            )
        mount = request.getfixturevalue(name)
        mount._test = request.node.name
        try:
            mount.reset()
        except UserError as exc:
            failed = str(exc)
        if failed is not None:
            pytest.fail(f"efs fixture: {failed}", pytrace=False)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "efs_profile", f"profile the efs fixture emulates (default {DEFAULT_PROFILE})", default=DEFAULT_PROFILE
    )


def pytest_configure(config: pytest.Config) -> None:
    keys = ", ".join(["profile=NAME", "set={KEY: VALUE}", "faults=FILE", *(f"{key}=BOOL" for key in _SWITCHES)])
    config.addinivalue_line(
        "markers", f"efs({keys}): how the efs fixtures mount their EFS (efs_module: in the module's pytestmark)"
    )


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Any mount a crash or an interrupt left behind is taken down, and said."""
    for mount in list(_mounted.values()):
        try:
            mount.unmount()
            note = "unmounted"
        except UserError as exc:
            note = str(exc)
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"efs fixture: {mount.path} was still mounted at the session's end: {note}")
