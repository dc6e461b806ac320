"""The crash fault through real mounts armed for it (--crashable): after `crash`, every
file holds what was made durable (fsync, fdatasync, a close, a synchronous write, a
truncation) and nothing written since, through the mount and in the source alike; names
are kept; descriptors open at the crash are stale; a commit in flight tears at page
granularity; an unarmed mount refuses; a faults file's crash event crashes on time and
its mistakes fail the mount.

The crash is asked in process (support.crashing.crash): `fusetrace fault MNT crash` run
while the test holds descriptors would close the child's copies at its exec, a close
that commits (close-to-open), so that nothing would be lost."""

import errno as E
import json
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from support import Mount, fusetrace, mount_fails, one_line_error, poll
from support.crashing import PAGE, armed, crash, holding

from fusetrace.client import ask
from fusetrace.errors import UserError

WRITEBACK = pytest.mark.parametrize("writeback", [True, False], ids=["writeback-cache", "no-writeback-cache"])


def failing_with_the_writeback_cache(limit: str):
    """WRITEBACK, the write-back cache's case a strict xfail: a known limit of it (docs/FAULTS.md)."""
    xfail = pytest.mark.xfail(strict=True, reason=f"a known limit (docs/FAULTS.md): {limit}")
    return pytest.mark.parametrize(
        "writeback",
        [pytest.param(True, id="writeback-cache", marks=xfail), pytest.param(False, id="no-writeback-cache")],
    )


def stale(writeback: bool) -> set[int]:
    """What a call on a descriptor open at the crash may fail with: ESTALE from the mount,
    or, with the write-back cache, EIO from the kernel's failed write-back."""
    return {E.ESTALE, E.EIO} if writeback else {E.ESTALE}


def fails(call, errnos: set[int]) -> None:
    with pytest.raises(OSError) as failed:
        call()
    assert failed.value.errno in errnos, failed.value


def contents(where, names) -> dict[str, bytes]:
    return {name: (where / name).read_bytes() for name in names}


def sizes(m, names) -> dict[str, int]:
    return {name: os.stat(m.mountpoint / name).st_size for name in names}


def assert_holds(m, expected: dict[str, bytes]) -> None:
    """Each file holds what is expected, through the mount (content and size) and in the source."""
    assert contents(m.mountpoint, expected) == expected
    assert contents(m.source, expected) == expected
    assert sizes(m, expected) == {name: len(data) for name, data in expected.items()}


@contextmanager
def stalled(m, op: str, call, stall: str = "60s") -> Iterator[tuple[list, threading.Thread]]:
    """`call` run in a thread of its own, its `op` request held at the server (in flight) by
    a fault rule until the block ends (the rule cleared): yields the list that gets what it
    returned or the OSError it raised, and the thread."""
    mnt = str(m.mountpoint)
    ask(mnt, cmd="fault_add", rule={"id": "stalled", "op": op, "stall": stall})
    answered: list = []

    def run() -> None:
        try:
            answered.append(call())
        except OSError as exc:
            answered.append(exc)

    caller = threading.Thread(target=run)
    caller.start()
    try:
        poll(lambda: ask(mnt, cmd="fault_list")["rules"][0]["fired"] == 1)
        yield answered, caller
    finally:
        ask(mnt, cmd="fault_clear")
        caller.join(30)


@WRITEBACK
def test_fsynced_and_closed_data_survive_and_unsynced_data_is_gone(mount, writeback):
    m = armed(mount, writeback)
    mnt = m.mountpoint
    (mnt / "closed").write_bytes(b"c" * 10_000)  # written and closed: close-to-open committed it
    holder = os.open(mnt / "shared", os.O_CREAT | os.O_RDONLY)
    (mnt / "shared").write_bytes(b"h" * 5000)  # committed by its close, though the file is still open
    (mnt / "rewritten").write_bytes(b"o" * 3 * PAGE)
    synced = os.open(mnt / "synced", os.O_CREAT | os.O_RDWR)
    os.write(synced, b"s" * 5000)
    os.fsync(synced)
    os.write(synced, b"l" * 5000)  # after the last fsync: lost
    os.pwrite(synced, b"L" * 10, 0)  # over fsynced bytes: they come back
    created = os.open(mnt / "created", os.O_CREAT | os.O_WRONLY)
    os.write(created, b"n" * 100)  # never made durable: the name stays, empty
    rewritten = os.open(mnt / "rewritten", os.O_RDWR)
    os.pwrite(rewritten, b"X" * PAGE, PAGE)  # its middle page...
    os.pwrite(rewritten, b"X" * 10, 3 * PAGE)  # ... and past its end
    (mnt / "log").write_bytes(b"d" * 100)
    log = os.open(mnt / "log", os.O_WRONLY | os.O_APPEND)
    os.write(log, b"a" * 5000)
    os.fsync(log)
    os.write(log, b"b" * 5000)
    done = crash(m)
    assert done["handles"] == 5
    if not writeback:  # (with it, the kernel held some of these writes: they never reached the mount)
        assert done == {
            "files": 4,  # (shared: written and closed while another descriptor held it: nothing to undo)
            "pages_lost": 3 + 1 + 2 + 2,
            "pages_torn": 0,
            "bytes_cut": 5000 + 100 + 10 + 5000,
            "handles": 5,
        }
    expected = {"closed": b"c" * 10_000, "shared": b"h" * 5000, "rewritten": b"o" * 3 * PAGE, "synced": b"s" * 5000}
    assert_holds(m, {**expected, "log": b"d" * 100 + b"a" * 5000, "created": b""})
    for fd in (holder, synced, created, rewritten, log):
        fails(lambda fd=fd: os.close(fd), stale(writeback))


