"""fusetrace simulate: a trace's records rebuilt into the handlers' requests, run through
the NFS client and the model in virtual time, repeated for days with the steady stretches
fast-forwarded; and a real emulated mount agreeing with the simulation of its own trace."""

import json
import math
import os
import stat
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pyarrow.parquet as pq
import pyfuse3
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pyfuse3 import FUSEError
from support import fusetrace_here, one_line_error
from support.inprocess import CTX, QUICK, serve

from fusetrace.emulator import tracesim
from fusetrace.emulator.call import Call
from fusetrace.emulator.model import Model
from fusetrace.emulator.nfsclient import NfsClient
from fusetrace.emulator.params import RPC_LATENCIES, GiB, KiB, MiB
from fusetrace.emulator.tracesim import Timed, TraceSim
from fusetrace.rehearse import simulate, simulate_fleet
from fusetrace.rehearse.requests import COLUMNS, UNKNOWN_DIRECTORY, Rebuilder
from fusetrace.report.query import Trace
from fusetrace.request import Request
from fusetrace.server.inodes import ROOT
from fusetrace.shaping.profile import load_params
from fusetrace.trace import metadata as meta
from fusetrace.trace.schema import TraceRecord
from fusetrace.trace.writer import TraceWriter

# ---- the handlers in process, driven as the kernel would drive them ----------------------

NAMES = [b"a", b"b", b"c", b"d"]
FLAGS = [
    os.O_RDONLY,
    os.O_WRONLY,
    os.O_RDWR,
    os.O_WRONLY | os.O_SYNC,
    os.O_RDWR | os.O_DIRECT,
    os.O_WRONLY | os.O_DSYNC | os.O_APPEND,
    os.O_WRONLY | os.O_TRUNC,
]
ACTIONS = [
    "mkdir",
    "create",
    "open",
    "write",
    "write",
    "read",
    "flush",
    "fsync",
    "release",
    "lookup",
    "getattr",
    "setattr",
    "access",
    "unlink",
    "rmdir",
    "rename",
    "link",
    "symlink",
    "readlink",
    "mknod",
    "opendir",
    "readdir",
    "releasedir",
    "fsyncdir",
    "statfs",
    "getxattr",
    "setxattr",
    "listxattr",
    "removexattr",
]
# Every program starts with a directory, a file open for reading and writing, and a listing.
PROLOGUE = [("mkdir", 0, 0, 0), ("create", 0, 1, 2), ("write", 0, 3, 0), ("create", 1, 2, 1), ("opendir", 0, 0, 0)]
PROGRAMS = st.lists(
    st.tuples(st.sampled_from(ACTIONS), st.integers(0, 15), st.integers(0, 15), st.integers(0, 15)),
    min_size=5,
    max_size=80,
).map(lambda steps: PROLOGUE + steps)


class Token:
    """The kernel's readdir buffer: room for `room` entries."""

    def __init__(self, room: int):
        self.room, self.next = room, 0


def _reply(token: Token, name, attr, next_id) -> bool:
    if token.room <= 0:
        return False
    token.room -= 1
    token.next = next_id
    return True


def _pick(items: list, i: int):
    return items[i % len(items)] if items else None


async def _run(ops, program) -> None:
    """Interpret `program` against the handlers, knowing only the node ids and handles
    the handlers' replies gave, as the kernel does.  A refused operation (FUSEError) is
    part of the workload: its record is made all the same."""
    dirs, files, links, fifos, handles, listings = [ROOT], [], [], [], [], {}

    def learn(entry) -> None:
        """The kernel opens regular files through FUSE, never a FIFO (it opens those itself)."""
        if entry.st_ino:
            mode = entry.st_mode
            kind = (
                dirs if stat.S_ISDIR(mode) else files if stat.S_ISREG(mode) else links if stat.S_ISLNK(mode) else fifos
            )
            for known in (dirs, files, links, fifos):  # a node id now another object's: the number was reused
                if entry.st_ino in known and known is not kind:
                    known.remove(entry.st_ino)
            if entry.st_ino not in kind:
                kind.append(entry.st_ino)

    for action, a, b, c in program:
        name = NAMES[b % len(NAMES)]
        parent = _pick(dirs, a)
        try:
            if action == "mkdir":
                learn(await ops.mkdir(parent, name, stat.S_IFDIR | 0o755, CTX))
            elif action == "create":
                info, entry = await ops.create(parent, name, 0o644, FLAGS[c % len(FLAGS)], CTX)
                learn(entry)
                handles.append(info.fh)
            elif action == "open" and files:
                handles.append((await ops.open(_pick(files, a), FLAGS[c % len(FLAGS)], CTX)).fh)
            elif action == "write" and handles:
                await ops.write(_pick(handles, a), 4096 * c, b"x" * (512 * (b + 1)))
            elif action == "read" and handles:
                await ops.read(_pick(handles, a), 1024 * c, 4096)
            elif action in ("flush", "fsync", "release") and handles:
                fh = _pick(handles, a)
                if action == "flush":
                    await ops.flush(fh)
                elif action == "fsync":
                    await ops.fsync(fh, bool(c % 2))
                else:
                    handles.remove(fh)
                    await ops.release(fh)
            elif action == "lookup":
                learn(await ops.lookup(parent, name, CTX))
            elif action in ("getattr", "access", "getxattr", "listxattr", "setxattr", "removexattr"):
                node = _pick(dirs + files + links + fifos, a)
                if action == "getattr":
                    await ops.getattr(node, CTX)
                elif action == "access":
                    await ops.access(node, os.R_OK, CTX)
                elif action == "getxattr":
                    await ops.getxattr(node, b"user." + name, CTX)
                elif action == "listxattr":
                    await ops.listxattr(node, CTX)
                elif action == "setxattr":
                    await ops.setxattr(node, b"user." + name, b"v" * c, CTX)
                else:
                    await ops.removexattr(node, b"user." + name, CTX)
            elif action == "setattr":
                attr = pyfuse3.EntryAttributes()
                attr.st_size, attr.st_mode = 100 * c, stat.S_IFREG | 0o640
                attr.st_atime_ns = attr.st_mtime_ns = 10**18
                fields = SimpleNamespace(
                    update_size=b % 2 == 0,
                    update_mode=b % 3 == 0,
                    update_uid=False,
                    update_gid=False,
                    update_atime=b % 5 == 0,
                    update_mtime=b % 2 == 1,
                )
                fh = _pick(handles, c) if c % 2 and handles else None
                await ops.setattr(_pick(dirs + files, a), attr, fields, fh, CTX)
            elif action in ("unlink", "rmdir"):
                await getattr(ops, action)(parent, name, CTX)
            elif action == "rename":
                await ops.rename(parent, name, _pick(dirs, c), NAMES[a % len(NAMES)], 0, CTX)
            elif action == "link" and files:
                learn(await ops.link(_pick(files, c), parent, name, CTX))
            elif action == "symlink":
                learn(await ops.symlink(parent, name, b"target-" + name, CTX))
            elif action == "readlink" and links:
                await ops.readlink(_pick(links, a), CTX)
            elif action == "mknod":
                learn(await ops.mknod(parent, name, stat.S_IFIFO | 0o644, 0, CTX))
            elif action == "opendir":
                fh = await ops.opendir(parent, CTX)
                listings[fh] = 0
            elif action in ("readdir", "releasedir", "fsyncdir") and listings:
                fh = _pick(list(listings), a)
                if action == "readdir":
                    token = Token(c % 4 + 1)
                    start = listings[fh] if b % 3 else 0  # go on through the listing, or rewind
                    await ops.readdir(fh, start, token)
                    listings[fh] = token.next or start
                elif action == "fsyncdir":
                    await ops.fsyncdir(fh, False)
                else:
                    del listings[fh]
                    await ops.releasedir(fh)
            elif action == "statfs":
                await ops.statfs(CTX)
        except FUSEError:
            pass
    for fh in handles:  # as the kernel does at unmount
        await ops.release(fh)


