"""Requests left unread in the FUSE kernel: the arithmetic in virtual time, the counters
of a real connection with its server stopped, and the verdict that counts them."""

import errno
import os
import signal
import threading

import pytest
from support import fusetrace, poll, stats_json

from fusetrace.emulator.model import Model, Op, OpClass
from fusetrace.emulator.profiles import apply_overrides, load_profile
from fusetrace.hostload import NO_LOAD, host_load, load_words, paced_words
from fusetrace.server import fusectl, fuseread
from fusetrace.shaping.emulation import Emulation
from fusetrace.shaping.kernelqueue import KernelQueue, UnreadWait, pending

S = 1_000_000_000


def test_pending_is_below_the_caps_less_what_the_server_holds():
    assert pending(waiting=1001, held=990, cap=1000) == 10  # one blocked by max_background: the cap's
    assert pending(waiting=5, held=9, cap=1000) == 0  # the server's count runs ahead of the kernel's
    assert pending(waiting=1200, held=0, cap=1000) == 1000


def test_unread_wait_counts_the_unread_requests_while_the_model_has_room():
    w = UnreadWait()
    w.add(0, 0, True)
    w.add(1 * S, 10, True)  # the mean of 0 and 10 unread, the model idle at both ends
    assert w.queued_ns == 5 * S
    w.add(2 * S, 12, True)
    assert w.queued_ns == 16 * S
    w.add(3 * S, 10, False)  # the model busy at the later end: only the earlier end's 12 count
    assert w.queued_ns == 22 * S
    w.add(4 * S, 10, False)  # busy at both: they would have queued in the model anyway
    assert w.queued_ns == 22 * S
    w.add(5 * S, 0, True)
    w.add(6 * S, 0, True)  # nothing unread
    assert w.queued_ns == 22 * S


def model_of(profile: str, *overrides: str) -> Model:
    return Model(apply_overrides(load_profile(profile), list(overrides)), 0.0)


def test_the_model_is_busy_while_a_limit_has_work_queued_past_its_burst_allowance():
    model = model_of("efs-2016")  # 7,400 IOPS in all, a 10 ms burst allowance
    assert not model.busy(0.0)  # nothing served yet
    for _ in range(740):  # a tenth of a second's worth at once
        model.admit(Op(OpClass.DATA_READ, 4096, file=1), 0.0)
    assert model.busy(0.05)
    assert not model.busy(0.095)  # within the burst allowance: a request now is granted at once
    assert not model.busy(0.2)


def test_a_request_in_its_latency_keeps_no_gate_busy():
    model = model_of("efs-2016")
    done = model.admit(Op(OpClass.DATA_READ, 4096, file=1), 0.0).done_at
    assert done > 0.002  # a read's 2.23 ms ...
    assert not model.busy(0.0001)  # ... its 4 KiB through the pipes in 40-100 us, its IOPS token at once


def test_the_model_is_busy_while_a_pipes_bytes_outlast_a_requests_latency():
    model = model_of("efs-2016", "total_iops=0")
    for _ in range(100):  # 100 MiB at once: about 2.6 s through the client's 40 MB/s
        model.admit(Op(OpClass.DATA_READ, 1 << 20, file=1), 0.0)
    assert model.busy(0.5) and model.busy(2.5)
    assert not model.busy(5.0)


def test_the_model_is_busy_while_a_files_write_slots_are_taken():
    model = model_of("efs-2016", "total_iops=0")
    for _ in range(3):  # its 3 write slots, each held about 10 ms
        model.admit(Op(OpClass.DATA_WRITE, 4096, file=7, write_mode="direct"), 0.0)
    assert model.busy(0.001)
    model.admit(Op(OpClass.DATA_WRITE, 4096, file=8, write_mode="direct"), 1.0)
    assert not model.busy(1.001)  # another file's slots are free: the last request's are what counts


def _counters(late_ns=0, modelled_ns=0, busy=0.0, **more) -> dict:
    return {
        "late_ns": late_ns,
        "modelled_ns": modelled_ns,
        "loop_elapsed_ns": S,
        "loop_idle_ns": int((1 - busy) * S),
        **more,
    }


def test_the_verdict_adds_the_unread_wait_and_then_ignores_the_loops_cpu():
    measured = host_load(NO_LOAD, _counters(late_ns=2 * S, modelled_ns=100 * S, busy=0.9, queued_ns=9 * S))
    assert measured["added_share"] == pytest.approx(0.11) and measured["queued_share"] == pytest.approx(0.09)
    assert measured["host_bound"]
    kept_up = host_load(NO_LOAD, _counters(late_ns=2 * S, modelled_ns=100 * S, busy=0.9, queued_ns=1 * S))
    assert not kept_up["host_bound"]  # a busy loop that read every request in time
    assert "replies late 2.0 %" in load_words(kept_up) and "unread in the kernel 1.0 %" in load_words(kept_up)
    unmeasured = host_load(NO_LOAD, _counters(late_ns=2 * S, modelled_ns=100 * S, busy=0.9))
    assert unmeasured["queued_share"] is None and unmeasured["host_bound"]  # the loop's CPU stands in
    assert "kernel queue not measured: a loop busy over 75 % counts" in load_words(unmeasured)


