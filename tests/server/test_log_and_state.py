"""The server's own files given by path: `--log FILE` never writes through a link planted
there or into another user's file, and `fusetrace umount` of a killed server leaves no
run state or control socket behind (docs/SECURITY.md, "The server's own files given by
path"; docs/RELIABILITY.md, "A killed server's state"), nor fails on a mount table holding
a name that is not UTF-8."""

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from support import fusetrace, is_mounted, one_line_error, poll

from fusetrace import processes
from fusetrace.server import runstate

NOBODY = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give files to another user")


@pytest.fixture
def sticky():
    """A world-writable sticky directory, as /tmp is, where another user plants things."""
    base = Path(tempfile.mkdtemp(prefix="fusetrace-log-"))
    os.chmod(base, 0o1777)
    (base / "src").mkdir()
    (base / "mnt").mkdir()
    yield base
    if is_mounted(base / "mnt"):
        fusetrace("umount", str(base / "mnt"), check=False)
    for p in sorted(base.rglob("*"), reverse=True):
        p.unlink() if not p.is_dir() or p.is_symlink() else p.rmdir()
    base.rmdir()


def _plant(base: Path, what: str) -> Path:
    """`what` at base/server.log, as another user (nobody) would leave it; returns the
    victim a link points to (root's, which a write through the link would change)."""
    log, victim = base / "server.log", base / "victim"
    victim.write_text("keep\n")
    if what.startswith("symlink"):
        if what == "symlink, not sticky":
            os.chmod(base, 0o777)  # (in a sticky one, Linux refuses an O_CREAT through another user's link)
        os.symlink(victim, log)
        os.lchown(log, NOBODY, NOBODY)
    elif what == "dangling symlink":
        os.symlink(base / "made-through-the-link", log)
        os.lchown(log, NOBODY, NOBODY)
    elif what == "another user's file":
        log.write_text("theirs\n")
        os.chown(log, NOBODY, NOBODY)
    elif what == "fifo":
        os.mkfifo(log)
        os.chown(log, NOBODY, NOBODY)
    else:  # a second name of a file of ours (where protected_hardlinks is off, anyone can)
        os.link(victim, log)
    return victim


@pytest.mark.parametrize(
    "what, why",
    [
        ("symlink", "is a symbolic link; refusing to follow it"),
        ("symlink, not sticky", "is a symbolic link; refusing to follow it"),
        ("dangling symlink", "is a symbolic link; refusing to follow it"),
        ("another user's file", f"belongs to uid {NOBODY}"),
        ("fifo", "not a regular file"),
        ("hard link", "has 2 names (hard links)"),
    ],
)
def test_a_log_planted_by_another_user_is_refused_in_one_line(sticky, what, why):
    victim = _plant(sticky, what)
    log = sticky / "server.log"
    before = os.lstat(log)
    done = fusetrace("mount", str(sticky / "src"), str(sticky / "mnt"), "--log", str(log), check=False)
    one_line_error(done, f"--log {log}: {why}", code=1)
    assert not is_mounted(sticky / "mnt")
    assert victim.read_text() == "keep\n"  # nothing written through a link
    assert not (sticky / "made-through-the-link").exists()
    after = os.lstat(log)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)


def test_a_directory_link_planted_on_the_logs_way_is_not_followed(sticky):
    """nobody links a world-writable directory's name to a directory of root's: the log's
    name there is root's own file, one name, so only the way to it can tell."""
    os.chmod(sticky, 0o777)
    theirs, ours = sticky / "pdir", sticky / "rootdir"
    ours.mkdir(mode=0o755)
    (ours / "passwd").write_text("keep\n")
    os.symlink(ours, theirs)
    os.lchown(theirs, NOBODY, NOBODY)
    done = fusetrace("mount", str(sticky / "src"), str(sticky / "mnt"), "--log", str(theirs / "passwd"), check=False)
    one_line_error(
        done, f"--log {theirs}/passwd: {theirs} is a symbolic link of uid {NOBODY}", "refusing to follow", code=1
    )
    assert not is_mounted(sticky / "mnt")
    assert (ours / "passwd").read_text() == "keep\n"
    # a link of root's own on the way is followed, as the operator made it
    os.unlink(theirs)
    os.symlink(ours, theirs)
    fusetrace("mount", str(sticky / "src"), str(sticky / "mnt"), "--log", str(theirs / "server.log"))
    fusetrace("umount", str(sticky / "mnt"))
    assert "mounted on" in (ours / "server.log").read_text()


def test_a_new_log_is_made_private_and_an_own_log_appended_to(sticky):
    log = sticky / "server.log"
    for _ in range(2):
        fusetrace("mount", str(sticky / "src"), str(sticky / "mnt"), "--log", str(log))
        fusetrace("umount", str(sticky / "mnt"))
    st = os.lstat(log)
    assert (st.st_mode & 0o7777, st.st_uid) == (0o600, 0)
    assert log.read_text().count("mounted on") == 2  # the second run appended


def _state_files(mnt: Path) -> list[str]:
    """Which of the mountpoint's run state (.json) and control socket (.sock) exist."""
    return [suffix for suffix in (".json", ".sock") if os.path.lexists(runstate.path_for(str(mnt), suffix))]


def test_umount_of_a_killed_server_removes_its_state(sticky):
    mnt = sticky / "mnt"
    fusetrace("mount", str(sticky / "src"), str(mnt), "--emulate", "efs-elastic", "--log", str(sticky / "log"))
    poll(lambda: _state_files(mnt) == [".json", ".sock"])
    state = runstate.read(str(mnt))
    assert state is not None
    os.kill(state["pid"], signal.SIGKILL)
    poll(lambda: not processes.is_fusetrace(state["pid"]))
    done = fusetrace("umount", str(mnt))
    assert "unmounted" in done.stdout
    assert not is_mounted(mnt)
    assert _state_files(mnt) == []


def test_umount_after_the_mount_went_by_hand_removes_a_dead_servers_state(sticky):
    """Killed, then unmounted without fusetrace (fusermount3 -u): `fusetrace umount` says
    it is not mounted, and removes what the server left."""
    mnt = sticky / "mnt"
    fusetrace("mount", str(sticky / "src"), str(mnt), "--log", str(sticky / "log"))
    state = runstate.read(str(mnt))
    assert state is not None
    os.kill(state["pid"], signal.SIGKILL)
    poll(lambda: not processes.is_fusetrace(state["pid"]))
    subprocess.run(["fusermount3", "-u", str(mnt)], check=True)
    assert _state_files(mnt) == [".json", ".sock"]
    one_line_error(fusetrace("umount", str(mnt), check=False), "not mounted")
    assert _state_files(mnt) == []


def test_umount_keeps_the_state_of_a_live_server(sticky):
    """Only a dead server's state is removed: here its recorded pid is a live process
    whose command line names fusetrace, as a server's does."""
    mnt = sticky / "mnt"
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "fusetrace"])
    try:
        runstate.write(str(mnt), pid=alive.pid, source="x")
        one_line_error(fusetrace("umount", str(mnt), check=False), "not mounted")
        assert runstate.read(str(mnt)) == {"pid": alive.pid, "source": "x"}
    finally:
        alive.kill()
        alive.wait()
        runstate.remove(str(mnt))