def _served(program) -> tuple[list[tuple[Request, dict]], dict]:
    """Run the program in process (shaped and traced); the requests the shaper saw, each
    with its trace record, and the trace's metadata."""
    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(pyfuse3, "readdir_reply", _reply):
        requests, rows = serve(Path(tmp), lambda ops: _run(ops, program))
        metadata = meta.read(os.path.join(tmp, "trace"))
    assert len(requests) == len(rows)  # each request admitted is traced
    return list(zip(requests, rows)), metadata


def _rebuilt(rows: list[dict]) -> list[Request | None]:
    r = Rebuilder()
    return [r.rebuild(*(row[c] for c in COLUMNS)) for row in rows]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PROGRAMS)
@example(
    [*PROLOGUE, ("mkdir", 0, 0, 0), ("mkdir", 0, 0, 0), ("mkdir", 0, 2, 0), ("rmdir", 0, 2, 0), ("rename", 0, 0, 2)]
)  # a rename into a directory just removed names it still
@example([*PROLOGUE, ("unlink", 0, 1, 0), ("release", 0, 0, 0)])  # an open file unlinked, then its last close
def test_the_records_give_back_the_requests_the_handlers_made(program):
    served, _ = _served(program)
    rebuilt = _rebuilt([row for _, row in served])
    for (request, row), again in zip(served, rebuilt):
        assert repr(again) == repr(request), row


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PROGRAMS)
@example([*PROLOGUE, ("unlink", 0, 1, 0), ("release", 0, 0, 0)])  # an open file unlinked, then its last close
def test_simulating_the_trace_is_driving_the_client_with_the_requests(program):
    """The simulation of a trace leaves the model as the original requests, handed to an
    NFS client at their own times, do; and it charges each operation what the shaper did
    when the trace was recorded (the same profile, the credit balance at its cap)."""
    served, metadata = _served(program)
    params = load_params("efs-bursting", QUICK)
    times = [row["start_ns"] / 1e9 for _, row in served]
    origin = metadata["start_monotonic_ns"] / 1e9
    end = times[-1] + 1.0

    direct = Model(params, origin)
    client = NfsClient(direct)
    for (request, row), t in zip(served, times):
        client.admit(request.call(row["uid"]), t)
    calls = [
        (t, t, -1, r.call(row["uid"]))
        for r, t, (_, row) in zip(_rebuilt([row for _, row in served]), times, served)
        if r is not None
    ]
    seen: list[tuple[str, str, int, int, int]] = []
    model = Model(params, origin)
    TraceSim(
        model,
        lambda: calls,
        origin=origin,
        first=times[0],
        span=end - times[0],
        every=0.01,
        admitted=lambda c, t, a: seen.append(
            (str(a.gate), a.rpcs, int(a.wait * 1e9), int(a.latency * 1e9), int(a.transfer * 1e9))
        ),
    ).run(end - origin)
    assert model.metrics(end) == direct.metrics(end)
    assert seen == [
        (row["gate"], row["nfs"], row["wait_ns"], row["latency_ns"], row["transfer_ns"]) for _, row in served
    ]


# ---- repetition in virtual time: fast-forward against every operation simulated -----------


