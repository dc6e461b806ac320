"""FUSE's write-back cache, on by default on an emulated mount (--no-writeback-cache: off).
Buffered writes gather in the kernel's page cache and reach the mount as write-back, as
an NFS client's reach the server; the server opens write-only files for reading too (the
kernel fills the rest of a page a write covers in part) and leaves appends to the
kernel; the kernel's hand-overs of a file's times cost nothing, as NFS sends none."""

import errno
import json
import os
import subprocess
import sys

import pandas as pd
import pytest
from support import Mount, fusetrace, fusetrace_here, is_mounted, poll

from fusetrace.rehearse.requests import COLUMNS, Rebuilder
from fusetrace.server import nofollow, syscalls
from fusetrace.server.main import MountOptions
from fusetrace.trace import metadata as meta

MiB = 1 << 20
WB = ("--emulate", "efs-tiny", "--writeback-cache")


def _trace(m) -> pd.DataFrame:
    m.unmount()
    return pd.read_parquet(m.trace)


def test_a_trace_only_mount_takes_it_when_asked_and_records_the_write_back(mount):
    """The faster of a traced mount's two ways, by name: tar's small writes arrive as the
    kernel's write-back; without the flag, each aligned 4 KiB write(2) is a request."""
    fast, plain = mount("--writeback-cache", trace=True), mount(trace=True)
    for m in (fast, plain):
        subprocess.run(
            ["dd", "if=/dev/zero", f"of={m.mountpoint / 'f'}", "bs=4k", "count=256", "status=none"], check=True
        )
    counts = {}
    for m in (fast, plain):
        df = _trace(m)
        counts[m] = int(((df.path == "/f") & (df.op == "write")).sum())
        assert meta.read(str(m.trace))["options"]["writeback_cache"] is (m is fast)
        assert (m.source / "f").read_bytes() == bytes(MiB)
    assert counts[plain] == 256 and 1 <= counts[fast] <= 16


def test_a_trace_only_mount_over_a_network_or_fuse_source_refuses_it(tmp_path, mount):
    """Other clients write there: appends through the mount would land at the kernel's
    stale end of file."""
    below = mount()
    (tmp_path / "over").mkdir()
    done = fusetrace("mount", str(below.mountpoint), str(tmp_path / "over"), "--writeback-cache", check=False)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "--writeback-cache" in lines[0] and "fuse" in lines[0]
    assert not is_mounted(tmp_path / "over")


def test_on_by_default_where_emulated_and_not_shared(tmp_path):
    def cache(*, emulate=None, shared=None, asked=None) -> bool | None:
        return MountOptions(
            str(tmp_path), str(tmp_path / "mnt"), emulate=emulate, shared=shared, fs_id="one", writeback_cache=asked
        ).writeback_cache

    assert cache(emulate="efs-tiny") is True
    assert cache(emulate="efs-tiny", asked=False) is False
    assert cache() is False  # a traced mount: the source may change beside it (NFS's other clients)
    assert cache(emulate="efs-tiny", shared="redis://127.0.0.1:6379/0") is False


def _kernel_only(df: pd.DataFrame, op: str) -> list[bool]:
    """`fusetrace simulate`'s view of the trace's `op` requests: the kernel's own or not."""
    rebuilder = Rebuilder()
    rebuilt = (rebuilder.rebuild(*(row[c] for c in COLUMNS)) for row in df.to_dict("records"))
    return [r.kernel_only for r in rebuilt if r is not None and r.op == op]


