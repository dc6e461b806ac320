"""`fusetrace fit` of a syscall trace (`fusetrace capture`): the RPCs the model's NFS client
sends for each system call (path walks, page cache, close-to-open), in virtual time, and
the profile fitted from the calls that reached the server."""

import math
import os
import stat
import tomllib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import fusetrace_here, syscall_trace

from fusetrace.emulator.profiles import load_profile
from fusetrace.rehearse import fit_rpcs
from fusetrace.rehearse.syscalls import COLUMNS, Syscalls
from fusetrace.trace.metadata import trace_kind
from fusetrace.trace.schema import TraceRecord
from fusetrace.trace.writer import TraceWriter

BASE = load_profile("efs-bursting")
REG, DIR = stat.S_IFREG | 0o644, stat.S_IFDIR | 0o755


class Client:
    """Syscalls on the base, fed one call at a time: what it says each sends."""

    def __init__(self) -> None:
        self.calls = Syscalls(BASE, 0)

    def __call__(self, t_s: float, op: str, path: str = "", **fields) -> str:
        record = {
            "dur_ns": 500_000,
            "op": op,
            "inode": 0,
            "path": path,
            "path2": None,
            "fh": 0,
            "offset": 0,
            "size": 0,
            "result": 0,
            "errno": 0,
            "kind": None,
            "flags": 0,
            "mode": 0,
            **fields,
        }
        return self.calls.rpcs(int(t_s * 1e9), 1000, tuple(record[c] for c in COLUMNS))[0]


def test_a_stat_loop_looks_up_once_then_is_answered_from_the_cache_until_acregmin():
    """nfs_lookup_revalidate trusts the dentry while its directory's attributes are fresh,
    nfs_getattr the attributes the LOOKUP brought for acregmin (3 s on the base); then a
    GETATTR whenever they expire, the period doubling from there (its first is the
    client's first fetch of them: NfsClient.trusted)."""
    c = Client()
    assert BASE.nfs_acregmin_s == 3
    sent = {t / 10: c(t / 10, "getattr", "/d/f", mode=REG) for t in range(0, 100)}
    # the first search of each directory asks ACCESS (nfs_permission), then the names' LOOKUPs
    assert sent[0] == "ACCESS,LOOKUP,ACCESS,LOOKUP"
    assert {t: rpcs for t, rpcs in sent.items() if rpcs and t} == {3.1: "GETATTR", 6.2: "GETATTR"}
    assert c(9.05, "getattr", "/d/g", mode=REG) == "LOOKUP"  # the directories are known: one LOOKUP


def test_an_open_write_close_writes_back_and_commits_on_close():
    """Buffered writes stay in the page cache; close(2) (nfs_file_flush) sends them (two
    WRITEs of 1 MiB, unstable) and, past one WRITE's worth, a COMMIT; the open's CLOSE
    goes with it.  The next open sends OPEN (close-to-open) and reads the written pages
    from the page cache."""
    c = Client()
    mib = 1 << 20
    assert c(0, "create", "/f", inode=7, fh=1, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC) == "ACCESS,OPEN(create)"
    for i in range(2):
        done = c(0.01 + i / 1000, "write", "/f", inode=7, fh=1, offset=i * mib, size=mib, result=mib, kind="buffered")
        assert done == ""
    assert c(0.02, "flush", "/f", inode=7, fh=1, kind="commit") == "WRITE x2,COMMIT,CLOSE"
    assert c(1, "open", "/f", inode=7, fh=2, flags=os.O_RDONLY) == "OPEN"
    assert c(1.01, "read", "/f", inode=7, fh=2, size=mib, result=mib) == ""  # the pages written
    assert c(1.02, "flush", "/f", inode=7, fh=2) == "CLOSE"


