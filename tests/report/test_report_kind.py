"""`fusetrace report` says which kind of trace it reads (metadata.trace_kind): the requests a
FUSE mount served, or the system calls a capture saw; on the second, nothing of FUSE's own
(its round trip, the hints whose cause or remedy is the mount's)."""

import json
from pathlib import Path

import pytest
from support import fusetrace_here
from support.syscall_trace import CALLS, FILE, MOUNTPOINT, write_syscall_trace

from fusetrace.report import hints
from fusetrace.report.query import Trace
from fusetrace.trace import metadata as meta

ENODATA = 61


def as_fuse(trace: Path, **extra: object) -> Path:
    """The same records, their metadata a FUSE mount's (source a directory), with `extra`."""
    m = meta.read(str(trace))
    meta.write(str(trace), {**m, "source": "/src", "mountpoint": "/mnt/t", **extra})
    return trace


def test_trace_kind_is_read_from_the_source():
    assert meta.trace_kind({"source": "syscalls", "mountpoint": "/mnt/efs"}) == "syscalls"
    assert meta.trace_kind({"source": "/srv/syscalls"}) == "fuse"
    assert meta.trace_kind({}) == "fuse"


def test_header_says_a_capture_s_kind_and_leaves_out_fuse_s_round_trip(tmp_path):
    captured = write_syscall_trace(tmp_path / "captured")
    text = fusetrace_here("report", str(captured)).stdout
    assert f"recorded    system calls (eBPF capture of {MOUNTPOINT})" in text and "no server in the path" in text
    assert "round trip" not in text and "source      " not in text
    assert "dur_ns (system call entry to exit)" in text and "what the kernel answered" not in text
    out = json.loads(fusetrace_here("report", str(captured), "--json").stdout)
    assert out["kind"] == "syscalls" and out["traces"][0]["kind"] == "syscalls"

    fuse = as_fuse(write_syscall_trace(tmp_path / "fuse"), fuse_round_trip_ns=90_000)
    text = fusetrace_here("report", str(fuse)).stdout
    assert "recorded    FUSE requests" in text and "round trip  with FUSE's" in text
    assert "source      /src" in text and "dur_ns (admission to reply)" in text


def test_a_fleet_of_both_kinds_says_so(tmp_path):
    a = write_syscall_trace(tmp_path / "a")
    b = as_fuse(write_syscall_trace(tmp_path / "b"))
    text = fusetrace_here("report", str(a), str(b)).stdout
    assert "recorded    FUSE requests (1 trace) and system calls (1 trace, eBPF captures)" in text


@pytest.mark.parametrize("op", sorted({c[0] for c in CALLS}))
def test_op_filter_takes_every_captured_operation(tmp_path, op):
    captured = write_syscall_trace(tmp_path / "t")
    out = json.loads(fusetrace_here("report", str(captured), "--op", op, "--json").stdout)
    assert out["matched"] == sum(c[0] == op for c in CALLS) > 0


def test_fuse_only_hints_stay_silent_on_a_capture(tmp_path):
    """Records on which the FUSE mount's hints fire (extended-attribute misses, failed
    lookups, --attr-timeout 0) say nothing when they are system calls; fsync-per-write,
    the application's own, still fires on them."""
    fh, ino = 9, 80001
    calls = [("getxattr", 0, "/f", "security.selinux", 0, 0, 255, 0, ENODATA, 0, 0, "meta_read", 1)] * 40
    calls += [("lookup", 0, "/nope", None, 0, 0, 0, 0, 2, 0, 0, "meta_read", 1)] * 20
    calls += [("getattr", 0, "/f", None, 0, 0, 0, 0, 0, 0, FILE, "meta_read", 1)] * 40
    write = ("write", ino, "/db", None, fh, 0, 100, 100, 0, 1, FILE, "buffered", 1)
    calls += [write, ("fsync", ino, "/db", None, fh, 0, 0, 0, 0, 0, FILE, "commit", 1)] * hints.FSYNC_HINT_COUNT
    captured = write_syscall_trace(tmp_path / "captured", calls)
    fuse = as_fuse(write_syscall_trace(tmp_path / "fuse", calls), options={"attr_timeout": 0})
    said = {h["hint"] for h in Trace(str(fuse)).hints()}
    fuse_only = {r.name for r in hints.RULES if r.fuse}
    assert fuse_only == {"xattr-misses", "failed-lookups", "wasted-round-trips", "attr-timeout-0"}
    assert {"xattr-misses", "attr-timeout-0", "fsync-per-write"} <= said  # they fire on a FUSE trace
    m = meta.read(str(captured))
    meta.write(str(captured), {**m, "options": {"attr_timeout": 0}})
    assert [h["hint"] for h in Trace(str(captured)).hints()] == ["fsync-per-write"]
