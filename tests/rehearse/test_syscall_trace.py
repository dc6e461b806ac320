"""A captured trace (`source` "syscalls": system calls, no lookup or release, a handle number
per open file description, real inode numbers) through export, replay, compare and simulate,
each run as the command line runs it."""

import csv
import json
import os
from pathlib import Path

import pytest
from support import fusetrace_here
from support.syscall_trace import CALLS, FILE, PID, TID, WORKER, WRITTEN, write_syscall_trace

from fusetrace.rehearse.replay_calls import Rec, Target
from fusetrace.rehearse.rows import last_closes


@pytest.fixture
def captured(tmp_path: Path) -> Path:
    return write_syscall_trace(tmp_path / "trace")


def test_export_takes_a_captured_trace_in_every_format(captured, tmp_path):
    done = fusetrace_here("export", str(captured), "--format", "csv", "-o", str(tmp_path / "out.csv"))
    assert "2 R, 4 W, 3 O, 4 G" in done.stdout
    rows = list(csv.DictReader((tmp_path / "out.csv").open()))
    assert [r["TYPE"] for r in rows].count("W") == 4 and {r["PID"] for r in rows} == {str(PID)}

    # fio: a file is closed at its close(2), there being no release, and opened again after
    fusetrace_here("export", str(captured), "--format", "fio-iolog", "-o", str(tmp_path / "out.fio"))
    log = [line.split(" ", 1)[1] for line in (tmp_path / "out.fio").read_text().splitlines()[1:]]
    assert log[:7] == [
        "d/f add",
        "d/f open",
        "d/f write 0 4096",
        "d/f write 4096 4096",
        "d/f write 8192 4096",
        "d/f sync 0 0",
        "d/f close",
    ]
    assert log[7:10] == ["d/f open", f"d/f read 0 {WRITTEN}", "d/f close"] and log[-1] == "d/h close"

    fusetrace_here("export", str(captured), "--format", "perfetto", "-o", str(tmp_path / "out.json"))
    data = json.loads((tmp_path / "out.json").read_text())
    assert data["otherData"]["source"] == "syscalls"
    slices = [e for e in data["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == len(CALLS)
    assert {e["args"].get("tid") for e in slices} == {TID, WORKER}  # format 8's thread, in every event's args


def _flush(fh: int, start_ns: int, pid: int = PID) -> Rec:
    return Rec(start_ns, 1, "flush", "/f", None, fh, 0, 0, 0, 0, pid, 0, 0, None)


def test_replay_closes_a_handle_at_its_last_close(tmp_path):
    """A descriptor closed twice (a forked child's copy, then the parent's): the first close is
    a close of a duplicate, the second closes the replay's descriptor; the child names the
    handle by its number alone."""
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "f").write_bytes(b"x" * 10)
    target = Target(str(tmp_path / "t"), {7: 300})
    opened = Rec(100, 1, "open", "/f", None, 7, 0, 0, 0, 0, PID, os.O_RDONLY, FILE, None)
    h = target.bind(opened)
    assert h is not None and target.issue(opened, h) == []
    child = _flush(7, 200, pid=PID + 1)
    assert target.bind(child) is h and target.issue(child, h) == []
    read = Rec(250, 1, "read", "/f", None, 7, 0, 10, 10, 0, PID, 0, 0, None)
    assert target.bind(read) is h and target.issue(read, h) == []  # still open after the child's close
    fd = h.fd
    last = _flush(7, 300)
    assert target.bind(last) is h and target.issue(last, h) == []
    assert h.fd == -1 and not target.handles
    with pytest.raises(OSError):
        os.fstat(fd)  # closed then, not at the end of the replay
    target.close()


def test_replay_of_a_captured_trace_matches_its_outcomes(captured, tmp_path):
    into = tmp_path / "into"
    into.mkdir()
    done = fusetrace_here("replay", str(captured), str(into), "--as-fast-as-possible", "--json")
    out = json.loads(done.stdout)
    assert out["replayed"] == len(CALLS) and out["not_replayed"] == {}
    assert out["differences"]["count"] == 0, out["differences"]  # readdir compared as getdents64's bytes
    assert sorted(os.listdir(into / "d")) == ["h"] and (into / "d" / "h").stat().st_size == 100
    assert last_closes(str(captured)) == {}  # every handle closed once


def test_compare_takes_captured_traces_and_cautions_against_a_fuse_one(captured, tmp_path):
    out = json.loads(fusetrace_here("compare", str(captured), str(captured), "--json").stdout)
    assert out["a"]["kind"] == out["b"]["kind"] == "syscalls" and out["caution"] is None
    assert {r["op"] for r in out["ops"]} == {c[0] for c in CALLS}
    fuse = write_syscall_trace(tmp_path / "fuse")
    meta_path = fuse / "_metadata.json"
    meta_path.write_text(json.dumps({**json.loads(meta_path.read_text()), "source": "/src"}))
    out = json.loads(fusetrace_here("compare", str(captured), str(fuse), "--json", check=False).stdout)
    assert out["b"]["kind"] == "fuse" and "system calls (a capture)" in out["caution"]


def test_simulate_makes_a_captured_trace_into_what_the_nfs_client_is_asked(captured):
    """The written pages are read from the page cache, the stats answered from the
    attributes the calls before brought: fewer requests than records (syscalls.py)."""
    out = json.loads(fusetrace_here("simulate", str(captured), "--profile", "efs-bursting", "--json").stdout)
    made = {m["op"]: (m["records"], m["requests"]) for m in out["requests"]}
    assert made["read"] == (2, 0) and made["lookup"] == (0, 1) and made["getattr"] == (4, 1)
    assert out["operations"]["simulated"] == sum(m["requests"] for m in out["requests"]) < len(CALLS)
    assert out["rebuilt"] == {"new_directories": 0, "unknown_handles": 0, "unknown_ops": 0}
    assert any("read-ahead" in n for n in out["notes"])