def test_an_open_revalidates_a_name_it_no_longer_trusts_and_skips_one_not_cached():
    """nfs4_do_lookup_revalidate: an open's last name, cached and its directory's attributes
    fresh, is left to the OPEN; past acdirmin it is revalidated first by a LOOKUP
    (nfs_lookup_revalidate_dentry); one not cached is opened by name (nfs_atomic_open:
    OPEN alone)."""
    c = Client()
    assert c(0, "open", "/f", inode=5, fh=1, flags=os.O_RDONLY) == "ACCESS,OPEN"  # the root's first search
    c(0.1, "flush", "/f", inode=5, fh=1)
    assert c(1, "open", "/f", inode=5, fh=2, flags=os.O_RDONLY) == "OPEN"
    c(1.1, "flush", "/f", inode=5, fh=2)
    assert c(BASE.nfs_acdirmin_s + 1, "open", "/f", inode=5, fh=3, flags=os.O_RDONLY) == "LOOKUP,OPEN"


def test_an_o_sync_write_sends_its_stable_write_itself():
    c = Client()
    c(0, "open", "/s", inode=8, fh=1, flags=os.O_WRONLY | os.O_SYNC)
    assert c(0.01, "write", "/s", inode=8, fh=1, size=4096, result=4096, kind="sync") == "WRITE"
    assert c(0.02, "flush", "/s", inode=8, fh=1) == "CLOSE"  # nothing left to write back or commit


def test_reading_a_file_twice_sends_one_read_and_only_the_pages_missing():
    c = Client()
    c(0, "open", "/r", inode=9, fh=1, flags=os.O_RDONLY)
    assert c(0.01, "read", "/r", inode=9, fh=1, offset=0, size=65536, result=65536) == "READ"
    assert c(0.02, "read", "/r", inode=9, fh=1, offset=0, size=65536, result=65536) == ""
    c(0.03, "flush", "/r", inode=9, fh=1)
    c(1, "open", "/r", inode=9, fh=2, flags=os.O_RDONLY)  # close-to-open: the pages stay (one client)
    assert c(1.01, "read", "/r", inode=9, fh=2, offset=4096, size=8192, result=8192) == ""
    assert c(1.02, "read", "/r", inode=9, fh=2, offset=32768, size=65536, result=65536) == "READ"  # 64-96 KiB
    assert c(1.03, "read", "/r", inode=9, fh=2, offset=200_000, size=4096, result=0) == ""  # past its end


