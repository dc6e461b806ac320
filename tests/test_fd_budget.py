"""One user's open files cannot take the server's descriptors from everyone else.

The server runs as root under a low descriptor limit (256), on an allow_other mount.
Before the budget, `nobody` opening 300 files there took every descriptor: its opens
failed with EMFILE well short of the limit's worth, then root's opens failed too, then
`nobody`'s own close(2)s failed (FLUSH's dup needed a descriptor), and the trace writer
could not open a part file, losing records and the final _metadata.json.  Now each
user gets EMFILE beyond their share of the open-file budget, other users and every
close still succeed, and the trace keeps every operation (docs/RELIABILITY.md,
"Hardening, second pass: descriptors").
"""

import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from conftest import Mount, fusetrace, is_mounted

NOBODY = 65534
PYTHON = "/usr/bin/python3"
LIMIT = 256
FILES = 300  # more than the server's limit's worth of open files

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (allow_other, a second user)")

# Opens each file named on the command line and keeps it open; says how many opened and
# how many failed (by errno), waits for a line on stdin, then closes them all and says
# which closes failed.
_HOLDER = """
import errno, json, os, sys
fds, failed = [], {}
for p in sys.argv[1:]:
    try:
        fds.append(os.open(p, os.O_RDONLY))
    except OSError as e:
        failed[e.errno] = failed.get(e.errno, 0) + 1
print(json.dumps({"opened": len(fds), "failed": failed}), flush=True)
sys.stdin.readline()
bad = {}
for fd in fds:
    try:
        os.close(fd)
    except OSError as e:
        bad[e.errno] = bad.get(e.errno, 0) + 1
print(json.dumps({"close_failed": bad}), flush=True)
"""


@pytest.fixture
def limited_shared():
    """An allow_other, traced mount served by root with RLIMIT_NOFILE 256 (soft and hard),
    in a directory every user can reach: (Mount, trace directory)."""
    base = Path(tempfile.mkdtemp(prefix="fusetrace-fds-"))
    os.chmod(base, 0o755)
    src, mnt, trace = base / "src", base / "mnt", base / "trace"
    src.mkdir(mode=0o755)
    mnt.mkdir(mode=0o755)
    m = Mount(src, mnt, trace)
    try:
        subprocess.run(["prlimit", f"--nofile={LIMIT}:{LIMIT}", "--", sys.executable, "-m", "fusetrace", "mount",
                        str(src), str(mnt), "-o", "allow_other", "--attr-timeout", "0", "--entry-timeout", "0",
                        "--trace", str(trace), "--log", str(base / "server.log")],
                       check=True, capture_output=True, timeout=120)
        yield m
    finally:
        m.unmount()
        shutil.rmtree(base, ignore_errors=True)


def _files(d: Path, prefix: str, n: int) -> list[Path]:
    names = [d / f"{prefix}{i:04d}" for i in range(n)]
    for p in names:
        p.write_bytes(b"x")
        os.chmod(p, 0o644)
    return names


def test_one_user_holding_files_leaves_descriptors_for_others(limited_shared):
    m = limited_shared
    mine = _files(m.source, "n", FILES)
    roots = _files(m.source, "r", 40)
    holder = subprocess.Popen([PYTHON, "-c", _HOLDER, *(m.mountpoint / p.name for p in mine)], user=NOBODY,
                              group=NOBODY, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdin is not None
        held = json.loads(holder.stdout.readline())
        # `nobody` is held to its share: EMFILE beyond it, and no other failure
        assert set(held["failed"]) <= {str(errno.EMFILE)}, held
        assert held["opened"] + held["failed"].get(str(errno.EMFILE), 0) == FILES
        assert 0 < held["opened"] < FILES
        stats = json.loads(fusetrace("stats", str(m.mountpoint), "--json").stdout)
        fds = stats["descriptors"]
        assert fds["open_by_user"][str(NOBODY)] == held["opened"] == fds["share"]
        assert fds["inode_table"] + fds["open"] <= fds["limit"] - fds["reserve"]
        # meanwhile root opens 40 files at once, and closes them all
        opened = [os.open(p, os.O_RDONLY) for p in (m.mountpoint / p.name for p in roots)]
        for fd in opened:
            os.close(fd)
        with open(m.mountpoint / "made-by-root", "w") as f:
            f.write("still serving")
        # and every one of `nobody`'s closes succeeds
        holder.stdin.write("\n")
        holder.stdin.flush()
        closed = json.loads(holder.stdout.readline())
        assert closed == {"close_failed": {}}
    finally:
        holder.kill()
        holder.wait()
    fusetrace("umount", str(m.mountpoint))
    assert not is_mounted(m.mountpoint)
    meta = json.loads((m.trace / "_metadata.json").read_text())
    assert "end_wall_ns" in meta  # the final metadata was written
    assert (meta["dropped"], meta["lost"], meta["write_errors"]) == (0, 0, 0)
    df = pd.read_parquet(m.trace)
    assert meta["records"] == len(df)
    theirs = df[df.uid == NOBODY]
    ops = theirs.groupby(["op", "errno"], observed=True).size().to_dict()
    assert ops[("open", 0)] == ops[("flush", 0)] == ops[("release", 0)] == held["opened"]
    assert ops[("open", errno.EMFILE)] == FILES - held["opened"]
    failed = {(op, err) for (op, err) in ops if err}
    assert failed <= {("open", errno.EMFILE), ("getxattr", errno.ENODATA)}, failed  # (the kernel's security.* asks)
    root = df[df.uid == 0]
    assert len(root[(root.op == "open") & (root.errno == 0)]) == 40
    assert len(root[(root.op == "release")]) == 41  # the 40 and the file made
