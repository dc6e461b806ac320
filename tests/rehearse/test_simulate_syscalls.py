"""`fusetrace simulate` of a captured trace (`source` "syscalls"): its system calls made into
the requests the kernel in front of the Linux NFS client passes on (syscalls.py, as `fit`
infers them), each made from its call's start, in virtual time."""

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import fusetrace_here
from support.syscall_trace import FILE, TID, write_syscall_trace

from fusetrace.emulator.model import Model
from fusetrace.emulator.nfsclient import NfsClient
from fusetrace.rehearse import simulate
from fusetrace.rehearse.simulate_fleet import Calls
from fusetrace.report.query import Trace
from fusetrace.shaping.profile import load_params

PARAMS = load_params("efs-bursting", [])
KiB, MiB = 1 << 10, 1 << 20
INO = 81001
START_NS = 10**12


def call(op: str, path: str = "/f", fh: int = 0, **fields) -> tuple:
    """One system call in support.syscall_trace's layout."""
    f = {"inode": INO if fh else 0, "path2": None, "offset": 0, "size": 0, "result": 0, "errno": 0, "flags": 0}
    f |= {"mode": FILE, "kind": None, **fields}
    return (op, f["inode"], path, f["path2"], fh, f["offset"], f["size"], f["result"], f["errno"], f["flags"],
            f["mode"], f["kind"], TID)  # fmt: skip


def made(directory: Path, closed: bool = False) -> list[tuple[float, float, int, object]]:
    """The calls a pass makes of the NFS client (time, end, chain, Call)."""
    return list(Calls(Trace(str(directory)), closed, PARAMS)())


def admitted(calls: list) -> list[tuple[str, str]]:
    """Each call's operation and the RPCs a fresh client sends for it, at its time."""
    client = NfsClient(Model(PARAMS, calls[0][0]))
    return [(c.op, client.admit(c, t).rpcs) for t, _, _, c in calls]


def test_a_thousand_stats_within_acregmin_are_one_lookup(tmp_path):
    """The first stat's path walk looks the name up; its attributes answer the others
    (1,000 stats 50 µs apart: 50 ms, within acregmin)."""
    trace = write_syscall_trace(tmp_path / "t", [call("getattr")] * 1000)
    assert PARAMS.nfs_acregmin_s >= 1
    out = simulate.simulate(str(trace), PARAMS, None)
    assert out["requests"] == [
        {"op": "getattr", "records": 1000, "requests": 0},
        {"op": "lookup", "records": 0, "requests": 1},
    ]
    assert out["operations"]["simulated"] == 1
    assert admitted(made(trace)) == [("lookup", "ACCESS,LOOKUP")]


def test_reading_the_same_mebibyte_twice_reads_it_once(tmp_path):
    """The second open's read finds the pages the first read (close-to-open keeps them:
    one client, nothing else changed the file)."""
    once = [
        call("open", fh=1, flags=os.O_RDONLY),
        *(call("read", fh=1, offset=i * 128 * KiB, size=128 * KiB, result=128 * KiB) for i in range(8)),
        call("flush", fh=1),
    ]
    again = [(*c[:4], 2, *c[5:]) for c in once]
    trace = write_syscall_trace(tmp_path / "t", once + again)
    reads = [c for *_, c in made(trace) if c.op == "read"]
    assert [c.size for c in reads] == [128 * KiB] * 8  # the first pass's, none of the second's
    out = simulate.simulate(str(trace), PARAMS, None)
    assert {m["op"]: m["requests"] for m in out["requests"]}["read"] == 8


