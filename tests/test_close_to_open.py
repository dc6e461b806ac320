"""Close-to-open consistency, as an NFS client keeps it, with the default caches.

Another writer (here: the source written directly, as another EFS client would)
changes and closes a file; an open through the mount after that close must see the
new data, though the kernel still holds the old pages and attributes (a one-second
attribute cache by default).  It returned stale data 15 times in 20 before opens
revalidated.
"""

import os

import duckdb
from conftest import fusetrace


def test_open_after_another_writer_closed_sees_its_data(mount):
    m = mount()  # default --attr-timeout 1 --entry-timeout 1
    path, below = m.mountpoint / "f", m.source / "f"
    below.write_bytes(b"version 0")
    assert path.read_bytes() == b"version 0"  # cached by the kernel now
    for i in range(1, 21):
        data = f"version {i} ".encode() * i  # a new size each time, as appends and rewrites have
        below.write_bytes(data)  # written and closed by the other client
        with open(path, "rb") as f:
            assert f.read() == data, f"stale data on open {i}"
        assert os.stat(path).st_size == len(data)


def test_unchanged_file_keeps_its_cache(mount):
    """An open of a file nobody changed keeps the kernel's pages (and reads them)."""
    m = mount(trace=True)
    (m.source / "f").write_bytes(b"x" * 65536)
    for _ in range(3):
        assert (m.mountpoint / "f").read_bytes() == b"x" * 65536
    m.unmount()
    reads = duckdb.sql(f"select count(*) from '{m.trace}/*.parquet' where op = 'read'").fetchall()[0][0]
    assert 1 <= reads <= 2  # the first open reads from the file system; later ones from the cache


# With FUSE's write-back cache (an emulated mount's default) the kernel keeps a regular
# file's size as its own while it holds the inode; an open renews the inode of a file
# resized beside the mount (handlers.py, _resized_beside).  Before, a file cut short
# beside the mount read padded with zeros, and an append through the mount landed at
# the old end, writing those zeros into the source.

WRITE_BACK = ("--emulate", "efs-tiny")  # the write-back cache is on by default there


def test_with_the_write_back_cache_an_open_sees_the_new_size(mount):
    m = mount(*WRITE_BACK)
    path, below = m.mountpoint / "f", m.source / "f"
    below.write_bytes(b"version 0")
    assert path.read_bytes() == b"version 0"
    for i in (5, 1, 9, 2, 14, 3):  # shrinking and growing
        data = f"v{i} ".encode() * i
        below.write_bytes(data)
        with open(path, "rb") as f:
            assert f.read() == data, f"stale size on open of {len(data)} bytes"
        assert os.stat(path).st_size == len(data)
    stats = fusetrace("stats", str(m.mountpoint)).stdout
    assert "their kernel inodes renewed at open: 6" in stats, stats


def test_with_the_write_back_cache_an_append_lands_at_the_sources_end(mount):
    m = mount(*WRITE_BACK)
    path, below = m.mountpoint / "log", m.source / "log"
    below.write_bytes(b"A" * 20 + b"\n")
    assert path.read_bytes() == b"A" * 20 + b"\n"
    below.write_bytes(b"bb\n")  # cut short beside the mount
    with open(path, "ab") as f:
        f.write(b"zz\n")
    assert below.read_bytes() == b"bb\nzz\n"


def test_two_emulated_mounts_appending_in_turn_keep_every_line(mount):
    a = mount(*WRITE_BACK)
    b = mount(*WRITE_BACK, source=a.source)
    lines = []
    for i in range(12):
        line = f"line {i} from {'ab'[i % 2]}\n".encode()
        with open((a, b)[i % 2].mountpoint / "log", "ab") as f:  # open, append, close: in turn
            f.write(line)
        lines.append(line)
    assert (a.source / "log").read_bytes() == b"".join(lines)


def test_a_file_held_open_is_not_renewed_under_its_reader(mount):
    # renewing retires the kernel's inode, which would fail the held descriptor's reads (EIO)
    m = mount(*WRITE_BACK)
    path, below = m.mountpoint / "f", m.source / "f"
    below.write_bytes(b"x" * 100)
    with open(path, "rb") as held:
        assert held.read() == b"x" * 100
        below.write_bytes(b"y" * 10)
        with open(path, "rb") as again:
            again.read()
        held.seek(0)
        assert held.read(10) == b"y" * 10  # the source's data, read through the old inode
    stats = fusetrace("stats", str(m.mountpoint)).stdout
    assert "renewed" not in stats
