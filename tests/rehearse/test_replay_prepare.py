"""`fusetrace replay --prepare`: the tree a trace started from, made before the replay, so
that what the recording found is found again and what it made is made again (a create
stays a create); never a write outside the directory it prepares, whatever the trace says.
"""

import os
import stat
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from support import fusetrace_here, one_line_error
from support.replays import RDONLY, rec, replay, synthetic, tree

from fusetrace.rehearse.prepare import NOT_A_DIRECTORY, UNDER_MADE, prepare
from fusetrace.rehearse.replay_calls import REFUSED_PATH

FILE, DIR, LINK = stat.S_IFREG | 0o640, stat.S_IFDIR | 0o750, stat.S_IFLNK | 0o777


def test_what_the_trace_found_is_made_and_what_it_made_is_not(tmp_path):
    """Found names are made with the type and permissions replied and the size read;
    names the trace creates, or found missing, are not, nor what it found below them."""
    trace = synthetic(
        tmp_path / "t",
        [
            rec(0, "lookup", "/in", mode=DIR),
            rec(1, "open", "/in/data", fh=3, flags=RDONLY),
            rec(2, "read", "/in/data", fh=3, size=131072, result=131072),
            rec(3, "read", "/in/data", fh=3, offset=131072, size=131072, result=8000),
            rec(4, "release", "/in/data", fh=3),
            rec(5, "write", "/in/data", fh=4, offset=500_000, size=10, result=10),  # after: says nothing
            rec(6, "lookup", "/in/gone", err=2),
            rec(7, "mkdir", "/made", mode=DIR),
            rec(8, "open", "/made/f", fh=5, flags=RDONLY),  # below a directory the trace made
            rec(9, "create", "/new", fh=6, mode=FILE),
            rec(10, "getattr", "/in/sub/deep/f", mode=FILE),  # its directories: only implied
            rec(11, "open", "/cut", fh=7, flags=os.O_WRONLY | os.O_TRUNC, size=5000),
            rec(12, "readlink", "/link", result=8),
            rec(13, "unlink", "/old"),
            rec(14, "access", "/odd", err=13),  # EACCES: says nothing of whether it is there
            rec(15, "getattr", "/odd/x", mode=FILE),
        ],
    )
    into = tmp_path / "into"
    into.mkdir()
    p = prepare(str(trace), str(into))
    assert tree(into) == {
        "cut": (stat.S_IFREG, 0o644, 5000),  # what the O_TRUNC cut
        "in": (stat.S_IFDIR, 0o750, None),
        "in/data": (stat.S_IFREG, 0o644, 139072),  # the end of the furthest read
        "in/sub": (stat.S_IFDIR, 0o755, None),
        "in/sub/deep": (stat.S_IFDIR, 0o755, None),
        "in/sub/deep/f": (stat.S_IFREG, 0o640, 0),
        "link": (stat.S_IFLNK, 0o777, "########"),  # its target's length, not its target
        "odd": (stat.S_IFDIR, 0o755, None),
        "odd/x": (stat.S_IFREG, 0o640, 0),
        "old": (stat.S_IFREG, 0o644, 0),
    }
    assert (p["directories"], p["files"], p["symlinks"], p["bytes"]) == (4, 5, 1, 144072)
    assert p["not_made"] == {UNDER_MADE: 1}


def test_a_hostile_trace_writes_nothing_outside(tmp_path):
    """'..', a relative name, a NUL, a name below what the trace shows is a link: each
    refused or not made, and counted; a name that is not UTF-8 is made with its bytes."""
    outside = tmp_path / "outside"
    outside.mkdir()
    trace = synthetic(
        tmp_path / "t",
        [
            rec(0, "lookup", "/../outside/x", mode=FILE),
            rec(1, "open", "/a/../../outside/y", fh=3, flags=RDONLY),
            rec(2, "read", "/a/../../outside/y", fh=3, size=4096, result=4096),
            rec(3, "lookup", "relative", mode=FILE),
            rec(4, "lookup", "/nul\0/../../outside/z", mode=FILE),
            rec(5, "readlink", "/out", result=len(str(outside))),
            rec(6, "lookup", "/out/w", mode=FILE),
            rec(7, "getattr", os.fsdecode(b"/caf\xe9"), mode=FILE),
        ],
    )
    into = tmp_path / "into"
    into.mkdir()
    s = replay(trace, into, "--prepare", "--as-fast-as-possible")
    assert s["prepared"]["not_made"] == {REFUSED_PATH: 4, NOT_A_DIRECTORY: 1}
    assert list(outside.iterdir()) == []
    assert sorted(os.listdir(os.fsencode(into))) == [b"caf\xe9", b"out"]
    assert (into / "out").is_symlink() and os.readlink(into / "out") != str(outside)


