"""The static checks run with the tests: ruff over the repository and mypy over the
package, read from the checkout as it is (fusetrace/emulator and fusetrace/scenarios are
committed links to emulator/ and scenarios/, so the folders are the installed names)."""

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "pyproject.toml"


def _tool(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def test_ruff_is_clean():
    done = subprocess.run(
        [_tool("ruff"), "check", "--no-cache", "--config", str(CONFIG), str(REPO)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_format_leaves_every_file_as_it_is():
    done = subprocess.run(
        [_tool("ruff"), "format", "--check", "--no-cache", "--config", str(CONFIG), str(REPO)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr


MOST_LINES = 650  # "about 600": a module a newcomer can hold in mind at once


def test_every_module_says_what_it_is_for_and_stays_small():
    """Issue 38's rooms: each module opens with a docstring saying what it is for, and none
    grows past MOST_LINES (split it by what its parts do, as server/ and report/ were)."""
    sources = [
        p
        for top in ("fusetrace", "emulator", "scenarios")
        for p in sorted((REPO / top).rglob("*.py"))
        if p.relative_to(REPO).parts[:2] not in (("fusetrace", "emulator"), ("fusetrace", "scenarios"))
    ]
    assert len(sources) > 90
    unsaid = [str(p.relative_to(REPO)) for p in sources if not ast.get_docstring(ast.parse(p.read_text()))]
    large = [(str(p.relative_to(REPO)), n) for p in sources if (n := len(p.read_text().splitlines())) > MOST_LINES]
    assert unsaid == [], "modules without a docstring saying what they are for"
    assert large == [], f"modules over {MOST_LINES} lines"


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory) -> Path:
    """One cache for the module's mypy runs: the benchmarks' run then reads the package's
    modules it imports from the package's run, where it checked them again (3-4 s)."""
    return tmp_path_factory.mktemp("mypy") / "cache"


def _mypy(cache: Path, *what: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [_tool("mypy"), "--config-file", str(CONFIG), "--cache-dir", str(cache), *what],
        cwd=REPO,
        capture_output=True,
        text=True,
    )


def test_mypy_is_clean(mypy_cache):
    done = _mypy(mypy_cache, "-p", "fusetrace")
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_is_clean_on_the_benchmarks(mypy_cache):
    """bench/ is run by hand, not by the suite: a name it uses that the package no longer
    has is found here, not halfway through a 20-minute run."""
    done = _mypy(mypy_cache, *sorted(str(p.relative_to(REPO)) for p in (REPO / "bench").glob("*.py")))
    assert done.returncode == 0, done.stdout + done.stderr


def _strict_modules() -> list[str]:
    """The module patterns pyproject.toml holds to mypy --strict's checks."""
    overrides = tomllib.loads(CONFIG.read_text())["tool"]["mypy"]["overrides"]
    return [m for o in overrides if o.get("disallow_untyped_defs") for m in o["module"]]


def test_the_strict_list_names_modules_that_exist():
    """A misspelt or moved name in the list matches nothing, and mypy would say nothing."""
    assert _strict_modules()
    for pattern in _strict_modules():
        path = REPO.joinpath(*pattern.removesuffix(".*").split("."))
        assert path.is_dir() or path.with_suffix(".py").is_file(), pattern