def test_namespace_changes_walk_their_paths_and_skip_the_names_they_make():
    """mkdir, a rename's target, an open's last name: not looked up (LOOKUP_EXCL,
    LOOKUP_RENAME_TARGET, nfs_atomic_open); an absent name is looked up once (a
    negative dentry)."""
    c = Client()
    assert c(0, "mkdir", "/a", mode=DIR) == "ACCESS,CREATE"
    assert c(0.1, "mkdir", "/a/b", mode=DIR) == "ACCESS,CREATE"  # the first search of /a asks
    assert c(0.2, "getattr", "/a/none", errno=2) == "LOOKUP"
    assert c(0.3, "getattr", "/a/none", errno=2) == ""
    made = c(0.4, "create", "/a/b/f", inode=11, fh=1, flags=os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    assert made == "ACCESS,OPEN(create)"  # and of /a/b
    c(0.5, "flush", "/a/b/f", inode=11, fh=1)
    assert c(0.6, "rename", "/a/b/f", path2="/a/g") == "RENAME"
    assert c(0.7, "unlink", "/a/g") == "REMOVE"
    assert c(0.8, "opendir", "/a", inode=10, fh=2, flags=os.O_RDONLY | os.O_DIRECTORY) == "GETATTR"
    assert c(0.9, "readdir", "/a", inode=10, fh=2, size=32768, result=3 * 32) == "READDIRPLUS"
    assert c(0.91, "readdir", "/a", inode=10, fh=2, offset=3, size=32768, result=0) == ""
    assert c.calls.unknown == 0


def test_unlinking_an_open_file_renames_it_away_until_its_close():
    """nfs_sillyrename: a LOOKUP of a hidden name and a RENAME to it; the close that ends
    the open sends its REMOVE (in the background); a failed write sends nothing."""
    c = Client()
    c(0, "open", "/f", inode=5, fh=1, flags=os.O_RDWR)
    assert c(0.1, "unlink", "/f") == "LOOKUP,RENAME"
    assert c(0.2, "read", "/f", inode=5, fh=1, size=4096, result=4096) == "READ"  # still readable
    assert c(0.3, "write", "/f", inode=5, fh=1, size=4096, errno=28) == ""  # ENOSPC
    assert c(0.4, "flush", "/f", inode=5, fh=1) == "CLOSE,REMOVE"
    assert c(0.5, "getattr", "/f", errno=2) == "LOOKUP"  # the name is gone


def test_a_duplicate_written_after_the_first_close_flushes_without_a_second_close():
    """The first close(2) of an open file ends its NFS open (CLOSE); a duplicate of it
    (dup, fork) written after that: its close sends the data (one stable WRITE: it fits
    one) with no CLOSE; data dirty for over 30 s went in the background (a COMMIT)."""
    c = Client()
    c(0, "open", "/f", inode=5, fh=1, flags=os.O_WRONLY)
    assert c(0.1, "flush", "/f", inode=5, fh=1) == "CLOSE"
    assert c(0.2, "write", "/f", inode=5, fh=1, size=4096, result=4096, kind="buffered") == ""
    assert c(5, "flush", "/f", inode=5, fh=1, kind="commit") == "WRITE"
    assert c(5.1, "flush", "/f", inode=5, fh=1) == ""
    c(6, "write", "/f", inode=5, fh=1, size=4096, result=4096, kind="buffered")
    assert c(40, "flush", "/f", inode=5, fh=1, kind="commit") == "COMMIT"
    assert c.calls.rebuilder.gaps.unknown_handles == 0


def test_a_renamed_directory_keeps_its_entries_and_their_attributes():
    c = Client()
    c(0, "mkdir", "/a", mode=DIR)
    c(0.1, "create", "/a/f", inode=5, fh=1, flags=os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    c(0.2, "flush", "/a/f", inode=5, fh=1)
    assert c(0.3, "rename", "/a", path2="/b") == "RENAME"
    assert c(0.4, "getattr", "/b/f", mode=REG) == ""  # the same dentry and node, moved
    assert c(0.6, "getattr", "/a", errno=2) == ""  # the client knows the old name is gone


ops = st.sampled_from(["stat", "read", "write"])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(ops, st.integers(0, 2), st.integers(0, 31), st.integers(1, 32), st.floats(0.001, 5.0)),
        min_size=1,
        max_size=40,
    )
)
def test_a_call_repeated_at_once_is_answered_from_the_caches(steps):
    """Whatever came before, a stat repeated at once sends nothing (the attributes and
    the dentries just fetched are trusted), nor a read of pages just read or written."""
    c, t = Client(), 0.0
    for n, (op, f, page, pages, gap) in enumerate(steps):
        t += gap
        path, inode, fh = f"/d/f{f}", 100 + f, n + 1
        offset, size = page * 4096, pages * 4096
        if op == "stat":
            c(t, "getattr", path, mode=REG)
            assert c(t + 1e-6, "getattr", path, mode=REG) == ""
            continue
        flags = os.O_RDONLY if op == "read" else os.O_WRONLY | os.O_CREAT
        c(t, "open" if op == "read" else "create", path, inode=inode, fh=fh, flags=flags)
        done = c(t + 1e-4, op, path, inode=inode, fh=fh, offset=offset, size=size, result=size, kind="buffered")
        assert done in (("READ", "") if op == "read" else ("",))
        assert c(t + 2e-4, "read", path, inode=inode, fh=fh, offset=offset, size=size, result=size) == ""
        c(t + 3e-4, "flush", path, inode=inode, fh=fh)


