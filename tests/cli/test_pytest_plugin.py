"""The `efs` pytest fixture, tested as a user's project uses it: a separate test file run
by pytest in a child process (pytester), finding the plugin through the installed
package's entry point, mounting real emulated file systems."""

import re
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
GUIDE = Path(__file__).resolve().parents[2] / "docs" / "PYTEST.md"


def _mounts_under(path) -> list[str]:
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:  # any name
        return [line.split()[4] for line in f if line.split()[4].startswith(str(path))]


def run(pytester: pytest.Pytester, source: str, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_user=source)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v", *args, timeout=300)


def test_a_user_test_gets_a_fresh_emulated_mount_with_its_own_trace(pytester):
    result = run(
        pytester,
        """
import os, pytest

def test_write_and_read(efs):
    (efs.path / "hello.txt").write_text("hi")
    assert (efs.source / "hello.txt").read_text() == "hi"
    assert efs.stats()["profile"] == "efs-bursting"
    assert efs.stats()["BurstCreditBalance"] > 0
    ops = set(efs.trace().op)
    assert {"create", "write"} <= ops, ops

def test_starts_empty(efs):
    assert os.listdir(efs.path) == []

@pytest.mark.efs(profile="efs-elastic", set={"nfs_acregmin_s": 0})
def test_marker(efs):
    assert efs.stats()["profile"] == "efs-elastic"

@pytest.mark.parametrize("efs", [{"profile": "efs-2016"}], indirect=True)
def test_indirect(efs):
    assert efs.stats()["profile"] == "efs-2016"

def test_set_and_a_fault_in_a_block(efs):
    efs.set(burst_credit_balance=0)
    assert efs.stats()["BurstCreditBalance"] < 1e9
    with efs.fault(op="fsync", errno="EIO", path="*.ckpt", count=1) as rule:
        fd = os.open(efs.path / "job.ckpt", os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, b"state")
        with pytest.raises(OSError) as failed:
            os.fsync(fd)
        os.close(fd)
        assert failed.value.errno == 5 and rule.fired == 1
    assert efs.faults() == []
    faulted = efs.trace().dropna(subset=["fault"])
    assert list(faulted.op) == ["fsync"]

@pytest.mark.efs(writeback_cache=False)
def test_short_writes_need_the_write_back_cache_off(efs):
    with efs.fault(op="write", short=3):
        fd = os.open(efs.path / "f", os.O_CREAT | os.O_WRONLY, 0o644)
        assert os.write(fd, b"hello") == 3
        os.close(fd)
    assert (efs.source / "f").read_bytes() == b"hel"
""",
    )
    result.assert_outcomes(passed=6)
    assert _mounts_under(pytester.path) == []


def test_a_failing_or_interrupted_test_leaves_no_mount(pytester):
    failing = run(
        pytester,
        """
def test_fails(efs):
    (efs.path / "f").write_text("x")
    assert False, "the application broke"
""",
    )
    failing.assert_outcomes(failed=1)
    assert _mounts_under(pytester.path) == []
    interrupted = run(
        pytester,
        """
def test_interrupted(efs):
    (efs.path / "f").write_text("x")
    raise KeyboardInterrupt

def test_never_reached(efs):
    pass
""",
    )
    assert interrupted.ret == pytest.ExitCode.INTERRUPTED
    assert _mounts_under(pytester.path) == []


def test_a_bad_option_fails_the_test_with_one_line(pytester):
    bad = [  # (the marker's arguments, the line its test fails with)
        ('profile="no-such-profile"', "*efs fixture: *no-such-profile*"),
        ('colour="red"', "*efs fixture: @pytest.mark.efs: unknown key 'colour'*"),
        ('writeback_cache="no"', "*efs fixture: writeback_cache must be True or False, got 'no'*"),
        (
            '"efs-elastic"',
            "*efs fixture: @pytest.mark.efs takes keywords*got 'efs-elastic': "
            "e.g. @pytest.mark.efs(profile='efs-elastic')*",
        ),
        (
            'set="burst_credit_balance=0"',
            "*efs fixture: @pytest.mark.efs: set must be a dict of profile keys*got 'burst_credit_balance=0'*",
        ),
        ('faults="no-such-faults.toml"', f"*--faults {pytester.path}/no-such-faults.toml: no such file*"),
        ("faults=3", "*efs fixture: faults must be the path of a faults file, got 3*"),
    ]
    result = run(
        pytester,
        "import pytest\n"
        + "".join(f"\n@pytest.mark.efs({marker})\ndef test_{i}(efs):\n    pass\n" for i, (marker, _) in enumerate(bad)),
    )
    result.assert_outcomes(errors=len(bad))
    result.stdout.fnmatch_lines_random([line for _, line in bad])
    assert "Traceback" not in result.stdout.str() and "TypeError" not in result.stdout.str()
    assert "During handling" not in result.stdout.str()  # each said once
    assert _mounts_under(pytester.path) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    "doc, tests", [(GUIDE, 4), (GUIDE.parent.parent / "README.md", 1)], ids=["PYTEST.md", "README.md"]
)
def test_the_worked_examples_run_as_written(pytester, doc, tests):
    [example] = re.findall(r"```python\n(.*?)```", doc.read_text(), re.S)
    result = run(pytester, example)
    result.assert_outcomes(passed=tests)
    assert _mounts_under(pytester.path) == []
