"""Through a real emulated mount, real tools: each FUSE request is charged what a Linux NFS
4.1 client sends for the same system call (the trace's `nfs` column names it), and the
kernel's own caches are set to the NFS client's timeouts."""

import ctypes
import ctypes.util
import mmap
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pandas as pd
from support import Mount, fusetrace, fusetrace_here, poll

from fusetrace.rehearse.simulate_fleet import Calls
from fusetrace.report.query import Trace
from fusetrace.server import syscalls

MiB = 1 << 20


def _trace(m) -> pd.DataFrame:
    m.unmount()
    return pd.read_parquet(m.trace)


def test_touch_stat_and_absent_names_cost_what_nfs_sends(mount):
    m = mount("--emulate", "efs-bursting", trace=True)
    f = m.mountpoint / "new"
    subprocess.run(["touch", str(f)], check=True)
    for _ in range(3):
        os.stat(f)  # within acregmin: the kernel's cache, as the NFS client's
        assert not (m.mountpoint / "absent").exists()  # asked once, then a negative entry
    df = _trace(m)
    mine = df[df.path == "/new"]
    rpcs = [r for r in mine.nfs if r]
    # the walk's first search of the mount's root (ACCESS: FUSE checks permissions itself), FUSE's
    # LOOKUP (NFS sends none before an exclusive create), the create, and one CLOSE although
    # touch closes a duplicate first
    assert rpcs == ["ACCESS,LOOKUP", "OPEN(create)", "CLOSE", "SETATTR"]
    assert (mine.op == "lookup").sum() == 1  # its time is the create's (tests/emulator/test_nfs_client.py)
    # the write-back cache's kernel asks for the block count again after a close
    # (fs/fuse: fuse_flush); the NFS client's cache answers it (no GETATTR above)
    assert (mine.op == "getattr").sum() <= 1
    assert (df[df.path == "/absent"].op == "lookup").sum() == 1


def test_each_users_first_search_of_a_directory_asks_access_again():
    """NFS keeps ACCESS answers per credential: through an allow_other mount, a second
    user's first lookup in a directory root has searched pays an ACCESS root's did not."""
    base = Path(tempfile.mkdtemp(prefix="fusetrace-access-"))  # every user can reach it
    try:
        os.chmod(base, 0o755)
        m = Mount(base / "src", base / "mnt", base / "trace")
        for d in (m.source, m.source / "d", m.mountpoint):
            d.mkdir(mode=0o755)
        fusetrace(
            "mount",
            str(m.source),
            str(m.mountpoint),
            "--emulate",
            "efs-bursting",
            "-o",
            "allow_other",
            "--trace",
            str(m.trace),
            "--log",
            str(base / "server.log"),
        )
        try:
            for name in ("a", "c"):
                assert not (m.mountpoint / "d" / name).exists()
            done = subprocess.run(
                ["test", "-e", str(m.mountpoint / "d" / "b")], user=65534, group=65534, timeout=60, check=False
            )
            assert done.returncode == 1  # looked up, and absent
        finally:
            m.unmount()
        lookups = pd.read_parquet(m.trace).query("op == 'lookup'").set_index("path")
        assert lookups.loc["/d/a", "nfs"] == "ACCESS,LOOKUP" and lookups.loc["/d/c", "nfs"] == "LOOKUP"
        assert lookups.loc["/d/b", "nfs"] == "ACCESS,LOOKUP" and lookups.loc["/d/b", "uid"] == 65534
        # and `fusetrace simulate` hands each call to the NFS client as its record's user
        assert {c.uid for *_, c in Calls(Trace(str(m.trace)), True)() if c.op == "lookup"} == {0, 65534}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_overwriting_a_file_costs_the_setattr_nfs_sends_after_its_open(mount):
    """A shell's `>` over a non-empty file: FUSE hands O_TRUNC to the server in its open;
    NFS sends OPEN, then a SETATTR of the size. The trace's open names the bytes it cut."""
    m = mount("--emulate", "efs-bursting", trace=True)
    (m.source / "old").write_bytes(b"x" * 5000)
    (m.source / "empty").write_bytes(b"")
    subprocess.run(["sh", "-c", f"echo new > {m.mountpoint / 'old'}; echo new > {m.mountpoint / 'empty'}"], check=True)
    df = _trace(m)
    opens = df[df.op == "open"].set_index("path")
    assert opens.loc["/old", "nfs"] == "OPEN,SETATTR" and opens.loc["/old", "size"] == 5000
    assert opens.loc["/empty", "nfs"] == "OPEN" and opens.loc["/empty", "size"] == 0
    assert (m.source / "old").read_bytes() == b"new\n"


