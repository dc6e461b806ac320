"""Fault rules on real mounts, through the real command line: each effect as a program
sees it, the data below untouched by the injector, every fault named in its trace record
and counted in `fault list` and `stats`, stalls released by `fault clear` and by an
unmount, and bad rules refused with one line."""

import errno as E
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.request

import pandas as pd
import pytest
from support import fusetrace, is_mounted, one_line_error, poll
from support.metrics import free_port


def add(m, *args: str) -> str:
    done = fusetrace("fault", str(m.mountpoint), "add", *args)
    return done.stdout.split(":")[0]


def listed(m) -> dict:
    return {r["id"]: r for r in json.loads(fusetrace("fault", str(m.mountpoint), "list", "--json").stdout)["rules"]}


def records(m) -> pd.DataFrame:
    m.unmount()
    return pd.read_parquet(m.trace)


def test_an_errno_fails_the_operation_without_reaching_the_source_and_is_traced(mount):
    m = mount(trace=True)
    (m.source / "keep.db").write_bytes(b"committed")
    rid = add(m, "--op", "write", "--path", "*.db", "--errno", "EIO", "--count", "1", "--id", "eio")
    assert rid == "eio"
    fd = os.open(m.mountpoint / "keep.db", os.O_WRONLY)
    try:
        with pytest.raises(OSError) as failed:
            os.pwrite(fd, b"CLOBBER", 0)
        assert failed.value.errno == E.EIO
        assert os.pwrite(fd, b"second", 0) == 6  # count 1: the next one goes through
    finally:
        os.close(fd)
    assert (m.source / "keep.db").read_bytes() == b"secondted"  # "second" over "committed"
    assert (listed(m)["eio"]["matched"], listed(m)["eio"]["fired"]) == (2, 1)
    stats = json.loads(fusetrace("stats", str(m.mountpoint), "--json").stdout)
    assert stats["faults"]["fired"] == 1 and stats["faults"]["rules"][0]["id"] == "eio"
    assert (
        "faults: 1 fired since mounting; in force: eio (fired 1 of 2 matched)"
        in fusetrace("stats", str(m.mountpoint)).stdout
    )
    writes = records(m).query("op == 'write'")
    kept = json.loads((m.trace / "_metadata.json").read_text())["faults"]  # the rules at unmount
    assert [(r["id"], r["fired"]) for r in kept] == [("eio", 1)]
    assert writes.errno.tolist() == [E.EIO, 0] and writes.fault.iloc[0] == "eio" and pd.isna(writes.fault.iloc[1])


def test_rules_from_a_faults_file_hold_from_the_mount_on(mount, tmp_path):
    faults = tmp_path / "faults.toml"
    faults.write_text('[[rule]]\nid = "ro"\nop = "meta_write"\npath = "/locked/**"\nerrno = "EROFS"\n')
    m = mount("--faults", str(faults), "--log", str(tmp_path / "server.log"))
    assert (tmp_path / "server.log").read_text().count("fault rule ro added") == 1  # (not the check's too)
    (m.source / "locked").mkdir()
    with pytest.raises(OSError) as failed:
        (m.mountpoint / "locked" / "new").write_text("x")
    assert failed.value.errno == E.EROFS
    (m.mountpoint / "free").write_text("x")
    assert not (m.source / "locked" / "new").exists() and (m.source / "free").read_text() == "x"
    assert listed(m)["ro"]["fired"] == 1


@pytest.mark.parametrize("options", [("--emulate", "efs-tiny"), ()])
def test_fusetraces_own_probe_at_mount_passes_the_rules_by(mount, tmp_path, options):
    # a traced or emulated mount times statfs through itself before it is announced: the
    # rules are the application's (a rule on statfs failed the mount, a stall spent itself)
    faults = tmp_path / "faults.toml"
    faults.write_text('[[rule]]\nid = "once"\nop = "statfs"\nerrno = "EIO"\ncount = 1\n')
    m = mount("--faults", str(faults), *options, trace=True)
    assert listed(m)["once"]["matched"] == 0
    with pytest.raises(OSError) as failed:
        os.statvfs(m.mountpoint)
    assert failed.value.errno == E.EIO
    os.statvfs(m.mountpoint)  # it fired once
    assert listed(m)["once"]["fired"] == 1


