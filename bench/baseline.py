"""The code before a change, for `bench/run.py --baseline`: a git revision or another checkout,
laid out as its own setup.cfg installs it, for this venv's Python to run with nothing of this
checkout on its path.

This venv's editable install finds `fusetrace.emulator` in this checkout whenever the package in
front of it lacks one, so pointing PYTHONPATH at a bare tree would mix the two versions: the
baseline is built (setuptools' `build_py`, which honours its `package_dir`) into a folder of its
own, and every module of it is checked to load from there.
"""

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SKIP = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.egg-info", "out")

# Run in the baseline's environment: import every module of its fusetrace, then name any
# fusetrace module that came from elsewhere, or any module from this checkout (bar its venv).
_CHECK = """
import importlib, pathlib, sys
site, here, venv = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), pathlib.Path(sys.prefix)
for f in sorted((site / "fusetrace").rglob("*.py")):
    parts = f.relative_to(site).with_suffix("").parts
    name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    if name.endswith("__main__"):
        continue
    try:
        importlib.import_module(name)
    except Exception:
        pass  # an optional dependency missing: what it would have imported is not loaded either
files = {n: pathlib.Path(m.__file__) for n, m in list(sys.modules.items()) if getattr(m, "__file__", None)}
ours = [f for f in files.values() if site in f.parents]
wrong = [f"{n} from {f}" for n, f in files.items() if site not in f.parents
         and (here in f.parents and venv not in f.parents or n == "fusetrace" or n.startswith("fusetrace."))]
print("; ".join(wrong[:5]) if wrong else f"ok {len(ours)}")
"""


class BaselineError(Exception):
    pass


@dataclass
class Baseline:
    site: Path  # the package as installed: PYTHONPATH for the baseline's server
    label: str  # the revision or checkout, for the report
    modules: int  # how many of its modules were checked to load from `site`

    def env(self) -> dict[str, str]:
        """The environment of the baseline's commands: its code first, and only its."""
        return dict(os.environ, PYTHONPATH=str(self.site))


def prepare(spec: str, work: Path) -> Baseline:
    """Lay out `spec` (a revision of this repository, or the path of another checkout) under
    `work` and check that it, not this checkout, is what its commands import."""
    base = work / "baseline-code"
    shutil.rmtree(base, ignore_errors=True)
    src, site = base / "src", base / "site"
    if Path(spec, "setup.cfg").is_file():
        checkout = Path(spec).resolve()
        shutil.copytree(checkout, src, ignore=SKIP)  # build_py writes beside the sources: not in theirs
        label = f"{checkout} at {_git(checkout, 'rev-parse', '--short', 'HEAD') or 'no git revision'}"
    else:
        sha = _git(REPO, "rev-parse", "--verify", "--quiet", f"{spec}^{{commit}}")
        if not sha:
            raise BaselineError(f"--baseline {spec}: neither a revision of {REPO} nor a checkout (no setup.cfg)")
        src.mkdir(parents=True)
        tar = base / "src.tar"
        subprocess.run(["git", "-C", str(REPO), "archive", "--output", str(tar), sha], check=True)
        subprocess.run(["tar", "-x", "-f", str(tar), "-C", str(src)], check=True)
        tar.unlink()
        label = f"{spec} ({sha[:10]})" if not sha.startswith(spec) else sha[:10]
    built = subprocess.run(
        [sys.executable, "-c", "from setuptools import setup; setup()", "-q", "build_py", "-d", str(site)],
        cwd=src,
        capture_output=True,
        text=True,
    )
    if built.returncode != 0 or not (site / "fusetrace").is_dir():
        last = (built.stderr.strip().splitlines() or ["no fusetrace package built"])[-1]
        raise BaselineError(f"--baseline {spec}: build_py failed: {last}")
    return Baseline(site, label, check(site))


def check(site: Path) -> int:
    """How many modules load from `site` in its environment; BaselineError naming any that do
    not (from this checkout, or a fusetrace elsewhere)."""
    done = subprocess.run(
        [sys.executable, "-P", "-c", _CHECK, str(site), str(REPO)],
        cwd=site,
        env=dict(os.environ, PYTHONPATH=str(site)),
        capture_output=True,
        text=True,
    )
    out = done.stdout.strip()
    if done.returncode != 0 or not out.startswith("ok "):
        raise BaselineError(f"baseline in {site} imports code from elsewhere: {out or done.stderr.strip()}")
    return int(out.split()[1])


def server_of(mnt: str) -> int:
    """The pid of the fusetrace server of `mnt`, found by its command line (the run state
    would be read by this checkout's code, whose format the baseline's may not share)."""
    for entry in os.scandir("/proc"):
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except (OSError, ValueError):  # not a process, or gone
            continue
        if b"fusetrace" in argv and b"--foreground" in argv and os.fsencode(mnt) in argv:
            return int(entry.name)
    raise BaselineError(f"no fusetrace server of {mnt} in /proc")


def pythonpath_of(pid: int) -> str | None:
    """PYTHONPATH in the environment process `pid` started with."""
    with open(f"/proc/{pid}/environ", "rb") as f:
        for item in f.read().split(b"\0"):
            if item.startswith(b"PYTHONPATH="):
                return os.fsdecode(item.partition(b"=")[2])
    return None


def _git(where: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""
