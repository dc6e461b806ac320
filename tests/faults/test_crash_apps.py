"""Real applications across a crash of a mount armed for it: sqlite in each journal mode
keeps every committed row and no uncommitted one, whole; git's repository is whole; what
tar extracted (and closed) is all there.

An application holding files at the crash is a process of its own (support.crashing's
holder), killed after the crash as the crash of its client would kill it.

sqlite's journal modes memory and off promise nothing across a crash and are not tested.
Seen in 3 runs each way (write-back cache on and off, the holder mid-transaction as
below, November 2026): integrity "ok" and exactly the committed rows every time, since
the crash puts the database file back exactly as its last commit's fsync left it, and
no commit was in flight to tear."""

import os
import sqlite3
import subprocess
import tarfile

import pytest
from support.crashing import COMMITTED, armed, crash, holding

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
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "HOME": str(m.mountpoint),
    }
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