@pytest.mark.parametrize(
    "text, says",
    [
        ('[[rule]]\nerrno = "EIOO"\n', "rule 1: errno 'EIOO': not an errno name"),
        ('[[rule]]\nerrno = "EIO"\n[[rule]]\nstall = "5s"\nop = "nope"\n', "rule 2: op 'nope'"),
        ('[[rules]]\nerrno = "EIO"\n', "unknown table 'rules'"),
        ("[[rule]\n", "not TOML"),
        ("x = " + "[" * 5000 + "]" * 5000 + "\n", "arrays or tables nested too deep to read"),
        ("# " + "x" * (1 << 20) + "\n", "over 1,048,576 bytes, so not a faults file"),
        ("[[rule]]\ncount = " + "9" * 5000 + "\n", "a number too long to read"),  # a traceback from tomllib's int()
        (None, "not a regular file"),  # a FIFO: the mount waited on it for good
        ('[[event]]\nat = "1s"\nstall = "1s"\n', "[[event]] tables need --emulate"),
        (
            '[[rule]]\nid = "a"\nerrno = "EIO"\n[[rule]]\nid = "a"\nerrno = "EIO"\n',
            "rule 2: id 'a': an earlier rule of the file has that id",
        ),
    ],
)
def test_a_bad_faults_file_is_one_line_and_nothing_is_mounted(tmp_path, text, says):
    faults = tmp_path / "faults.toml"
    if text is None:
        os.mkfifo(faults)
    else:
        faults.write_text(text)
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    done = fusetrace("mount", str(src), str(mnt), "--faults", str(faults), check=False)
    one_line_error(done, f"--faults {faults}", says)
    assert not is_mounted(mnt)


def test_a_bad_rule_at_run_time_is_one_line_and_changes_nothing(mount):
    m = mount()
    done = fusetrace("fault", str(m.mountpoint), "add", "--stall", "5s", "--timeo", "3", check=False)
    one_line_error(done, "timeo, retrans and errno go with soft = true")
    done = fusetrace("fault", str(m.mountpoint), "clear", "r9", check=False)
    one_line_error(done, "fault clear r9: no such rule")
    assert listed(m) == {}


def _in_thread(fn) -> dict:
    """Run fn() in a thread; the dict gets its result or error and when it ended."""
    out: dict = {}

    def run():
        try:
            out["result"] = fn()
        except OSError as exc:
            out["error"] = exc.errno
        out["ended"] = time.monotonic()

    threading.Thread(target=run, daemon=True).start()
    return out


def test_a_stall_holds_matching_operations_until_it_ends_and_others_answer(mount):
    m = mount(trace=True)
    (m.source / "slow").write_text("late")
    (m.source / "fast").write_text("now")
    add(m, "--op", "read", "--path", "/slow", "--stall", "1s", "--id", "outage")
    began = time.monotonic()
    assert (m.mountpoint / "slow").read_text() == "late"
    assert time.monotonic() - began >= 1.0  # proceeds after the outage, as a hard mount does
    reads = records(m).query("op == 'read' and path == '/slow'")
    assert reads.fault.tolist()[0] == "outage" and reads.dur_ns.iloc[0] >= 1e9


def _a_read_stalled_for_an_hour(m) -> dict:
    """A read of /f held by an hour's stall, in a thread (see _in_thread), once it is held."""
    (m.source / "f").write_text("data")
    add(m, "--op", "read", "--stall", "1h")
    out = _in_thread(lambda: (m.mountpoint / "f").read_text())
    poll(lambda: listed(m)["r1"]["fired"] == 1)
    return out


def test_fault_clear_releases_a_stalled_operation_at_once(mount):
    m = mount()
    out = _a_read_stalled_for_an_hour(m)
    assert "ended" not in out
    fusetrace("fault", str(m.mountpoint), "clear")
    poll(lambda: "ended" in out, timeout=20)
    assert out.get("result") == "data"


def test_a_stalled_server_still_stops_when_told_and_leaves_no_mount(mount):
    m = mount()
    out = _a_read_stalled_for_an_hour(m)
    pid = m.server_pid()
    os.kill(pid, signal.SIGTERM)  # as a service manager stops it
    poll(lambda: not is_mounted(m.mountpoint), timeout=20)
    poll(lambda: "ended" in out, timeout=20)
    assert out.get("error") in (E.ENOTCONN, E.EIO, E.ECONNABORTED)
    assert (m.source / "f").read_text() == "data"


