"""Trees larger than the descriptor limit: the mount holds a bounded set of descriptors.

A server that kept one descriptor per inode the kernel knows listed 19,966 of 21,000
entries under a limit of 20,000, then answered EMFILE to every create and open.  Here
the server runs under a hard limit of 1,024 (so it cannot raise it) and lists, walks
and stats trees of 3,000 and 100,000 entries, then serves as usual.
"""

import os
import subprocess
import sys

import pytest
from support import Mount, is_mounted


def _mount_limited(src, mnt, nofile: int, *options: str) -> Mount:
    """`fusetrace mount` with RLIMIT_NOFILE soft = hard = nofile, as an operator's
    ulimit would leave it; the server inherits it."""
    subprocess.run(
        [
            "prlimit",
            f"--nofile={nofile}:{nofile}",
            "--",
            sys.executable,
            "-m",
            "fusetrace",
            "mount",
            str(src),
            str(mnt),
            *options,
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return Mount(src, mnt, None)


def _server_fds(m: Mount) -> int:
    return len(os.listdir(f"/proc/{m.server_pid()}/fd"))


def _make_tree(root, files: int, per_dir: int) -> None:
    for i in range(files):
        d = root / f"d{i // per_dir:03d}"
        if i % per_dir == 0:
            d.mkdir()
        (d / f"f{i:06d}").write_bytes(b"x" * (i % 7))


@pytest.fixture
def limited(tmp_path):
    made = []

    def make(nofile: int, *options: str):
        src, mnt = tmp_path / "src", tmp_path / "mnt"
        src.mkdir()
        mnt.mkdir()
        m = _mount_limited(src, mnt, nofile, *options)
        made.append(m)
        return m

    yield make
    for m in made:
        m.unmount()
        assert not is_mounted(m.mountpoint)


def _serves_normally(m: Mount) -> None:
    with open(m.mountpoint / "after", "w") as f:
        f.write("still serving")
    assert (m.source / "after").read_text() == "still serving"
    fds = [os.open(m.mountpoint / "after", os.O_RDONLY) for _ in range(40)]  # (a user's share under 256: 48)
    for fd in fds:
        os.close(fd)


@pytest.mark.slow
def test_listing_more_entries_than_descriptors(limited):
    m = limited(256, "--attr-timeout", "0", "--entry-timeout", "0")
    _make_tree(m.source, 3000, 3000)
    listed = subprocess.run(["ls", "-l", str(m.mountpoint / "d000")], capture_output=True, text=True, check=True)
    assert len(listed.stdout.splitlines()) == 3001  # "total" and every entry
    # every entry again, by name, after most descriptors were closed: reopened on demand
    sizes = [os.stat(m.mountpoint / "d000" / f"f{i:06d}").st_size for i in range(3000)]
    assert sizes == [i % 7 for i in range(3000)]
    assert _server_fds(m) < 256
    _serves_normally(m)


def test_renamed_behind_the_back_after_its_descriptor_was_closed(limited):
    """A closed inode is reopened by file handle, so a rename in the source is
    followed even then (root's server; without root it answers ESTALE and the kernel
    looks the name up again)."""
    m = limited(256, "--attr-timeout", "0", "--entry-timeout", "3600")
    _make_tree(m.source, 600, 600)
    fd = os.open(m.mountpoint / "d000" / "f000005", os.O_RDONLY)  # the kernel keeps this inode
    try:
        subprocess.run(["ls", "-l", str(m.mountpoint / "d000")], capture_output=True, check=True)
        os.rename(m.source / "d000" / "f000005", m.source / "moved")
        (m.source / "moved").write_bytes(b"moved below")
        assert os.fstat(fd).st_size == len(b"moved below")
        assert os.pread(fd, 100, 0) == b"moved below"
    finally:
        os.close(fd)


@pytest.mark.slow
def test_ls_and_find_over_100000_entries_with_1024_descriptors(limited):
    m = limited(1024)
    _make_tree(m.source, 100_000, 10_000)
    listed = subprocess.run(["ls", "-l", str(m.mountpoint / "d000")], capture_output=True, text=True, check=True)
    assert len(listed.stdout.splitlines()) == 10_001
    found = subprocess.run(["find", str(m.mountpoint), "-type", "f"], capture_output=True, text=True, check=True)
    assert len(found.stdout.splitlines()) == 100_000
    assert found.stderr == ""
    du = subprocess.run(
        ["du", "-s", "--apparent-size", "-b", str(m.mountpoint)], capture_output=True, text=True, check=True
    )
    assert int(du.stdout.split()[0]) >= sum(i % 7 for i in range(100_000))
    assert _server_fds(m) < 1024
    _serves_normally(m)
