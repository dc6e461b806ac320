"""Real applications under injected faults, through real mounts: what sqlite3 (rollback
journal and WAL), git and tar report, and that the data below was not corrupted by the
injector itself."""

import os
import sqlite3
import subprocess
import time

import pytest
from support import fusetrace, git_env


def add(m, *args: str) -> None:
    fusetrace("fault", str(m.mountpoint), "add", *args)


def clear(m) -> None:
    fusetrace("fault", str(m.mountpoint), "clear")


def sh(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, cwd=cwd, timeout=120)


def sql(db, statement: str) -> subprocess.CompletedProcess:
    """The sqlite3 command-line shell, a process of its own, on `db`."""
    return sh("sqlite3", str(db), statement)


def rows_and_integrity(db) -> tuple[list[int], str]:
    con = sqlite3.connect(db)
    try:
        return [r[0] for r in con.execute("select x from t order by x")], con.execute(
            "pragma integrity_check"
        ).fetchone()[0]
    finally:
        con.close()


@pytest.mark.parametrize(
    "mode, synced, when, rows",
    [
        # Rollback journal: a journal that could not be made durable stops the transaction before
        # the database is touched, so row 2 never lands.
        ("delete", "*.db-journal", ("--count", "1"), [1, 3]),
        # WAL, the first sync of the log failing (the sync of its new header): the transaction
        # stops before its frames count, so row 2 never lands.
        ("wal", "*.db-wal", ("--count", "1"), [1, 3]),
        # WAL, the commit's own sync failing: the frames, commit frame included, were written, so
        # the next reader finds row 2 though its writer was told the commit failed.  This is how a
        # failed fsync behaves on Linux (the data may still reach the disk); the fault did not
        # garble anything, and the database is whole either way.
        ("wal", "*.db-wal", ("--every", "2"), [1, 2, 3]),
    ],
)
def test_sqlite_reports_a_failed_fsync_and_its_database_stays_whole(mount, mode, synced, when, rows):
    m = mount()
    db = m.mountpoint / "app.db"
    assert sql(db, f"pragma journal_mode={mode}; create table t (x); insert into t values (1);").returncode == 0
    add(m, "--op", "fsync", "--path", synced, "--errno", "EIO", *when)
    failed = sql(db, "insert into t values (2);")
    assert failed.returncode != 0 and "disk I/O error" in failed.stderr, failed
    clear(m)
    assert sql(db, "insert into t values (3);").returncode == 0
    through, integrity = rows_and_integrity(db)
    below, integrity_below = rows_and_integrity(m.source / "app.db")
    assert integrity == integrity_below == "ok"
    assert through == below == rows


def test_sqlite_waits_out_a_hard_stall_and_fails_on_a_soft_one(mount):
    m = mount()
    db = m.mountpoint / "app.db"
    assert sql(db, "create table t (x); insert into t values (1);").returncode == 0
    add(m, "--op", "fsync", "--path", "*.db*", "--stall", "2s", "--id", "hard")
    began = time.monotonic()
    assert sql(db, "insert into t values (2);").returncode == 0  # no error: a hard mount waits
    assert time.monotonic() - began >= 2.0
    clear(m)
    add(m, "--op", "fsync", "--path", "*.db*", "--stall", "30s", "--soft", "--timeo", "3", "--retrans", "1")
    began = time.monotonic()
    soft = sql(db, "insert into t values (3);")
    assert soft.returncode != 0 and "disk I/O error" in soft.stderr, soft
    assert 0.9 - 0.05 <= time.monotonic() - began < 30  # 0.3 s, then 0.6 s: not the 30 s stall
    clear(m)
    assert rows_and_integrity(db) == rows_and_integrity(m.source / "app.db") == ([1, 2], "ok")


def test_git_calls_a_stale_object_corrupt_and_the_repository_is_intact(mount):
    m = mount()
    repo = m.mountpoint / "repo"
    env = git_env(m.mountpoint)

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, timeout=120)

    assert subprocess.run(["git", "init", "-q", str(repo)], env=env).returncode == 0
    for i in range(3):
        (repo / f"f{i}.txt").write_text(f"version {i}\n")
        assert git("add", ".").returncode == 0 and git("commit", "-q", "-m", f"commit {i}").returncode == 0
    head = git("rev-parse", "HEAD").stdout.strip()
    # another client removed the objects under this one: the next object git opens is stale
    add(m, "--op", "open,read", "--path", "/repo/.git/objects/**", "--stale", "--count", "1")
    failed = git("cat-file", "-p", f"{head}:f2.txt")
    # git reports the object it could not read as corrupt; fsck below shows that nothing is
    assert failed.returncode == 128 and "fatal: loose object" in failed.stderr and "is corrupt" in failed.stderr
    clear(m)
    # the index made stale: git names the error as the kernel gives it, and again until cleared
    add(m, "--op", "open", "--path", "/repo/.git/index", "--stale", "--count", "1")
    for _ in range(2):
        stale = git("status")
        assert stale.returncode == 128 and "index file open failed: Stale file handle" in stale.stderr, stale
    clear(m)
    assert git("fsck", "--full", "--strict").returncode == 0
    assert git("cat-file", "-p", f"{head}:f2.txt").stdout == "version 2\n"
    assert git("status", "--porcelain").stdout == ""
    assert git("rev-list", "--count", "HEAD").stdout.strip() == "3"
    below = subprocess.run(["git", "-C", str(m.source / "repo"), "fsck", "--full"], capture_output=True, env=env)
    assert below.returncode == 0


@pytest.mark.parametrize("errno_name, says", [("ENOSPC", "No space left on device"), ("EDQUOT", "Disk quota exceeded")])
def test_tar_stops_at_a_full_file_system_and_what_it_wrote_is_whole(mount, tmp_path, errno_name, says):
    m = mount()
    originals = {name: os.urandom(size) for name, size in (("a.bin", 100_000), ("b.bin", 200_000), ("c.bin", 300_000))}
    work = tmp_path / "work"
    work.mkdir()
    for name, data in originals.items():
        (work / name).write_bytes(data)
    assert sh("tar", "-cf", str(tmp_path / "x.tar"), "a.bin", "b.bin", "c.bin", cwd=work).returncode == 0
    (m.mountpoint / "out").mkdir()
    (m.mountpoint / "out" / "kept.txt").write_text("here before\n")
    add(m, "--full", "256k", "--errno", errno_name, "--path", "/out/**")
    done = sh("tar", "-xf", str(tmp_path / "x.tar"), "-C", str(m.mountpoint / "out"))
    assert done.returncode != 0 and f"c.bin: Cannot open: {says}" in done.stderr, done
    below = m.source / "out"
    assert (below / "a.bin").read_bytes() == originals["a.bin"]  # whole: it fitted
    partial = (below / "b.bin").read_bytes()  # cut where the space ran out, and never garbled
    assert len(partial) == 256 * 1024 - 100_000 and originals["b.bin"].startswith(partial)
    assert not (below / "c.bin").exists()  # its create was refused
    assert sorted(p.name for p in below.iterdir()) == ["a.bin", "b.bin", "kept.txt"]
    assert (below / "kept.txt").read_text() == "here before\n"  # a file already there: untouched