@WRITEBACK
def test_a_rename_without_fsync_loses_the_data_a_close_or_fsync_before_it_keeps_it(mount, writeback):
    m = armed(mount, writeback)
    mnt = m.mountpoint
    (mnt / "a").write_bytes(b"old config\n")
    (mnt / "removed").write_bytes(b"x")
    (mnt / "removed").unlink()  # namespace changes are on the server when they return
    (mnt / "made").mkdir()
    # the program: write a new version, rename it over the old one, no fsync
    unsynced = os.open(mnt / "a.tmp", os.O_CREAT | os.O_WRONLY)
    os.write(unsynced, b"new config\n")
    os.rename(mnt / "a.tmp", mnt / "a")
    (mnt / "b.tmp").write_bytes(b"closed first\n")  # close-to-open: on the server before the rename
    os.rename(mnt / "b.tmp", mnt / "b")
    synced = os.open(mnt / "c.tmp", os.O_CREAT | os.O_WRONLY)
    os.write(synced, b"fsynced first\n")
    os.fsync(synced)
    os.rename(mnt / "c.tmp", mnt / "c")
    crash(m)
    assert sorted(os.listdir(mnt)) == sorted(os.listdir(m.source)) == ["a", "b", "c", "made"]  # names are kept
    assert_holds(m, {"a": b"", "b": b"closed first\n", "c": b"fsynced first\n"})  # the old "a" is gone too
    for fd in (unsynced, synced):
        fails(lambda fd=fd: os.close(fd), stale(writeback))


@WRITEBACK
def test_descriptors_open_at_the_crash_are_stale_and_new_opens_see_the_durable_file(mount, writeback):
    m = armed(mount, writeback)
    path = m.mountpoint / "f"
    path.write_bytes(b"d" * 2 * PAGE)
    reader = os.open(path, os.O_RDONLY)
    assert os.pread(reader, 10, 0) == b"d" * 10  # (its page now in the kernel's cache)
    writer = os.open(path, os.O_RDWR)
    os.pwrite(writer, b"w" * 3 * PAGE, PAGE)
    assert os.stat(path).st_size == 4 * PAGE
    crash(m)
    errnos = stale(writeback)
    fails(lambda: os.pread(reader, 10, 0), errnos)  # not the cached page
    fails(lambda: os.pread(writer, 10, PAGE), errnos)
    fails(lambda: os.pwrite(writer, b"x", 1), errnos)  # (a part of a page: the kernel reads the rest)
    fails(lambda: os.fsync(writer), errnos)
    fails(lambda: os.fdatasync(reader), errnos)
    assert os.stat(path).st_size == 2 * PAGE  # the durable size, though the kernel held 4 pages
    fresh = os.open(path, os.O_RDWR)
    try:
        assert os.pread(fresh, 5 * PAGE, 0) == b"d" * 2 * PAGE
        os.pwrite(fresh, b"N" * 10, 0)  # the mount works on...
        os.fsync(fresh)
        os.pwrite(fresh, b"Z" * 10, 0)
        for fd in (reader, writer):  # (their close does not hang)
            fails(lambda fd=fd: os.close(fd), errnos)
        crash(m)  # ... and crashes again: the second fsync's bytes are kept
        assert_holds(m, {"f": b"N" * 10 + b"d" * (2 * PAGE - 10)})
    finally:
        fails(lambda: os.close(fresh), errnos)