def test_small_writes_reach_the_mount_as_write_back(mount):
    m = mount(*WB, trace=True)
    f = m.mountpoint / "f"
    subprocess.run(["dd", "if=/dev/zero", f"of={f}", "bs=4k", "count=2048", "status=none"], check=True)
    subprocess.run(["touch", "-m", "-d", "2020-01-01", str(f)], check=True)  # a caller's, not the kernel's
    df = _trace(m)
    mine = df[df.path == "/f"]
    writes = mine[mine.op == "write"]
    # 2,048 write(2) calls of 4 KiB; without the cache, as many requests
    assert 8 <= len(writes) <= 64 and writes["size"].max() <= MiB and writes["size"].sum() == 8 * MiB
    assert set(writes.gate) == {"buffered"}
    times = mine[mine.op == "setattr"]
    handed = times.fh != 0  # the kernel hands its times over on an open handle
    assert handed.sum() >= 1 and set(times[handed].path2) == {"mtime"} and times[handed].nfs.eq("").all()
    assert set(times[handed].gate) == {"kernel"}
    assert list(times[~handed].nfs) == ["SETATTR"]  # touch -m: charged as NFS sends it
    assert "COMMIT" in "".join(mine[mine.op == "flush"].nfs)  # the close sends what NFS sends
    assert (m.source / "f").read_bytes() == bytes(8 * MiB)
    # re-emulating the trace (fusetrace simulate) tells them apart as the mount did
    assert meta.read(str(m.trace))["options"]["writeback_cache"] is True
    assert _kernel_only(df, "setattr") == list(handed)


def test_off_it_is_one_request_per_write(mount):
    m = mount("--emulate", "efs-tiny", "--no-writeback-cache", trace=True)
    f = m.mountpoint / "f"
    subprocess.run(["dd", "if=/dev/zero", f"of={f}", "bs=4k", "count=64", "status=none"], check=True)
    df = _trace(m)
    assert meta.read(str(m.trace))["options"]["writeback_cache"] is False
    assert ((df.path == "/f") & (df.op == "write")).sum() == 64


def test_the_kernels_times_after_a_link_rename_or_unlink_cost_nothing(mount):
    # the kernel hands a file's times over, on no handle, after each change of its names
    # (fs/fuse: fuse_update_ctime): NFS sends nothing then, but a caller's touch -m is sent
    m = mount(*WB, trace=True)
    a, b, c = (m.mountpoint / n for n in "abc")
    a.write_bytes(b"data")
    # a rule on setattr passes the kernel's own by: else the rename's would fail a later close
    fusetrace("fault", str(m.mountpoint), "add", "--op", "setattr", "--path", "/c", "--errno", "EIO", "--count", "5")
    os.link(a, b)
    os.rename(a, c)
    os.unlink(b)
    # a caller setting the very mtime the file has, as the kernel's hand-overs do: still sent
    mtime = os.stat(c).st_mtime_ns
    subprocess.run(["touch", "-m", "-d", f"@{mtime // 10**9}.{mtime % 10**9:09d}", str(c)], check=False)
    os.unlink(c)
    # a file open for writing gets its hand-over on its handle, which pays what is owed too
    d, e = m.mountpoint / "d", m.mountpoint / "e"
    with open(d, "wb"):
        os.rename(d, e)
    mtime = os.stat(e).st_mtime_ns
    touched = subprocess.run(["touch", "-m", "-d", f"@{mtime // 10**9}.{mtime % 10**9:09d}", str(e)], check=False)
    assert touched.returncode == 0  # the rule above was for /c only
    df = _trace(m)
    late = df[(df.op == "setattr") & (df.path == "/e")]
    assert list(late.gate.iloc[-1:]) != ["kernel"] and list(late.nfs.iloc[-1:]) == ["SETATTR"]
    df = df[~df.path.isin(["/d", "/e"])]
    times = df[(df.op == "setattr") & (df.fh == 0)]
    names = df[df.op.isin(["link", "rename", "unlink"])]
    assert len(names) == 4 and names.nfs.ne("").all()
    kernels = times[times.gate == "kernel"]
    assert len(kernels) == 4 and kernels.nfs.eq("").all() and kernels.errno.eq(0).all()
    assert kernels.fault.isna().all()
    callers = times[times.gate != "kernel"]
    assert list(callers.nfs) == ["SETATTR"] and list(callers.errno) == [errno.EIO]  # touch -m: the rule took it
    assert _kernel_only(df, "setattr") == list(df[df.op == "setattr"].gate == "kernel")
    # fusetrace replay leaves them out as the kernel's own, and finds no difference
    target = m.source.parent / "target"
    target.mkdir()
    out = json.loads(fusetrace_here("replay", str(m.trace), str(target), "--as-fast-as-possible", "--json").stdout)
    # (but for the fault's error, which the target does not inject)
    assert out["differences"]["by_op"] == [{"op": "setattr", "kind": "ok, recorded EIO", "count": 1}], out
    assert sum(n for why, n in out["not_replayed"].items() if "write-back cache" in why) >= 4


