"""Helpers the tests share: the command line run as a user would, mount checks, polling,
the one-line error check, a mount's handle (fixtures live in tests/conftest.py)."""

import contextlib
import io
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

from fusetrace import cli, processes
from fusetrace.server import runstate

ROOT = Path(__file__).resolve().parents[2]


def fusetrace(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the fusetrace command line as a user would."""
    done = subprocess.run([sys.executable, "-m", "fusetrace", *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"fusetrace {' '.join(args)} failed ({done.returncode}): {done.stderr}")
    return done


def run_in_process(argv: list[str]) -> tuple[int | None, str, str]:
    """(exit code, stdout, stderr) of the command line run here; exit code None and the
    traceback as stderr when an exception left it.  The logging it configures is undone:
    pytest's own handlers (caplog) stay on the root logger."""
    out, err = io.StringIO(), io.StringIO()
    loggers = [logging.getLogger(name) for name in ("", "fusetrace", "pyfuse3")]
    saved = [(lg.handlers[:], lg.level) for lg in loggers]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            return None, out.getvalue(), err.getvalue() + traceback.format_exc()
        finally:
            for lg, (handlers, level) in zip(loggers, saved):
                lg.handlers[:] = handlers
                lg.setLevel(level)
    return code, out.getvalue(), err.getvalue()


def fusetrace_here(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """fusetrace(), the command run in this process: for the fixtures' mounts and unmounts, the
    polls of `stats` and the commands over traces whose results a test reads, the same command
    less a Python start and its imports (a quarter to half a second each on a loaded host,
    hundreds of times a suite).  An exception leaving the command is exit code None and its
    traceback on stderr.  What only a real process shows (its exit by a signal, the bytes of a
    name it prints) is tested with fusetrace()."""
    code, out, err = run_in_process(list(args))
    if check and code != 0:
        raise AssertionError(f"fusetrace {' '.join(args)} failed ({code}): {err}")
    return subprocess.CompletedProcess(["fusetrace", *args], code, out, err)


def mount_here(source: Path, mountpoint: Path, *options: str) -> None:
    """`fusetrace mount SOURCE MOUNTPOINT OPTIONS` in this process (fusetrace_here).  Its server
    is then this process's child, not init's as when a `fusetrace mount` process has exited:
    a thread waits for it, as init would, so that a server that exits or is killed leaves no
    zombie behind (tests see a server gone by its /proc/PID)."""
    fusetrace_here("mount", str(source), str(mountpoint), *options)
    state = runstate.read(str(mountpoint))
    if state is not None:
        threading.Thread(target=_reap, args=(state["pid"],), daemon=True).start()


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):  # not ours, or reaped by subprocess meanwhile
        os.waitpid(pid, 0)


def stats_json(mountpoint: Path) -> dict:
    """`fusetrace stats MOUNTPOINT --json`, in this process (tests poll it)."""
    return json.loads(fusetrace_here("stats", str(mountpoint), "--json").stdout)


def is_mounted(path: Path) -> bool:
    target = str(path)
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:  # any name
        return any(line.split()[4] == target for line in f)


def unshared(script: str | bytes, *args: str | bytes) -> list[str | bytes]:
    """argv running the shell `script` with `args` ($0, $1...) in a private mount namespace
    (what it mounts there, a tmpfs or a test's FUSE mount, is gone with it)."""
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, *args]


def mount_fails(dirs: Path, *options: str) -> subprocess.CompletedProcess:
    """`fusetrace mount DIRS/src DIRS/mnt OPTIONS` that must fail: its result, once the
    mount point is checked to be left unmounted."""
    done = fusetrace("mount", str(dirs / "src"), str(dirs / "mnt"), *options, check=False)
    assert not is_mounted(dirs / "mnt")
    return done


def poll(predicate, timeout: float = 10.0, interval: float = 0.02):
    """Wait until predicate() is true, failing after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s: {predicate}")
        time.sleep(interval)


def one_line_error(done: subprocess.CompletedProcess, *needles: str, code: int | None = None) -> str:
    """A command failed (with exit code `code`, if given) with exactly one line on
    stderr, no traceback, holding every needle."""
    if code is None:
        assert done.returncode != 0
    else:
        assert done.returncode == code, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def descendants(pid: int) -> dict[int, str]:
    """{pid: command line} of every process below `pid` (processes.descendants): only
    processes a test started, never a look-up by name that could match anything else on
    the machine.  Processes that exit meanwhile are left out."""
    found: dict[int, str] = {}
    for child in processes.descendants(pid):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                found[child] = f.read().rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
        except FileNotFoundError:
            continue
    return found


class Mount:
    def __init__(self, source: Path, mountpoint: Path, trace: Path | None):
        self.source, self.mountpoint, self.trace = source, mountpoint, trace

    def server_pid(self) -> int:
        """The pid the mount's server recorded in its run state (the one `fusetrace umount` signals)."""
        state = runstate.read(str(self.mountpoint))
        assert state is not None, f"no run state for {self.mountpoint}"
        return state["pid"]

    def unmount(self) -> None:
        if is_mounted(self.mountpoint):
            code, _, _ = run_in_process(["umount", str(self.mountpoint)])
            if code != 0 and is_mounted(self.mountpoint):
                subprocess.run(["fusermount3", "-uz", str(self.mountpoint)], check=False)


def served(prefix: str, *options: str) -> Iterator[tuple[Path, Path]]:
    """(source, mountpoint) of an allow_other mount served by root with `options`, in a
    fresh directory every user can reach (pytest's tmp_path is root's alone); unmounted and
    removed at the end: a fixture's `yield from served(...)`."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(base, 0o755)
    src, mnt = base / "src", base / "mnt"
    src.mkdir(mode=0o755)
    mnt.mkdir(mode=0o755)
    mount_here(src, mnt, "-o", "allow_other", *options, "--log", str(base / "server.log"))
    try:
        yield src, mnt
    finally:
        Mount(src, mnt, None).unmount()
        shutil.rmtree(base, ignore_errors=True)


def git_env(home: Path) -> dict[str, str]:
    """The environment git runs in a test with: an author and committer, and HOME at `home`
    (no user's configuration)."""
    return {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "HOME": str(home),
    }