def test_a_server_the_emulated_file_system_holds_still_stops_when_told(mount):
    """An event's hour-long stall (the model's, no fault rule's) holds a request: SIGTERM
    still ends the server and the mount."""
    m = mount("--emulate", "efs-bursting")
    fusetrace("fault", str(m.mountpoint), "event", "--at", "0", "--stall", "1h")
    out = _in_thread(lambda: (m.mountpoint / "new").write_text("x"))
    poll(lambda: json.loads(fusetrace("stats", str(m.mountpoint), "--json").stdout)["held_long"])
    os.kill(m.server_pid(), signal.SIGTERM)
    poll(lambda: not is_mounted(m.mountpoint), timeout=20)
    poll(lambda: "ended" in out, timeout=20)


def test_a_server_lazily_unmounted_while_stalled_is_still_reached_to_clear_it(mount):
    """`fusermount3 -uz` (umount's advice for a busy mount) detaches the mount while a
    stall holds a request: the server keeps running for it, and `fault clear` must still
    reach it, or nothing but a kill frees the caller."""
    m = mount()
    out = _a_read_stalled_for_an_hour(m)
    pid = m.server_pid()
    subprocess.run(["fusermount3", "-uz", str(m.mountpoint)], check=True)
    assert not is_mounted(m.mountpoint)
    assert fusetrace("fault", str(m.mountpoint), "clear").returncode == 0
    poll(lambda: "ended" in out, timeout=20)
    assert out.get("result") == "data"
    poll(lambda: not os.path.exists(f"/proc/{pid}"), timeout=20)  # its last request answered, it ends


def test_a_soft_stall_fails_the_call_after_the_nfs_timeouts(mount):
    m = mount()
    (m.source / "f").write_text("data")
    add(m, "--op", "read", "--stall", "1h", "--soft", "--timeo", "2", "--retrans", "1", "--errno", "ETIMEDOUT")
    began = time.monotonic()
    with pytest.raises(OSError) as failed:
        (m.mountpoint / "f").read_text()
    assert failed.value.errno == E.ETIMEDOUT
    assert time.monotonic() - began >= 0.2 + 0.4  # timeo, then 2 timeo
    assert (m.source / "f").read_text() == "data"


def test_a_stale_file_answers_estale_on_its_handles_until_the_rule_is_cleared(mount):
    m = mount(trace=True)
    (m.source / "obj").write_bytes(b"x" * 100)
    fd = os.open(m.mountpoint / "obj", os.O_RDONLY)
    try:
        add(m, "--op", "read", "--path", "/obj", "--stale", "--id", "gone")
        with pytest.raises(OSError) as failed:
            os.pread(fd, 10, 0)
        assert failed.value.errno == E.ESTALE
        with pytest.raises(OSError) as again:
            os.pread(fd, 10, 50)  # the file is gone for good, not for one read
        assert again.value.errno == E.ESTALE
        assert listed(m)["gone"]["fired"] == 1
        fusetrace("fault", str(m.mountpoint), "clear", "gone")
        assert os.pread(fd, 10, 0) == b"x" * 10
    finally:
        os.close(fd)
    assert (m.source / "obj").read_bytes() == b"x" * 100
    reads = records(m).query("op == 'read'")  # the kernel retries a failed readahead page by page
    assert set(reads.fault.iloc[:-1]) == {"gone"} and pd.isna(reads.fault.iloc[-1])


