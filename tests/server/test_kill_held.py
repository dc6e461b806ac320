"""A process killed while the server holds its request ends, as on an NFS hard mount
(issue 37, item 4): a request a stall rule or the emulated file system holds, whose
caller has SIGKILL pending, is answered EINTR at once and traced so; the write-back
cache's WRITEs, which no caller waits on, still complete.  And every rate key has a
least value, so that no request is modelled to take past the latency bound."""

import errno as E
import math
import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest
import trio
import trio.testing
from support import fusetrace, is_mounted, one_line_error, poll, stats_json

from fusetrace.emulator.model import Model, Op, OpClass
from fusetrace.emulator.params import HOUR_MS, LEAST_WHY, SPECS, Params, ProfileError
from fusetrace.emulator.profiles import apply_overrides, load_profile
from fusetrace.server import kills

STALL_S = 60
RATE_KEYS = [
    "baseline_kibps_per_gib",
    "baseline_floor_mibps",
    "burst_mibps",
    "burst_mibps_per_tib",
    "provisioned_mibps",
]
# the least throughput a profile may give (efs-tiny bursts: its credits last)
CRAWL = ["burst_mibps=0.001", "baseline_floor_mibps=0.001"]


def stats(m) -> dict:
    return stats_json(m.mountpoint)


def records(m) -> pd.DataFrame:
    m.unmount()
    return pd.read_parquet(m.trace)


def _held(m, op: str) -> dict:
    """The one request of `op` the server lists as held, once it is."""
    return poll(lambda: next((h for h in stats(m)["held_long"] if h["op"] == op), None))


def _kill_and_wait(proc: subprocess.Popen) -> None:
    """SIGKILL to proc, and wait for it to end (at most 10 s: the stall is 60)."""
    proc.send_signal(signal.SIGKILL)
    poll(lambda: proc.poll() is not None, timeout=10)
    assert proc.returncode == -signal.SIGKILL


def test_a_process_killed_in_a_stall_ends_and_the_mount_serves_on(mount):
    m = mount(trace=True)  # a plain mount writes through: dd's write is its own request
    (m.source / "f").write_bytes(b"x" * 8192)
    fusetrace("fault", str(m.mountpoint), "add", "--op", "write", "--stall", f"{STALL_S}s", "--id", "outage")
    dd = subprocess.Popen(
        ["dd", "if=/dev/zero", f"of={m.mountpoint}/g", "bs=64k", "count=4"], stderr=subprocess.DEVNULL
    )
    held = _held(m, "write")
    assert (held["pid"], held["name"]) == (dd.pid, "dd")
    _kill_and_wait(dd)
    assert (m.mountpoint / "f").read_bytes() == b"x" * 8192  # the mount serves on
    now = stats(m)
    assert now["held_long"] == [] and now["killed_released"] == 1
    writes = records(m).query("op == 'write'")
    assert len(writes) == 1, writes  # the kill ended dd: it wrote nothing more
    w = writes.iloc[0]
    assert (w.errno, w.fault, w.pid) == (E.EINTR, "outage", dd.pid)
    assert w.dur_ns < STALL_S * 1e9 / 2  # let go by the kill, not by the stall's end
    assert (m.source / "g").stat().st_size == 0  # a stalled request never reached the source


def test_a_process_killed_while_a_thread_other_than_its_first_waits_ends(mount):
    """FUSE names the calling thread, not its process: the watcher reads that thread."""
    m = mount()
    fusetrace("fault", str(m.mountpoint), "add", "--op", "lookup", "--stall", f"{STALL_S}s")
    code = "import os, sys, threading\nt = threading.Thread(target=os.stat, args=(sys.argv[1],))\nt.start()\nt.join()\n"
    proc = subprocess.Popen([sys.executable, "-c", code, f"{m.mountpoint}/nosuch"])
    held = _held(m, "lookup")
    assert held["pid"] == proc.pid  # the process, its thread's request
    _kill_and_wait(proc)
    assert stats(m)["killed_released"] == 1


