"""fusetrace simulate over a fleet: several hosts' traces through one emulated file system,
each host its own NFS client, all sharing its credits, throughput, IOPS and slots."""

import json
import os
import stat
import subprocess
from collections import deque
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import fusetrace_here, one_line_error, served

from fusetrace.emulator.call import Call
from fusetrace.emulator.params import MiB
from fusetrace.rehearse import simulate, simulate_fleet
from fusetrace.server.inodes import ROOT
from fusetrace.shaping.profile import load_params
from fusetrace.trace.schema import TraceRecord
from fusetrace.trace.writer import TraceWriter

T0 = 10**12
WALL0 = 1_790_000_000 * 10**9
PROVISIONED = ["burst_credit_balance=0", "stored_size=100GiB"]  # the baseline: 5 MiB/s


def _host(directory: Path, host: str, files: int = 20, gap_ms: int = 10, wall_ns: int = WALL0) -> Path:
    """A host's trace: one process writing `files` files of 1 MiB one after another (look up,
    open, four 256 KiB buffered writes, close, release), `gap_ms` between files."""
    t = T0
    data = {"source": "/efs", "mountpoint": "/mnt", "start_monotonic_ns": T0, "start_wall_ns": wall_ns, "host": host}
    w = TraceWriter(directory, data, flush_interval=3600)

    def record(op, inode, path, fh=0, offset=0, size=0, kind="meta_read", flags=0, mode=0, entry=0):
        nonlocal t
        w.record(
            TraceRecord(t, 500_000, op, inode, path, None, fh, offset, size, size, 0, 42, 0, 0, 0,
                        comm="writer", kind=kind, flags=flags, mode=mode, entry=entry)
        )  # fmt: skip
        t += 1_000_000

    for i in range(files):
        f = 100 + i
        record("lookup", ROOT, f"/f{f}", mode=stat.S_IFREG | 0o644, entry=f)
        record("open", f, f"/f{f}", fh=7, flags=os.O_WRONLY)
        for k in range(4):
            record("write", f, f"/f{f}", 7, k * 262_144, 262_144, kind="buffered")
        record("flush", f, f"/f{f}", 7, kind="commit")
        record("release", f, f"/f{f}", 7, kind="none")
        t += gap_ms * 1_000_000
    w.close()
    return directory


def _fleet(root: Path, n: int, **kw) -> list[str]:
    return [str(_host(root / f"host=h{i}", f"h{i}", **kw)) for i in range(n)]


def _run(*args: str) -> dict:
    return json.loads(fusetrace_here("simulate", *args, "--json").stdout)


def test_identical_hosts_contend_for_the_shared_throughput(tmp_path):
    """Four hosts writing as fast as they can through a 5 MiB/s baseline: each takes longer than
    alone, and the file system's throughput holds: the fleet's bytes over its time stay within
    the limit (the first second's burst allowance aside)."""
    params = load_params("efs-bursting", PROVISIONED)
    alone = simulate.simulate(_fleet(tmp_path / "one", 1), params, None)
    fleet = simulate.simulate(_fleet(tmp_path / "four", 4), params, None)
    assert fleet["records"] == 4 * alone["records"]
    assert len(fleet["hosts"]) == 4 and "hosts" not in alone
    for h in fleet["hosts"]:
        assert h["simulated_s"] > alone["simulated_s"] * 3
        assert h["waited_s"] > alone["waited"]["total_s"]
        assert h["top_gate"] in ("throughput", "dirty", "writeback")
    written = 4 * 20 * MiB
    took = max(h["simulated_s"] for h in fleet["hosts"])
    assert written / took <= 5 * MiB * 1.02
    assert fleet["metered_bytes"] >= written


@given(st.lists(st.booleans(), max_size=400), st.integers(1, 50))
def test_a_chains_spilled_operations_come_back_in_order(steps, chunk):
    """A chain's queue (True: add one, False: take the first, if any) gives back what was added,
    in order, every field of each call, as a deque would; past two chunks the rest is on disk."""
    spill = simulate_fleet.Spill()
    spilled, kept = spill.queue(), deque()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(simulate_fleet, "CHUNK", chunk)
        for i, add in enumerate(steps):
            if add:
                op = (
                    i / 3,
                    i / 2,
                    Call("write", i, 0, f"n{i}", offset=i * 7, size=i, write_mode="direct", uid=i, host=i % 5),
                )
                spilled.append(op)
                kept.append(op)
            elif kept:
                assert spilled[0] == kept[0]
                assert spilled.popleft() == kept.popleft()
            assert len(spilled) > 0 if kept else len(spilled) == 0
        while kept:
            assert spilled.popleft() == kept.popleft()
        most = max_pending(steps)
        if most >= 2 * chunk:
            assert spill.file is not None
        if most <= chunk:
            assert spill.file is None
        spill.close()


def max_pending(steps: list[bool]) -> int:
    """The most a queue held at once, added one at a time by `steps` (see above)."""
    n = most = 0
    for add in steps:
        n = n + 1 if add else max(0, n - 1)
        most = max(most, n)
    return most


