"""The static checks run with the tests: ruff over the repository and mypy over the
package as installed (emulator/ and scenarios/ are fusetrace.emulator and
fusetrace.scenarios, so mypy reads them through a folder of links in that shape)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "pyproject.toml"


def _tool(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def test_ruff_is_clean():
    done = subprocess.run([_tool("ruff"), "check", "--no-cache", "--config", str(CONFIG), str(REPO)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def installed(tmp_path: Path) -> Path:
    """A folder holding the package as installed (links), for MYPYPATH."""
    package = tmp_path / "fusetrace"
    package.mkdir()
    for entry in (REPO / "fusetrace").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for top in ("emulator", "scenarios"):
        (package / top).symlink_to(REPO / top)
    return tmp_path


def _mypy(installed: Path, *what: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([_tool("mypy"), "--config-file", str(CONFIG), "--cache-dir", str(installed / "cache"),
                           *what], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "MYPYPATH": str(installed)})


def test_mypy_is_clean(installed):
    done = _mypy(installed, "-p", "fusetrace", cwd=installed)
    report = done.stdout.replace(f"fusetrace{os.sep}emulator{os.sep}", f"emulator{os.sep}")
    report = report.replace(f"fusetrace{os.sep}scenarios{os.sep}", f"scenarios{os.sep}")
    assert done.returncode == 0, report + done.stderr


def test_mypy_is_clean_on_the_benchmarks(installed):
    """bench/ is run by hand, not by the suite: a name it uses that the package no longer
    has is found here, not halfway through a 20-minute run."""
    done = _mypy(installed, *sorted(p.name for p in (REPO / "bench").glob("*.py")), cwd=REPO / "bench")
    assert done.returncode == 0, done.stdout + done.stderr