def test_a_process_killed_while_the_emulated_file_system_holds_it_ends(mount):
    """The least throughput (1 MiB: about 1,000 s): an O_DIRECT write is held by the
    model, and dd killed in it ends."""
    m = mount("--emulate", "efs-tiny", *[a for s in CRAWL for a in ("--set", s)], trace=True)
    dd = subprocess.Popen(
        ["dd", "if=/dev/zero", f"of={m.mountpoint}/g", "bs=1M", "count=2", "oflag=direct"], stderr=subprocess.DEVNULL
    )
    held = _held(m, "write")
    assert held["why"] == "the emulated file system (throughput)" and held["left_s"] > 60, held
    _kill_and_wait(dd)
    assert os.stat(m.mountpoint).st_mode and os.stat(m.mountpoint / "g").st_size >= 0  # answered
    assert stats(m)["killed_released"] == 1
    writes = records(m).query("op == 'write'")
    assert len(writes) == 1, writes
    w = writes.iloc[0]
    assert (w.errno, w.gate) == (E.EINTR, "throughput")
    assert 0 < w.shaped_ns < 60e9 and w.transfer_ns + w.wait_ns > 60e9  # held far less than modelled


def test_a_namespace_change_the_emulated_file_system_holds_completes(mount):
    """What the model holds has run on the source already: an unlink answered EINTR would
    leave the server's tables behind the source, so a killed `rm` waits its hold out."""
    m = mount(
        "--emulate",
        "efs-tiny",
        *[a for s in CRAWL for a in ("--set", s)],
        "--set",
        "metadata_io_size=24 KiB",
        trace=True,
    )  # a REMOVE metered as 24 KiB: held about 2.5 s
    (m.source / "x").write_bytes(b"x")
    os.stat(m.mountpoint / "x")  # looked up: rm sends only the unlink
    rm = subprocess.Popen(["rm", f"{m.mountpoint}/x"])
    _held(m, "unlink")
    rm.send_signal(signal.SIGKILL)
    poll(lambda: rm.poll() is not None, timeout=30)
    assert stats(m)["killed_released"] == 0
    unlink = records(m).query("op == 'unlink'").iloc[0]
    assert (unlink.errno, unlink.gate) == (0, "throughput") and unlink.shaped_ns > 1e9
    assert not (m.source / "x").exists()


def test_write_back_no_caller_waits_on_still_completes(mount):
    """With the write-back cache, the kernel's WRITEs carry data already written: a
    killed writer's data still reaches the source, and nothing is answered EINTR."""
    m = mount("--emulate", "efs-tiny", trace=True)
    fusetrace("fault", str(m.mountpoint), "add", "--op", "write", "--stall", "3s", "--id", "outage")
    dd = subprocess.Popen(
        ["dd", "if=/dev/urandom", f"of={m.mountpoint}/g", "bs=64k", "count=1", "conv=fsync"], stderr=subprocess.DEVNULL
    )
    _held(m, "write")
    assert not kills.dying(dd.pid, True)  # dd is not being killed yet
    dd.send_signal(signal.SIGKILL)
    poll(lambda: dd.poll() is not None, timeout=20)  # once the write-back is done
    assert stats(m)["killed_released"] == 0
    writes = records(m).query("op == 'write'")
    assert (writes.errno == 0).all() and writes["size"].sum() == 65536, writes
    assert (m.source / "g").stat().st_size == 65536


def _zombie(proc: subprocess.Popen) -> None:
    status = Path(f"/proc/{proc.pid}/status")
    poll(lambda: "State:\tZ" in status.read_text())  # ended, not reaped yet


def test_dying_reads_a_threads_pending_kill_and_its_end():
    killed, ended = subprocess.Popen(["sleep", "30"]), subprocess.Popen(["true"])
    try:
        assert not kills.dying(killed.pid, True) and not kills.dying(killed.pid, False)  # alive
        killed.send_signal(signal.SIGKILL)
        _zombie(killed)
        assert kills.dying(killed.pid, True) and kills.dying(killed.pid, False)  # ShdPnd keeps SIGKILL
        _zombie(ended)
        assert kills.dying(ended.pid, True)  # the thread that sent a request: its end is the caller's
        assert not kills.dying(ended.pid, False)  # an opener's: another process may share its file
    finally:
        killed.wait()
        ended.wait()
    assert kills.dying(ended.pid, True) and not kills.dying(ended.pid, False)  # gone
    assert not kills.dying(threading.get_native_id(), True)  # a live thread of a live process


