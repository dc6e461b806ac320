"""Hangs and leftovers: a mount on its own source, a trace the mount would hide, a hung
(stopped) server at the mountpoint, the source walk of an emulated mount, and SIGTERM or
SIGHUP to a long-running command.  Every failure is one line, bounded in time, and leaves
no mount, process or scratch directory behind."""

import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
import trio
from support import fusetrace, is_mounted, one_line_error, poll

from fusetrace import umount_cli
from fusetrace.errors import UserError
from fusetrace.server import runstate
from fusetrace.shaping import emulation

GiB = 1 << 30


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return False
    return text[text.rindex(")") + 2] not in "ZX"


# -- paths that would deadlock the server or lose the trace --------------------------------


def test_mountpoint_equal_to_the_source_is_refused(tmp_path):
    (tmp_path / "src" / "sub").mkdir(parents=True)
    (tmp_path / "link").symlink_to("src")
    for mountpoint in ("src", "link", "src/"):
        done = fusetrace("mount", str(tmp_path / "src"), str(tmp_path / mountpoint), check=False)
        one_line_error(done, "is the source itself")
        assert not is_mounted(tmp_path / "src")


def test_trace_inside_the_mountpoint_is_refused(tmp_path):
    for d in ("src", "mnt"):
        (tmp_path / d).mkdir()
    (tmp_path / "mlink").symlink_to("mnt")
    for trace in ("mnt", "mnt/t", "mlink/deeper/t"):
        done = fusetrace(
            "mount", str(tmp_path / "src"), str(tmp_path / "mnt"), "--trace", str(tmp_path / trace), check=False
        )
        one_line_error(done, "inside the mountpoint", str(tmp_path / "mnt"))
        assert not is_mounted(tmp_path / "mnt")
    assert not (tmp_path / "mnt" / "t").exists()


# -- a hung server at the mountpoint -------------------------------------------------------


def test_a_stopped_server_is_named_quickly_and_umount_is_bounded(mount, tmp_path):
    m = mount()
    (m.source / "sub").mkdir()
    pid = m.server_pid()
    other = tmp_path / "other"
    other.mkdir()
    os.kill(pid, signal.SIGSTOP)
    try:
        poll(lambda: _state(pid) == "T")
        begin = time.monotonic()
        done = fusetrace("mount", str(other), str(m.mountpoint), check=False, timeout=30)
        one_line_error(done, f"mountpoint {m.mountpoint}", "does not answer", "fusetrace umount")
        named_in = time.monotonic() - begin
        assert named_in < 8, named_in
        # a source below the hung mount: named too, not waited on
        done = fusetrace("mount", str(m.mountpoint / "sub"), str(other), check=False, timeout=30)
        one_line_error(done, "source", f"on {m.mountpoint}", "does not answer")
        begin = time.monotonic()
        done = fusetrace("umount", str(m.mountpoint), check=False, timeout=30)
        one_line_error(done, "stopped", f"kill -CONT {pid}")
        assert time.monotonic() - begin < 8
        assert not is_mounted(m.mountpoint)
    finally:
        os.kill(pid, signal.SIGCONT)
    poll(lambda: not _alive(pid), timeout=30)  # resumed, it finds its mount gone and exits
    assert not is_mounted(m.mountpoint)


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    return text[text.rindex(")") + 2]


def _process(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code])


def test_umount_waits_while_the_server_works_and_not_when_it_stalls(monkeypatch):
    monkeypatch.setattr(umount_cli, "STALL_TIMEOUT", 0.5)
    # working (CPU) for longer than the stall timeout, then gone: waited for, no error
    busy = _process("import time\nend = time.monotonic() + 1.5\nwhile time.monotonic() < end: pass")
    try:
        umount_cli._wait_server("/m", busy.pid, None)
        assert busy.wait(timeout=5) == 0
    finally:
        busy.kill()
        busy.wait()
    idle = _process("import time; time.sleep(60)")
    try:
        poll(lambda: _state(idle.pid) == "S")
        begin = time.monotonic()
        with pytest.raises(UserError, match=f"no progress for 0.5 s .*kill {idle.pid}"):
            umount_cli._wait_server("/m", idle.pid, None)
        assert time.monotonic() - begin < 3
        os.kill(idle.pid, signal.SIGSTOP)
        poll(lambda: _state(idle.pid) == "T")
        begin = time.monotonic()
        with pytest.raises(UserError, match=f"is stopped .*kill -CONT {idle.pid}"):
            umount_cli._wait_server("/m", idle.pid, "/trace")
        assert time.monotonic() - begin < 0.5
    finally:
        idle.kill()
        idle.wait()


# -- the source walk of an emulated mount --------------------------------------------------


