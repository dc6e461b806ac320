"""Attribute changes through an allow_other mount are made as the caller, as natively.

Root serves the mount; `nobody` changes a file's mode, group, size and times through it.
The kernel checks the caller against the attributes it holds (`default_permissions`);
with `--attr-timeout 60` those are a minute old, and the source below may have changed
since (the file chowned to root there).  The source then decides with the caller's own
credentials, as it would natively: the server used to make every change as root, and
`nobody` made a file that was root's by then mode 0666 (docs/SECURITY.md).  What the
kernel does itself stays done: a `touch` (now) by a writer who is not the owner, the
clearing of a set-user-ID bit when such a writer writes, and, with the write-back
cache, the hand-over of a file's times after writes.
"""

import errno
import os
import subprocess
import time
from pathlib import Path

import pytest
from support import poll, served

NOBODY = 65534
PYTHON = "/usr/bin/python3"  # the caller's: the test's own may sit where nobody cannot reach

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to serve an allow_other mount")

# As the caller: one call on PATH, named by OP with its argument; print its errno (0: done).
_CALL = r"""
import os, sys
path, op, arg = sys.argv[1:4]
try:
    if op == "chmod":
        os.chmod(path, int(arg, 8))
    elif op == "chgrp":
        os.chown(path, -1, int(arg))
    elif op == "truncate":
        os.truncate(path, int(arg))
    elif op == "utime":
        os.utime(path, ns=(int(arg), int(arg)))
    elif op == "touch":
        os.utime(path)
    elif op == "write":
        with open(path, "r+b") as f:
            f.write(arg.encode())
    elif op == "read":
        with open(path, "rb") as f:
            f.read()
    elif op == "list":
        os.listdir(path)
    print(0)
except OSError as exc:
    print(exc.errno)
"""


