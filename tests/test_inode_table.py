"""The inode table in process: a bounded set of descriptors, reopened safely."""

import errno
import os

import pytest

from fusetrace.server.inodes import InodeTable


def _lookup(table: InodeTable, parent_fd: int, name: str, path: str):
    fd = os.open(name, os.O_PATH | os.O_NOFOLLOW, dir_fd=parent_fd)
    return table.remember(os.stat(fd), fd, path)


@pytest.fixture
def tree(tmp_path):
    for i in range(40):
        (tmp_path / f"f{i}").write_text(str(i))
    root_fd = os.open(tmp_path, os.O_PATH | os.O_DIRECTORY)
    yield tmp_path, root_fd
    os.close(root_fd)


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("by_handle", [True, False])
def test_descriptors_stay_bounded_and_come_back(tree, by_handle):
    if by_handle and os.geteuid() != 0:
        pytest.skip("open_by_handle_at needs root")
    src, root_fd = tree
    before = _fds()
    table = InodeTable(root_fd, max_open=16, by_handle=by_handle)
    nodes = [_lookup(table, root_fd, f"f{i}", f"/f{i}") for i in range(40)]
    assert table.open_count == 16
    assert _fds() - before <= 16 + 1  # and the handle-mount descriptor
    closed = [n for n in nodes if n.fd < 0]
    assert len(closed) == 24 and closed == nodes[:24]  # least recently used first
    for n in closed:
        table.attach(n, table.reopen(n))
        assert os.readlink(f"/proc/self/fd/{n.fd}") == str(src / f"f{nodes.index(n)}")
    assert table.open_count == 16
    table.close_all()
    assert _fds() == before  # all closed but the root's, which is the caller's


def test_pinned_descriptors_are_never_closed(tree):
    _, root_fd = tree
    table = InodeTable(root_fd, max_open=16, by_handle=False)
    first = _lookup(table, root_fd, "f0", "/f0")
    table.pin(first)
    for i in range(1, 40):
        _lookup(table, root_fd, f"f{i}", f"/f{i}")
    assert first.fd >= 0
    table.unpin(first)
    assert table.open_count == 16


def test_reopen_by_path_never_follows_a_planted_link(tree, tmp_path_factory):
    """Without file handles the best known path is walked again: a directory swapped
    for a link (to somewhere outside) is not followed, and an object that is not the
    one the kernel knows answers ESTALE."""
    src, root_fd = tree
    outside = tmp_path_factory.mktemp("outside")
    (outside / "f").write_text("outside")
    (src / "d").mkdir()
    (src / "d" / "f").write_text("inside")
    table = InodeTable(root_fd, max_open=16, by_handle=False)
    d = _lookup(table, root_fd, "d", "/d")
    node = _lookup(table, d.fd, "f", "/d/f")
    for i in range(40):
        _lookup(table, root_fd, f"f{i}", f"/f{i}")
    assert node.fd < 0
    os.rename(src / "d", src / "d.away")
    os.symlink(outside, src / "d")
    with pytest.raises(OSError) as err:
        table.reopen(node)
    assert err.value.errno == errno.ESTALE  # not followed: the walk stops at the link
    os.unlink(src / "d")
    os.mkdir(src / "d")
    (src / "d" / "f").write_text("another")
    with pytest.raises(OSError) as err:
        table.reopen(node)
    assert err.value.errno == errno.ESTALE


def test_forgotten_while_in_use_closes_after(tree):
    _, root_fd = tree
    table = InodeTable(root_fd, max_open=16, by_handle=False)
    node = _lookup(table, root_fd, "f1", "/f1")
    table.pin(node)
    table.forget(node.id, 1)
    assert node.fd >= 0 and table.get(node.id) is None
    table.unpin(node)
    assert node.fd < 0


@pytest.mark.parametrize("by_handle", [True, False])
def test_a_reused_inode_number_is_another_inode(tree, by_handle):
    """Once an inode's descriptor is closed nothing keeps its number from reuse below: a
    new object found under it is a new inode (another node id), never merged into the
    old one, which answers ESTALE.  (Merging let a user read a root-only file through an
    O_PATH descriptor of a deleted file of theirs.)"""
    if by_handle and os.geteuid() != 0:
        pytest.skip("open_by_handle_at needs root")
    src, root_fd = tree
    table = InodeTable(root_fd, max_open=16, by_handle=by_handle)
    old = _lookup(table, root_fd, "f0", "/f0")
    for i in range(1, 40):
        _lookup(table, root_fd, f"f{i}", f"/f{i}")
    assert old.fd < 0 and old.handle is not None
    os.unlink(src / "f0")
    for i in range(400):  # ext4 and tmpfs hand the freed number out again soon
        (src / f"new{i}").write_text("new")
        if os.stat(src / f"new{i}").st_ino == old.key[1]:
            break
    else:
        pytest.skip("the file system did not reuse the inode number")
    new = _lookup(table, root_fd, f"new{i}", f"/new{i}")
    assert new is not old and new.id != old.id
    assert table.get(old.id) is old  # the kernel still knows it, until it forgets
    with pytest.raises(OSError) as err:
        table.reopen(old)
    assert err.value.errno == errno.ESTALE
    table.forget(old.id, 1)
    assert table.by_key(new.key) is new


def test_looked_up_again_while_the_forgotten_one_is_in_use(tree):
    """A new inode under the node id of a forgotten one still in use keeps its own
    descriptor tracked when the old one's is closed."""
    _, root_fd = tree
    table = InodeTable(root_fd, max_open=16, by_handle=False)
    old = _lookup(table, root_fd, "f1", "/f1")
    table.pin(old)
    table.forget(old.id, 1)
    new = _lookup(table, root_fd, "f1", "/f1")
    assert new is not old and new.id == old.id
    table.unpin(old)
    assert old.fd < 0 and new.fd >= 0
    assert table.open_count == 1
