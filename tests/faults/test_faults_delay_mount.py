"""Delay rules on real mounts: sqlite's commits on a traced and an emulated mount (the
latter through the pytest plugin's `efs.fault(delay=...)`) each wait the delay out, the
records saying so (dur_ns, fault); a seeded probability delays the reads the injector's
hash picks, no others; a caller killed in a long delay ends promptly; `fault clear`
releases a held delay at once; a faults file's delay holds from the mount, and a bad
one is one line.  Asserts read the trace, never the test's own clock."""

import errno as E
import json
import signal
import subprocess
import threading

import pandas as pd
from support import fusetrace, is_mounted, one_line_error, poll

from fusetrace.faults.injector import Injector
from fusetrace.request import Kind

MS = 1_000_000
INSERTS = 5


def add(m, *args: str) -> None:
    fusetrace("fault", str(m.mountpoint), "add", *args)


def listed(m) -> dict:
    return {r["id"]: r for r in json.loads(fusetrace("fault", str(m.mountpoint), "list", "--json").stdout)["rules"]}


def records(m) -> pd.DataFrame:
    m.unmount()
    return pd.read_parquet(m.trace).sort_values("start_ns")


def stats(m) -> dict:
    return json.loads(fusetrace("stats", str(m.mountpoint), "--json").stdout)


