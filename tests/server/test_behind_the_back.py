"""Inodes stay right when the source directory changes behind the mount's back.

Every object the kernel knows is held by an O_PATH descriptor (fusetrace/server/inodes.py),
so what the kernel calls inode N stays the object it was when its name changes
below.  Here files and directories are renamed, replaced and removed in the
SOURCE directory (not through the mount) while the mount has them open, looked
up, or as a process's working directory.  The mounts run with attribute and
entry timeouts 0, so the kernel revalidates every name and nothing here waits.
"""

import ctypes
import ctypes.util
import os
import pathlib
import subprocess
from contextlib import contextmanager

import pytest

NO_CACHE = ("--attr-timeout", "0", "--entry-timeout", "0")

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
AT_SYMLINK_NOFOLLOW = 0x100
AT_EMPTY_PATH = 0x1000


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def utimens_fd(fd: int, atime_ns: int, mtime_ns: int) -> None:
    """utimensat(fd, "", times, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW): the times of the
    very object an O_PATH descriptor holds (here: a symbolic link), no name involved."""
    times = (_Timespec * 2)(_Timespec(*divmod(atime_ns, 10**9)), _Timespec(*divmod(mtime_ns, 10**9)))
    if _libc.utimensat(fd, b"", times, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def enoent(fn, *args):
    with pytest.raises(FileNotFoundError):
        fn(*args)
    return True


@contextmanager
def cwd(path):
    back = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(back)  # never leave the test process inside the mount: it could not be unmounted


# ---- open files --------------------------------------------------------------------------


def test_open_file_follows_its_rename_in_the_source(mount):
    m = mount(*NO_CACHE)
    (m.source / "sub").mkdir()
    (m.source / "f").write_bytes(b"0123456789")
    fd = os.open(m.mountpoint / "f", os.O_RDWR)
    try:
        os.rename(m.source / "f", m.source / "sub" / "g")  # to another directory, too
        assert os.pread(fd, 100, 0) == b"0123456789"
        assert os.pwrite(fd, b"AB", 2) == 2
        assert (m.source / "sub" / "g").read_bytes() == b"01AB456789"  # written where the file now is
        assert not (m.source / "f").exists()  # and nothing made at its old name
        # writes below, to the new name, show through the old descriptor
        with open(m.source / "sub" / "g", "r+b") as below:
            below.seek(8)
            below.write(b"XYZ")
        assert os.pread(fd, 100, 0) == b"01AB4567XYZ"
        os.ftruncate(fd, 4)
        assert (m.source / "sub" / "g").read_bytes() == b"01AB"
        assert os.fstat(fd).st_size == 4
        assert os.fstat(fd).st_ino == os.stat(m.mountpoint / "sub" / "g").st_ino
    finally:
        os.close(fd)


def test_file_unlinked_in_the_source_stays_readable_through_an_open_fd(mount):
    m = mount(*NO_CACHE)
    (m.source / "f").write_bytes(b"still here")
    fd = os.open(m.mountpoint / "f", os.O_RDWR)
    try:
        ino = os.fstat(fd).st_ino
        os.unlink(m.source / "f")
        assert os.pread(fd, 100, 0) == b"still here"
        assert os.pwrite(fd, b" and written", 10) == 12
        assert os.pread(fd, 100, 0) == b"still here and written"
        st = os.fstat(fd)
        assert (st.st_nlink, st.st_ino, st.st_size) == (0, ino, 22)
        assert enoent(os.stat, m.mountpoint / "f")
        assert "f" not in os.listdir(m.mountpoint)
        # a new file at the old name is a new object; the descriptor keeps the old one
        (m.source / "f").write_bytes(b"new")
        assert (m.mountpoint / "f").read_bytes() == b"new"
        assert os.stat(m.mountpoint / "f").st_ino != ino
        assert os.pread(fd, 100, 0) == b"still here and written"
    finally:
        os.close(fd)


def test_file_replaced_by_rename_in_the_source(mount):
    """rename(new, f) below: the name shows the new file, an open fd the old one."""
    m = mount(*NO_CACHE)
    (m.source / "f").write_bytes(b"old")
    (m.source / "new").write_bytes(b"replacement")
    old_ino = os.stat(m.mountpoint / "f").st_ino
    new_ino = os.stat(m.mountpoint / "new").st_ino
    with open(m.mountpoint / "f", "rb") as old:
        os.rename(m.source / "new", m.source / "f")
        assert os.stat(m.mountpoint / "f").st_ino == new_ino != old_ino
        assert (m.mountpoint / "f").read_bytes() == b"replacement"
        assert enoent(os.stat, m.mountpoint / "new")
        assert old.read() == b"old"
        assert os.fstat(old.fileno()).st_ino == old_ino


# ---- names -------------------------------------------------------------------------------


def test_rename_in_the_source_shows_under_the_new_name_with_the_same_inode(mount):
    m = mount(*NO_CACHE)
    (m.source / "d").mkdir()
    (m.source / "d" / "f").write_bytes(b"content")
    (m.source / "other").mkdir()
    before = os.stat(m.mountpoint / "d" / "f")
    dir_before = os.stat(m.mountpoint / "d")

    os.rename(m.source / "d" / "f", m.source / "other" / "g")
    after = os.stat(m.mountpoint / "other" / "g")
    assert after.st_ino == before.st_ino
    assert (after.st_size, after.st_mode, after.st_mtime_ns) == (before.st_size, before.st_mode, before.st_mtime_ns)
    assert (m.mountpoint / "other" / "g").read_bytes() == b"content"
    assert enoent(os.stat, m.mountpoint / "d" / "f")
    assert enoent(open, m.mountpoint / "d" / "f")
    assert os.listdir(m.mountpoint / "d") == []
    assert os.listdir(m.mountpoint / "other") == ["g"]

    # a directory, with what it holds
    os.rename(m.source / "other", m.source / "renamed")
    assert os.stat(m.mountpoint / "renamed").st_ino != dir_before.st_ino
    assert os.stat(m.mountpoint / "renamed" / "g").st_ino == before.st_ino
    assert enoent(os.stat, m.mountpoint / "other")
    assert enoent(os.stat, m.mountpoint / "other" / "g")
    # and the listing's inode numbers (readdir's d_ino) agree with stat's
    assert {e.name: e.inode() for e in os.scandir(m.mountpoint / "renamed")} == {"g": before.st_ino}


def test_hard_link_made_in_the_source_shares_the_inode(mount):
    m = mount(*NO_CACHE)
    (m.source / "f").write_bytes(b"x")
    ino = os.stat(m.mountpoint / "f").st_ino
    os.link(m.source / "f", m.source / "g")
    assert os.stat(m.mountpoint / "g").st_ino == ino
    assert os.stat(m.mountpoint / "f").st_nlink == 2
    os.unlink(m.source / "f")
    assert os.stat(m.mountpoint / "g").st_nlink == 1
    assert os.stat(m.mountpoint / "g").st_ino == ino


def test_symlink_renamed_in_the_source_keeps_its_identity(mount):
    """Setting a symbolic link's times through a descriptor on it (no name looked up)
    reaches that link after it was renamed below, not whatever took its old name."""
    m = mount(*NO_CACHE)
    os.symlink("target-1", m.source / "l")
    fd = os.open(m.mountpoint / "l", os.O_PATH | os.O_NOFOLLOW)
    try:
        os.rename(m.source / "l", m.source / "moved")
        os.symlink("target-2", m.source / "l")  # a different link at the old name
        newcomer = os.lstat(m.source / "l").st_mtime_ns
        utimens_fd(fd, 5_000_000_007, 1_000_000_003)
        assert os.lstat(m.source / "moved").st_mtime_ns == 1_000_000_003
        assert os.lstat(m.source / "l").st_mtime_ns == newcomer
        assert os.lstat(m.mountpoint / "moved").st_mtime_ns == 1_000_000_003
        assert os.readlink(m.mountpoint / "moved") == "target-1"
        assert os.readlink(m.mountpoint / "l") == "target-2"
    finally:
        os.close(fd)


# ---- working directories ------------------------------------------------------------------


def test_cwd_in_a_directory_renamed_in_the_source(mount):
    m = mount(*NO_CACHE)
    (m.source / "d").mkdir()
    (m.source / "d" / "inside").write_bytes(b"i")
    with cwd(m.mountpoint / "d"):
        ino = os.stat(".").st_ino
        os.rename(m.source / "d", m.source / "renamed")
        # relative names go on working in the directory, wherever it now is below
        with open("created", "wb") as f:
            f.write(b"made after the rename")
        os.mkdir("subdir")
        assert sorted(os.listdir(".")) == ["created", "inside", "subdir"]
        assert pathlib.Path("inside").read_bytes() == b"i"
        assert os.stat(".").st_ino == ino
        # getcwd() is not checked: it is the kernel's own record of the path (the
        # name the mount last told it), and the kernel cannot know of a rename below
        # until it looks the directory up again.
    assert (m.source / "renamed" / "created").read_bytes() == b"made after the rename"
    assert (m.source / "renamed" / "subdir").is_dir()
    assert not (m.source / "d").exists()
    assert os.stat(m.mountpoint / "renamed").st_ino == ino
    assert (m.mountpoint / "renamed" / "created").read_bytes() == b"made after the rename"


def test_cwd_in_a_directory_removed_in_the_source(mount):
    m = mount(*NO_CACHE)
    (m.source / "d").mkdir()
    with cwd(m.mountpoint / "d"):
        os.rmdir(m.source / "d")
        with pytest.raises(FileNotFoundError):
            pathlib.Path("created").write_bytes(b"")  # as in any directory that was removed
        assert os.listdir(".") == []
    assert not (m.source / "d").exists()


def test_cwd_in_a_renamed_directory_in_a_child_process(mount):
    """The same through a shell that stays in the directory across the rename."""
    m = mount(*NO_CACHE)
    (m.source / "d").mkdir()
    shell = subprocess.Popen(
        ["sh", "-c", "read go; echo made > file-from-shell; ls"],
        cwd=m.mountpoint / "d",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    os.rename(m.source / "d", m.source / "e")
    out, _ = shell.communicate("go\n", timeout=30)
    assert shell.returncode == 0
    assert out.split() == ["file-from-shell"]
    assert (m.source / "e" / "file-from-shell").read_text() == "made\n"


# ---- another file system mounted inside the source ---------------------------------------


def test_file_system_mounted_in_the_source(mount, tmp_path):
    """Objects on another device below the source get node ids of their own; the
    numbers a listing gives (d_ino) must be the ones stat gives, and hard links
    there must share one."""
    m = mount(*NO_CACHE)
    sub = m.source / "sub"
    sub.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "fusetrace-test", str(sub)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        (sub / "f").write_bytes(b"on tmpfs")
        os.link(sub / "f", sub / "hard")
        (sub / "dir").mkdir()
        for _ in range(2):  # the first listing meets these objects for the first time
            listed = {e.name: e.inode() for e in os.scandir(m.mountpoint / "sub")}
            stated = {n: os.lstat(m.mountpoint / "sub" / n).st_ino for n in listed}
            assert listed == stated
        assert listed["f"] == listed["hard"] != listed["dir"]
        assert (m.mountpoint / "sub" / "hard").read_bytes() == b"on tmpfs"
        # renamed behind the back on that file system too
        os.rename(sub / "f", sub / "dir" / "moved")
        assert os.stat(m.mountpoint / "sub" / "dir" / "moved").st_ino == listed["f"]
    finally:
        # after the mount above it: its server holds descriptors on objects in there
        m.unmount()
        done = subprocess.run(["umount", str(sub)], capture_output=True, text=True)
        if done.returncode != 0:
            subprocess.run(["umount", "-l", str(sub)], check=False)
            pytest.fail(f"tmpfs in the source still busy after the mount was gone: {done.stderr.strip()}")