def test_the_source_walk_runs_in_the_background_and_is_abandoned_at_unmount(monkeypatch, tmp_path):
    """Emulation.start returns, and the loop runs, while the walk is still blocked; the
    profile's stored_size holds until the walk completes; a walk in progress does not hold
    up the end.  A walk back on the loop (or awaited in start) blocks start for 10 s."""
    release, walking = threading.Event(), threading.Event()

    def slow_walk(root):
        walking.set()
        release.wait(10)
        return 7 * GiB

    monkeypatch.setattr(emulation, "_tree_bytes", slow_walk)
    monkeypatch.setattr(emulation, "CALIBRATE_WAIT", 0)
    emu = emulation.Emulation.open("efs-tiny", ["storage_remeasure_s=0"], str(tmp_path))
    profile_size = emu.model.params.stored_size

    async def main():
        async with trio.open_nursery() as nursery:
            with trio.fail_after(5):
                await emu.start(nursery, None, None)
                await trio.to_thread.run_sync(walking.wait)
            assert not emu.measured
            assert emu.model.metrics(emulation._now())["StorageBytes"] == profile_size
            monkeypatch.setattr(emulation, "MEASURE_EVERY", 0)  # the next walk at once
            release.set()
            with trio.fail_after(5):
                while not emu.measured:  # noqa: ASYNC110 (a flag the walk thread sets)
                    await trio.sleep(0.01)
            assert emu.model.metrics(emulation._now())["StorageBytes"] == profile_size + 7 * GiB
            walking.clear()
            release.clear()
            with trio.fail_after(5):
                await trio.to_thread.run_sync(walking.wait)  # a second walk, blocked
            nursery.cancel_scope.cancel()

    begin = time.monotonic()
    try:
        trio.run(main)
        assert time.monotonic() - begin < 5
    finally:
        release.set()


def test_the_source_walk_follows_no_symlink(tmp_path):
    src, outside = tmp_path / "src", tmp_path / "outside"
    (src / "d" / "e").mkdir(parents=True)
    outside.mkdir()
    (src / "a").write_bytes(b"x" * 100)
    (src / "d" / "e" / "b").write_bytes(b"x" * 50)
    (outside / "big").write_bytes(b"x" * 100_000)
    (src / "d" / "to-dir").symlink_to(outside)
    (src / "to-file").symlink_to(outside / "big")
    (src / "to-self").symlink_to(src)
    assert emulation._tree_bytes(str(src)) == 150
    assert emulation._tree_bytes(str(tmp_path / "missing")) == 0


# -- SIGTERM and SIGHUP to long-running commands -------------------------------------------


def _tagged(tag: str) -> dict[int, dict[str, str]]:
    """The processes whose environment carries `tag`: this run's, whoever their parent."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or not _alive(int(name)):
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
        except OSError:
            continue
        if env.get(b"FUSETRACE_TEST_TAG") == tag.encode():
            found[int(name)] = {k.decode(errors="replace"): v.decode(errors="replace") for k, v in env.items()}
    return found


def _our_mount(tag: str) -> str | None:
    """This run's scenario mount: a fusetrace mount whose recorded server carries the tag."""
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:  # any name
        points = [line.split()[4] for line in f if " fuse.fusetrace " in line]
    for point in points:
        state = runstate.read(point)
        if state and state["pid"] in _tagged(tag):
            return point
    return None


def _run_and_signal(tmp_path, args, signum, ready):
    """Start `fusetrace scenario run ARGS`, wait for ready(tag, mount), send signum; what
    was seen (mount, processes, scratch and work directories) and the exit code."""
    tag = uuid.uuid4().hex
    env = dict(os.environ, FUSETRACE_TEST_TAG=tag)
    proc = subprocess.Popen(
        [sys.executable, "-m", "fusetrace", "scenario", "run", *args, "--out", str(tmp_path / "out")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen = {}
    try:
        mnt = poll(lambda: _our_mount(tag), timeout=60, interval=0.05)
        poll(lambda: ready(tag), timeout=60, interval=0.05)
        seen = {pid: (env, _pgid(pid)) for pid, env in _tagged(tag).items() if pid != proc.pid}
        proc.send_signal(signum)
        code = proc.wait(timeout=60)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in _tagged(tag):  # never let a test leave processes behind
            os.kill(pid, signal.SIGCONT)
    return code, err, mnt, seen, tag


def _assert_all_gone(mnt, seen, tag):
    """No mount, none of the processes seen (by pid), none in their process groups (the
    steps' own; not pytest's), no tagged process, no scratch directory."""
    assert not is_mounted(mnt)
    poll(lambda: not [pid for pid in seen if _alive(pid)], timeout=10, interval=0.05)
    groups = {pgid for _, pgid in seen.values()} - {None, os.getpgrp()}
    in_groups = [p for p in map(int, filter(str.isdigit, os.listdir("/proc"))) if _alive(p) and _pgid(p) in groups]
    assert not in_groups
    assert not _tagged(tag)
    assert not os.path.exists(os.path.dirname(mnt))  # the scratch directory


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def test_sigterm_during_a_step_unwinds_like_ctrl_c(tmp_path):
    path = tmp_path / "long.toml"
    path.write_text(
        'title = "t"\nsystem = "s"\nsource = "none"\nprofile = "efs-tiny"\n'
        '[[steps]]\nname = "long"\nrun = "sleep 600 & sleep 600; wait"\n'
    )

    def two_sleeps(tag):
        return sum(1 for env in _tagged(tag).values() if "WORK" in env) >= 3  # the shell, 2 sleeps

    code, err, mnt, seen, tag = _run_and_signal(tmp_path, [str(path)], signal.SIGTERM, two_sleeps)
    assert code == 128 + signal.SIGTERM, err
    assert "stopped by SIGTERM" in err
    work = {env["WORK"] for env, _ in seen.values() if "WORK" in env}
    assert len(work) == 1
    _assert_all_gone(mnt, seen, tag)
    assert not os.path.exists(work.pop())


def test_sighup_while_the_mount_comes_up_unwinds(tmp_path):
    """Signalled as soon as the mount shows, while `fusetrace mount` still waits for it to
    be ready: the mount that comes up is taken down again."""
    code, err, mnt, seen, tag = _run_and_signal(tmp_path, ["efs-2018-touch", "--fast"], signal.SIGHUP, lambda tag: True)
    assert code == 128 + signal.SIGHUP, err
    _assert_all_gone(mnt, seen, tag)
