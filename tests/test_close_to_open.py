"""Close-to-open consistency, as an NFS client keeps it, with the default caches.

Another writer (here: the source written directly, as another EFS client would)
changes and closes a file; an open through the mount after that close must see the
new data, though the kernel still holds the old pages and attributes (a one-second
attribute cache by default).  It returned stale data 15 times in 20 before opens
revalidated.
"""

import os

import duckdb


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