def test_a_write_back_error_surfaces_at_fsync_and_close_once_each_and_the_data_is_below(mount):
    m = mount(trace=True)
    add(m, "--op", "write", "--path", "*.log", "--write-error", "EIO", "--count", "1", "--id", "wb")
    a = os.open(m.mountpoint / "x.log", os.O_CREAT | os.O_WRONLY, 0o644)
    b = os.open(m.mountpoint / "x.log", os.O_WRONLY)
    later = None
    try:
        assert os.write(a, b"buffered") == 8  # accepted: the error comes with write-back
        later = os.open(m.mountpoint / "x.log", os.O_RDONLY)  # opened after: never sees it
        with pytest.raises(OSError) as at_fsync:
            os.fsync(a)
        assert at_fsync.value.errno == E.EIO
        os.fsync(a)  # reported once
    finally:
        os.close(a)
    with pytest.raises(OSError) as at_close:
        os.close(b)
    assert at_close.value.errno == E.EIO
    os.close(later)
    assert (m.source / "x.log").read_bytes() == b"buffered"
    faulted = records(m).dropna(subset=["fault"])
    assert list(zip(faulted.op, faulted.errno)) == [("write", 0), ("fsync", E.EIO), ("flush", E.EIO)]
    report = fusetrace("report", str(m.trace)).stdout
    assert "rule wb acted on 3 records: flush EIO 1, fsync EIO 1, write (no error) 1" in report


def test_a_full_file_system_cuts_the_crossing_write_short_then_refuses(mount):
    m = mount()
    add(m, "--full", "10k", "--errno", "EDQUOT")
    done = subprocess.run(
        ["dd", "if=/dev/zero", f"of={m.mountpoint / 'big'}", "bs=4k", "count=8"], capture_output=True, text=True
    )
    assert done.returncode != 0 and "Disk quota exceeded" in done.stderr
    assert (m.source / "big").stat().st_size == 10 * 1024
    with pytest.raises(OSError) as failed:
        os.mkdir(m.mountpoint / "d")
    assert failed.value.errno == E.EDQUOT