def _workload(
    rounds: int = 50, writes: int = 4, size: int = 64 * 1024, start: float = 1000.0, gap: float = 0.1
) -> list[Timed]:
    """A small job, round after round: look a file up, open it, write it, close it, stat it
    (open loop: each operation at its time)."""
    calls, t = [], start
    for i in range(rounds):
        f = 100 + i % 10
        calls += [(t, Call("lookup", file=ROOT, directory=ROOT, name=f"f{f}")), (t + 0.001, Call("open", file=f))]
        calls += [(t + 0.002 + k * 0.001, Call("write", file=f, size=size)) for k in range(writes)]
        t += 0.003 + writes * 0.001
        calls += [(t, Call("flush", file=f)), (t + 0.02, Call("release", file=f)), (t + 0.021, Call("getattr", file=f))]
        t += 0.022 + gap
    return _open(calls)


def _open(calls: list[tuple[float, Call]]) -> list[Timed]:
    """Operations of no chain, made at their times (open loop)."""
    return [(t, t, -1, c) for t, c in calls]


def _span(calls: list[Timed]) -> float:
    return calls[-1][0] - calls[0][0] + 0.01


def _simulated(overrides: list[str], calls: list[Timed], reps: float, profile: str = "efs-bursting"):
    span = _span(calls)
    first = calls[0][0]
    model = Model(load_params(profile, overrides), first)
    return TraceSim(model, lambda: calls, origin=first, first=first, span=span, every=span / 4).run(reps * span)


def _every_operation(overrides: list[str], calls: list[Timed], reps: float, profile: str = "efs-bursting") -> dict:
    """The same repetitions, every operation simulated, the balance looked at after each
    until it first reaches zero."""
    span, origin = _span(calls), calls[0][0]
    model = Model(load_params(profile, overrides), origin)
    client = NfsClient(model)
    stop, cliff, waited, longest, ops = origin + reps * span, None, 0.0, 0.0, 0
    for r in range(math.ceil(reps)):
        for at, _, _, c in calls:
            t = at + r * span
            if t >= stop:
                break
            a = client.admit(c, t)
            ops += 1
            waited, longest = waited + a.wait, max(longest, a.wait)
            if cliff is None and model.metrics(t)["BurstCreditBalance"] <= 0:
                cliff = t - origin
    return {"cliff": cliff, "waited": waited, "longest": longest, "ops": ops, **model.metrics(stop)}


def test_fast_forward_finds_the_cliff_every_operation_finds():
    calls = _workload()
    settings = ["burst_credit_balance=400 MiB"]
    res = _simulated(settings, calls, 120)
    full = _every_operation(settings, calls, 120)
    assert full["cliff"] is not None
    assert abs(res.cliff - full["cliff"]) < 0.5, (res.cliff, full["cliff"])
    assert res.cliff_simulated and res.after_cliff == 1 * MiB
    assert [s.simulated for s in res.spans][:2] == [True, False]  # a stretch before the cliff was skipped
    assert res.ops < full["ops"] / 3
    assert res.end_balance == full["BurstCreditBalance"] == 0
    assert res.end_permitted == full["PermittedThroughput"] == 1 * MiB
    assert res.metered == pytest.approx(full["MeteredIOBytes"], rel=1e-3)
    assert res.waited == pytest.approx(full["waited"], rel=0.05)
    assert res.max_wait == pytest.approx(full["longest"], rel=0.05)
    assert res.saturated  # after the cliff the job asks more than the baseline gives


def test_a_queue_growing_at_burst_is_extrapolated_through_the_cliff():
    """Asking more than the burst rate: the queue grows from the start, the balance falls
    at burst less baseline, and the cliff comes as every operation simulated says."""
    calls = _workload(writes=6)
    settings = ["burst_mibps=2", "burst_mibps_per_tib=0", "burst_credit_balance=60 MiB"]
    res = _simulated(settings, calls, 60)
    full = _every_operation(settings, calls, 60)
    assert not res.cliff_simulated and res.saturated
    assert res.cliff == pytest.approx(full["cliff"], rel=0.02)
    assert res.ops < full["ops"] / 5
    assert res.max_wait == pytest.approx(full["longest"], rel=0.05)
    assert res.waited == pytest.approx(full["waited"], rel=0.1)


def test_at_the_credit_cap_the_rest_is_skipped():
    calls = _workload(writes=1, size=4096)
    res = _simulated([], calls, 10_000)
    assert res.cliff is None and res.delta == 0
    assert res.end_balance == res.start_balance == load_params("efs-bursting", []).burst_credit_cap_min
    assert [(s.simulated, round(s.reps, 6)) for s in res.spans] == [(True, 4), (False, 9_996)]
    assert res.ops == 4 * len(calls)


def test_rising_credits_reach_the_cap():
    calls = _workload(writes=1, size=16 * 1024)
    settings = ["burst_credit_balance=10 MiB", "burst_credit_cap_min=200 MiB", "burst_credit_cap_per_tib=0"]
    res = _simulated(settings, calls, 200)
    full = _every_operation(settings, calls, 200)
    assert res.cliff is None and res.delta > 0
    assert res.end_balance == full["BurstCreditBalance"] == 200 * MiB
    # skipped while rising, simulated as it reaches the cap, skipped from there on
    assert [s.simulated for s in res.spans] == [True, False, True, False]
    assert res.ops < full["ops"] / 3


def test_elastic_throughput_has_no_cliff():
    res = _simulated([], _workload(), 1000, profile="efs-elastic")
    assert res.cliff is None and res.after_cliff is None
    assert [s.simulated for s in res.spans] == [True, False]


