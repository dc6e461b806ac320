"""`fusetrace reset MNT`: a running mount put back as it was mounted without remounting
(the pytest plugin's module and session fixtures run it between tests): the emulated file
system afresh, every fault rule and event gone and the faults file's in force again, the
files kept; requests in flight at the reset complete."""

import errno
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from support import fusetrace, is_mounted, one_line_error, poll

TIB = 1 << 40


def stats(m) -> dict:
    return json.loads(fusetrace("stats", str(m.mountpoint), "--json").stdout)


def listed(m) -> dict:
    return json.loads(fusetrace("fault", str(m.mountpoint), "list", "--json").stdout)


def test_a_reset_puts_the_emulated_mount_back_as_mounted_and_keeps_its_files(mount, tmp_path):
    faults = tmp_path / "faults.toml"
    faults.write_text(
        '[[rule]]\nid = "ro"\nop = "mkdir"\npath = "/locked"\nerrno = "EROFS"\n'
        '[[event]]\nat = "1h"\nset = {burst_credit_balance = 0}\n'
    )
    m = mount("--emulate", "efs-bursting", "--faults", str(faults))
    mnt = str(m.mountpoint)
    fusetrace("set", mnt, "burst_credit_balance=0")
    fusetrace("fault", mnt, "add", "--op", "unlink", "--errno", "EIO")
    fusetrace("fault", mnt, "event", "--at", "10m", "--stall", "1m")
    fd = os.open(m.mountpoint / "kept", os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, b"x" * (1 << 20))  # dirty in the emulated client when the reset comes
    os.close(fd)
    assert stats(m)["metrics"]["BurstCreditBalance"] < 1e6
    assert [r["id"] for r in listed(m)["rules"]] == ["ro", "r2"]

    said = fusetrace("reset", mnt).stdout.splitlines()
    assert said == [
        "efs-bursting as mounted: model, NFS client's caches and events afresh",
        "fault rules cleared: ro, r2",
        "events called off: e1, e2",
        "from the faults file again: ro, e3",
    ], said
    assert abs(stats(m)["metrics"]["BurstCreditBalance"] - 2.1 * TIB) < 0.01 * TIB  # the profile's again
    after = listed(m)
    assert [(r["id"], r["fired"]) for r in after["rules"]] == [("ro", 0)]
    assert [(e["id"], e["set"]) for e in after["events"]] == [("e3", {"burst_credit_balance": 0.0})]
    assert (m.source / "kept").stat().st_size == 1 << 20  # the files are not the model's
    os.unlink(m.mountpoint / "kept")  # the rule added live is gone
    with pytest.raises(OSError) as refused:  # the faults file's rule is back
        os.mkdir(m.mountpoint / "locked")
    assert refused.value.errno == errno.EROFS and listed(m)["rules"][0]["fired"] == 1


def test_requests_in_flight_at_a_reset_complete_and_the_mount_serves_on(mount):
    m = mount("--emulate", "efs-bursting")
    mnt, pid = str(m.mountpoint), m.server_pid()
    (m.source / "f").write_text("data")
    fusetrace("fault", mnt, "add", "--op", "read", "--stall", "1h")
    fusetrace("fault", mnt, "event", "--at", "0", "--stall", "2s")  # the model holds what arrives
    with ThreadPoolExecutor(3) as pool:
        read = pool.submit((m.mountpoint / "f").read_text)  # held by the rule
        made = pool.submit((m.mountpoint / "g").write_text, "new")  # held by the model's stall

        resetting = threading.Event()

        def busy() -> int:  # writes and fsyncs all through the resets
            fd = os.open(m.mountpoint / "busy", os.O_CREAT | os.O_WRONLY, 0o644)
            written = 0
            try:
                while resetting.is_set() or not written:
                    os.pwrite(fd, b"y" * 4096, written * 4096)
                    written += 1
                    if written % 10 == 0:
                        os.fsync(fd)
            finally:
                os.close(fd)
            return written

        resetting.set()
        writer = pool.submit(busy)
        poll(lambda: listed(m)["rules"][0]["fired"] == 1)
        for _ in range(3):
            fusetrace("reset", mnt)
        resetting.clear()
        assert read.result(timeout=30) == "data"  # the rule's stall let go
        assert made.result(timeout=30) == 3  # the model's stall kept the time it gave
        written = writer.result(timeout=60)
    assert (m.source / "busy").stat().st_size == written * 4096
    assert m.server_pid() == pid and is_mounted(m.mountpoint)
    assert listed(m)["rules"] == [] and stats(m)["profile"] == "efs-bursting"


def test_a_reset_of_a_trace_only_mount_clears_its_rules(mount):
    m = mount(trace=True)
    fusetrace("fault", str(m.mountpoint), "add", "--op", "mkdir", "--errno", "EACCES")
    said = fusetrace("reset", str(m.mountpoint)).stdout.splitlines()
    assert said == ["trace only: no model", "fault rules cleared: r1", "events called off: none"], said
    os.mkdir(m.mountpoint / "d")


def test_a_reset_of_no_mount_is_one_line(tmp_path):
    one_line_error(fusetrace("reset", str(tmp_path), check=False), "no fusetrace mount here")


def test_a_reset_of_a_shared_file_system_is_refused_in_one_line_and_changes_nothing(mount, redis_server):
    m = mount("--emulate", "efs-bursting", "--shared", redis_server.url, "--fs-id", "fs1")
    fusetrace("fault", str(m.mountpoint), "add", "--op", "mkdir", "--errno", "EACCES")
    one_line_error(fusetrace("reset", str(m.mountpoint), check=False), "--shared", "every mount's")
    assert [r["id"] for r in listed(m)["rules"]] == ["r1"]
