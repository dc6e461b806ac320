"""The crash fault's tests share these: an armed mount's options, the crash asked in
process, and a process that writes and then holds its files open across the crash.

Why a process of its own: a client that crashes takes its applications with it, so the
application must still hold its descriptors when the crash comes, and must not close
them before (a close commits: close-to-open).  The test crashes the mount, then kills
the holder (SIGKILL); its descriptors then close on stale handles, which commits nothing.

`python -m support.crashing file PATH SIZE` writes SIZE bytes of b"u" at the start of
PATH (created if missing) without a sync; `python -m support.crashing sqlite DB MODE
SYNCHRONOUS` commits rows 0..4 of table t (made in rollback-journal mode, so that it is
in the database file) in journal mode MODE (WAL checkpointed after row 2), then begins a transaction of rows 100..399
big enough to spill pages into the database (or the WAL) before its commit.  Each then
prints "holding" and waits for its stdin to close; the sqlite one, given a line "commit"
first, commits and prints "committed" or what failed.
"""

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fusetrace.client import ask

ROOT = Path(__file__).resolve().parents[2]
PAGE = 4096

# the emulated latencies small: each test makes hundreds of requests
FAST = [
    f"--set={key}={ms}"
    for kind in ("read", "write", "meta_read", "meta_write", "commit")
    for key, ms in ((f"{kind}_latency_ms", 0.02), (f"{kind}_latency_p99_ms", 0.05))
]
COMMITTED = [0, 1, 2, 3, 4]  # the rows the sqlite holder commits


def armed(mount, writeback: bool, *options: str):
    """An emulated mount armed for the crash, with FUSE's write-back cache or without."""
    cache = [] if writeback else ["--no-writeback-cache"]
    return mount("--emulate", "efs-bursting", "--crashable", *FAST, *cache, *options)


def crash(m) -> dict[str, int]:
    """Crash the mount's client now, from this process (a `fusetrace fault MNT crash`
    subprocess would close the test's descriptors first: a close commits)."""
    return ask(str(m.mountpoint), cmd="crash")["crashed"]


@contextmanager
def holding(*args: str) -> Iterator[subprocess.Popen]:
    """The holder process (see the module's docstring), once it holds; killed at the end."""
    child = subprocess.Popen(
        [sys.executable, "-m", "support.crashing", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "tests")},
    )
    try:
        said = child.stdout.readline()  # type: ignore[union-attr]
        assert said == "holding\n", f"the holder said {said!r} ({child.wait(30)})"
        yield child
    finally:
        child.kill()
        child.wait(30)


def _hold_sqlite(db: str, mode: str, synchronous: str) -> sqlite3.Connection:
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("create table t (x integer primary key, pad blob)")
    con.execute(f"pragma journal_mode={mode}")
    con.execute(f"pragma synchronous={synchronous}")
    for x in COMMITTED:
        con.execute("begin")
        con.execute("insert into t values (?, randomblob(3000))", (x,))
        con.execute("commit")
        if x == 2:
            con.execute("pragma wal_checkpoint")  # (WAL: synced, whatever the synchronous setting)
    con.execute("pragma cache_size=1")  # the transaction's pages spill before its commit
    con.execute("begin")
    for x in range(100, 400):
        con.execute("insert into t values (?, randomblob(3000))", (x,))
    return con


def _hold_file(path: str, size: str) -> int:
    fd = os.open(path, os.O_CREAT | os.O_RDWR)
    os.pwrite(fd, b"u" * int(size), 0)
    return fd


def main(what: str, *args: str) -> object:
    held = _hold_file(*args) if what == "file" else _hold_sqlite(*args)
    print("holding", flush=True)
    if sys.stdin.readline() == "commit\n" and isinstance(held, sqlite3.Connection):
        try:
            held.execute("commit")
            print("committed", flush=True)
        except sqlite3.Error as exc:
            print(f"failed: {exc}", flush=True)
    sys.stdin.read()
    return held  # (referenced until here: its descriptors stay open)


if __name__ == "__main__":
    main(*sys.argv[1:])