@failing_with_the_writeback_cache(
    "the crash drops the kernel's "
    "entry of one name of each file open (Inode.dentry, the last looked up or linked); "
    "another name keeps the retired inode and its size until its entry times out"
)
def test_every_name_of_a_file_shows_its_durable_size_after_the_crash(mount, writeback):
    m = armed(mount, writeback)
    first, second = m.mountpoint / "first", m.mountpoint / "second"
    first.write_bytes(b"d" * 100)
    os.link(first, second)  # (the name the server remembers now: "second")
    fd = os.open(first, os.O_RDWR)
    os.pwrite(fd, b"w" * 3 * PAGE, 0)
    crash(m)
    fails(lambda: os.close(fd), stale(writeback))  # (closed first: nothing left open when the xfail fails)
    assert sizes(m, ("first", "second")) == {"first": 100, "second": 100}  # first: 12,288
    assert_holds(m, {"first": b"d" * 100, "second": b"d" * 100})  # first: 12,288 bytes, zeros past 100


@WRITEBACK
def test_synchronous_writes_and_fdatasync_are_durable_at_return(mount, writeback):
    m = armed(mount, writeback)
    aligned = mmap.mmap(-1, 2 * PAGE)  # (O_DIRECT needs an aligned buffer)
    aligned.write(b"D" * 2 * PAGE)
    held = []
    for name, flag in (("o_sync", os.O_SYNC), ("o_dsync", os.O_DSYNC), ("o_direct", os.O_DIRECT), ("fdatasync", 0)):
        fd = os.open(m.mountpoint / name, os.O_CREAT | os.O_RDWR | flag)
        held.append(fd)
        assert os.write(fd, aligned) == 2 * PAGE
        if not flag:
            os.fdatasync(fd)
    crash(m)
    assert_holds(m, dict.fromkeys(("o_sync", "o_dsync", "o_direct", "fdatasync"), b"D" * 2 * PAGE))
    for fd in held:
        fails(lambda fd=fd: os.close(fd), stale(writeback))


@WRITEBACK
def test_truncations_are_durable(mount, writeback):
    m = armed(mount, writeback)
    mnt = m.mountpoint
    for name in ("o_trunc", "ftruncate", "cut"):
        (mnt / name).write_bytes(b"o" * 3 * PAGE)
    earlier = os.open(mnt / "o_trunc", os.O_RDWR)
    os.pwrite(earlier, b"X" * PAGE, 0)  # unsynced, then cut by another's O_TRUNC open
    truncating = os.open(mnt / "o_trunc", os.O_RDWR | os.O_TRUNC)
    os.write(truncating, b"u" * 100)
    cutter = os.open(mnt / "ftruncate", os.O_RDWR)
    os.pwrite(cutter, b"X" * PAGE, 0)
    os.ftruncate(cutter, 0)
    os.write(cutter, b"u" * 100)  # (at 0: its offset was never moved)
    shortened = os.open(mnt / "cut", os.O_RDWR)
    os.ftruncate(shortened, PAGE + 10)
    crash(m)
    assert_holds(m, {"o_trunc": b"", "ftruncate": b"", "cut": b"o" * (PAGE + 10)})
    for fd in (earlier, truncating, cutter, shortened):
        fails(lambda fd=fd: os.close(fd), stale(writeback))


@failing_with_the_writeback_cache(
    "the kernel sends a truncating "
    "SETATTR without writing its dirty pages back (an NFS client writes back first): they "
    "are still in the kernel at the crash, and lost"
)
def test_data_written_before_a_truncation_is_durable(mount, writeback):
    # NFS writes a file's dirty data back before it sends a SETATTR of its size (nfs_setattr)
    m = armed(mount, writeback)
    grown = os.open(m.mountpoint / "grown", os.O_CREAT | os.O_RDWR)
    os.write(grown, b"g" * 2 * PAGE)
    os.ftruncate(grown, 3 * PAGE)
    shrunk = os.open(m.mountpoint / "shrunk", os.O_CREAT | os.O_RDWR)
    os.write(shrunk, b"s" * 3 * PAGE)
    os.ftruncate(shrunk, PAGE)
    crash(m)
    for fd in (grown, shrunk):  # (closed first: nothing left open when the xfail fails)
        fails(lambda fd=fd: os.close(fd), stale(writeback))
    assert_holds(m, {"grown": b"g" * 2 * PAGE + bytes(PAGE), "shrunk": b"s" * PAGE})


