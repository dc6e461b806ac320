"""Real applications across a crash of a mount armed for it: sqlite in each journal mode
keeps every committed row and no uncommitted one, whole; git's repository is whole; what
tar extracted (and closed) is all there.

An application holding files at the crash is a process of its own (support.crashing's
holder), killed after the crash as the crash of its client would kill it.

sqlite's journal modes memory and off promise nothing across a crash and are not tested.
Seen (November 2026, 3 runs of each mode with the write-back cache and 3 without): with
the crash mid-transaction, as in test_sqlite_keeps_exactly_its_committed_rows,
integrity "ok" and exactly the committed rows every time (the crash puts the database
back exactly as its last commit's fsync left it); with the commit's fsync of the
database in flight, as in test_sqlite_commit_in_flight_at_the_crash_is_all_or_nothing,
"database disk image is malformed" in 10 runs of 12 (no journal to roll the torn pages
back), integrity "ok" with the old rows in 2."""

import os
import signal
import sqlite3
import subprocess
import tarfile

import pytest
from support import git_env, poll
from support.crashing import COMMITTED, armed, crash, holding

from fusetrace.client import ask

WRITEBACK = pytest.mark.parametrize("writeback", [True, False], ids=["writeback-cache", "no-writeback-cache"])


def integrity_and_rows(db) -> tuple[str, list[int]]:
    """A new connection's integrity check and the rows of table t (none when the table is gone)."""
    con = sqlite3.connect(db)
    try:
        integrity = con.execute("pragma integrity_check").fetchone()[0]
        tables = [r[0] for r in con.execute("select name from sqlite_master where type = 'table'")]
        rows = [r[0] for r in con.execute("select x from t order by x")] if "t" in tables else []
        return integrity, rows
    finally:
        con.close()


@WRITEBACK
@pytest.mark.parametrize("mode", ["delete", "truncate", "persist", "wal"])
def test_sqlite_keeps_exactly_its_committed_rows(mount, writeback, mode):
    m = armed(mount, writeback)
    db = m.mountpoint / "app.db"
    with holding("sqlite", str(db), mode, "full"):  # mid-transaction, its pages spilled
        done = crash(m)
    assert done["handles"] >= 2  # the database and its journal or WAL
    # the new connection: a rollback journal is hot, or the WAL's committed frames are read
    assert integrity_and_rows(db) == ("ok", COMMITTED)
    assert integrity_and_rows(m.source / "app.db") == ("ok", COMMITTED)


@WRITEBACK
def test_sqlite_wal_with_synchronous_normal_may_lose_commits_but_never_tears_them(mount, writeback):
    # WAL with synchronous=NORMAL syncs the WAL only at checkpoints: commits since may be lost
    # (here all of them, rows 3 and 4: the crash undoes every write since the last sync)
    m = armed(mount, writeback)
    db = m.mountpoint / "app.db"
    with holding("sqlite", str(db), "wal", "normal"):
        crash(m)
    for where in (db, m.source / "app.db"):
        integrity, rows = integrity_and_rows(where)
        assert integrity == "ok"
        assert rows == COMMITTED[: len(rows)] and len(rows) >= 3  # a prefix, the checkpointed rows in it


def git(repo, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, timeout=120)


@WRITEBACK
def test_git_repository_is_whole_after_a_crash_and_keeps_its_commits(mount, writeback):
    m = armed(mount, writeback)
    repo = m.mountpoint / "repo"
    env = git_env(m.mountpoint)
    assert subprocess.run(["git", "init", "-q", str(repo)], env=env, timeout=120).returncode == 0
    for i in range(3):
        (repo / f"f{i}.txt").write_text(f"version {i}\n")
        assert git(repo, "add", ".", env=env).returncode == 0
        assert git(repo, "commit", "-q", "-m", f"commit {i}", env=env).returncode == 0
    (repo / "staged.txt").write_text("staged\n")
    assert git(repo, "add", "staged.txt", env=env).returncode == 0  # in the index: git closed it
    # another process rewrites a tracked file and holds it open, unsynced, at the crash
    with holding("file", str(repo / "f1.txt"), "5"):
        crash(m)
    assert git(repo, "fsck", "--full", "--strict", env=env).returncode == 0
    assert git(repo, "rev-list", "--count", "HEAD", env=env).stdout == "3\n"
    assert git(repo, "status", "--porcelain", env=env).stdout == "A  staged.txt\n"  # f1.txt as committed
    assert (repo / "f1.txt").read_text() == (m.source / "repo" / "f1.txt").read_text() == "version 1\n"
    below = git(m.source / "repo", "fsck", "--full", "--strict", env=env)
    assert below.returncode == 0, below.stderr


@WRITEBACK
def test_what_tar_extracted_is_all_there_after_a_crash(mount, tmp_path, writeback):
    m = armed(mount, writeback)
    originals = {f"d{i % 3}/f{i}.bin": os.urandom(1000 * i + 17) for i in range(12)}
    archive = tmp_path / "x.tar"
    work = tmp_path / "work"
    for name, data in originals.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_bytes(data)
    with tarfile.open(archive, "w") as tar:
        tar.add(work, arcname=".")
    done = subprocess.run(["tar", "-xf", str(archive), "-C", str(m.mountpoint)], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # tar closed each file: close-to-open made every one durable, and nothing was open
    assert crash(m) == {"files": 0, "pages_lost": 0, "pages_torn": 0, "bytes_cut": 0, "handles": 0}
    for where in (m.mountpoint, m.source):
        assert {name: (where / name).read_bytes() for name in originals} == originals


@WRITEBACK
@pytest.mark.parametrize("mode, synced", [("delete", "/app.db"), ("wal", "/app.db-wal")])
def test_sqlite_commit_in_flight_at_the_crash_is_all_or_nothing(mount, writeback, mode, synced):
    # the commit's last fsync (of the database; of the WAL) is in flight: the crash tears it
    m = armed(mount, writeback)
    db, mnt = m.mountpoint / "app.db", str(m.mountpoint)
    with holding("sqlite", str(db), mode, "full") as holder:
        ask(mnt, cmd="fault_add", rule={"id": "slow", "op": "fsync", "path": synced, "stall": "60s"})
        holder.stdin.write("commit\n")
        holder.stdin.flush()
        try:
            poll(lambda: ask(mnt, cmd="fault_list")["rules"][0]["fired"] == 1)
            done = crash(m)
        finally:
            ask(mnt, cmd="fault_clear")
        said = holder.stdout.readline() or f"died: {holder.wait(30)}"
    # sqlite is told (the fsync's ESTALE); with WAL, its next touch of the wal-index (the -shm
    # file, mmap'd through the mount and now stale) kills it with SIGBUS, as on NFS
    assert said in ("failed: disk I/O error\n", *([f"died: {-signal.SIGBUS}"] if mode == "wal" else [])), said
    assert done["pages_lost"] + done["pages_torn"] > 0
    rows = [COMMITTED] if mode == "delete" else [COMMITTED, COMMITTED + list(range(100, 400))]
    for where in (db, m.source / "app.db"):
        integrity, found = integrity_and_rows(where)
        assert integrity == "ok"
        assert found in rows, (found[:8], len(found))