def test_a_round_reads_at_most_most_reads_callers_and_the_next_round_the_rest():
    """The watcher's rounds are bounded (kills.MOST_READS threads read), and those left
    unread come first in the next round; each held caller that is gone is let go."""
    procs = [subprocess.Popen(["sleep", "30"]) for _ in range(kills.MOST_READS + 8)]
    for p in procs:
        p.kill()
        p.wait()  # gone: a request context's thread gone is a caller gone
    let_go: dict[int, bool] = {}

    async def held(k: kills.Kills, pid: int) -> None:
        with k.watched(pid, True, 0) as scope:
            await trio.sleep_forever()
        let_go[pid] = scope.cancelled_caught

    async def main() -> None:
        k = kills.Kills()
        async with trio.open_nursery() as nursery:
            for p in procs:
                nursery.start_soon(held, k, p.pid)
            await trio.testing.wait_all_tasks_blocked()
            assert k.check(kills.AFTER_NS - 1) == 0  # none held long enough yet
            assert k.check(kills.AFTER_NS) == kills.MOST_READS
            await trio.testing.wait_all_tasks_blocked()
            assert k.check(kills.AFTER_NS + 1) == 8
        assert k.released == len(procs)

    trio.run(main)
    assert let_go == {p.pid: True for p in procs}


# ---- every rate key has a least value ---------------------------------------------------


@pytest.mark.parametrize("key", RATE_KEYS)
def test_a_rate_too_small_to_model_is_refused(key):
    with pytest.raises(ProfileError) as info:
        apply_overrides(load_profile("efs-tiny"), [f"{key}=1e-300"])
    least = SPECS[key]["least"]
    assert str(info.value).startswith(f"--set {key}: must be 0 or at least {least:g} "), info.value
    assert LEAST_WHY in str(info.value) and str(info.value).endswith("got '1e-300'")
    apply_overrides(load_profile("efs-tiny"), [f"{key}=0", f"{key}={least!r}"])  # none, and the bound, will do


def test_every_rate_key_has_a_least_value():
    rates = [k for k, s in SPECS.items() if "/s" in s["unit"]]
    assert set(RATE_KEYS) < set(rates) and all(SPECS[k]["least"] for k in rates), rates


def test_at_the_least_rates_one_request_is_modelled_within_the_hour():
    """Every rate at its least, on an idle model: one 1 MiB read or write (direct, so
    modelled at once) completes within HOUR_MS; and the data of one is charged the
    least rate, not a faster one."""
    items = [f"{k}={SPECS[k]['least']!r}" for k, s in SPECS.items() if s["least"] and "/s" in s["unit"]]
    params = apply_overrides(Params(), [*items, "throughput_mode=provisioned", "burst_credit_balance=0"])
    for op in (
        Op(OpClass.DATA_WRITE, nbytes=1 << 20, file=1, write_mode="direct"),
        Op(OpClass.DATA_READ, nbytes=1 << 20, file=1),
    ):
        took = Model(params, 0.0, random.Random(1)).admit(op, 0.0).done_at
        assert math.isfinite(took) and 100 < took <= HOUR_MS / 1000, (op, took)


def test_mount_and_set_refuse_a_rate_of_1e_minus_300_in_one_line(mount, tmp_path):
    (tmp_path / "s").mkdir()
    (tmp_path / "m").mkdir()
    done = fusetrace(
        "mount",
        str(tmp_path / "s"),
        str(tmp_path / "m"),
        "--emulate",
        "efs-tiny",
        "--set",
        "burst_mibps=1e-300",
        check=False,
    )
    one_line_error(done, "--set burst_mibps: must be 0 or at least 0.001 MiB/s", "got '1e-300'", code=2)
    assert not is_mounted(tmp_path / "m")
    m = mount("--emulate", "efs-tiny")
    done = fusetrace("set", str(m.mountpoint), "baseline_floor_mibps=1e-300", check=False)
    one_line_error(done, "set baseline_floor_mibps: must be 0 or at least 0.001 MiB/s", LEAST_WHY, code=2)
    assert "baseline_floor_mibps = 1" in fusetrace("set", str(m.mountpoint), "baseline_floor_mibps=1").stdout