def test_a_short_write_writes_only_what_it_says(mount):
    m = mount()
    add(m, "--op", "write", "--short", "3", "--count", "1")
    fd = os.open(m.mountpoint / "f", os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        assert os.write(fd, b"abcdef") == 3
        assert os.write(fd, b"def") == 3
    finally:
        os.close(fd)
    assert (m.source / "f").read_bytes() == b"abcdef"


def test_a_rule_for_one_process_name_leaves_the_others_alone(mount):
    m = mount()
    (m.source / "f").write_text("data")
    add(m, "--op", "open", "--comm", "cat", "--errno", "EACCES")
    assert subprocess.run(["cat", str(m.mountpoint / "f")], capture_output=True).returncode != 0
    assert subprocess.run(["head", str(m.mountpoint / "f")], capture_output=True, text=True).stdout == "data"


def test_events_script_the_emulated_file_system_at_mount_and_live(mount, tmp_path):
    faults = tmp_path / "faults.toml"
    # 3 s from the mount's start: long enough that even a loaded host's first write lands inside
    faults.write_text('[[event]]\nat = "0s"\nstall = "3s"\n')
    m = mount("--emulate", "efs-bursting", "--faults", str(faults), trace=True)
    (m.mountpoint / "f").write_text("x")  # its create waits for the server to answer again
    answer = json.loads(
        fusetrace("fault", str(m.mountpoint), "event", "--at", "0", "--set", "burst_credit_balance=0", "--json").stdout
    )
    assert answer["set"] == {"burst_credit_balance": 0.0}
    stats = json.loads(fusetrace("stats", str(m.mountpoint), "--json").stdout)
    assert stats["metrics"]["BurstCreditBalance"] < 1e9
    assert [
        e.get("stall") for e in json.loads(fusetrace("fault", str(m.mountpoint), "list", "--json").stdout)["events"]
    ] == [3.0, None]
    later = fusetrace("fault", str(m.mountpoint), "event", "--at", "5m", "--set", "burst_credit_balance=1TiB").stdout
    assert re.fullmatch(
        r"scheduled e3: set burst_credit_balance=1099511627776 at (\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d "
        r"\(due in (4m 5\ds|5m 0s)\)\n",
        later,
    ), later  # as set takes it back
    listed_text = fusetrace("fault", str(m.mountpoint), "list").stdout.splitlines()
    events = [line for line in listed_text if line.startswith("event ")]
    assert events[0].startswith("event e1: stall 3s at ") and "ended" in events[0], events
    assert events[1].startswith("event e2: set burst_credit_balance=0 at ") and "happened" in events[1], events
    assert "due in" in events[2], events
    # called off before it happens; those that happened cannot be; a rule may not take an event's id
    assert fusetrace("fault", str(m.mountpoint), "clear", "e3").stdout == "called off e3\n"
    assert fusetrace("fault", str(m.mountpoint), "clear", "--events").stdout == "no event was still to happen\n"
    assert fusetrace("fault", str(m.mountpoint), "clear", "e1").stdout.startswith(
        "e1: already happened or called off, nothing to call off"
    )
    # what the kernel was given at mount no event changes, as no set does
    one_line_error(
        fusetrace("fault", str(m.mountpoint), "event", "--at", "1s", "--set", "nfs_acregmin_s=0", check=False),
        "nfs_acregmin_s: fixed at mount",
    )
    assert "called off" in fusetrace("fault", str(m.mountpoint), "list").stdout.splitlines()[-2]
    one_line_error(fusetrace("fault", str(m.mountpoint), "clear", "e9", check=False), "no event 'e9'")
    one_line_error(
        fusetrace("fault", str(m.mountpoint), "add", "--id", "e4", "--errno", "EIO", check=False), "id 'e4'", "events"
    )
    done = fusetrace("fault", str(m.mountpoint), "event", "--at", "1s", "--set", "burst_credit_balanse=0", check=False)
    one_line_error(done, "burst_credit_balanse: unknown parameter")
    first = records(m).sort_values("start_ns").iloc[0]  # what the model decided, not how fast the host got there
    assert first.gate == "stall" and first.shaped_ns > 0


def _fired_on(m) -> list[tuple[str, int]]:
    """(path, offset) of the writes a rule fired on, in order."""
    writes = records(m).query("op == 'write'")
    return list(zip(writes[writes.fault.notna()].path, writes[writes.fault.notna()].offset))


def test_a_seeded_rule_fires_on_the_same_operations_in_a_second_run(mount):
    fired = []
    for _ in range(2):
        m = mount(trace=True)
        add(m, "--op", "write", "--path", "*.log", "--errno", "EIO", "--probability", "0.3", "--seed", "11")
        for i in range(60):
            fd = os.open(m.mountpoint / f"f{i % 4}.log", os.O_CREAT | os.O_WRONLY, 0o644)
            try:
                os.pwrite(fd, b"x" * 100, 100 * i)
            except OSError as exc:
                assert exc.errno == E.EIO  # noqa: PT017 (a seeded 30 % fail: not every write raises)
            finally:
                os.close(fd)
        fired.append(_fired_on(m))
    assert fired[0] == fired[1] and 5 < len(fired[0]) < 40


def test_prometheus_counts_the_faults_fired(mount):
    port = free_port()
    m = mount("--emulate", "efs-bursting", "--metrics-port", str(port))
    add(m, "--op", "mkdir", "--errno", "EACCES")
    for name in ("a", "b"):
        with pytest.raises(PermissionError):
            os.mkdir(m.mountpoint / name)
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert "fusetrace_faults_fired_total 2.0" in body.splitlines()


def test_an_event_a_later_set_made_inconsistent_is_listed_once_as_not_applied(mount):
    m = mount("--emulate", "efs-bursting")
    # late enough that both sets below come first on a loaded host (each is a process start)
    fusetrace("fault", str(m.mountpoint), "event", "--at", "4s", "--set", "meta_read_latency_p99_ms=20")
    fusetrace("set", str(m.mountpoint), "meta_read_latency_p99_ms=100")
    fusetrace("set", str(m.mountpoint), "meta_read_latency_ms=30")  # the event's 20 is now below it

    made = iter(range(10**6))

    def listed():
        (m.mountpoint / f"f{next(made)}").touch()  # time passes in the model as requests reach it
        return [
            ln
            for ln in fusetrace("fault", str(m.mountpoint), "list").stdout.splitlines()
            if ln.startswith("event") and "not applied" in ln
        ]

    lines = poll(listed, timeout=60)
    assert len(lines) == 1 and lines[0].startswith("event e1: set meta_read_latency_p99_ms=20 at "), lines
    assert lines[0].endswith(
        "(not applied: set meta_read_latency_p99_ms: must not be below meta_read_latency_ms (30))"
    ), lines
    events = json.loads(fusetrace("fault", str(m.mountpoint), "list", "--json").stdout)["events"]
    assert [e["id"] for e in events] == ["e1"] and "must not be below" in events[0]["refused"]