def test_a_fleet_falling_behind_spills_and_simulates_the_same(tmp_path, monkeypatch):
    """Hosts waiting for a shared 5 MiB/s baseline fall behind their recordings: their records
    read and not yet made, held a chunk in memory and the rest on disk, give the same figures
    whatever the chunk."""
    traces = _fleet(tmp_path, 4)
    params = load_params("efs-bursting", PROVISIONED)
    held = simulate.simulate(traces, params, None)
    monkeypatch.setattr(simulate_fleet, "CHUNK", 2)
    spilled = simulate.simulate(traces, params, None)
    held.pop("wall_s")
    spilled.pop("wall_s")
    assert held == spilled


def test_one_host_alone_through_the_fleet_path_is_the_trace_simulated(tmp_path):
    """A glob matching one trace, and that trace beside an idle one, say what simulate of that
    trace says."""
    (d,) = _fleet(tmp_path / "f", 1)
    settings = ["--profile", "efs-bursting", "--set", "burst_credit_balance=10MiB"]
    one = _run(d, *settings)
    globbed = _run(str(tmp_path / "f" / "*"), *settings)
    idle = tmp_path / "f" / "host=idle"
    TraceWriter(idle, {"source": "/efs", "mountpoint": "/mnt", "host": "idle"}).close()
    done = fusetrace_here("simulate", str(tmp_path / "f" / "*"), *settings, "--json")
    assert "host=idle: the mount recorded no operation; left out" in done.stderr
    with_idle = json.loads(done.stdout)
    for out in (one, globbed, with_idle):
        out.pop("wall_s")
    assert one == globbed == with_idle
    assert one["credits"]["run_out_s"] is not None


def test_a_fleet_spends_the_credits_sooner_than_one_host(tmp_path):
    """The credits are the file system's: five hosts doing what one does spend them in about a
    fifth of the time; one alone runs them out later, and each's wall-clock time is said."""
    settings = ["--profile", "efs-bursting", "--set", "burst_credit_balance=40MiB", "--days", "0.01"]
    one = _run(_fleet(tmp_path / "one", 1, gap_ms=200)[0], *settings)
    _fleet(tmp_path / "five", 5, gap_ms=200)
    five = _run(str(tmp_path / "five" / "*"), *settings)
    c1, c5 = one["credits"], five["credits"]
    assert c1["run_out_s"] is not None and c5["run_out_s"] is not None
    assert c5["run_out_s"] < c1["run_out_s"] / 3
    assert c5["run_out_wall"].startswith("2026-09-21T")
    text = fusetrace_here("simulate", str(tmp_path / "five" / "*"), *settings).stdout
    assert "5 traces (5 hosts through one file system)" in text
    assert "credits run out at" in text and "2026-09-21 " in text and " UTC (" in text
    assert "hosts that waited most (of 5" in text
    assert all(f"h{i} " in text for i in range(5))


def test_two_traces_of_one_host_are_two_clients(tmp_path):
    _host(tmp_path / "a", "web1")
    _host(tmp_path / "b", "web1")
    out = _run(str(tmp_path / "a"), str(tmp_path / "b"), "--profile", "efs-bursting", "--set", *PROVISIONED[:1],
               "--set", PROVISIONED[1])  # fmt: skip
    assert sorted(h["host"] for h in out["hosts"]) == ["web1", "web1#2"]
    assert {p["host"] for p in out["processes"]} == {"web1", "web1#2"}


def test_bad_input_among_many_is_one_line_naming_it(tmp_path):
    dirs = _fleet(tmp_path / "f", 3, files=2)
    part = next(Path(dirs[1]).glob("*.parquet"))
    part.write_bytes(part.read_bytes()[:100])  # cut short
    settings = ["--profile", "efs-bursting"]
    err = one_line_error(fusetrace_here("simulate", str(tmp_path / "f" / "*"), *settings, check=False), code=2)
    assert "host=h1" in err and "host=h0" not in err and "host=h2" not in err
    one_line_error(
        fusetrace_here("simulate", str(tmp_path / "nothing*"), *settings, check=False),
        "nothing*: matches nothing",
        code=2,
    )
    (tmp_path / "notes.txt").write_text("x")
    one_line_error(
        fusetrace_here("simulate", dirs[0], str(tmp_path / "notes.txt"), *settings, check=False), "notes.txt", code=2
    )


@pytest.fixture
def three_mounts(tmp_path):
    """Three traced mounts, each tracing into traces/host=NAME."""
    traces = tmp_path / "traces"
    mounts = [served(f"fleet-{n}-", "--trace", str(traces / f"host={n}")) for n in ("writer", "reader", "lister")]
    try:
        yield traces, [next(m)[1] for m in mounts]
    finally:
        for m in mounts:
            m.close()


def test_a_fleet_of_real_mounts_simulated_together(three_mounts):
    """Three mounts, three workloads (writing, reading, listing), their traces through one file
    system: a host each, named by its trace directory."""
    traces, (writer, reader, lister) = three_mounts
    for i in range(20):
        (writer / f"w{i}").write_bytes(os.urandom(256 * 1024))
        (reader / f"r{i}").write_bytes(b"r" * 4096)
    for _ in range(5):
        for i in range(20):
            (reader / f"r{i}").read_bytes()
        subprocess.run(["ls", "-lR", str(lister)], check=True, capture_output=True)
    for m in (writer, reader, lister):
        fusetrace_here("umount", str(m))
    out = _run(str(traces / "*"), "--profile", "efs-bursting")
    assert sorted(h["host"] for h in out["hosts"]) == ["lister", "reader", "writer"]
    assert all(h["records"] > 0 for h in out["hosts"])