def test_removing_the_name_of_an_open_file_costs_the_silly_rename_nfs_makes(mount):
    """A file unlinked, or renamed over, while open: NFS renames it to a hidden name (LOOKUP,
    RENAME) and removes that at the last close; the trace names the open file in `entry`."""
    m = mount("--emulate", "efs-bursting", trace=True)
    for name in ("open", "target", "closed", "src"):
        (m.source / name).write_bytes(b"x")
    with open(m.mountpoint / "open", "rb") as f, open(m.mountpoint / "target", "rb") as g:
        os.unlink(m.mountpoint / "open")
        os.rename(m.mountpoint / "src", m.mountpoint / "target")
        os.unlink(m.mountpoint / "closed")
        assert f.read() == b"x" and g.read() == b"x"  # still open: still readable
    df = _trace(m)
    changes = df[df.op.isin(["unlink", "rename"])].set_index("path")
    assert changes.loc["/open", "nfs"] == "LOOKUP,RENAME"
    assert changes.loc["/src", "nfs"] == "LOOKUP,RENAME,RENAME"
    assert changes.loc["/closed", "nfs"] == "REMOVE" and changes.loc["/closed", "entry"] == 0
    opened = df[df.op == "open"].set_index("path").inode
    assert changes.loc["/open", "entry"] == opened["/open"] and changes.loc["/src", "entry"] == opened["/target"]
    released = df[df.op == "release"].set_index("inode").nfs
    assert released[opened["/open"]] == "REMOVE" and released[opened["/target"]] == "REMOVE"


def test_an_open_file_below_a_renamed_directory_is_still_found_when_unlinked(mount):
    """`mv d e; rm e/f` while f is open: the kernel unlinks by the dentry it holds, with no
    new lookup, so the mount moves its open files' paths with their directory."""
    m = mount("--emulate", "efs-bursting", trace=True)
    (m.source / "d").mkdir()
    (m.source / "d" / "f").write_bytes(b"x")
    with open(m.mountpoint / "d" / "f", "rb") as f:
        os.rename(m.mountpoint / "d", m.mountpoint / "e")
        os.unlink(m.mountpoint / "e" / "f")
        f.read()
    df = _trace(m)
    assert df[df.op == "unlink"].nfs.tolist() == ["LOOKUP,RENAME"]
    assert df[df.op == "read"].path.tolist() == ["/e/f"]  # and its trace names it where it is


def test_an_open_file_is_found_below_a_moved_grandparent_and_an_exchanged_directory(mount):
    """The kernel unlinks by the dentries it holds: a file open as a/b/f is z/b/f after
    `mv a z` with no new lookup of b; after directories d and e swap names, e/f is the file
    opened as d/f, and d/f the other one."""
    m = mount("--emulate", "efs-bursting", trace=True)
    for d in ("a/b", "d", "e"):
        (m.source / d).mkdir(parents=True)
    for f in ("a/b/f", "d/f", "e/f"):
        (m.source / f).write_bytes(b"x")
    with open(m.mountpoint / "a" / "b" / "f", "rb"), open(m.mountpoint / "d" / "f", "rb"):
        os.stat(m.mountpoint / "e" / "f")
        os.rename(m.mountpoint / "a", m.mountpoint / "z")
        d, e = os.fsencode(m.mountpoint / "d"), os.fsencode(m.mountpoint / "e")
        syscalls.renameat2(syscalls.AT_FDCWD, d, syscalls.AT_FDCWD, e, syscalls.RENAME_EXCHANGE)
        for f in ("z/b/f", "d/f", "e/f"):
            os.unlink(m.mountpoint / f)
    unlinks = _trace(m).query("op == 'unlink'").nfs.tolist()
    assert unlinks == ["LOOKUP,RENAME", "REMOVE", "LOOKUP,RENAME"]