@WRITEBACK
def test_a_commit_in_flight_tears_at_page_granularity(mount, writeback):
    m = armed(mount, writeback)
    path = m.mountpoint / "f"
    old, new = 4, 8  # pages: the durable file, and what the fsync in flight was to make durable
    path.write_bytes(b"o" * old * PAGE)
    fd = os.open(path, os.O_RDWR)
    os.pwrite(fd, b"n" * new * PAGE, 0)
    with stalled(m, "fsync", lambda: os.fsync(fd)) as (answered, _):
        done = crash(m)
    assert len(answered) == 1 and isinstance(answered[0], OSError) and answered[0].errno == E.ESTALE, answered
    assert done["pages_lost"] + done["pages_torn"] == new  # every page it wrote, kept or lost by the draw
    data = (m.mountpoint / "f").read_bytes()
    assert data == (m.source / "f").read_bytes()
    pages = [data[i : i + PAGE] for i in range(0, len(data), PAGE)]
    # the size: the durable one, or the end of the last page that got through
    assert len(data) == old * PAGE or (len(data) % PAGE == 0 and old < len(pages) <= new and pages[-1] == b"n" * PAGE)
    for i, page in enumerate(pages):  # each page its old or its new content, never a mix
        assert page in (b"o" * PAGE if i < old else bytes(PAGE), b"n" * PAGE), (i, set(page))
    fails(lambda: os.close(fd), stale(writeback))


@WRITEBACK
def test_a_crash_does_not_wait_for_a_write_in_flight(mount, writeback):
    m = armed(mount, writeback)
    path = m.mountpoint / "f"
    path.write_bytes(b"d" * 100)
    fd = os.open(path, os.O_RDWR)

    def write() -> None:  # (with the write-back cache, the fsync's write-back is held)
        os.pwrite(fd, b"x" * 5000, 0)
        os.fsync(fd)

    try:
        with stalled(m, "write", write, stall="4s") as (answered, writer):
            crash(m)
            assert writer.is_alive()  # the crash answered while the write was held (here: 4 s later)
        assert len(answered) == 1 and isinstance(answered[0], OSError) and answered[0].errno == E.ESTALE, answered
        assert_holds(m, {"f": b"d" * 100})
    finally:
        fails(lambda: os.close(fd), stale(writeback))


def test_a_trace_only_mount_crashes_too(mount):
    m = mount("--crashable")
    mnt = m.mountpoint
    (mnt / "closed").write_bytes(b"c" * 100)
    synced = os.open(mnt / "synced", os.O_CREAT | os.O_WRONLY)
    os.write(synced, b"s" * 100)
    os.fsync(synced)
    os.write(synced, b"l" * 100)
    renamed = os.open(mnt / "tmp", os.O_CREAT | os.O_WRONLY)
    os.write(renamed, b"r" * 100)
    os.rename(mnt / "tmp", mnt / "renamed")
    assert crash(m) == {"files": 2, "pages_lost": 2, "pages_torn": 0, "bytes_cut": 200, "handles": 2}
    assert_holds(m, {"closed": b"c" * 100, "synced": b"s" * 100, "renamed": b""})
    for fd in (synced, renamed):
        fails(lambda fd=fd: os.close(fd), {E.ESTALE})


def test_the_cli_says_what_a_crash_undid(mount):
    m = armed(mount, False)
    with holding("file", str(m.mountpoint / "held"), "5000"):  # another process holds it: not this test
        done = fusetrace("fault", str(m.mountpoint), "crash")
    assert done.stdout == (
        "crashed: 1 files put back as last made durable (2 pages undone, 0 torn, 5,000 bytes cut at their ends), "
        "1 open files stale\n"
    )
    assert_holds(m, {"held": b""})
    again = json.loads(fusetrace("fault", str(m.mountpoint), "crash", "--json").stdout)
    assert again == {"files": 0, "pages_lost": 0, "pages_torn": 0, "bytes_cut": 0, "handles": 0}


@pytest.mark.parametrize("options", [(), ("--emulate", "efs-bursting")])
def test_a_mount_not_armed_refuses_to_crash(mount, options):
    m = mount(*options)
    (m.mountpoint / "f").write_bytes(b"x")
    with pytest.raises(UserError) as refused:
        ask(str(m.mountpoint), cmd="crash")
    assert "mount it with --crashable" in str(refused.value)
    done = fusetrace("fault", str(m.mountpoint), "crash", check=False)
    one_line_error(done, "not armed for a crash", "--crashable")
    assert done.stdout == ""
    assert (m.mountpoint / "f").read_bytes() == b"x"


