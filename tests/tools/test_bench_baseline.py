"""bench/run.py --baseline: its options, and that the baseline it lays out runs its own code
(no timing: the benchmark itself is run by hand)."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_baseline", REPO / "bench" / "baseline.py")
assert _spec is not None and _spec.loader is not None
baseline = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(baseline)


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "bench" / "run.py"), *args], capture_output=True, text=True)


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--only", "fusetrace,nosuch"],
            "bench/run.py: --only: no target nosuch (targets: native, fusetrace, baseline,",
        ),
        (["--only", "fusetrace,baseline"], "bench/run.py: --only baseline needs --baseline REV|DIR"),
    ],
)
def test_bad_target_keys_get_one_line(args, message):
    done = _run(*args)
    assert done.returncode == 2
    assert done.stderr.startswith(message) and done.stderr.count("\n") == 1, done.stderr


def test_a_bad_revision_gets_one_line(tmp_path):
    done = _run("--only", "baseline", "--baseline", "no-such-revision", "--workdir", str(tmp_path))
    if "must run as root" in done.stderr or "not a local disk" in done.stderr:
        pytest.skip(done.stderr.strip())
    assert done.returncode == 2
    assert done.stderr == (
        f"bench/run.py: --baseline no-such-revision: neither a revision of {REPO} nor a checkout (no setup.cfg)\n"
    )


def test_a_revision_runs_its_own_code_and_the_check_sees_a_mix(tmp_path):
    base = baseline.prepare("HEAD", tmp_path)
    assert (base.site / "fusetrace" / "__init__.py").is_file()
    assert (base.site / "fusetrace" / "emulator" / "__init__.py").is_file()  # laid out as installed
    assert base.modules > 50
    assert base.env()["PYTHONPATH"] == str(base.site)
    # a name the baseline lacks is found in this checkout, which this venv's editable install
    # puts on sys.path (an old revision's top-level `emulator`, say): caught
    with open(base.site / "fusetrace" / "__init__.py", "a") as f:
        f.write("import emulator\n")
    with pytest.raises(baseline.BaselineError, match=r"emulator\S* from " + re.escape(str(REPO))):
        baseline.check(base.site)