calls = st.fixed_dictionaries(
    {
        "op": st.sampled_from(
            [
                "open",
                "create",
                "opendir",
                "read",
                "write",
                "flush",
                "releasedir",
                "fsync",
                "fsyncdir",
                "getattr",
                "access",
                "readlink",
                "readdir",
                "mkdir",
                "mknod",
                "unlink",
                "rmdir",
                "rename",
                "link",
                "symlink",
                "setattr",
                "statfs",
                "getxattr",
                "setxattr",
                "lookup",
                "forget",
            ]
        ),
        "path": st.sampled_from(["", "/", "/a", "/a/b", "/a/b/c", "//a/../b", "a/./c"]),
        "path2": st.sampled_from([None, "", "/a", "/d/e", "/a/b/c"]),
        "inode": st.sampled_from([0, 1, 2, 7, 2**64 - 1]),
        "fh": st.integers(0, 3),
        "offset": st.sampled_from([0, 1, 4095, 1 << 40, -1]),
        "result": st.sampled_from([0, 1, 4096, 1 << 21, -1]),
        "errno": st.sampled_from([0, 2, 13]),
        "kind": st.sampled_from([None, "buffered", "sync", "direct", "commit", "none", "junk"]),
        "flags": st.sampled_from([0, os.O_RDONLY, os.O_WRONLY | os.O_CREAT | os.O_EXCL, os.O_SYNC, os.O_DIRECT]),
        "mode": st.sampled_from([0, REG, DIR, stat.S_IFLNK]),
        "gap": st.floats(0, 40),
    }
)


@settings(max_examples=150, deadline=None)
@given(st.lists(calls, max_size=30))
def test_any_sequence_of_calls_replays(steps):
    """Whatever a (hostile) trace holds, each record gets RPCs the client names, or none."""
    c, t = Client(), 0.0
    for step in steps:
        t += step.pop("gap")
        sent = c(t, **step, size=step["result"])
        assert all(part.split(" x")[0] in RPCS for part in sent.split(",") if sent), sent


RPCS = set(fit_rpcs.RPC_CLASS) | {"WRITE(FILE_SYNC)"}


def test_the_shared_captured_trace_gets_the_rpcs_linux_sends(tmp_path):
    """tests/support/syscall_trace.py (a capture's records, as the format describes them):
    each call's RPCs, and `fusetrace fit` on it giving a profile that loads."""
    c = Client()
    sent = []
    for op, inode, path, path2, fh, offset, size, result, errno, flags, mode, kind, _ in syscall_trace.CALLS:
        fields = {"inode": inode, "path2": path2, "fh": fh, "offset": offset, "size": size, "result": result}
        sent.append((op, path, c(len(sent) * 5e-5, op, path, **fields, errno=errno, kind=kind, flags=flags, mode=mode)))
    assert sent[:10] == [
        ("mkdir", "/d", "ACCESS,CREATE"),
        ("getattr", "/d", ""),  # the CREATE's reply: dentry and attributes
        ("create", "/d/f", "ACCESS,OPEN(create)"),  # /d's first search
        *[("write", "/d/f", "")] * 3,
        ("fsync", "/d/f", "WRITE"),  # the 12 KiB held dirty: one stable WRITE
        ("flush", "/d/f", "CLOSE"),
        ("getattr", "/d/f", ""),  # nothing left to write back
        ("access", "/d/f", "ACCESS"),
    ]
    assert ("read", "/d/f", "") in sent  # the pages written
    assert ("getattr", "/d/missing", "LOOKUP") in sent
    assert ("flush", "/d/h", "WRITE,CLOSE") in sent  # close-to-open: the 100 bytes, then CLOSE
    trace = syscall_trace.write_syscall_trace(tmp_path / "t")
    fusetrace_here("fit", str(trace), "-o", str(tmp_path / "p.toml"))
    assert load_profile(tmp_path / "p.toml").read_latency_ms == BASE.read_latency_ms  # all under the floor


# ---- fitted through `fusetrace fit` -------------------------------------------------------


def syscall(t_ns: int, op: str, path: str, dur_ns: int, **fields) -> TraceRecord:
    values = {"inode": 0, "path2": None, "fh": 0, "offset": 0, "size": 0, "result": 0, "errno": 0, **fields}
    return TraceRecord(
        start_ns=t_ns, dur_ns=dur_ns, op=op, path=path, pid=10, uid=1000, gid=1000, shaped_ns=0, comm="app", **values
    )


def lognormal_ns(rng, median_ms: float, n: int) -> list[int]:
    return [int(ms * 1e6) for ms in rng.lognormal(math.log(median_ms), 0.3, n)]


