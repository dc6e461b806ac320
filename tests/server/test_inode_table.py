"""The inode table in process: a bounded set of descriptors, reopened safely."""

import errno
import os

import pyfuse3
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
    assert table.stats()["held"] == 16
    assert _fds() - before <= 16 + 1  # and the handle-mount descriptor
    closed = [n for n in nodes if n.fd < 0]
    assert len(closed) == 24 and closed == nodes[:24]  # least recently used first
    for n in closed:
        table.attach(n, table.reopen(n))
        assert os.readlink(f"/proc/self/fd/{n.fd}") == str(src / f"f{nodes.index(n)}")
    assert table.stats()["held"] == 16
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
    assert table.stats()["held"] == 16


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
    assert table.stats()["held"] == 1


def _crowd_out(table: InodeTable, root_fd: int) -> None:
    """Look up f0..f39 so that the least recently used descriptors are closed."""
    for i in range(40):
        _lookup(table, root_fd, f"f{i}", f"/f{i}")


def test_node_ids_are_backing_inode_numbers_and_lookups_are_counted(tree):
    src, root_fd = tree
    table = InodeTable(root_fd, max_open=16, by_handle=False)
    before = _fds()
    fd = os.open("f1", os.O_PATH | os.O_NOFOLLOW, dir_fd=root_fd)
    assert table.identify(os.fstat(fd), fd) == os.stat(src / "f1").st_ino
    node = table.remember(os.fstat(fd), fd, "/f1")
    assert node.id == os.stat(src / "f1").st_ino and node.nlookup == 1
    assert _lookup(table, root_fd, "f1", "/f1") is node and node.nlookup == 2
    assert _fds() - before == 1  # the second lookup's descriptor was closed, not kept
    table.forget(node.id, 1)
    assert table.get(node.id) is node and node.fd >= 0
    table.forget(node.id, 1)
    assert table.get(node.id) is None and table.by_key(node.key) is None and node.fd < 0
    assert _fds() == before
    table.forget(pyfuse3.ROOT_INODE, 5)  # the root is never forgotten
    assert table.get(pyfuse3.ROOT_INODE) is not None


def test_an_object_on_another_device_gets_a_node_id_of_its_own(tree):
    _, root_fd = tree
    table = InodeTable(root_fd, max_open=16, by_handle=False)
    fd = os.open("/proc", os.O_PATH | os.O_DIRECTORY)
    try:
        st = os.fstat(fd)
        assert st.st_dev != os.fstat(root_fd).st_dev
        first, second = table.identify(st, fd), table.identify(st, fd)
        assert first >= 1 << 63 and second != first  # never a number a backing inode could have
    finally:
        os.close(fd)


def test_only_the_first_reopened_descriptor_is_kept(tree):
    _, root_fd = tree
    table = InodeTable(root_fd, max_open=16, by_handle=False)
    _crowd_out(table, root_fd)
    node = table.by_key((os.fstat(root_fd).st_dev, os.stat("f0", dir_fd=root_fd).st_ino))
    assert node is not None and node.fd < 0
    before = _fds()
    first, second = table.reopen(node), table.reopen(node)  # two requests raced to reopen it
    table.attach(node, first)
    table.attach(node, second)
    assert node.fd == first and table.reopened == 1
    assert (
        _fds() == before and table.stats()["held"] == 16
    )  # one more held, the oldest closed, the other reopen's dropped


def _closed_f0(tree, by_handle: bool):
    """A table whose inode of f0 has been closed to make room: (table, that inode)."""
    if by_handle and os.geteuid() != 0:
        pytest.skip("open_by_handle_at needs root")
    src, root_fd = tree
    table = InodeTable(root_fd, max_open=16, by_handle=by_handle)
    _crowd_out(table, root_fd)
    node = table.by_key((os.fstat(root_fd).st_dev, os.stat(src / "f0").st_ino))
    assert node is not None and node.fd < 0
    return table, node


@pytest.mark.parametrize("by_handle", [True, False])
def test_renamed_behind_the_back_while_closed(tree, by_handle):
    """By handle a closed inode is found wherever it went; by path it answers ESTALE,
    and the kernel's fresh lookup under the new name finds the same inode again."""
    src, root_fd = tree
    table, node = _closed_f0(tree, by_handle)
    os.rename(src / "f0", src / "moved")
    if by_handle:
        table.attach(node, table.reopen(node))
        assert os.readlink(f"/proc/self/fd/{node.fd}") == str(src / "moved")
        return
    with pytest.raises(OSError) as err:
        table.reopen(node)
    assert err.value.errno == errno.ESTALE
    again = _lookup(table, root_fd, "moved", "/moved")
    assert again is node and node.fd >= 0 and node.path == "/moved" and node.nlookup == 2


@pytest.mark.parametrize("by_handle", [True, False])
def test_an_object_gone_while_closed_answers_estale(tree, by_handle):
    src, _ = tree
    table, node = _closed_f0(tree, by_handle)
    os.unlink(src / "f0")
    with pytest.raises(OSError) as err:
        table.reopen(node)
    assert err.value.errno == errno.ESTALE
    assert node.fd < 0 and table.get(node.id) is node  # known until the kernel forgets it