def test_a_name_is_hidden_only_while_a_file_is_open_by_it(mount):
    """NFS hides the name an open file holds (its dentry): another hard link of it, even one
    looked up since, is removed plainly; the name it was opened by is hidden wherever a
    rename has moved it."""
    m = mount("--emulate", "efs-bursting", trace=True)
    (m.source / "a").write_bytes(b"x")
    os.link(m.source / "a", m.source / "b")
    with open(m.mountpoint / "a", "rb") as f:
        os.stat(m.mountpoint / "b")  # the file's last lookup is by its other name
        os.unlink(m.mountpoint / "b")
        os.rename(m.mountpoint / "a", m.mountpoint / "c")
        os.unlink(m.mountpoint / "c")
        assert f.read() == b"x"
    df = _trace(m)
    unlinks = df[df.op == "unlink"].set_index("path")
    assert unlinks.loc["/b", "nfs"] == "REMOVE" and unlinks.loc["/b", "entry"] == 0
    assert unlinks.loc["/c", "nfs"] == "LOOKUP,RENAME" and unlinks.loc["/c", "entry"] != 0
    assert df[df.op == "release"].nfs.tolist() == ["REMOVE"]


def test_an_exchange_swaps_the_names_open_files_are_open_by(mount):
    """renameat2(RENAME_EXCHANGE) swaps two dentries: the file opened as `a` is then open
    as `b`, whose unlink hides it, and the closed file now at `a` is removed plainly."""
    m = mount("--emulate", "efs-bursting", trace=True)
    (m.source / "a").write_bytes(b"a")
    (m.source / "b").write_bytes(b"b")
    with open(m.mountpoint / "a", "rb") as f:
        a, b = os.fsencode(m.mountpoint / "a"), os.fsencode(m.mountpoint / "b")
        syscalls.renameat2(syscalls.AT_FDCWD, a, syscalls.AT_FDCWD, b, syscalls.RENAME_EXCHANGE)
        os.unlink(m.mountpoint / "a")
        os.unlink(m.mountpoint / "b")
        assert f.read() == b"a"
    unlinks = _trace(m).query("op == 'unlink'").set_index("path").nfs
    assert unlinks["/a"] == "REMOVE" and unlinks["/b"] == "LOOKUP,RENAME"


def test_a_release_while_the_unlink_of_its_file_waits_still_removes_the_hidden_name(mount):
    """A mapping's munmap releases the file without a flush (which the unlink would block)
    while the unlink waits for the model: that release is the last close NFS removes the
    hidden name at."""
    m = mount(
        "--emulate",
        "efs-bursting",
        "--set",
        "meta_write_latency_ms=3000",
        "--set",
        "meta_write_latency_p99_ms=3000",
        trace=True,
    )
    (m.source / "x").write_bytes(b"x" * 4096)
    fd = os.open(m.mountpoint / "x", os.O_RDONLY)
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.mmap.restype, libc.munmap.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t]
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    addr = libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)  # no dup, unlike Python's mmap
    assert addr not in (None, ctypes.c_void_p(-1).value)
    os.close(fd)
    unlink = threading.Thread(target=os.unlink, args=(m.mountpoint / "x",))
    unlink.start()
    try:
        poll(
            lambda: "unlink" in fusetrace_here("stats", str(m.mountpoint)).stdout.partition("waiting in the server")[2]
        )
    finally:
        libc.munmap(addr, 4096)
        unlink.join()
    df = _trace(m)
    assert df[df.op == "unlink"].nfs.tolist() == ["LOOKUP,RENAME"]
    assert df[df.op == "release"].nfs.tolist() == ["REMOVE"]


def test_removing_a_directory_nfs_would_keep_for_a_hidden_name_is_flagged(mount):
    """NFS keeps a file unlinked while open as .nfsXXXX in its directory, and refuses to
    remove the directory meanwhile; the mount cannot show the name, so it says so."""
    m = mount("--emulate", "efs-bursting")
    (m.mountpoint / "d").mkdir()
    (m.mountpoint / "e").mkdir()
    (m.mountpoint / "d" / "f").write_bytes(b"x")
    with open(m.mountpoint / "d" / "f", "rb"):
        os.unlink(m.mountpoint / "d" / "f")
        os.rmdir(m.mountpoint / "e")  # nothing hidden in it
        assert "removed that NFS" not in fusetrace("stats", str(m.mountpoint)).stdout
        os.rmdir(m.mountpoint / "d")
    warning = [ln for ln in fusetrace("stats", str(m.mountpoint)).stdout.splitlines() if "removed that NFS" in ln]
    assert len(warning) == 1 and warning[0].endswith("cannot show): 1"), warning