def test_a_crash_event_of_a_faults_file_crashes_then(mount, tmp_path):
    faults = tmp_path / "faults.toml"
    faults.write_text('[[event]]\nat = "3s"\ncrash = true\n')
    m = mount("--crashable", "--faults", str(faults))
    fd = os.open(m.mountpoint / "f", os.O_CREAT | os.O_RDWR)
    try:
        os.write(fd, b"s" * 10)
        os.fsync(fd)
        os.write(fd, b"l" * 10)
        # not crashed yet (the mount took less than 3 s): this read reaches the server
        assert os.pread(fd, 20, 0) == b"s" * 10 + b"l" * 10, "the crash came before the test wrote"

        def crashed() -> int:
            try:
                os.pread(fd, 1, 0)
            except OSError as exc:
                return exc.errno or -1
            return 0

        assert poll(crashed, timeout=30) == E.ESTALE
        assert_holds(m, {"f": b"s" * 10})
        assert "crash: 1 files put back as last made durable" in (tmp_path / "server0.log").read_text()
    finally:
        fails(lambda: os.close(fd), {E.ESTALE})


@pytest.mark.parametrize(
    "event, options, says",
    [
        ('at = "1s"\ncrash = false', ("--crashable",), ("event 2: crash: write crash = true, got False",)),
        ('at = "1s"\ncrash = true\nwhen = "1s"', ("--crashable",), ("event 2: unknown key 'when'",)),
        ("crash = true", ("--crashable",), ("event 2: at: missing",)),
        ('at = "soon"\ncrash = true', ("--crashable",), ("event 2: at",)),
        ('at = "1s"\ncrash = true', (), ("a crash event needs --crashable",)),
    ],
    ids=["crash-false", "unknown-key", "no-at", "bad-at", "not-armed"],
)
def test_a_mistaken_crash_event_fails_the_mount_with_one_line(dirs, event, options, says):
    faults = dirs / "faults.toml"
    faults.write_text(
        f'[[rule]]\nop = "read"\nerrno = "EIO"\ncount = 1\n\n[[event]]\nat = "1h"\ncrash = true\n\n[[event]]\n{event}\n'
    )
    done = mount_fails(dirs, *options, "--faults", str(faults))
    one_line_error(done, f"--faults {faults}", *says, code=2)


# Opens each file named for writing and writes a byte to it, keeping it open; says how many
# opened and how many failed (by errno), then waits for its stdin to close.
_WRITER = """
import json, os, sys
opened, failed = [], {}
for p in sys.argv[1:]:
    try:
        opened.append(os.open(p, os.O_WRONLY))
        os.write(opened[-1], b"y")
    except OSError as e:
        failed[e.errno] = failed.get(e.errno, 0) + 1
print(json.dumps({"opened": len(opened), "failed": failed}), flush=True)
sys.stdin.read()
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (allow_other, a second user)")
def test_files_written_on_an_armed_mount_stay_within_the_descriptor_budget():
    # as tests/server/test_fd_budget.py, with --crashable: the server under RLIMIT_NOFILE 256
    # (a share of 48 open files per user), `nobody` and then root each writing 60 files
    base = Path(tempfile.mkdtemp(prefix="fusetrace-crash-fds-"))
    os.chmod(base, 0o755)
    m = Mount(base / "src", base / "mnt", None)
    for d in (m.source, m.mountpoint):
        d.mkdir(mode=0o755)
    argv = [sys.executable, "-m", "fusetrace", "mount", str(m.source), str(m.mountpoint), "-o", "allow_other"]
    subprocess.run(
        ["prlimit", "--nofile=256:256", "--", *argv, "--crashable", "--log", str(base / "server.log")],
        check=True,
        capture_output=True,
        timeout=120,
    )
    writers: list[subprocess.Popen] = []
    try:
        said = {}
        for user, prefix in ((65534, "n"), (0, "r")):
            names = [m.source / f"{prefix}{i}" for i in range(60)]
            for p in names:
                p.write_bytes(b"x")
                os.chmod(p, 0o666)
            writer = subprocess.Popen(
                ["/usr/bin/python3", "-c", _WRITER, *(str(m.mountpoint / p.name) for p in names)],
                user=user,
                group=user,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            writers.append(writer)
            said[user] = json.loads(writer.stdout.readline())  # type: ignore[union-attr]
        share = 48  # fdbudget.Budget(256).share
        assert said[65534] == {"opened": share, "failed": {str(E.EMFILE): 60 - share}}
        assert said[0] == {"opened": share, "failed": {str(E.EMFILE): 60 - share}}  # armed: 25 opened
        assert ask(str(m.mountpoint), cmd="stats")["descriptors"]["open"] == 2 * share  # armed: no answer
    finally:
        for writer in writers:
            writer.kill()
            writer.wait(30)
        m.unmount()
        shutil.rmtree(base, ignore_errors=True)