def test_a_directory_not_empty_is_refused(tmp_path):
    trace = synthetic(tmp_path / "t", [rec(0, "lookup", "/f", mode=FILE)])
    into = tmp_path / "into"
    into.mkdir()
    (into / "there").write_text("")
    done = fusetrace_here("replay", str(trace), str(into), "--prepare", check=False)
    one_line_error(done, "into", "not empty", "there", code=2)
    other = tmp_path / "other"
    other.mkdir()
    (other / "x").mkdir()
    done = fusetrace_here("replay", str(trace), str(into), "--prepare-into", str(other), check=False)
    one_line_error(done, "other", "not empty", code=2)
    assert sorted(p.name for p in into.iterdir()) == ["there"] and [p.name for p in other.iterdir()] == ["x"]


# ---- a real workload ----------------------------------------------------------------

WORKLOAD = r"""
set -e
cd "$1"
cat data/big > /dev/null
dd if=data/part of=/dev/null bs=4096 skip=10 count=2 status=none
stat data/sub/deep/file > /dev/null
readlink link > /dev/null
ls -l ro > /dev/null
echo x > trunc
rm data/old
mv data/moved data/renamed
mkdir new
echo hello > new/f
touch new/g
cp data/big new/copy
"""


def _starting_tree(root: Path) -> None:
    (root / "data/sub/deep").mkdir(parents=True)
    (root / "data/big").write_bytes(b"b" * 300_000)
    (root / "data/part").write_bytes(b"p" * 1_000_000)
    (root / "data/old").write_bytes(b"o" * 10)
    (root / "data/moved").write_bytes(b"m" * 20)
    (root / "data/sub/deep/file").write_bytes(b"f" * 30)
    (root / "trunc").write_bytes(b"t" * 5000)
    (root / "link").symlink_to("data/big")
    (root / "ro").mkdir(mode=0o750)
    (root / "ro/inside").write_text("")


@pytest.mark.slow
def test_a_real_workload_replays_from_its_prepared_tree(mount, tmp_path):
    """Recorded over a starting tree, replayed into an empty traced mount prepared from
    its trace (through its source, so its trace holds the replay alone): no difference,
    and as many creates, opens, mkdirs, unlinks and renames as recorded."""
    m = mount(trace=True)
    _starting_tree(m.source)
    os.chmod(m.source / "ro", 0o750)
    subprocess.run(["sh", "-c", WORKLOAD, "sh", str(m.mountpoint)], check=True)
    m.unmount()
    original = pd.read_parquet(m.trace)

    plain = tmp_path / "plain"
    plain.mkdir()
    prepared = prepare(str(m.trace), str(plain))
    got = tree(plain)
    reads = original[(original.op == "read") & (original.path == "/data/part")]
    assert got["data/big"] == (stat.S_IFREG, 0o644, 300_000)  # read whole
    assert got["data/part"][2] == (reads["offset"] + reads["result"]).max() <= 1_000_000
    assert got["trunc"][2] == 5000 and got["ro"] == (stat.S_IFDIR, 0o750, None)
    assert got["link"][0] == stat.S_IFLNK and len(got["link"][2]) == len("data/big")
    assert {"data/old", "data/moved", "data/sub/deep/file"} <= set(got) and "new" not in got
    assert prepared["not_made"] == {}

    again = mount(trace=True)
    s = replay(m.trace, again.mountpoint, "--prepare-into", str(again.source))
    assert s["differences"]["count"] == 0, s["differences"]
    assert s["prepared"]["files"] == prepared["files"] and s["not_replayed"].keys() <= {
        "getxattr security.capability: the target's kernel asks it itself before each replayed write",
        "lookup of a missing name: the kernel's, for the create that follows (replayed, it looks it up)",
    }
    again.unmount()
    replayed = pd.read_parquet(again.trace)
    before, after = original.op.astype(str).value_counts(), replayed.op.astype(str).value_counts()
    for op in ("create", "open", "mkdir", "unlink", "rename", "opendir", "readlink"):
        assert after.get(op, 0) == before.get(op, 0), (op, before.get(op, 0), after.get(op, 0))
    assert before["create"] >= 3  # new/f, new/g, new/copy
