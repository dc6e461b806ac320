"""The `efs` pytest fixture, tested as a user's project uses it: a separate test file run
by pytest in a child process (pytester), finding the plugin through the installed
package's entry point, mounting real emulated file systems."""

import importlib.util
import re
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
GUIDE = Path(__file__).resolve().parents[2] / "docs" / "PYTEST.md"
# (page, which of its python blocks, the tests it holds): every example a user may copy
WORKED = [(GUIDE, 0, 5), (GUIDE, 1, 3), (GUIDE.parent.parent / "README.md", 0, 1)]


def _mounts_under(path) -> list[str]:
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:  # any name
        return [line.split()[4] for line in f if line.split()[4].startswith(str(path))]


def run(pytester: pytest.Pytester, source: str, *args: str, **more: str) -> pytest.RunResult:
    """pytest run on the test file `source` (test_user.py), and on `more` files (name: source)."""
    pytester.makepyfile(test_user=source, **more)
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


# A user's tests of one mount shared by several tests: each notes the mount it saw in
# seen.txt (its server's pid, its path, whether the earlier mounts are still there), changes
# all a reset must undo, and checks that the test before it left nothing behind but files.
SHARED = """
import os, pathlib, subprocess, sys
import pytest
from fusetrace.client import ask, server_of

SEEN = pathlib.Path(__file__).parent / "seen.txt"


def seen(efs):
    earlier = [ln.split()[1] for ln in SEEN.read_text().splitlines()] if SEEN.exists() else []
    with open("/proc/self/mountinfo") as f:
        mounted = {ln.split()[4] for ln in f}
    gone = sorted({p for p in earlier if p != str(efs.path) and p not in mounted})
    with open(SEEN, "a") as f:
        f.write(f"{server_of(str(efs.path))['pid']} {efs.path} {len(gone)}\\n")


def changes_everything(efs):
    seen(efs)
    (efs.workdir / "kept").write_text("x")
    efs.set(burst_credit_balance=0)
    subprocess.run([sys.executable, "-m", "fusetrace", "fault", str(efs.path), "add", "--op", "mkdir",
                    "--errno", "EACCES"], check=True, capture_output=True)
    efs.event(at=3600, stall=60)
    assert efs.stats()["BurstCreditBalance"] < 1e6 and len(efs.faults()) == 1
    assert "create" in set(efs.trace().op)


def starts_as_mounted(efs):
    seen(efs)
    assert efs.stats()["BurstCreditBalance"] > 1e12  # the profile's 2.1 TiB
    assert efs.faults() == [] and ask(str(efs.path), cmd="fault_list")["events"] == []
    os.mkdir(efs.workdir / "d")  # the rule is gone
    assert os.listdir(efs.workdir) == ["d"]
    assert len(list(efs.path.glob("*/kept"))) >= 1  # files stay
    ops = efs.trace()  # this test's records alone
    assert "mkdir" in set(ops.op) and "create" not in set(ops.op), ops[["op", "path"]]


def fails_midway(efs):
    seen(efs)
    efs.set(burst_credit_balance=0)
    assert False, "the application broke"
"""


def _seen(pytester: pytest.Pytester) -> list[tuple[str, str, int]]:
    """(server pid, mount, earlier mounts already gone) for each test that ran, in order."""
    return [
        (pid, path, int(gone))
        for pid, path, gone in (ln.split() for ln in (pytester.path / "seen.txt").read_text().splitlines())
    ]


def test_efs_module_mounts_once_per_module_and_resets_between_its_tests(pytester):
    tests = (
        SHARED
        + """
def test_1(efs_module):
    changes_everything(efs_module)

def test_2(efs_module):
    starts_as_mounted(efs_module)

def test_3(efs_module):
    fails_midway(efs_module)

def test_4(efs_module):
    starts_as_mounted(efs_module)
"""
    )
    other = """
import pytest
from test_user import seen, starts_as_mounted

pytestmark = pytest.mark.efs(profile="efs-elastic")

def test_5(efs_module):
    seen(efs_module)
    assert efs_module.stats()["profile"] == "efs-elastic"

@pytest.mark.efs(profile="efs-2016")
def test_6_a_tests_own_marker_is_refused(efs_module):
    pass

@pytest.mark.parametrize("efs_module", [{"set": {"read_latency_ms": 2}}], indirect=True)
def test_7_a_parameter_is_a_mount_of_its_own(efs_module):
    assert efs_module.options["set"] == {"read_latency_ms": 2}
    assert efs_module.stats()["profile"] == "efs-elastic"
"""
    result = run(pytester, tests, test_user_other=other)
    result.assert_outcomes(passed=5, failed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*efs fixture: efs_module is mounted once for its module, before this test: @pytest.mark.efs on a "
            "test does not reach it (options: the module's pytestmark)"
        ]
    )
    seen = _seen(pytester)
    assert len({(pid, path) for pid, path, _ in seen[:4]}) == 1  # one mount for the module's four tests
    assert seen[4][:2] != seen[0][:2] and seen[4][2] == 1  # the other module's own; the first's gone
    assert _mounts_under(pytester.path) == []


