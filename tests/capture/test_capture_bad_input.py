"""`fusetrace capture` refused: each case one line on stderr naming what is wrong, exit 2,
no traceback, and no trace directory made.  Run as processes (the user, PATH and root are
the process's own).  A kernel without BTF is not tested: nothing here can hide
/sys/kernel/btf/vmlinux from the capture without a namespace of its own."""

import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest
from support import one_line_error

pytestmark = pytest.mark.timeout(300)


def _capture(*args: str, trace: Path, user: str | None = None, path: str | None = None) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "fusetrace", "capture", *args[:1], "--trace", str(trace), *args[1:]]
    if user:
        gid = pwd.getpwnam(user).pw_gid
        argv = ["setpriv", f"--reuid={user}", f"--regid={gid}", "--clear-groups", *argv]
    env = {**os.environ, "PATH": path} if path is not None else None
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)


def test_a_directory_that_is_not_a_mount_point(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    done = _capture(str(plain), "--for", "1s", trace=tmp_path / "trace")
    one_line_error(done, str(plain), "not a mount point", code=2)
    assert not (tmp_path / "trace").exists()


def test_a_path_that_does_not_exist(tmp_path):
    done = _capture(str(tmp_path / "nowhere"), "--for", "1s", trace=tmp_path / "trace")
    one_line_error(done, str(tmp_path / "nowhere"), "no such directory", code=2)
    assert not (tmp_path / "trace").exists()


def test_not_root(tmp_path):
    done = _capture("/", "--for", "1s", trace=tmp_path / "trace", user="nobody")
    one_line_error(done, "needs root", code=2)
    assert not (tmp_path / "trace").exists()


def test_no_bpftrace(tmp_path):
    done = _capture("/", "--for", "1s", trace=tmp_path / "trace", path=str(tmp_path))
    one_line_error(done, "bpftrace is not installed", code=2)
    assert not (tmp_path / "trace").exists()


@pytest.mark.parametrize(
    "args, needles",
    [
        (["--for", "1s", "--", "true"], ["a command or --for, not both"]),
        (["--", "no-such-command-i43"], ["no-such-command-i43", "command not found"]),
        (["--for", "0s"], ["--for", "above 0"]),
        (["--for", "soon"], ["--for", "soon"]),
    ],
)
def test_a_bad_command_line(tmp_path, args, needles):
    done = _capture("/", *args, trace=tmp_path / "trace")
    one_line_error(done, *needles, code=2)
    assert not (tmp_path / "trace").exists()
