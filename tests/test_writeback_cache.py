"""--writeback-cache: FUSE's write-back cache on an emulated mount.  Buffered writes gather
in the kernel's page cache and reach the mount as write-back, as an NFS client's reach
the server; the server opens write-only files for reading too (the kernel fills the
rest of a page a write covers in part) and leaves appends to the kernel; the kernel's
hand-over of a file's times costs nothing, as NFS sends none."""

import errno
import os
import subprocess

import pandas as pd
import pytest
from conftest import fusetrace, is_mounted

from fusetrace.rehearse.requests import COLUMNS, Rebuilder
from fusetrace.server import handlers
from fusetrace.trace import metadata as meta

MiB = 1 << 20
WB = ("--emulate", "efs-tiny", "--writeback-cache")


def _trace(m) -> pd.DataFrame:
    m.unmount()
    return pd.read_parquet(m.trace)


def test_it_needs_an_emulated_mount(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "mnt").mkdir()
    done = fusetrace("mount", str(tmp_path / "src"), str(tmp_path / "mnt"), "--writeback-cache", check=False)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "--writeback-cache" in lines[0] and "--emulate" in lines[0]
    assert not is_mounted(tmp_path / "mnt")


def test_small_writes_reach_the_mount_as_write_back(mount):
    m = mount(*WB, trace=True)
    subprocess.run(["dd", "if=/dev/zero", f"of={m.mountpoint / 'f'}", "bs=4k", "count=2048", "status=none"],
                   check=True)
    df = _trace(m)
    mine = df[df.path == "/f"]
    writes = mine[mine.op == "write"]
    # 2,048 write(2) calls of 4 KiB; without the cache, as many requests
    assert 8 <= len(writes) <= 64 and writes["size"].max() <= MiB and writes["size"].sum() == 8 * MiB
    assert set(writes.gate) == {"buffered"}
    times = mine[mine.op == "setattr"]
    assert len(times) >= 1 and set(times.path2) == {"mtime"} and times.nfs.eq("").all()  # charged nothing
    assert "COMMIT" in "".join(mine[mine.op == "flush"].nfs)  # the close sends what NFS sends
    assert (m.source / "f").read_bytes() == bytes(8 * MiB)
    # re-emulating the trace (fusetrace simulate) charges the kernel's times nothing too
    assert meta.read(str(m.trace))["options"]["writeback_cache"] is True
    rows = [[row[c] for c in COLUMNS] for row in df.to_dict("records")]

    def times_only(rebuilder: Rebuilder) -> list[bool]:
        return [r.times_only for r in map(lambda row: rebuilder.rebuild(*row), rows)
                if r is not None and r.op == "setattr"]

    assert times_only(Rebuilder(writeback_cache=True)) == [True] * len(times)
    assert times_only(Rebuilder()) == [False] * len(times)


def test_a_write_only_descriptor_takes_a_write_to_part_of_a_page(mount):
    m = mount(*WB)
    (m.source / "f").write_bytes(b"a" * 8192)  # below the mount: no page of it is cached
    fd = os.open(m.mountpoint / "f", os.O_WRONLY)
    try:
        assert os.pwrite(fd, b"B" * 100, 10) == 100  # the kernel reads the page through this handle
    finally:
        os.close(fd)
    assert (m.source / "f").read_bytes() == b"a" * 10 + b"B" * 100 + b"a" * (8192 - 110)


def test_appends_land_at_the_end(mount):
    m = mount(*WB)
    (m.source / "log").write_bytes(b"x\n")
    for line in (b"one\n", b"two\n"):
        fd = os.open(m.mountpoint / "log", os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    assert (m.source / "log").read_bytes() == b"x\none\ntwo\n"


def test_a_callers_times_reach_the_source(mount):
    # (the kernel's own, kept while it caches a file's data, reach it when the kernel hands
    # them over, if it does: the source's own mtime of the write stands until then)
    m = mount(*WB)
    f = m.mountpoint / "f"
    f.write_bytes(b"data")
    os.utime(f, ns=(1_000_000_000, 2_000_000_000))
    assert os.stat(m.source / "f").st_mtime_ns == os.stat(f).st_mtime_ns == 2_000_000_000


@pytest.mark.parametrize("refused", [errno.EACCES, None])
def test_a_write_only_open_is_tried_for_reading_first_then_as_asked(refused):
    tried = []

    def opener(flags: int) -> int:
        tried.append(flags)
        if refused and flags & os.O_ACCMODE == os.O_RDWR:
            raise PermissionError(refused, "refused")
        return 3

    asked = os.O_WRONLY | os.O_TRUNC
    assert handlers._as_asked(asked & ~os.O_ACCMODE | os.O_RDWR | handlers._WRONLY_ASKED, opener) == 3
    reading = asked & ~os.O_ACCMODE | os.O_RDWR
    assert tried == ([reading, asked] if refused else [reading])  # the marker never reaches open(2)