def test_efs_session_mounts_once_for_the_session(pytester):
    pytester.makeini("[pytest]\nefs_profile = efs-2016\n")
    tests = (
        SHARED
        + """
def test_1(efs_session):
    changes_everything(efs_session)

def test_2(efs_session):
    starts_as_mounted(efs_session)
"""
    )
    other = """
import os
from test_user import starts_as_mounted

def test_3(efs_session):
    starts_as_mounted(efs_session)
    assert efs_session.stats()["profile"] == "efs-2016"

def test_4(efs):  # beside it, a test's own mount
    (efs.workdir / "f").write_text("x")
    assert os.listdir(efs.path) == ["f"]
"""
    result = run(pytester, tests, test_user_other=other)
    result.assert_outcomes(passed=4)
    seen = _seen(pytester)
    assert len({(pid, path) for pid, path, _ in seen}) == 1  # one mount for three tests in two modules
    assert "still mounted at the session's end" not in result.stdout.str()  # its teardown took it down
    assert _mounts_under(pytester.path) == []


def test_a_bad_option_of_a_wider_scope_fails_its_tests_with_one_line(pytester):
    result = run(
        pytester,
        """
import pytest

pytestmark = pytest.mark.efs(colour="red")

def test_1(efs_module):
    pass

def test_2(efs_module):
    pass
""",
        test_user_session="""
import pytest

@pytest.mark.efs(profile="efs-2016")
def test_3(efs_session):
    pass
""",
    )
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines_random(
        [
            "*efs fixture: @pytest.mark.efs: unknown key 'colour'*",
            "*efs fixture: efs_session is mounted once for its session, before this test: @pytest.mark.efs on a "
            "test does not reach it (options: the ini option efs_profile)",
        ]
    )
    # each test of the module, once (the short summary repeats it, in full where CI is set)
    assert [line for line in result.stdout.lines if line.startswith("efs fixture: @pytest.mark.efs: unknown key")] == [
        "efs fixture: @pytest.mark.efs: unknown key 'colour' (keys: crashable, faults, profile, set, writeback_cache)"
    ] * 2
    assert "Traceback" not in result.stdout.str() and "During handling" not in result.stdout.str()
    assert _mounts_under(pytester.path) == []


@pytest.mark.skipif(importlib.util.find_spec("xdist") is None, reason="pytest-xdist is not installed")
def test_efs_session_under_xdist_is_one_mount_per_worker(pytester):
    tests = SHARED + "".join(
        f"\ndef test_{i}(efs_session):\n    seen(efs_session)\n    (efs_session.workdir / 'f').write_text('x')\n"
        for i in range(6)
    )
    result = run(pytester, tests, "-n", "2")
    result.assert_outcomes(passed=6)
    seen = _seen(pytester)
    assert len({(pid, path) for pid, path, _ in seen}) == 2  # gw0's and gw1's
    assert all("popen-gw" in path for _, path, _ in seen)  # each under its worker's own base
    assert _mounts_under(pytester.path) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    "doc, block, tests",
    WORKED,
    ids=["PYTEST.md", "PYTEST.md-module", "README.md"],
)
def test_the_worked_examples_run_as_written(pytester, doc, block, tests):
    examples = re.findall(r"```python\n(.*?)```", doc.read_text(), re.S)
    assert len(examples) == len([b for d, b, _ in WORKED if d == doc])  # each is run here
    result = run(pytester, examples[block])
    result.assert_outcomes(passed=tests)
    assert _mounts_under(pytester.path) == []