def test_a_large_synchronous_write_is_one_flush_of_parallel_writes(mount):
    m = mount("--emulate", "efs-bursting", "--set", "stored_size=2 TiB", trace=True)
    subprocess.run(
        ["dd", "if=/dev/zero", f"of={m.mountpoint / 'sync'}", "bs=4M", "count=2", "oflag=sync", "status=none"],
        check=True,
    )
    subprocess.run(
        ["dd", "if=/dev/zero", f"of={m.mountpoint / 'small'}", "bs=4k", "count=2", "oflag=dsync", "status=none"],
        check=True,
    )
    df = _trace(m)
    big = df[(df.path == "/sync") & (df.op == "fsync")]
    assert list(big.nfs) == ["WRITE x4,COMMIT"] * 2  # one per write(2): four 1 MiB WRITEs and a COMMIT
    small = df[(df.path == "/small") & (df.op == "fsync")]
    assert list(small.nfs) == ["WRITE(FILE_SYNC)"] * 2  # fits one WRITE: stable, no COMMIT
    writes = df[(df.path == "/sync") & (df.op == "write")]
    assert set(writes.gate) == {"buffered"} and writes.nfs.eq("").all()  # into the page cache


def test_an_emulated_mount_gives_the_kernel_the_nfs_clients_cache_timeouts(mount):
    m = mount("--emulate", "efs-bursting", "--set", "nfs_acregmin_s=7", trace=True)
    os.stat(m.mountpoint)
    m.unmount()
    import json

    meta = json.loads((m.trace / "_metadata.json").read_text())
    assert {
        k: meta["options"][k] for k in ("attr_timeout", "dir_attr_timeout", "entry_timeout", "negative_timeout")
    } == {"attr_timeout": 7.0, "dir_attr_timeout": 30.0, "entry_timeout": 30.0, "negative_timeout": 30.0}


def test_the_kernel_keeps_attributes_as_long_as_the_nfs_client_trusts_them(mount):
    """Stats of an unchanged file for a few seconds with acregmin 1 s: the NFS client trusts
    its attributes 1 s, then 2, then 4 (doubling while unchanged), and the kernel, told
    each period, asks only when the client sends a GETATTR.  A kernel given acregmin alone
    would ask again after every second, and the client answer from its cache."""
    m = mount("--emulate", "efs-bursting", "--set", "nfs_acregmin_s=1", trace=True)
    (m.source / "f").write_text("x")
    f = m.mountpoint / "f"
    until = time.monotonic() + 4.5
    while time.monotonic() < until:  # the workload: a stat every 20 ms, not a wait
        os.stat(f)
        time.sleep(0.02)
    df = _trace(m)
    mine = df[df.path == "/f"]
    assert list(mine[mine.op == "lookup"].nfs) == ["ACCESS,LOOKUP"]  # the root's first search, the name
    asked = mine[mine.op == "getattr"]
    assert len(asked) >= 1 and set(asked.nfs) == {"GETATTR"}  # never one the client answers alone


def test_names_and_attributes_a_listing_brought_are_kept_as_nfs_keeps_them(mount):
    """`ls -l` of a directory: READDIRPLUS brings each entry's name and attributes (Linux
    primes its dentries), so the stats after it send nothing more, through the mount as on
    NFS: no lookup and no getattr of the entries reaches it."""
    m = mount("--emulate", "efs-bursting", trace=True)
    (m.source / "d").mkdir()
    for i in range(5):
        (m.source / "d" / f"f{i}").write_text("x")
    subprocess.run(["ls", "-l", str(m.mountpoint / "d")], check=True, capture_output=True)
    for i in range(5):
        os.stat(m.mountpoint / "d" / f"f{i}")
    df = _trace(m)
    entries = df[df.path.str.startswith("/d/")]
    assert (df.op == "readdir").any()
    assert entries[entries.op.isin(["lookup", "getattr"])].empty, entries[["op", "path", "nfs"]]