@pytest.mark.parametrize("size, sent", [(4 * KiB, "WRITE(FILE_SYNC),CLOSE"), (16 * KiB, "COMMIT,CLOSE")])
def test_buffered_writes_reach_the_client_at_the_close(tmp_path, size, sent):
    """100 buffered writes stay in the page cache until close(2), which passes them on as
    one write (the client sends it in WRITEs of up to wsize) and then waits for them: one
    stable WRITE where they fit one (400 KiB), else the WRITEs and a COMMIT (1.6 MiB)."""
    calls = [
        call("create", fh=1, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
        *(call("write", fh=1, offset=i * size, size=size, result=size, kind="buffered") for i in range(100)),
        call("flush", fh=1),
    ]
    trace = write_syscall_trace(tmp_path / "t", calls)
    passed = made(trace)
    writes = [(t, c) for t, _, _, c in passed if c.op == "write"]
    close_at = (START_NS + 101 * 50_000) / 1e9
    assert [(t, c.size, c.offset, c.write_mode) for t, c in writes] == [
        (pytest.approx(close_at, abs=1e-9), 100 * size, 0, "buffered")
    ]
    # the root's first search (ACCESS), the OPEN(create), then nothing until the close
    assert admitted(passed) == [
        ("access", "ACCESS"),
        ("create", "OPEN(create)"),
        ("write", "WRITE(write-back)"),
        ("flush", sent),
        ("release", ""),
    ]


def test_dirty_data_goes_after_thirty_seconds_without_a_close(tmp_path):
    """The flusher writes back data dirty for 30 s (dirty_expire_centisecs): passed on at
    the first call after, so that the close then only commits it."""
    calls = [
        call("create", fh=1, flags=os.O_WRONLY | os.O_CREAT),
        call("write", fh=1, size=4 * KiB, result=4 * KiB, kind="buffered"),
        call("getattr", "/g"),
        call("getattr", "/h"),  # 40 s after the write
        call("flush", fh=1),
    ]
    trace = write_syscall_trace(tmp_path / "t", calls, step_ns=20 * 10**9)  # 20 s apart
    ops = [(round(t - START_NS / 1e9), c.op) for t, _, _, c in made(trace)]
    assert ops == [
        (0, "access"),
        (0, "create"),
        (40, "lookup"),
        (60, "write"),
        (60, "lookup"),
        (80, "flush"),
        (80, "release"),
    ]
    flush = [c for *_, c in made(trace) if c.op == "flush"]
    assert admitted(made(trace))[-2] == ("flush", "COMMIT,CLOSE") and flush[0].writable


def test_a_call_s_requests_are_made_one_after_another_from_its_start(tmp_path):
    """A stat of a/b/c, cold: three lookups from the call's start, each (in closed loop)
    waiting for the one before, the last ending with the call; then the next call's."""
    trace = write_syscall_trace(tmp_path / "t", [call("getattr", "/a/b/c"), call("getattr", "/a/b/d")])
    passed = made(trace, closed=True)
    t0, dur = START_NS / 1e9, 20_000 / 1e9
    assert [c.op for *_, c in passed] == ["lookup"] * 4
    assert [(t - t0, end - t0) for t, end, _, _ in passed[:3]] == [
        (0, pytest.approx(1e-9)),
        (pytest.approx(1e-9), pytest.approx(2e-9)),
        (pytest.approx(2e-9), pytest.approx(dur)),
    ]
    assert passed[3][0] == pytest.approx(t0 + 50e-6) and len({key for _, _, key, _ in passed}) == 1
    # in closed loop the walk's lookups wait for one another: the job is longer than one's
    one = write_syscall_trace(tmp_path / "one", [call("getattr", "/c"), call("getattr", "/d")])
    walk, single = (simulate.simulate(str(t), PARAMS, None)["simulated_s"] for t in (trace, one))
    assert walk is not None and single is not None and walk > 2 * single


def test_the_command_says_what_the_client_was_asked_per_operation(tmp_path):
    trace = write_syscall_trace(tmp_path / "t", [call("getattr")] * 1000)
    text = fusetrace_here("simulate", str(trace), "--profile", "efs-bursting").stdout
    rows = {line.split()[0]: line.split()[1:] for line in text.splitlines() if line.startswith(("getattr ", "lookup "))}
    assert rows == {"getattr": ["1,000", "0"], "lookup": ["0", "1"]}
    assert "system calls (a capture's trace)" in text and "read-ahead" in text
    out = json.loads(fusetrace_here("simulate", str(trace), "--profile", "efs-bursting", "--json").stdout)
    assert out["operations"]["simulated"] == 1


steps = st.lists(
    st.tuples(
        st.sampled_from(
            ["open", "create", "read", "write", "flush", "fsync", "getattr", "setattr", "unlink", "rename"]
        ),
        st.sampled_from(["/a", "/a/b", "/c/d"]),
        st.integers(0, 3),  # fh (0: by path)
        st.integers(0, 64),  # pages
        st.sampled_from(["buffered", "sync", "direct"]),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=30, deadline=None)
@given(steps, st.sampled_from([50_000, 7 * 10**9]))
def test_any_captured_trace_is_made_in_order_and_simulates(tmp_path_factory, calls, step_ns):
    """Whatever the calls, the requests are made in time order, each ending no earlier
    than it starts, within its call's time; the client takes each; buffered data is
    passed on no more than it was written; the simulation runs."""
    rows = []
    for op, path, fh, pages, kind in calls:
        n = pages * 4 * KiB
        flags = os.O_RDWR | (os.O_CREAT if op == "create" else 0) | (os.O_SYNC if kind == "sync" else 0)
        rows.append(call(op, path, fh, size=n, result=n, flags=flags, kind=kind if op == "write" else None, path2="/e"))
    trace = write_syscall_trace(tmp_path_factory.mktemp("t") / "t", rows, step_ns=step_ns)
    passed = made(trace, closed=True)
    times = [t for t, *_ in passed]
    assert times == sorted(times) and all(end >= t for t, end, *_ in passed)
    assert all(end <= START_NS / 1e9 + len(rows) * step_ns / 1e9 for _, end, *_ in passed)
    assert not passed or len(admitted(passed)) == len(passed)
    buffered = sum(c.size for *_, c in passed if c.op == "write" and c.write_mode == "buffered")
    assert buffered <= sum(r[7] for r in rows if r[0] == "write" and r[11] == "buffered")
    assert simulate.simulate(str(trace), PARAMS, None)["operations"]["simulated"] == len(passed)