def _read_twice(gaps: list[float]) -> list[Timed]:
    """A file looked up, opened, read and closed, twice: a trace of a few milliseconds, hardly
    longer than its operations' latencies, asking a thousandth of what is permitted."""
    once = [
        Call("open", file=100),
        Call("read", file=100, size=4096),
        Call("flush", file=100, writable=False),
        Call("release", file=100),
    ]
    look = Call("lookup", file=ROOT, directory=ROOT, name="f")
    kinds = [Call("getattr", file=ROOT, is_dir=True), look, *once, look, look, *once]
    t, calls = 1000.0, []
    for c, gap in zip(kinds, gaps, strict=True):
        t += gap
        calls.append((t, c))
    return _open(calls)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.00005, 0.0015), min_size=12, max_size=12))
@example(
    [
        0.000587,
        0.001428,
        0.00034,
        0.000481,
        0.000656,
        0.000394,
        0.000487,
        0.001269,
        0.00076,
        0.000171,
        0.001278,
        0.00038,
    ]
)  # was taken as saturated: 2.1µs waited in all, 17 min at most
@example(
    [
        0.0011138898839685944,
        0.0014917880276701717,
        0.0014917880276701717,
        0.0014700886010311346,
        0.0007207000544166278,
        0.0009172563448383822,
        0.0005588178213796608,
        0.0004158039142608807,
        0.0004158039142608807,
        0.00010298188224824036,
        0.0009172563448383822,
        0.00010298188224824036,
    ]
)  # a "queue" rising 0.16 → 0.65 ms by chance, shorter than a read
def test_latencies_are_not_a_growing_queue(gaps):
    """Repeated back to back for a day, a tiny trace's operations end past its span by
    their latencies, more in one repetition than the one before by chance: not a queue.
    Whatever is extrapolated, the waits' total is never below the longest of them."""
    calls = _read_twice(gaps)
    first = calls[0][0]
    span = calls[-1][0] - first
    model = Model(load_params("efs-bursting", []), first)
    res = TraceSim(model, lambda: calls, origin=first, first=first, span=span, every=180).run(86400)
    assert not res.saturated
    assert res.waited >= res.max_wait
    assert res.max_wait < 0.1  # as every repetition simulated op by op finds: a few milliseconds


def test_write_back_nobody_waits_for_grows_no_wait():
    """Buffered writes at more than the burst rate, never flushed: the write-back queue grows
    without end (saturated) but no operation waits for it until the client's dirty limit,
    as every operation simulated says; once it is reached the writers do."""
    calls = _open([(1000.0 + i * 0.01, Call("write", file=100, size=32 * 1024)) for i in range(100)])
    settings = ["burst_mibps=2", "burst_mibps_per_tib=0", "burst_credit_balance=600 MiB"]
    res = _simulated(settings, calls, 60)
    full = _every_operation(settings, calls, 60)
    assert res.saturated and not res.spans[-1].simulated
    assert res.waited == res.max_wait == full["waited"] == full["longest"] == 0
    res = _simulated(settings, calls, 400)  # the limit (256 MiB) reached after some 210 repetitions
    full = _every_operation(settings, calls, 400)
    assert res.waited == pytest.approx(full["waited"], rel=0.1)
    assert full["longest"] <= res.max_wait <= res.waited


# ---- the rebuilding's guesses ------------------------------------------------------------


def _record(
    op: str,
    inode: int,
    path: str,
    path2: str | None = None,
    fh: int = 0,
    errno: int = 0,
    kind: str | None = None,
    flags: int = 0,
    mode: int = 0,
    entry: int = 0,
) -> tuple:
    return (op, inode, path, path2, fh, 0, 0, errno, kind, flags, mode, entry, None)


def test_a_rename_into_a_directory_the_trace_never_named_gets_one_of_its_own():
    r = Rebuilder()
    r.rebuild(*_record("mkdir", ROOT, "/d", kind="meta_write", mode=stat.S_IFDIR | 0o755, entry=5))
    known = r.rebuild(*_record("rename", 5, "/d/a", "/d/b", kind="meta_write"))
    assert (known.directory, known.new_directory, known.name, known.new_name) == (5, 5, "a", "b")
    # /e was learnt from a listing (READDIRPLUS), which the trace does not list
    first = r.rebuild(*_record("rename", 5, "/d/b", "/e/c", kind="meta_write"))
    again = r.rebuild(*_record("rename", 5, "/d/x", "/e/y", kind="meta_write"))
    assert first.new_directory == again.new_directory == UNKNOWN_DIRECTORY + 1
    assert r.gaps.new_directories == 1
    # once a record names it, its own id
    r.rebuild(*_record("getattr", 9, "/f", kind="meta_read", mode=stat.S_IFDIR | 0o700))
    assert r.rebuild(*_record("rename", 5, "/d/z", "/f/z", kind="meta_write")).new_directory == 9


def test_a_handle_whose_open_is_not_in_the_trace():
    r = Rebuilder()
    flush = r.rebuild(*_record("flush", 7, "/f", fh=3, kind="meta_read"))
    assert flush.closes and not flush.writable and r.gaps.unknown_handles == 1
    r.rebuild(*_record("write", 7, "/f", fh=3, kind="sync"))
    flush = r.rebuild(*_record("flush", 7, "/f", fh=3, kind="commit"))
    assert flush.writable and not flush.closes  # written through, and its first close was seen


# ---- the command -------------------------------------------------------------------------


