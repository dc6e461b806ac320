"""Extended attributes below a file system that has none (like EFS over NFS), and the
--no-xattrs and --inline choices, through real mounts."""

import errno
import os
import subprocess

import pandas as pd
import pytest
from support import fusetrace, stats_json


@pytest.fixture
def ramfs(tmp_path):
    """A file system with no extended attribute support at all, as NFS without RFC 8276."""
    path = tmp_path / "ramfs"
    path.mkdir()
    if subprocess.run(["mount", "-t", "ramfs", "ramfs", str(path)], capture_output=True).returncode:
        pytest.skip("cannot mount ramfs here (needs root)")
    yield path
    subprocess.run(["umount", "-l", str(path)], check=False)


def _errno(fn, *args):
    try:
        fn(*args)
    except OSError as exc:
        return exc.errno
    return 0


def _getxattr_records(trace) -> pd.DataFrame:
    df = pd.read_parquet(trace)
    return df[(df.op == "getxattr") & (df.pid == os.getpid())]


def test_no_xattrs_below_gives_callers_the_same_errors_and_the_kernel_stops_asking(ramfs, mount):
    (ramfs / "f").write_bytes(b"data")
    m = mount(source=ramfs, trace=True)
    native, mounted = ramfs / "f", m.mountpoint / "f"
    for _ in range(10):
        assert _errno(os.getxattr, mounted, "user.a") == _errno(os.getxattr, native, "user.a") == errno.EOPNOTSUPP
    assert _errno(os.setxattr, mounted, "user.a", b"1") == errno.EOPNOTSUPP
    assert _errno(os.removexattr, mounted, "user.a") == errno.EOPNOTSUPP
    assert os.listxattr(mounted) == os.listxattr(native) == []
    with open(mounted, "r+b") as f:  # buffered writes ask for security.capability no more
        for _i in range(20):
            f.write(b"x")
            f.flush()
    m.unmount()
    asked = _getxattr_records(m.trace)
    assert len(asked) <= 1 and set(asked.errno) <= {errno.ENOSYS}


def test_no_xattrs_option(mount):
    m = mount("--no-xattrs", trace=True)
    (m.source / "f").write_bytes(b"")
    os.setxattr(m.source / "f", "user.a", b"1")  # present below, hidden by the option
    assert _errno(os.getxattr, m.mountpoint / "f", "user.a") == errno.EOPNOTSUPP
    with open(m.mountpoint / "f", "r+b", buffering=0) as f:
        for _ in range(20):
            f.write(b"x")
    m.unmount()
    assert len(_getxattr_records(m.trace)) <= 1


def _inline(mountpoint) -> dict:
    return stats_json(mountpoint)["inline"]


def test_quick_calls_run_on_the_loop_over_a_local_directory(mount):
    m = mount("--attr-timeout", "0")
    (m.source / "f").write_bytes(b"")
    for _ in range(50):
        os.stat(m.mountpoint / "f")
    inline = _inline(m.mountpoint)
    assert inline["threshold_us"] > 0
    assert "getattr/meta_read" in inline["loop"] + inline["workers"]


def test_nothing_runs_on_the_loop_over_a_fuse_mount_or_when_told_not_to(mount):
    below = mount()
    above = mount(source=below.mountpoint)  # the source is a FUSE file system: auto means off
    never = mount("--inline", "never")
    always = mount("--inline", "always", source=below.mountpoint)
    assert _inline(above.mountpoint)["threshold_us"] == 0
    assert _inline(never.mountpoint)["threshold_us"] == 0
    assert _inline(always.mountpoint)["threshold_us"] > 0
    for m in (above, never):
        os.stat(m.mountpoint)
        (m.mountpoint / "g").write_bytes(b"y")
        assert _inline(m.mountpoint)["loop"] == []


def test_an_emulated_efs_has_no_extended_attributes_unless_the_profile_says(mount):
    efs = mount("--emulate", "efs-tiny", trace=True)
    (efs.source / "f").write_bytes(b"")
    os.setxattr(efs.source / "f", "user.a", b"1")
    for _ in range(5):
        assert _errno(os.getxattr, efs.mountpoint / "f", "user.a") == errno.EOPNOTSUPP  # as on EFS
    done = fusetrace("set", str(efs.mountpoint), "xattrs=true", check=False)
    assert done.returncode != 0 and "fixed at mount" in done.stderr
    efs.unmount()
    assert len(_getxattr_records(efs.trace)) <= 1
    nfs42 = mount("--emulate", "efs-tiny", "--set", "xattrs=true")
    (nfs42.source / "f").write_bytes(b"")
    os.setxattr(nfs42.source / "f", "user.a", b"1")
    assert os.getxattr(nfs42.mountpoint / "f", "user.a") == b"1"


def test_reads_over_a_file_system_without_nowait_reads_run_on_the_loop(mount):
    """tmpfs has no RWF_NOWAIT path: reads then follow the inline policy, not all go to workers."""
    import tempfile
    from pathlib import Path

    from fusetrace.server.mounts import fstype_of

    if fstype_of("/dev/shm") != "tmpfs":
        pytest.skip("no tmpfs at /dev/shm")
    with tempfile.TemporaryDirectory(dir="/dev/shm") as shm:
        m = mount(source=Path(shm))
        (m.source / "f").write_bytes(b"z" * 65536)
        with open(m.mountpoint / "f", "rb", buffering=0) as f:
            for i in range(20):
                assert os.pread(f.fileno(), 4096, 4096 * (i % 16)) == b"z" * 4096
        assert "read/read" in _inline(m.mountpoint)["loop"]
        m.unmount()
