"""Locks stay local to the mount, and fusetrace says so rather than letting it pass.

pyfuse3 has no lock operations, so the kernel keeps flock and fcntl locks of the mount
itself: they conflict with each other, not with locks on the source.  Over a shared EFS
that loses mutual exclusion between machines; the README, `fusetrace mount` and the
trace metadata say so.  These tests pin what is said to what happens.
"""

import fcntl
import json
import os

from support import fusetrace


def _try_flock(path) -> bool:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_locks_through_the_mount_conflict_with_each_other_not_with_the_source(mount):
    m = mount(trace=True)
    (m.source / "f").write_text("x")
    held = os.open(m.mountpoint / "f", os.O_RDONLY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert not _try_flock(m.mountpoint / "f")  # another open file through the mount: conflicts
        assert _try_flock(m.source / "f")  # the source never saw the lock
    finally:
        os.close(held)
    m.unmount()
    meta = json.loads((m.trace / "_metadata.json").read_text())
    assert meta["locks"].startswith("local")


def test_mount_says_locks_are_local(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "mnt").mkdir()
    done = fusetrace("mount", str(tmp_path / "src"), str(tmp_path / "mnt"))
    try:
        assert "locks are local" in done.stdout
    finally:
        fusetrace("umount", str(tmp_path / "mnt"))
