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
from support import Mount, fusetrace, is_mounted
from support.metrics import free_port, scrape, values

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
        subprocess.run(
            [
                "prlimit",
                f"--nofile={LIMIT}:{LIMIT}",
                "--",
                sys.executable,
                "-m",
                "fusetrace",
                "mount",
                str(src),
                str(mnt),
                "-o",
                "allow_other",
                "--attr-timeout",
                "0",
                "--entry-timeout",
                "0",
                "--trace",
                str(trace),
                "--log",
                str(base / "server.log"),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
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
    holder = subprocess.Popen(
        [PYTHON, "-c", _HOLDER, *(m.mountpoint / p.name for p in mine)],
        user=NOBODY,
        group=NOBODY,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
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
        assert fds["refused"] == FILES - held["opened"]
        said = fusetrace("stats", str(m.mountpoint)).stdout
        assert f"open files and directories {fds['share']} of {fds['open_most']} (uid {NOBODY} {fds['share']};" in said
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


def _in_a_full_process(code: str, *args) -> dict:
    """Run `code` in a child whose descriptor limit is 64; `fill()` there opens /dev/null
    until none is free and returns the descriptors.  Its last line of output is JSON."""
    prelude = (
        "import errno, json, os, resource, sys, time\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))\n"
        "def fill():\n"
        "    fds = []\n"
        "    try:\n"
        "        while True:\n"
        "            fds.append(os.open('/dev/null', os.O_RDONLY))\n"
        "    except OSError as e:\n"
        "        assert e.errno == errno.EMFILE\n"
        "    return fds\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", prelude + code, *map(str, args)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_a_close_with_no_descriptor_free_still_reports_write_back_errors(mount):
    """FLUSH's close(dup(fd)) with the table full: the kept slot (dup2 onto it), or fsync
    when none is kept, both report a write-back error as close(2) would."""
    m = mount()
    done = fusetrace(
        "fault", str(m.mountpoint), "add", "--op", "write", "--path", "/x.log", "--write-error", "EIO", "--count", "1"
    )
    assert done.returncode == 0
    out = _in_a_full_process(
        """
from fusetrace.server.fdbudget import Spares
a, b = (os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644) for _ in range(2))
os.write(a, b"buffered")
kept, none = Spares(2), Spares(0)
held = fill()
def errno_of(fn, *args):
    try:
        fn(*args)
        return 0
    except OSError as e:
        return e.errno
seen = {"dup": errno_of(os.dup, a), "kept": errno_of(kept.close_dup, a), "fsync": errno_of(none.close_dup, b)}
seen["again"] = [errno_of(kept.close_dup, a) for _ in range(10)]
print(json.dumps({**seen, "used": kept.used}))
""",
        m.mountpoint / "x.log",
    )
    assert out == {"dup": errno.EMFILE, "kept": errno.EIO, "fsync": errno.EIO, "again": [0] * 10, "used": 11}
    assert (m.source / "x.log").read_bytes() == b"buffered"


def test_the_trace_writer_puts_off_a_write_with_no_descriptor_free_and_loses_nothing(tmp_path):
    out = _in_a_full_process(
        """
from fusetrace.trace.schema import TraceRecord
from fusetrace.trace.writer import TraceWriter
w = TraceWriter(sys.argv[1], {"source": "/src"}, flush_interval=0.01)
held = fill()
for i in range(100):
    w.record(TraceRecord(1000 + i, 10, "read", 2, "/f", None, 3, 0, 4096, 4096, 0, 100, 0, 0, 0))
deadline = time.monotonic() + 30
while w.deferred < 3 and time.monotonic() < deadline:
    time.sleep(0.01)
put_off = (w.deferred, w.records, w.queued)
for fd in held:
    os.close(fd)
while w.records < 100 and time.monotonic() < deadline:
    time.sleep(0.01)
print(json.dumps({"put_off": put_off, **w.close()}))
""",
        tmp_path / "t",
    )
    assert out["put_off"][0] >= 3 and out["put_off"][1:] == [0, 100]  # nothing written meanwhile, all kept
    assert (out["records"], out["dropped"], out["lost"], out["write_errors"]) == (100, 0, 0, 0)
    assert len(pd.read_parquet(tmp_path / "t")) == 100
    assert json.loads((tmp_path / "t" / "_metadata.json").read_text())["records"] == 100


def test_a_listing_short_of_descriptors_returns_a_shorter_chunk(tmp_path):
    """A listing takes a descriptor for each entry it returns; with few free it returns
    the entries it could open (the kernel asks on from there), with none, EMFILE."""
    for i in range(40):
        (tmp_path / f"f{i:02d}").write_bytes(b"")
    out = _in_a_full_process(
        """
from fusetrace.server.nofollow import list_chunk
d = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
names = [".", "..", *os.listdir(d)]
held = fill()
for fd in held[:5]:
    os.close(fd)
chunk = list_chunk(d, names, 0, 32)
got = [name for _, name, _, _ in chunk.entries]
for *_, fd in chunk.entries:
    if fd is not None:
        os.close(fd)
held = fill()
try:
    list_chunk(d, names, 2, 32)
    none = 0
except OSError as e:
    none = e.errno
print(json.dumps({"got": got, "none": none}))
""",
        tmp_path,
    )
    assert len(out["got"]) == 2 + 5 and out["got"][:2] == [".", ".."]  # 5 descriptors: 5 entries
    assert out["none"] == errno.EMFILE


def test_prometheus_shows_the_descriptors_held(mount):
    port = free_port()
    m = mount("--emulate", "efs-bursting", "--metrics-port", str(port))
    files = [os.open(m.mountpoint / f"f{i}", os.O_CREAT | os.O_RDWR, 0o644) for i in range(3)]
    files.append(os.open(m.mountpoint, os.O_RDONLY | os.O_DIRECTORY))
    try:
        held = values(scrape(port))
    finally:
        for fd in files:
            os.close(fd)
    assert held["fusetrace_open_descriptors"] == 4
    assert held["fusetrace_inode_descriptors"] >= 3  # the files' (pinned); the root's is not counted
    assert held["fusetrace_opens_refused_total"] == 0