def _touch_own_mtime(path) -> None:
    """A caller's `touch -m` of the mtime the file already has: what a hand-over carries."""
    mtime = os.stat(path).st_mtime_ns
    subprocess.run(["touch", "-m", "-d", f"@{mtime // 10**9}.{mtime % 10**9:09d}", str(path)], check=True)


def test_renameat2_flags_nfs_refuses_are_done_and_said_once_in_the_log(tmp_path, mount):
    log = tmp_path / "server.log"
    m = mount(*WB, "--log", str(log))
    a, b, c = (m.mountpoint / n for n in "abc")
    for f in (a, b):
        f.write_bytes(f.name.encode())
    for flags, old, new in ((syscalls.RENAME_EXCHANGE, a, b), (1, a, c)):  # 1: RENAME_NOREPLACE
        syscalls.renameat2(syscalls.AT_FDCWD, os.fsencode(old), syscalls.AT_FDCWD, os.fsencode(new), flags)
    assert b.read_bytes() == b"a" and c.read_bytes() == b"b" and not a.exists()
    said = poll(lambda: [ln for ln in log.read_text().splitlines() if "renameat2 flags" in ln])
    assert len(said) == 1 and "'/a': renamed with renameat2 flags (0x2), which an NFS client refuses" in said[0]


def test_an_exchange_a_replace_and_attribute_changes_owe_one_hand_over_a_file(mount):
    # exchanged files and a replaced one each get the kernel's hand-over, as does every
    # extended attribute change; once each is paid, a caller's touch -m is charged again
    m = mount(*WB, "--set", "xattrs=true", trace=True)
    a, b, c, d = (m.mountpoint / n for n in "abcd")
    for f in (a, b, c, d):
        f.write_bytes(f.name.encode())
    syscalls.renameat2(syscalls.AT_FDCWD, os.fsencode(a), syscalls.AT_FDCWD, os.fsencode(b), syscalls.RENAME_EXCHANGE)
    os.rename(c, d)  # d's file is replaced
    os.setxattr(a, "user.k", b"v")
    os.removexattr(a, "user.k")
    for f in (a, b, d):
        _touch_own_mtime(f)
    df = _trace(m)
    df = df[df.op.isin(["rename", "setxattr", "removexattr", "setattr"]) & (df.fh == 0)]
    changes = df.index[df.op != "setattr"]
    after = [
        list(df.loc[(df.index > i) & (df.index < j)].gate) for i, j in zip(changes, [*changes[1:], df.index.max() + 1])
    ]
    assert list(df.loc[changes].op) == ["rename", "rename", "setxattr", "removexattr"]
    assert [g.count("kernel") for g in after] == [2, 2, 1, 1]
    callers = df[(df.op == "setattr") & (df.gate != "kernel")]
    assert list(callers.path) == ["/a", "/b", "/d"] and callers.nfs.eq("SETATTR").all()