def test_a_mount_the_model_kept_busy_under_half_the_time_is_host_paced():
    """A loop of short processes: the model had an operation in hand 30 % of the second,
    the rest went to process starts; nothing was late, so it is not host-bound."""
    paced = host_load(NO_LOAD, _counters(modelled_ns=S // 2, busy=0.1, busy_ns=3 * S // 10))
    assert paced["model_busy"] == pytest.approx(0.3) and paced["host_paced"] and not paced["host_bound"]
    assert "only 30 %" in paced_words(paced)
    busy = host_load(NO_LOAD, _counters(modelled_ns=S, busy=0.1, busy_ns=8 * S // 10))
    assert not busy["host_paced"] and paced_words(busy) == ""
    older = host_load(NO_LOAD, _counters(modelled_ns=S, busy=0.1))  # a reading without the counter
    assert older["model_busy"] is None and not older["host_paced"]


def test_a_stopped_servers_unread_requests_are_counted(mount, tmp_path):
    m = mount()
    dev_minor = os.minor(os.stat(m.mountpoint).st_dev)
    pid = m.server_pid()
    # the server's own /dev/fuse descriptor is not this process's: stand-ins that are
    # readable (requests queued for the server) and not (none queued)
    queued, idle = os.open("/dev/null", os.O_RDONLY), os.pipe()
    held = 0
    queue = KernelQueue(
        fusectl.connection(dev_minor),
        fuseread.queued_check(queued),
        held=lambda: held,
        room=lambda now_ns: True,
        server_cap=1024,
    )
    answered = KernelQueue(
        fusectl.connection(dev_minor),
        fuseread.queued_check(idle[0]),
        held=lambda: 0,
        room=lambda now_ns: True,
        server_cap=1024,
    )
    os.kill(pid, signal.SIGSTOP)
    callers = [threading.Thread(target=os.statvfs, args=(m.mountpoint,)) for _ in range(3)]  # never cached
    try:
        for t in callers:
            t.start()
        poll(lambda: queue._read("waiting") == 3)
        for q in (queue, answered):
            q.sample(0)
            q.sample(2 * S)
        assert queue.wait.queued_ns == 6 * S  # three unread for two seconds
        assert answered.wait.queued_ns == 0  # counted by the kernel, but nothing to read: replied to
        held = 2  # the server says it holds two of them: one is unread
        queue.sample(3 * S)
        assert queue.wait.queued_ns == 8 * S  # (3 + 1) / 2 for a second
    finally:
        os.kill(pid, signal.SIGCONT)
        for t in callers:
            t.join(timeout=30)
        for q in (queue, answered):
            q.close()
        for fd in (queued, *idle):
            os.close(fd)
    assert not any(t.is_alive() for t in callers)


def _stats(m) -> dict:
    return stats_json(m.mountpoint)


def test_an_emulated_mount_samples_its_kernel_queue_from_a_thread(mount):
    m = mount("--emulate", "efs-tiny")
    for i in range(20):
        (m.mountpoint / f"f{i}").write_bytes(b"x" * 4096)
    before = _stats(m)["host"]
    poll(lambda: _stats(m)["host"]["queue_samples"] >= before["queue_samples"] + 2)  # on its own, the mount idle
    stats = _stats(m)
    assert stats["serving"] == 0  # every request handled was counted out again
    assert stats["host"]["queued_share"] is not None and stats["warnings"] == []
    # nothing waited unread while the mount was idle (a sample during the writes may have
    # found one of theirs: the words say how much of the time since mounting)
    assert stats["host"]["queued_ns"] == before["queued_ns"]
    assert "unread in the kernel" in fusetrace("stats", str(m.mountpoint)).stdout


def test_the_servers_fuse_descriptor_is_found_when_it_is_the_only_one():
    assert fusectl.session_fd() is None  # this process has none
    one = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
    try:
        assert fusectl.session_fd() == one
        two = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
        try:
            assert fusectl.session_fd() is None  # which one would be a guess
        finally:
            os.close(two)
    finally:
        os.close(one)


def test_a_sampler_that_fails_says_so_and_the_loops_cpu_stands_in(mount, caplog):
    m = mount()
    emulation = Emulation.open("efs-tiny", [], str(m.source))
    queued = os.open("/dev/null", os.O_RDONLY)
    try:
        emulation.watch_kernel_queue(
            fusectl.connection(os.minor(os.stat(m.mountpoint).st_dev)), fuseread.queued_check(queued), lambda: 0, 1024
        )
        assert emulation.host()["queued_share"] is not None  # measured
        queue = emulation.kernel_queue

        def clock() -> int:
            raise OSError(errno.EMFILE, "Too many open files")

        queue._sample_every(clock, threading.Event())  # the thread's body, on this one
    finally:
        os.close(queued)
    assert queue.failed == "OSError: [Errno 24] Too many open files"
    assert "no longer measured" in caplog.text
    host = emulation.host()
    assert host["queued_share"] is None and "queue_samples" not in host  # the loop's CPU decides again
    assert any("no longer measured (OSError" in w for w in emulation.stats()["warnings"])