def _trace(directory: Path, rounds: int = 300, gap_ms: int = 150) -> int:
    """A format 3 trace of the job _workload describes, as a mount records it."""
    t, n = 10**12, 0
    # tracing began at the first record: a real start (this host's uptime) before it would
    # add idle time, earning credits, that depends on how long ago the machine booted
    w = TraceWriter(directory, {"source": "/src", "mountpoint": "/mnt", "start_monotonic_ns": t}, flush_interval=3600)

    def record(op, inode, path, fh=0, offset=0, size=0, result=0, kind="meta_read", flags=0, mode=0, entry=0):
        nonlocal t, n
        w.record(
            TraceRecord(
                t,
                500_000,
                op,
                inode,
                path,
                None,
                fh,
                offset,
                size,
                result,
                0,
                42,
                0,
                0,
                0,
                comm="job",
                kind=kind,
                flags=flags,
                mode=mode,
                entry=entry,
            )
        )
        t, n = t + 1_000_000, n + 1

    for i in range(rounds):
        f, fh = 100 + i % 10, 10 + i % 3
        record("lookup", ROOT, f"/f{f}", mode=stat.S_IFREG | 0o644, entry=f)
        record("open", f, f"/f{f}", fh=fh, flags=os.O_WRONLY)
        for k in range(4):
            record("write", f, f"/f{f}", fh, 65536 * k, 65536, 65536, kind="buffered")
        record("flush", f, f"/f{f}", fh, kind="commit")
        record("release", f, f"/f{f}", fh, kind="none")
        record("getattr", f, f"/f{f}", mode=stat.S_IFREG | 0o644)
        t += gap_ms * 1_000_000
    w.close()
    return n


def test_simulate_says_when_credits_run_out(tmp_path):
    """In open loop, the operations at their recorded times: past the cliff the queue grows."""
    records = _trace(tmp_path / "t")
    args = [
        "simulate",
        str(tmp_path / "t"),
        "--profile",
        "efs-bursting",
        "--set",
        "burst_credit_balance=2 GiB",
        "--days",
        "7",
        "--open-loop",
    ]
    began = time.monotonic()
    out = json.loads(fusetrace_here(*args, "--json").stdout)
    took = time.monotonic() - began
    c = out["credits"]
    assert out["records"] == records and out["days"] == 7
    assert c["run_out_s"] is not None and c["run_out_simulated"]
    days, clock = c["run_out_at"].split("+")
    hours, minutes = clock.split(":")
    assert abs(int(days) * 86400 + int(hours) * 3600 + int(minutes) * 60 - c["run_out_s"]) <= 30
    assert c["after_run_out_bytes_per_s"] == out["permitted_end_bytes_per_s"] == 1 * MiB
    assert c["change_per_repetition_bytes"] < 0
    # About a day in: the credits fall by what the job meters less what the baseline earns
    per_rep = out["metered_bytes_per_s"] * out["span_s"]
    assert c["run_out_s"] == pytest.approx(2 * GiB / (per_rep - 1 * MiB * out["span_s"]) * out["span_s"], rel=0.05)
    assert out["operations"]["simulated"] < out["operations"]["total"] / 100
    assert [s["simulated"] for s in out["spans"]][:3] == [True, False, True]
    assert out["samples"][-1]["t_s"] == 7 * 86400 and out["duration_s"] == 7 * 86400
    assert took < 60, took  # a week in seconds (under 3 s here, both runs of the command)

    text = fusetrace_here(*args, "--plot", str(tmp_path / "credits.png")).stdout
    assert (
        f"credits run out at {c['run_out_s']:,.0f} s, {c['run_out_at']} from the trace's start, "
        f"{c['run_out_wall'].replace('T', ' ').replace('+00:00', ' UTC')} (simulated op by op); "
        "then 1.0 MiB/s is permitted" in text
    )
    assert "extrapolated: 0+00:" in text and "op by op" in text
    assert (tmp_path / "credits.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_simulate_once(tmp_path):
    records = _trace(tmp_path / "t", rounds=20)
    out = json.loads(
        fusetrace_here("simulate", str(tmp_path / "t"), "--profile", "efs-2018", "--open-loop", "--json").stdout
    )
    assert out["operations"] == {"simulated": records, "total": records}
    assert [s["simulated"] for s in out["spans"]] == [True]
    assert out["credits"]["run_out_s"] is None and out["waited"]["total_s"] > 0
    # the average is over the operations' own span, as --days takes it, not the idle time before them
    assert out["metered_bytes_per_s"] == pytest.approx(out["metered_bytes"] / out["span_s"])
    assert out["duration_s"] == pytest.approx(out["first_operation_s"] + out["span_s"], abs=1e-3)
    text = fusetrace_here("simulate", str(tmp_path / "t"), "--profile", "efs-2018", "--open-loop").stdout
    assert "the trace once" in text and "credits do not run out" in text
    assert "on average over its operations' " in text


def test_a_trace_too_large_to_keep_is_read_again_for_each_repetition(tmp_path, monkeypatch):
    _trace(tmp_path / "t", rounds=40)
    params = load_params("efs-bursting", ["burst_credit_balance=50 MiB"])
    kept = simulate.simulate(str(tmp_path / "t"), params, 1.0)
    monkeypatch.setattr(simulate_fleet, "CACHE_CALLS", 10)
    streamed = simulate.simulate(str(tmp_path / "t"), params, 1.0)
    assert streamed.pop("wall_s") > 0 and kept.pop("wall_s") > 0
    assert streamed == kept
    assert kept["credits"]["run_out_s"] is not None and len(kept["spans"]) > 2


def test_simulate_refuses_bad_input(tmp_path):
    _trace(tmp_path / "t", rounds=2)
    one_line_error(
        fusetrace_here("simulate", str(tmp_path / "none"), "--profile", "efs-bursting", check=False),
        "no such trace directory",
        code=2,
    )
    one_line_error(
        fusetrace_here("simulate", str(tmp_path / "t"), "--profile", "no-such-profile", check=False),
        "no-such-profile",
        code=2,
    )
    one_line_error(
        fusetrace_here("simulate", str(tmp_path / "t"), "--profile", "efs-bursting", "--set", "burst=1", check=False),
        "burst: unknown parameter",
        code=2,
    )
    one_line_error(
        fusetrace_here(
            "simulate",
            str(tmp_path / "t"),
            "--profile",
            "efs-bursting",
            "--plot",
            str(tmp_path / "no" / "p.png"),
            check=False,
        ),
        "no such directory",
    )


# ---- a real emulated mount against the simulation of its own trace ----------------------

WORKLOADS = st.lists(
    st.tuples(
        st.sampled_from(["write", "append", "sync", "read", "stat", "mkdir", "rename", "list", "remove"]),
        st.integers(0, 3),
        st.integers(1, 2048),
    ),
    min_size=4,
    max_size=16,
)
BALANCE = 64 * MiB


def _work(root: Path, steps) -> None:
    """Files of `size` KiB written, appended, read, renamed and removed; the failures a
    missing file gives are part of the workload."""
    for action, i, size in steps:
        f, d = root / f"f{i}", root / f"d{i % 2}"
        try:
            if action in ("write", "append"):
                with open(f, "wb" if action == "write" else "ab") as out:
                    out.write(b"x" * 1024 * size)
            elif action == "sync":
                fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_SYNC, 0o644)
                try:
                    os.write(fd, b"y" * 1024 * size)
                finally:
                    os.close(fd)
            elif action == "read":
                f.read_bytes()
            elif action == "stat":
                os.stat(f)
            elif action == "mkdir":
                d.mkdir(exist_ok=True)
            elif action == "rename":
                os.rename(f, d / f"g{size % 3}")
            elif action == "list":
                os.listdir(root)
            else:
                os.unlink(f)
        except OSError:
            pass