def commits(db) -> None:
    """sqlite3 (the shell, a process of its own): a table, then INSERTS commits, each
    syncing the database file (and its rollback journal)."""
    statements = "create table t (x);" + "".join(f"insert into t values ({i});" for i in range(INSERTS))
    done = subprocess.run(["sqlite3", str(db), statements], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def assert_each_fsync_of_the_db_waited(fsyncs: pd.DataFrame, rule: str, fired: int) -> None:
    db, others = fsyncs[fsyncs.path == "/app.db"], fsyncs[fsyncs.path != "/app.db"]
    assert len(db) >= INSERTS and len(db) == fired, fsyncs  # every commit synced it; each was delayed
    assert (db.fault == rule).all() and (db.errno == 0).all() and (db.dur_ns >= 50 * MS).all(), db
    assert others.fault.isna().all() and len(others) >= INSERTS, others  # the journal's: not matched


def test_a_delay_on_fsync_of_db_files_makes_each_sqlite_commit_wait_on_a_traced_mount(mount, tmp_path):
    m = mount(trace=True)
    add(m, "--op", "fsync", "--path", "*.db", "--delay", "50ms", "--id", "slowdb")
    commits(m.mountpoint / "app.db")
    rule = listed(m)["slowdb"]
    assert rule["summary"] == "delay 50ms; fsync path *.db" and rule["held"] == 0
    assert_each_fsync_of_the_db_waited(records(m).query("op == 'fsync'"), "slowdb", rule["fired"])
    assert "fault slowdb fired on fsync '/app.db': delay 50ms" in (tmp_path / "server0.log").read_text()


def test_a_delay_adds_to_the_emulated_file_systems_time_through_the_pytest_fixture(efs):
    with efs.fault(op="fsync", path="*.db", delay="50ms", id="slowdb") as slow:
        commits(efs.path / "app.db")
    fsyncs = efs.trace().query("op == 'fsync'")
    assert_each_fsync_of_the_db_waited(fsyncs, "slowdb", slow.fired)
    db = fsyncs[fsyncs.path == "/app.db"]
    assert (db.dur_ns >= 50 * MS + db.shaped_ns).all(), db  # on top of the model's own hold


def test_a_seeded_probability_delays_the_reads_its_hash_picks_and_no_others(mount):
    m = mount(trace=True)  # no write-back cache: each file's first read reaches the server
    for i in range(40):
        (m.source / f"f{i}").write_text("data")
    rule = {"op": "read", "delay": "20ms", "probability": 0.25, "seed": 7, "id": "slowread"}
    add(m, *(a for k, v in rule.items() for a in (f"--{k}", str(v))))
    for i in range(40):
        assert (m.mountpoint / f"f{i}").read_text() == "data"
    fired = listed(m)["slowread"]["fired"]
    reads = records(m).query("op == 'read'")
    expected = Injector()  # the same rule, in process, shown the reads in the order they came
    expected.add(rule, 0)
    picked = [expected.check("read", Kind.READ, 1, 0, p, 1, lambda: (1, "", 0), 0) is not None for p in reads.path]
    assert reads.fault.notna().tolist() == picked and 3 <= sum(picked) <= 20, reads  # 10 expected
    assert fired == sum(picked) and (reads[reads.fault.notna()].dur_ns >= 20 * MS).all()


def test_a_process_killed_in_a_long_delay_ends_and_is_listed_while_it_waits(mount):
    m = mount(trace=True)  # a plain mount writes through: dd's write is its own request
    add(m, "--op", "write", "--delay", "60s", "--id", "slow")
    dd = subprocess.Popen(
        ["dd", "if=/dev/zero", f"of={m.mountpoint}/g", "bs=64k", "count=4"], stderr=subprocess.DEVNULL
    )
    held = poll(lambda: next((h for h in stats(m)["held_long"] if h["op"] == "write"), None))
    assert (held["pid"], held["why"], held["rule"]) == (dd.pid, "fault rule slow (a delay of 60s)", True)
    assert "waiting in the server: " in fusetrace("stats", str(m.mountpoint)).stdout
    dd.send_signal(signal.SIGKILL)
    poll(lambda: dd.poll() is not None, timeout=10)  # not the delay's 60 s
    assert dd.returncode == -signal.SIGKILL and stats(m)["killed_released"] == 1
    [write] = records(m).query("op == 'write'").itertuples()
    assert (write.errno, write.fault, write.pid) == (E.EINTR, "slow", dd.pid)
    assert (m.source / "g").stat().st_size == 0  # a delayed request killed before it ran never ran


def test_fault_clear_releases_a_held_delay_at_once_and_the_call_then_runs(mount):
    m = mount(trace=True)
    (m.source / "f").write_text("data")
    add(m, "--op", "read", "--delay", "1h", "--id", "hour")
    out: dict = {}
    threading.Thread(target=lambda: out.update(read=(m.mountpoint / "f").read_text()), daemon=True).start()
    poll(lambda: listed(m)["hour"]["fired"] == 1)
    assert "read" not in out
    fusetrace("fault", str(m.mountpoint), "clear", "hour")
    poll(lambda: "read" in out, timeout=20)
    assert out["read"] == "data"
    [read] = records(m).query("op == 'read'").itertuples()
    assert (read.errno, read.fault) == (0, "hour") and read.dur_ns < 3600e9


def test_a_faults_files_delay_holds_from_the_mount_and_a_bad_one_is_one_line(mount, tmp_path):
    faults = tmp_path / "faults.toml"
    faults.write_text('[[rule]]\nid = "tail"\nop = "read"\ndelay = "lognormal:p50=5ms,p99=200ms"\nseed = 7\n')
    m = mount("--faults", str(faults))
    assert listed(m)["tail"]["summary"] == "delay lognormal:p50=5ms,p99=200ms; read; seed 7"
    done = fusetrace("fault", str(m.mountpoint), "add", "--delay", "uniform:1s,10ms", check=False)
    one_line_error(done, "fault add: delay 'uniform:1s,10ms': LOW must be less than HIGH", code=2)
    assert list(listed(m)) == ["tail"]
    faults.write_text('[[rule]]\nerrno = "EIO"\n[[rule]]\ndelay = "lognormal:p50=5ms"\n')
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    done = fusetrace("mount", str(src), str(mnt), "--faults", str(faults), check=False)
    one_line_error(
        done, f"--faults {faults}: rule 2: delay 'lognormal:p50=5ms': expected lognormal:p50=A,p99=B", code=2
    )
    assert not is_mounted(mnt)
