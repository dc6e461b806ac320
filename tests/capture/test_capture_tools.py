"""Real tools under `fusetrace capture` on a loop-mounted ext4: tar x of a small tree, sqlite3
inserting in a transaction, git init/add/commit, each run under strace inside one capture.
The capture's records of each tool's threads, counted by operation, are strace's calls on
the mount counted by the same names (support/capture.py maps them as the probes do); and
report, fit and export take the trace as a user would run them.

One capture for the module (bpftrace takes seconds to start): the `captured` fixture."""

import csv
import io
import json
import shlex
import tarfile
from collections import Counter
from pathlib import Path

import pytest
from support import fusetrace_here, git_env
from support.capture import capture, records, strace_argv, strace_ops

from fusetrace.emulator.profiles import load_profile

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

FILES = 300  # in the tarball, in DIRS directories
DIRS = 10
ROWS = 200  # sqlite3's inserts, in one transaction
PAGE = 4096
SQL = (
    f"PRAGMA page_size = {PAGE}; CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT); BEGIN; "
    + " ".join(f"INSERT INTO t (v) VALUES ('row {i}');" for i in range(ROWS))
    + " COMMIT;"
)
WORKLOAD = """set -e
m=$1; s=$2
mkdir "$m/tar" "$m/sqlite" "$m/git"
cd "$m/tar" && {tar}
cd "$m/sqlite" && {sqlite}
cp -r "$4/." "$m/git/"
cd "$m/git" && {git}
"""


def _tarball(path: Path) -> Path:
    with tarfile.open(path, "w") as tar:
        for i in range(FILES):
            data = f"file {i}\n".encode() * (i % 7 + 1)
            info = tarfile.TarInfo(f"tree/d{i % DIRS}/f{i}.txt")
            info.size, info.mode, info.mtime = len(data), 0o644, 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture(scope="module")
def captured(ext4, tmp_path_factory):
    """(the mount, the trace, strace's files' directory): the module's one capture."""
    work = tmp_path_factory.mktemp("tools")
    tarball = _tarball(work / "tree.tar")
    src = work / "gitsrc"
    for i in range(20):
        (src / f"d{i % 3}").mkdir(parents=True, exist_ok=True)
        (src / f"d{i % 3}" / f"f{i}.py").write_text(f"x = {i}\n")
    strace = work / "strace"
    strace.mkdir()
    script = WORKLOAD.format(
        tar=shlex.join(strace_argv(strace / "tar", "tar", "-xf", str(tarball))),
        sqlite=shlex.join(strace_argv(strace / "sqlite", "sqlite3", "db.sqlite", SQL)),
        git=shlex.join(strace_argv(strace / "git", "sh", "-c", "git init -q && git add . && git commit -q -m first")),
    )
    trace = work / "trace"
    capture(ext4, trace, "sh", "-c", script, "sh", str(ext4), str(strace), str(tarball), str(src), env=git_env(work))
    return ext4, trace, strace


@pytest.mark.parametrize("tool", ["tar", "sqlite", "git"])
def test_counts_by_operation_are_strace_s(captured, tool):
    mnt, trace, strace = captured
    want, tids = strace_ops(strace / tool, mnt, mnt / tool)
    got = Counter(r["op"] for r in records(trace) if r["tid"] in tids)
    assert got == want


def test_no_call_is_recorded_twice(captured):
    _, trace, _ = captured
    recs = records(trace)
    assert len({(r["tid"], r["start_ns"]) for r in recs}) == len(recs)
    assert json.loads((trace / "_metadata.json").read_text())["capture"]["lost"] == {}


def test_tar_s_files_each_have_their_calls(captured):
    """Each file tar made: a create, its one write of its bytes at 0, its times, owner and
    mode set, its close: one fh, the file's inode, its path."""
    mnt, trace, strace = captured
    _, tids = strace_ops(strace / "tar", mnt, mnt / "tar")
    by_path: dict[str, list[dict]] = {}
    for r in records(trace):
        if r["tid"] in tids and not r["errno"]:
            by_path.setdefault(r["path"], []).append(r)
    for i in range(FILES):
        path = f"/tar/tree/d{i % DIRS}/f{i}.txt"
        recs = by_path[path]
        assert [r["op"] for r in recs] == ["create", "write", "setattr", "setattr", "setattr", "flush"], path
        assert len({r["fh"] for r in recs}) == 1 and recs[0]["fh"] > 0
        # (futimens(3), utimensat(fd, NULL), is a named call on the descriptor itself: the same inode)
        assert {r["inode"] for r in recs} == {(mnt / path[1:]).stat().st_ino}
        (write,) = [r for r in recs if r["op"] == "write"]
        assert (write["offset"], write["result"]) == (0, (mnt / path[1:]).stat().st_size)


def test_sqlite_writes_whole_pages_of_its_database(captured):
    _, trace, _ = captured
    writes = [r for r in records(trace) if r["path"] == "/sqlite/db.sqlite" and r["op"] == "write"]
    assert writes and all(r["offset"] % PAGE == 0 and r["result"] == PAGE for r in writes)
    assert {"create", "unlink"} <= {r["op"] for r in records(trace) if r["path"] == "/sqlite/db.sqlite-journal"}


def test_git_s_objects_are_named_where_they_landed(captured):
    """git writes each object to a temporary name and links or renames it into place:
    every object in .git/objects is the target (path2) of one of those records."""
    mnt, trace, _ = captured
    objects = {"/" + str(p.relative_to(mnt)) for p in (mnt / "git" / ".git" / "objects").glob("??/*")}
    moved = {r["path2"] for r in records(trace) if r["op"] in ("link", "rename")}
    assert len(objects) > 20 and objects <= moved


def test_report_says_it_reads_a_capture(captured):
    mnt, trace, _ = captured
    text = fusetrace_here("report", str(trace)).stdout
    assert f"recorded    system calls (eBPF capture of {mnt} " in text
    creates = sum(r["op"] == "create" for r in records(trace))
    assert any(line.split()[:2] == ["create", str(creates)] for line in text.splitlines())


def test_fit_makes_a_profile_of_it(captured, tmp_path):
    _, trace, _ = captured
    out = tmp_path / "fitted.toml"
    fusetrace_here("fit", str(trace), "-o", str(out))
    assert "fitted to the trace" in load_profile(out).description
    # a syscall trace: its RPCs are inferred through the model's NFS client (rehearse/syscalls.py)
    assert "sent RPCs as the model's NFS client replays them" in out.read_text()


def test_export_writes_its_calls(captured, tmp_path):
    mnt, trace, _ = captured
    recs = records(trace)
    fusetrace_here("export", str(trace), "--format", "csv", "-o", str(tmp_path / "out.csv"))
    rows = list(csv.DictReader((tmp_path / "out.csv").open()))
    assert sum(r["TYPE"] == "W" for r in rows) == sum(r["op"] == "write" for r in recs)
    fusetrace_here("export", str(trace), "--format", "fio-iolog", "-o", str(tmp_path / "out.fio"))
    log = [line.split(" ", 1)[1] for line in (tmp_path / "out.fio").read_text().splitlines()[1:]]
    for i in range(0, FILES, 37):
        name = f"tar/tree/d{i % DIRS}/f{i}.txt"
        size = (mnt / name).stat().st_size
        assert [e for e in log if e.startswith(name + " ")] == [
            f"{name} add",
            f"{name} open",
            f"{name} write 0 {size}",
            f"{name} close",
        ]