def _as_nobody(path: Path, op: str, arg: str = "") -> int:
    """The errno of _CALL run as nobody (0: done)."""
    done = subprocess.run(
        [PYTHON, "-c", _CALL, str(path), op, arg],
        user=NOBODY,
        group=NOBODY,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


@pytest.fixture(scope="module")
def cached():
    """The kernel keeps attributes for a minute."""
    yield from served("fusetrace-setattr-", "--attr-timeout", "60", "--entry-timeout", "60")


@pytest.fixture(scope="module")
def writeback():
    """An emulated mount, with the write-back cache (its default)."""
    yield from served("fusetrace-setattr-", "--emulate", "efs-bursting")


def _file(src: Path, name: str, owner: int, mode: int, group: int | None = None) -> Path:
    path = src / name
    path.write_bytes(b"hello")
    os.chown(path, owner, owner if group is None else group)
    os.chmod(path, mode)
    return path


def _state(path: Path) -> tuple[int, int, int, int, int]:
    st = os.stat(path)
    return st.st_uid, st.st_gid, st.st_mode, st.st_size, st.st_mtime_ns


@pytest.mark.parametrize(
    "op, arg, expected",
    [
        ("chmod", "666", errno.EPERM),
        ("chgrp", str(NOBODY), errno.EPERM),
        ("truncate", "1", errno.EACCES),
        ("utime", "1000000000", errno.EPERM),
        ("touch", "", errno.EACCES),
    ],
)
def test_a_change_the_source_refuses_the_caller_is_refused(cached, op, arg, expected):
    """nobody's file 0644, looked up through the mount, then chowned to root below: the
    kernel still holds it as nobody's and lets the call through; the source refuses it,
    as natively, and nothing changes."""
    src, mnt = cached
    name = f"stale-{op}"
    path = _file(src, name, NOBODY, 0o644)
    os.stat(mnt / name)  # looked up: the kernel keeps this for a minute
    os.chown(path, 0, 0)
    before = _state(path)
    assert _as_nobody(path, op, arg) == expected  # natively
    assert _as_nobody(mnt / name, op, arg) == expected
    assert _state(path) == before


@pytest.mark.parametrize("op, kind", [("read", "file"), ("write", "file"), ("list", "directory")])
def test_an_open_the_source_refuses_the_caller_is_refused(cached, op, kind):
    """nobody's file or directory, 0600 or 0700, looked up through the mount, then given
    to root below: the kernel still holds it as nobody's; the source's check of the open,
    made as the caller, refuses it as natively (open and opendir ran as the server)."""
    src, mnt = cached
    name = f"stale-open-{op}"
    if kind == "file":
        path = _file(src, name, NOBODY, 0o600)
    else:
        path = src / name
        path.mkdir(mode=0o700)
        os.chown(path, NOBODY, NOBODY)
    os.stat(mnt / name)
    os.chown(path, 0, 0)
    before = _state(path)
    assert _as_nobody(path, op, "HELLO") == errno.EACCES  # natively
    assert _as_nobody(mnt / name, op, "HELLO") == errno.EACCES
    assert _state(path) == before


@pytest.mark.parametrize(
    "op, arg, check",
    [
        ("chmod", "600", lambda st: st[2] & 0o7777 == 0o600),
        ("chgrp", str(NOBODY), lambda st: st[1] == NOBODY),  # a group the caller is in
        ("truncate", "1", lambda st: st[3] == 1),
        ("utime", "1000000000", lambda st: st[4] == 1000000000),
    ],
)
def test_the_owner_changes_their_own_file(cached, op, arg, check):
    src, mnt = cached
    for where, base in (("native", src), ("through", mnt)):
        path = _file(src, f"own-{op}-{where}", NOBODY, 0o644, group=0)
        assert _as_nobody(base / path.name, op, arg) == 0
        assert check(_state(path)), where


@pytest.mark.parametrize("served", ["cached", "writeback"])
def test_touch_by_a_writer_not_the_owner_sets_now(request, served):
    """utimensat(UTIME_NOW) needs only write permission; explicit times, ownership."""
    src, mnt = request.getfixturevalue(served)
    for where, base in (("native", src), ("through", mnt)):
        path = _file(src, f"touch-{where}", 0, 0o666)
        os.utime(path, ns=(10**9, 10**9))
        os.stat(mnt / path.name)
        start = time.time_ns() - 10**9
        assert _as_nobody(base / path.name, "touch") == 0
        assert _state(path)[4] >= start, where
        assert os.stat(path).st_atime_ns >= start, where
        assert _as_nobody(base / path.name, "utime", "2000000000") == errno.EPERM  # explicit: not theirs


@pytest.mark.parametrize("served", ["cached", "writeback"])
@pytest.mark.parametrize("op, arg, content", [("write", "HELLO", b"HELLO"), ("truncate", "2", b"he")])
def test_a_write_by_a_writer_not_the_owner_clears_set_user_id(request, served, op, arg, content):
    """The kernel sends the cleared mode itself, with the writer's credentials (a write
    without O_TRUNC; a truncate by path, with the size)."""
    src, mnt = request.getfixturevalue(served)
    for where, base in (("native", src), ("through", mnt)):
        path = _file(src, f"setuid-{op}-{where}", 0, 0o6777)
        os.stat(mnt / path.name)
        assert _as_nobody(base / path.name, op, arg) == 0
        assert poll(lambda p=path: os.stat(p).st_mode & 0o7777 == 0o0777, timeout=30), where
        assert path.read_bytes() == content


def test_a_directorys_group_changed_below_is_refused(cached):
    """A regular file's chown makes the kernel fetch fresh attributes first (to clear its
    set-ID bits); a directory's does not, so the source decides."""
    src, mnt = cached
    for where, base in (("native", src), ("through", mnt)):
        path = src / f"dir-{where}"
        path.mkdir()
        os.chown(path, NOBODY, 0)
        os.stat(mnt / path.name)
        os.chown(path, 0, 0)
        assert _as_nobody(base / path.name, "chgrp", str(NOBODY)) == errno.EPERM, where
        assert os.stat(path).st_gid == 0


def test_the_write_back_caches_times_reach_the_source_after_a_writer_not_the_owner(writeback):
    """The kernel keeps a written file's mtime and hands it over itself (explicit times,
    which only the owner may set): still done, as the server."""
    src, mnt = writeback
    path = _file(src, "handed", 0, 0o666)
    os.utime(path, ns=(10**9, 10**9))
    os.stat(mnt / "handed")
    assert _as_nobody(mnt / "handed", "write", "HELLO") == 0
    seen = os.stat(mnt / "handed").st_mtime_ns
    assert seen > 10**9
    assert poll(lambda: os.stat(path).st_mtime_ns == seen, timeout=30), (os.stat(path).st_mtime_ns, seen)