def test_fit_of_a_syscall_trace_counts_only_the_calls_that_reached_the_server(tmp_path):
    """60 files, each: a stat (LOOKUP, 0.6 ms), two more within acregmin taking 0.3 ms
    (over the floor, but cached: not counted), an open (OPEN, 1.1 ms), a read (READ,
    0.8 ms), the same read again (cached, 0.3 ms), a close (CLOSE, 0.7 ms), and 4 s
    later a stat (GETATTR, 0.9 ms); and 60 4 KiB writes to one file, each then fsync'd
    (the fsync sends the WRITE, 3 ms).  Each RPC's median comes back from its calls alone."""
    rng = np.random.default_rng(5)
    n, records = 60, []
    lookup, open_, read, close, getattr_ = (lognormal_ns(rng, ms, n) for ms in (0.6, 1.1, 0.8, 0.7, 0.9))
    for i in range(n):
        path, t = f"/data/f{i}", i * 10_000_000
        records.append(syscall(t, "getattr", path, lookup[i], mode=REG))
        for k in (1, 2):
            records.append(syscall(t + 700_000_000 * k, "getattr", path, 300_000, mode=REG))
        t += 1_500_000_000
        inode, fh = 1000 + i, i + 1
        on = {"inode": inode, "fh": fh}
        records.append(syscall(t, "open", path, open_[i], flags=os.O_RDONLY, **on))
        records.append(syscall(t + 2_000_000, "read", path, read[i], size=4096, result=4096, kind="read", **on))
        records.append(syscall(t + 4_000_000, "read", path, 300_000, size=4096, result=4096, kind="read", **on))
        records.append(syscall(t + 6_000_000, "flush", path, close[i], kind="none", **on))
        records.append(syscall(t + 4_000_000_000, "getattr", path, getattr_[i], mode=REG))
    db = {"inode": 5000, "fh": 5000}  # sqlite's pattern: a 4 KiB pwrite, then fsync, which sends it
    records.append(syscall(0, "open", "/data/db", 900_000, flags=os.O_RDWR, **db))
    for i, dur in enumerate(lognormal_ns(rng, 3.0, n)):
        t = 8_000_000_000 + i * 50_000_000
        records.append(syscall(t, "write", "/data/db", 20_000, offset=i * 4096, size=4096, result=4096, **db))
        records.append(syscall(t + 100_000, "fsync", "/data/db", dur, kind="commit", **db))
    records.append(syscall(1, "forget", "/data/f0", 1000))  # no system call's: counted, not replayed
    records.sort(key=lambda r: r.start_ns)
    trace = tmp_path / "t"
    with TraceWriter(trace, {"source": "syscalls", "mountpoint": "/mnt/efs"}) as w:
        for r in records:
            w.record(r)
    assert trace_kind({"source": "syscalls"}) == "syscalls" and trace_kind({"source": str(trace)}) == "fuse"
    out = tmp_path / "fitted.toml"
    done = fusetrace_here("fit", str(trace), "-o", str(out))
    assert "base: efs-bursting" in done.stdout
    text = out.read_text()
    profile = tomllib.loads(text)
    load_profile(out)  # what --emulate reads
    for key, ms in (("lookup", 0.6), ("open", 1.1), ("read", 0.8), ("close", 0.7), ("meta_read", 0.9), ("write", 3)):
        assert profile[f"{key}_latency_ms"] == pytest.approx(ms, rel=0.12), key
    # the first stat's compound (ACCESS,LOOKUP,ACCESS,LOOKUP) is not one LOOKUP's time
    assert "median of 59 LOOKUP records (59 alone): dur_ns of system calls over 150 µs" in text
    assert "median of 60 GETATTR records (60 alone)" in text  # the cached stats are not among them
    assert "median of 60 READ records (60 alone)" in text
    assert "median of 60 WRITE records (60 alone)" in text
    assert "# 1 record of operations no system call makes" in text
    # all but the cached calls and the buffered writes (whose fsyncs sent them) sent RPCs
    assert "# of 602 records, 361 sent RPCs as the model's NFS client replays them, and 361 of those" in text
    assert "240 read-class system calls" in text and "those the client's caches answered included" in text