@pytest.mark.slow
@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(WORKLOADS)
def test_a_mount_and_the_simulation_of_its_trace_agree_on_the_credits(mount, workload):
    """The mount's own figures at unmount (its last per-minute sample) against the trace's
    simulation with the same profile, to that moment.  Every operation is charged as the
    mount charged it, the metered bytes are the same to the byte, and so is the balance: the
    simulation starts where the mount's model did (the metadata's emulation.started_monotonic_ns),
    not when the trace opened, up to a second later on a loaded host (credits earned meanwhile)."""
    m = mount("--emulate", "efs-bursting", "--set", f"burst_credit_balance={BALANCE}", trace=True)
    _work(m.mountpoint, [("write", 0, 8192), *workload])
    m.unmount()
    metadata = meta.read(m.trace)
    final = metadata["metrics_per_minute"][-1]  # taken as the server stopped
    at = (metadata["start_monotonic_ns"] + final["wall_time"] * 1e9 - metadata["start_wall_ns"]) / 1e9
    rows = sorted(pq.read_table(m.trace).to_pylist(), key=lambda row: row["start_ns"])
    calls = [
        (row["start_ns"] / 1e9, row["start_ns"] / 1e9, -1, request.call(row["uid"]))
        for request, row in zip(_rebuilt(rows), rows)
        if request is not None
    ]
    assert len(calls) == len(rows)
    params = load_params("efs-bursting", [f"burst_credit_balance={BALANCE}"])
    origin, first = metadata["emulation"]["started_monotonic_ns"] / 1e9, rows[0]["start_ns"] / 1e9
    model = Model(params, origin)
    charged: list[tuple] = []
    TraceSim(
        model,
        lambda: calls,
        origin=origin,
        first=first,
        span=at - first,
        every=at - origin,
        admitted=lambda c, t, a: charged.append((str(a.gate), a.rpcs, int(a.latency * 1e9))),
    ).run(at - origin)
    simulated = model.metrics(at)

    assert charged == [(row["gate"], row["nfs"], row["latency_ns"]) for row in rows]
    assert simulated["MeteredIOBytes"] == final["MeteredIOBytes"]
    spent = BALANCE - final["BurstCreditBalance"]
    assert spent > 4 * MiB  # the credits moved: 8 MiB written, less what the baseline earned meanwhile
    # to 10 ms of the 1 MiB/s baseline: `at` comes through the wall clock's mapping to monotonic time
    assert simulated["BurstCreditBalance"] == pytest.approx(final["BurstCreditBalance"], abs=10 * KiB)


# ---- closed loop: each process waits for its own operations --------------------------------

# Latencies without spread (p99 = median), every RPC its class's, no stripes: a model whose
# every figure can be worked out by hand.
_FIXED_MS = (("read", 0.4), ("write", 2.7), ("meta_read", 0.4), ("meta_write", 2.7), ("commit", 2.7))
FIXED = [
    *(f"{c}_latency_ms={ms}" for c, ms in _FIXED_MS),
    *(f"{c}_latency_p99_ms={ms}" for c, ms in _FIXED_MS),
    *(f"{key}_latency_ms=0" for key in RPC_LATENCIES),
    "file_stripe_size=0",
]
STEPS = st.lists(
    st.tuples(
        st.integers(1, 3),  # chain
        st.floats(0.0001, 0.2),  # think time before it
        st.sampled_from(["getattr", "lookup", "read", "write", "sync", "direct"]),
        st.integers(1, 256),  # KiB
        st.booleans(),  # made without waiting for its chain's last (another thread of the process)
    ),
    min_size=1,
    max_size=40,
)


def _recorded(params, steps) -> list[Timed]:
    """`steps` made by their chains on the model, each after its chain's last one completed and
    its think time (or, `overlapping`, that long after the one made before it), the ends as the
    model gave them: the model's own recording."""
    model, start, calls = Model(params, 1.0), 1.0, []
    client = NfsClient(model)
    done = dict.fromkeys(range(1, 4), start)
    for chain, think, op, kib, overlapping in steps:
        # in start order: never before the one made before it
        t = start + think if overlapping else max(start, done[chain] + think)
        mode = {"sync": "sync", "direct": "direct"}.get(op, "buffered")
        c = Call("write", 100 + chain, size=kib * KiB, write_mode=mode) if op in ("write", "sync", "direct") else None
        c = c or Call(op, 100 + chain, directory=ROOT, name=f"f{chain}", size=kib * KiB)
        done[chain] = client.admit(c, t).done_at
        calls.append((t, done[chain], chain, c))
        start = t
    return [(t, end, chain, Call(**{f: getattr(c, f) for f in c.__slots__})) for t, end, chain, c in calls]


