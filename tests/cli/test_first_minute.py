"""A new user's first minute: the installed command from any working directory,
--version, mount(8) and /etc/fstab through mount.fuse3, --debug, and a server log
whose lines say when."""

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support import fusetrace, is_mounted, one_line_error, poll

from fusetrace import __version__

FUSETRACE = str(Path(sys.executable).with_name("fusetrace"))  # the script pip installed
STAMPED = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d (DEBUG|INFO|WARNING|ERROR) [\w.]+: ")
MOUNTED = re.compile(r" INFO fusetrace\.server\.main: .* mounted on .* \(pid (\d+);")


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    (src / "f").write_text("hello\n")
    return src, mnt


def _server_pid(log: Path) -> int:
    return int(poll(lambda: MOUNTED.search(log.read_text())).group(1))


@pytest.mark.parametrize("shadow", ["an empty package", "another project's package"])
def test_mounts_from_the_folder_that_holds_a_folder_named_fusetrace(tmp_path, shadow):
    """Run from a folder that holds a package named fusetrace, `python -m fusetrace` would
    import it instead of this one: the server must not start that way.  (The clone's own
    top folder, no package, no longer shadows since the editable install names the checkout
    on sys.path: a regular package found later on the path wins over it.)"""
    here = tmp_path / "here"
    (here / "fusetrace").mkdir(parents=True)
    if shadow == "another project's package":
        (here / "fusetrace" / "__init__.py").write_text("raise ImportError('another project')\n")
    else:
        (here / "fusetrace" / "__init__.py").write_text("")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    shadowed = subprocess.run(
        [sys.executable, "-m", "fusetrace", "--version"], cwd=here, env=env, capture_output=True, text=True
    )
    assert shadowed.returncode != 0, "the folder does not shadow the package: this test tests nothing"
    src, mnt = _tree(tmp_path)
    try:
        done = subprocess.run(
            [FUSETRACE, "mount", str(src), str(mnt)], cwd=here, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        assert os.listdir(mnt) == ["f"] and (mnt / "f").read_text() == "hello\n"
        done = subprocess.run(
            [FUSETRACE, "umount", str(mnt)], cwd=here, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        assert not is_mounted(mnt)
    finally:
        if is_mounted(mnt):
            fusetrace("umount", str(mnt), check=False)


def test_umount_from_elsewhere_names_the_trace_given_relative_by_its_full_path(tmp_path):
    src, mnt = _tree(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    fusetrace_in = {"capture_output": True, "text": True, "timeout": 120}
    done = subprocess.run([FUSETRACE, "mount", str(src), str(mnt), "--trace", "t1"], cwd=tmp_path, **fusetrace_in)
    assert done.returncode == 0, done.stderr
    try:
        assert os.listdir(mnt) == ["f"]
    finally:
        done = subprocess.run([FUSETRACE, "umount", str(mnt)], cwd=elsewhere, **fusetrace_in)
    assert done.returncode == 0 and not is_mounted(mnt), done.stderr
    assert done.stdout == f"fusetrace: unmounted {mnt}; trace in {tmp_path / 't1'}\n"


def test_version():
    done = subprocess.run([FUSETRACE, "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    first, second = done.stdout.splitlines()
    assert first == f"fusetrace {__version__}"
    assert re.fullmatch(r"python 3\.[\d.]+, pyfuse3 [\d.]+, libfuse 3\.[\d.]+", second), second


def test_server_log_lines_carry_a_timestamp(tmp_path):
    src, mnt = _tree(tmp_path)
    log = tmp_path / "server.log"
    fusetrace("mount", str(src), str(mnt), "--log", str(log))
    try:
        assert os.listdir(mnt) == ["f"]
    finally:
        fusetrace("umount", str(mnt))
    lines = log.read_text().splitlines()
    assert MOUNTED.search(lines[0]) and STAMPED.match(lines[0]), lines
    assert STAMPED.match(lines[-1]) and "stopped" in lines[-1], lines
    assert not [ln for ln in lines if " DEBUG " in ln or "opcode:" in ln], lines  # neither debug log asked for


def test_debug_and_debug_fuse(tmp_path):
    """--debug: fusetrace's (and pyfuse3's) debug messages; --debug-fuse: libfuse's log of
    every request; both in the server's log, and the mount says where that is."""
    src, mnt = _tree(tmp_path)
    log = tmp_path / "server.log"
    done = fusetrace("mount", str(src), str(mnt), "--log", str(log), "--debug", "--debug-fuse")
    assert f"debug log in {log}" in done.stdout
    try:
        assert (mnt / "f").read_text() == "hello\n"
    finally:
        fusetrace("umount", str(mnt))
    text = log.read_text()
    debug = [ln for ln in text.splitlines() if STAMPED.match(ln) and " DEBUG " in ln]
    assert any(" fusetrace." in ln for ln in debug) and any(" pyfuse3: " in ln for ln in debug), text
    assert re.search(r"opcode: LOOKUP .*\n", text) and "opcode: READ " in text, text  # libfuse's own


def test_sigusr1_writes_every_thread_traceback_to_the_log(tmp_path):
    src, mnt = _tree(tmp_path)
    log = tmp_path / "server.log"
    fusetrace("mount", str(src), str(mnt), "--log", str(log))
    try:
        os.kill(_server_pid(log), signal.SIGUSR1)
        # faulthandler writes thread by thread; the current one may come last
        poll(lambda: "Current thread" in log.read_text())
        assert os.listdir(mnt) == ["f"]  # and it serves on
    finally:
        fusetrace("umount", str(mnt))


# Run inside a private mount namespace, where a folder holding a link to the installed
# script covers /usr/local/bin: mount(8) runs its helpers without the caller's PATH, so
# the shell mount.fuse3 starts looks in the default one.
_IN_NAMESPACE = 'mount --bind "$1" /usr/local/bin && shift && exec "$@"'


def _as_mount8(bindir: Path, *command: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", _IN_NAMESPACE, "sh", str(bindir), *command],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def mount8(tmp_path):
    if os.geteuid() != 0 or not shutil.which("unshare") or not os.path.exists("/sbin/mount.fuse3"):
        pytest.skip("needs root, unshare and mount.fuse3")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "fusetrace").symlink_to(FUSETRACE)
    return lambda *command: _as_mount8(bindir, *command)


def test_mount_t_fuse_fusetrace(tmp_path, mount8):
    """`mount -t fuse.fusetrace SRC MNT -o ...`: FUSE's options (ro) reach the kernel,
    fusetrace's (trace=, log=) reach fusetrace; umount(8) unmounts."""
    src, mnt = _tree(tmp_path)
    trace, log = tmp_path / "trace", tmp_path / "server.log"
    script = f"""
set -e
mount -t fuse.fusetrace {src} {mnt} -o ro,trace={trace},log={log},inline=never
cat {mnt}/f
grep " {mnt} " /proc/self/mountinfo
touch {mnt}/g 2>&1 || true
umount {mnt}
"""
    done = mount8("sh", "-c", script)
    assert done.returncode == 0, done.stderr
    assert f"mounted on {mnt}, tracing to {trace}" in done.stdout and "hello" in done.stdout, done.stdout
    [info] = [ln for ln in done.stdout.splitlines() if f" {mnt} " in ln]
    assert " - fuse.fusetrace " in info and info.split()[5].startswith("ro,"), info
    assert "Read-only file system" in done.stdout
    poll(lambda: "stopped" in log.read_text(), timeout=30)  # umount(8) does not wait for the server
    assert '"inline": "never"' in (trace / "_metadata.json").read_text()
    assert not is_mounted(mnt)


def test_fstab_line(tmp_path, mount8):
    """A line of /etc/fstab (here a file given to mount --fstab), with the options only
    mount(8) and systemd read, and fusetrace umount to unmount."""
    src, mnt = _tree(tmp_path)
    trace, log = tmp_path / "trace", tmp_path / "server.log"
    fstab = tmp_path / "fstab"
    fstab.write_text(
        f"# a comment\n{src} {mnt} fuse.fusetrace "
        f"noauto,nofail,_netdev,x-systemd.automount,log={log},debug,set=nothing 0 0\n"
    )
    done = mount8(FUSETRACE, "--version")  # the namespace works
    assert done.returncode == 0, done.stderr
    done = mount8("mount", "--fstab", str(fstab), str(mnt))  # set= without emulate=: refused
    one_line_error(done, "--set needs --emulate")
    fstab.write_text(
        f"{src} {mnt} fuse.fusetrace noauto,nofail,_netdev,x-systemd.automount,log={log},"
        f"debug,emulate=efs-2016,set=read_latency_ms=1,trace={trace} 0 0\n"
    )
    done = mount8("sh", "-c", f"mount --fstab {fstab} {mnt} && ls {mnt} && {FUSETRACE} umount {mnt}")
    assert done.returncode == 0, done.stderr
    assert f"debug log in {log}" in done.stdout and "\nf\n" in done.stdout, done.stdout
    assert f"unmounted {mnt}" in done.stdout
    assert '"read_latency_ms=1"' in (trace / "_metadata.json").read_text()
    assert [ln for ln in log.read_text().splitlines() if STAMPED.match(ln) and " DEBUG fusetrace." in ln]
    assert not is_mounted(mnt)


def test_mount8_unknown_option(tmp_path, mount8):
    src, mnt = _tree(tmp_path)
    done = mount8("mount", "-t", "fuse.fusetrace", str(src), str(mnt), "-o", "ro,bogus=1")
    one_line_error(done, "-o bogus", "unknown mount option")
    assert not is_mounted(mnt)