def test_a_hand_over_the_source_refuses_keeps_its_times_and_fails_nothing(tmp_path):
    # the source refuses to set the times of a file the server does not own (as a
    # root-squashed NFS export would): here a server without CAP_FOWNER, on a file of nobody's
    src, mnt, trace = tmp_path / "src", tmp_path / "mnt", tmp_path / "trace"
    src.mkdir()
    mnt.mkdir()
    (src / "f").write_bytes(b"hello")
    os.chown(src / "f", 65534, 65534)
    os.chmod(src / "f", 0o666)
    lacking = ["setpriv", "--inh-caps=-fowner", "--bounding-set=-fowner"]
    refused = subprocess.run([*lacking, "touch", "-m", "-d", "2020-01-01", str(src / "f")], capture_output=True)
    assert refused.returncode != 0  # the server's own utimensat will be refused too
    done = subprocess.run(
        [*lacking, sys.executable, "-m", "fusetrace", "mount", str(src), str(mnt), *WB, "--trace", str(trace)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    m = Mount(src, mnt, trace)
    try:
        fd = os.open(mnt / "f", os.O_WRONLY)
        try:
            os.pwrite(fd, b"HELLO", 0)
        finally:
            os.close(fd)  # the hand-over on its handle is refused: the close still succeeds
        os.rename(mnt / "f", mnt / "g")  # and the one after a rename
        assert (mnt / "g").read_bytes() == b"HELLO"
        os.stat(mnt / "g")
    finally:
        m.unmount()
    df = pd.read_parquet(trace)
    kernels = df[(df.op == "setattr") & (df.gate == "kernel")]
    assert set(kernels.fh != 0) == {True, False} and kernels.errno.eq(0).all()
    assert (src / "g").read_bytes() == b"HELLO"


def test_a_write_only_descriptor_takes_a_write_to_part_of_a_page(mount):
    m = mount(*WB, trace=True)
    (m.source / "f").write_bytes(b"a" * 8192)  # below the mount: no page of it is cached
    fd = os.open(m.mountpoint / "f", os.O_WRONLY)
    try:
        assert os.pwrite(fd, b"B" * 100, 10) == 100  # the kernel reads the page through this handle
    finally:
        os.close(fd)
    assert (m.source / "f").read_bytes() == b"a" * 10 + b"B" * 100 + b"a" * (8192 - 110)
    df = _trace(m)
    fills = df[(df.path == "/f") & (df.op == "read")]
    # the kernel's page fill: NFS writes the part alone and reads nothing
    assert len(fills) >= 1 and fills.nfs.eq("").all() and set(fills.gate) == {"kernel"}
    assert _kernel_only(df, "read") == [True] * len(fills)
    # fusetrace replay issues what the caller did, not the kernel's page fills
    target = m.source.parent / "target"
    target.mkdir()
    (target / "f").write_bytes(b"a" * 8192)
    out = json.loads(fusetrace_here("replay", str(m.trace), str(target), "--as-fast-as-possible", "--json").stdout)
    assert out["differences"]["count"] == 0, out["differences"]
    assert sum(n for why, n in out["not_replayed"].items() if "write-back cache" in why) >= len(fills)


def test_not_with_a_shared_file_system(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "mnt").mkdir()
    done = fusetrace(
        "mount",
        str(tmp_path / "src"),
        str(tmp_path / "mnt"),
        *WB,
        "--shared",
        "redis://127.0.0.1:6379/0",
        "--fs-id",
        "one",
        check=False,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1 and "--writeback-cache" in lines[0], done.stderr
    assert not is_mounted(tmp_path / "mnt")


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
    assert nofollow.as_asked(asked & ~os.O_ACCMODE | os.O_RDWR | nofollow.WRONLY_ASKED, opener) == 3
    reading = asked & ~os.O_ACCMODE | os.O_RDWR
    assert tried == ([reading, asked] if refused else [reading])  # the marker never reaches open(2)


def test_replay_makes_the_traced_reads_again_past_the_pages_its_writes_left(mount):
    # the application dropped its pages (as fio's invalidate=1 does: no request, no record)
    # and read the file back through the mount; replayed, the target's kernel still holds
    # the pages the replayed writes left, and read nothing from its mount
    m = mount(*WB, trace=True)
    f = m.mountpoint / "data"
    f.write_bytes(os.urandom(512 * 1024))
    fd = os.open(f, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        while os.read(fd, 65536):
            pass
    finally:
        os.close(fd)
    recorded = _trace(m)
    target = mount(*WB, trace=True)
    out = json.loads(fusetrace_here("replay", str(m.trace), str(target.mountpoint), "--json").stdout)
    assert out["differences"]["count"] == 0, out["differences"]
    replayed = _trace(target)
    reads = [df[(df.op == "read") & (df.path == "/data")] for df in (recorded, replayed)]
    assert len(reads[0]) >= 1 and reads[0]["size"].sum() == 512 * 1024
    assert reads[1]["size"].sum() == 512 * 1024 and 0.5 * len(reads[0]) <= len(reads[1]) <= 2 * len(reads[0])