def _closed(params, calls: list[Timed], seen=None):
    first = calls[0][0]
    span = max(end for _, end, _, _ in calls) - first
    sim = TraceSim(
        Model(params, first), lambda: calls, origin=first, first=first, span=span, every=0.5, closed=True, admitted=seen
    )
    return sim.run(None), span


@settings(max_examples=100, deadline=None)
@given(STEPS)
def test_closed_loop_on_the_recordings_own_model_takes_what_it_took(steps):
    """A recording made on the model, simulated in closed loop on the same model: every
    operation is made when it was, and the job takes exactly as long (slowdown 1)."""
    params = load_params("efs-bursting", FIXED)
    calls = _recorded(params, steps)
    made: list[float] = []
    res, span = _closed(params, calls, lambda c, t, a: made.append(t))
    assert made == [t for t, *_ in calls]
    assert res.job == span
    assert all(end == done for _, end, done in res.chains.values())


def _writes(n: int, think: float, chain: int = 1, start: float = 1.0, took: float = 0.012) -> list[Timed]:
    """One thread's n direct writes of 1 MiB, each recorded taking `took`, `think` apart."""
    calls, t = [], start
    for _ in range(n):
        calls.append((t, t + took, chain, Call("write", 100 + chain, size=1 * MiB, write_mode="direct")))
        t += took + think
    return calls


def test_a_job_past_the_baseline_stretches_as_worked_out_by_hand():
    """No credits: 1 MiB/s, the floor, is permitted, earned as the job goes.  Ten writes of
    1 MiB, half a second apart: each waits for the one before, so the tenth completes when
    ten MiB have been earned, 10 s after the first started, where the recording took
    10 x 12 ms + 9 x 0.5 s.  Nothing waits longer than one write's second; in open loop the
    writes queue up behind one another instead."""
    params = load_params("efs-bursting", [*FIXED, "burst_credit_balance=0", "stored_size=1GiB"])
    calls = _writes(10, 0.5)
    res, span = _closed(params, calls)
    assert span == pytest.approx(10 * 0.012 + 9 * 0.5)
    assert res.job == pytest.approx(10.0, abs=1e-9)
    assert res.job / span == pytest.approx(10 / 4.62)
    assert res.max_wait <= 1.0 and not res.saturated
    opened = TraceSim(Model(params, 1.0), lambda: calls, origin=1.0, first=1.0, span=span, every=0.5).run(None)
    assert opened.job == pytest.approx(10.0, abs=1e-9)  # the same bytes at the same rate ...
    assert opened.max_wait > 4 * res.max_wait  # ... queued: the last write waits for all before it


def test_two_threads_each_wait_only_for_their_own():
    """A thread of synchronous writes (each flushed) recorded on a faster disk, and one of lookups and stats
    recorded on a slower one: the writer's chain stretches by what each write takes more, the
    other's operations are made at their recorded times."""
    params = load_params("efs-bursting", FIXED)
    writes, stats = [], []
    for i in range(50):
        t = 1.0 + i * 0.0011  # 0.1 ms each, 1 ms apart
        c = Call("fsync", 101) if i % 2 else Call("write", 101, size=4 * KiB, write_mode="sync")
        writes.append((t, t + 0.0001, 1, c))
        t = 1.0 + i * 0.005 + 0.0005  # 2 ms each, 3 ms apart
        stats.append((t, t + 0.002, 2, Call("getattr" if i % 2 else "lookup", 102, directory=ROOT, name=f"m{i}")))
    made: dict[int, list[tuple[float, float]]] = {1: [], 2: []}
    res, _ = _closed(
        params, sorted(writes + stats, key=lambda x: x[0]), lambda c, t, a: made[c.file - 100].append((t, a.done_at))
    )
    assert [t for t, _ in made[2]] == [t for t, *_ in stats]
    # each write made 1 ms after the fsync before it completed (a write is answered from the
    # cache faster than recorded: the fsync after it at its recorded time, the chain's delay added)
    after = list(zip(made[1], made[1][1:]))
    assert all(t == pytest.approx(done + 0.001) for (_, done), (t, _) in after[1::2])
    assert all(t == pytest.approx(w + 0.0011) for (w, _), (t, _) in after[::2])
    # (recorded, simulated) lengths of each chain's pass
    writer, other = ((end - first, done - first) for first, end, done in (res.chains[1], res.chains[2]))
    assert writer[1] == pytest.approx(made[1][-1][1] - 1.0) and writer[1] > 1.5 * writer[0]
    assert other[1] <= other[0]  # each answered within its recorded 2 ms


def test_closed_loop_command_says_how_much_longer_the_job_takes(tmp_path):
    """Recorded at 0.5 ms an operation, 1 ms apart, on a 2018-era file system whose writes take
    milliseconds: the job stretches; in open loop it is as recorded, ops at their times."""
    _trace(tmp_path / "t", rounds=40, gap_ms=0)
    args = ["simulate", str(tmp_path / "t"), "--profile", "efs-2018"]
    out = json.loads(fusetrace_here(*args, "--json").stdout)
    assert out["loop"] == "closed" and out["process_count"] == 1 and out["processes"][0]["pid"] == 42
    assert out["recorded_s"] == pytest.approx(out["span_s"]) and out["simulated_s"] > out["recorded_s"]
    assert out["slowdown"] == pytest.approx(out["simulated_s"] / out["recorded_s"]) and out["slowdown"] > 1.5
    assert out["processes"][0]["slowdown"] == pytest.approx(out["slowdown"])
    assert out["duration_s"] == pytest.approx(out["first_operation_s"] + out["simulated_s"], abs=1e-6)
    # longer than recorded: the samples merged to keep the table within its rows, none lost
    assert out["row_s"] * simulate.TABLE_ROWS >= out["duration_s"] > 0.02 * simulate.TABLE_ROWS
    assert len(out["samples"]) <= simulate.TABLE_ROWS * simulate.SAMPLES_PER_ROW + 2
    assert sum(x["ops"] for x in out["samples"]) == out["records"]
    text = fusetrace_here(*args).stdout
    job = f"the job would take {simulate._length(out['simulated_s'])} instead of {simulate._length(out['recorded_s'])}"
    assert f"{job} ({out['slowdown']:,.2f}x)" in text
    opened = json.loads(fusetrace_here(*args, "--open-loop", "--json").stdout)
    assert opened["loop"] == "open" and opened["processes"] == [] and opened["slowdown"] < out["slowdown"]


def test_open_loop_makes_every_operation_at_its_recorded_time(tmp_path):
    """--open-loop is the simulation as it was: the trace's requests handed to the client at their
    recorded times, whatever their processes."""
    n = _trace(tmp_path / "t", rounds=30)
    params = load_params("efs-2018", [])
    out = simulate.simulate(str(tmp_path / "t"), params, None, closed=False)
    calls = list(simulate_fleet.Calls(Trace(str(tmp_path / "t")), False)())
    assert len(calls) == n
    assert {chain for _, _, chain, _ in calls} == {-1}
    client = NfsClient(Model(params, calls[0][0]))
    waits = [client.admit(c, t).wait for t, _, _, c in calls]
    assert out["waited"]["total_s"] == pytest.approx(sum(waits), rel=1e-12)
    assert out["waited"]["max_s"] == max(waits)


def test_closed_loop_past_the_cliff_the_job_slows_instead_of_queueing(tmp_path):
    """A week of the job of test_simulate_says_when_credits_run_out, in closed loop: the credits
    run out as before, but nothing queues without end: the job runs fewer times instead."""
    _trace(tmp_path / "t")
    args = ["simulate", str(tmp_path / "t"), "--profile", "efs-bursting", "--set", "burst_credit_balance=2 GiB"]
    out = json.loads(fusetrace_here(*args, "--days", "7", "--json").stdout)
    assert out["credits"]["run_out_s"] is not None and not out["saturated"]
    assert out["waited"]["max_s"] < out["span_s"]
    assert out["repetitions"] < 0.9 * 7 * 86400 / out["span_s"]
    assert out["slowdown"] == pytest.approx(1.0, abs=0.1)  # its first pass, with credits
    assert out["samples"][-1]["t_s"] == 7 * 86400


def test_closed_loop_fast_forward_finds_what_every_operation_finds(monkeypatch):
    """The job of test_fast_forward_finds_the_cliff_every_operation_finds, one thread, each
    operation recorded taking 0.5 ms, repeated for 120 of its spans in closed loop: skipping
    the steady stretches finds the cliff, the balance, the bytes, the waits and the passes that
    every operation simulated finds."""
    calls = [(t, t + 0.0005, 1, c) for t, _, _, c in _workload()]
    params = load_params("efs-bursting", ["burst_credit_balance=400 MiB"])
    span, first = _span(calls), calls[0][0]

    def run():
        sim = TraceSim(
            Model(params, first), lambda: calls, origin=first, first=first, span=span, every=span, closed=True
        )
        return sim.run(120 * span)

    res = run()
    monkeypatch.setattr(tracesim, "CLOSED_STEADY", 10**9)
    full = run()
    assert [s.simulated for s in full.spans] == [True] and full.cliff is not None
    assert [s.simulated for s in res.spans][:2] == [True, False] and res.ops < full.ops / 3
    assert abs(res.cliff - full.cliff) < span, (res.cliff, full.cliff)
    assert res.end_balance == pytest.approx(full.end_balance, abs=1 * MiB)
    assert res.metered == pytest.approx(full.metered, rel=0.01)
    assert res.reps == pytest.approx(full.reps, rel=0.01)
    assert res.waited == pytest.approx(full.waited, rel=0.05)
    assert res.max_wait == pytest.approx(full.max_wait, rel=0.05)
    assert not res.saturated and res.job == full.job


def test_one_pass_far_longer_than_recorded_keeps_its_samples_few():
    """A write of 1 TiB with no credits holds its thread for 12 days at 1 MiB/s, and the
    operations after it with it: one pass sampled every 5 ms as recorded would take 200
    million samples; the interval doubles instead, and every operation is still counted."""
    params = load_params("efs-bursting", [*FIXED, "burst_credit_balance=0", "stored_size=1GiB"])
    calls = [(1.0, 1.001, 1, Call("write", 101, size=1 << 40, write_mode="direct"))]
    calls += [(1.002 + i * 0.001, 1.0025 + i * 0.001, 1, Call("getattr", 101)) for i in range(20)]
    sim = TraceSim(Model(params, 1.0), lambda: calls, origin=1.0, first=1.0, span=0.03, every=0.005, closed=True)
    res = sim.run(None, most=100)
    assert res.job == pytest.approx(2**20 + 0.02, rel=1e-3)  # 1 TiB at 1 MiB/s, then the stats
    assert 50 <= len(res.samples) <= 102
    assert sum(s.ops for s in res.samples) == len(calls)
    assert res.samples[-1].t == pytest.approx(res.job, rel=1e-6)
