"""Names that are not UTF-8, through a real traced mount: the trace keeps their exact bytes,
replay makes exactly those names again, and every reader of the trace (report, export,
simulate) takes them without a traceback or a line a terminal would act on."""

import errno
import json
import os
import shutil
import stat
import subprocess
import sys

import pyarrow.parquet as pq
from support import fusetrace, unshared

from fusetrace.trace.schema import TraceRecord
from fusetrace.trace.writer import TraceWriter

# Every byte value but NUL and '/', in names of at most 255 bytes: files and directories.
ALL_BYTES = bytes(b for b in range(1, 256) if b != ord("/"))
LOW, HIGH = ALL_BYTES[:127], ALL_BYTES[127:]  # 0x01..0x80, 0x81..0xFF
LONG = b"n" * 254 + b"\xff"  # 255 bytes: as \xff it was 258, ENAMETOOLONG on replay
BACKSLASH, LATIN1 = b"caf\\xff", b"caf\xff"  # a real backslash, and the byte it used to be written as


def _workload(root: bytes) -> None:
    """Entries named with every byte, made, written, linked, renamed and removed."""

    def at(*names: bytes) -> bytes:
        return os.path.join(root, *names)

    os.mkdir(at(HIGH))  # a directory of 0x81..0xFF
    os.mkdir(at(LOW[::-1]))  # and of 0x80..0x01
    for path, size in (
        (at(LOW), 100),
        (at(HIGH, HIGH[::-1]), 200),
        (at(HIGH, LONG), 10),
        (at(BACKSLASH), 1),
        (at(LATIN1), 2),
        (at(LOW[::-1], b"tmp\x80"), 3),
    ):
        with open(path, "wb") as f:
            f.write(b"x" * size)
    os.symlink(b"../\xfe\xff target", at(HIGH, b"link\xfe"))  # a target that is not UTF-8 (path2)
    os.rename(at(LOW[::-1], b"tmp\x80"), at(LOW[::-1], b"moved\x81"))  # both names not UTF-8
    os.link(at(LOW), at(HIGH, b"hard\xc0"))
    os.symlink(b"gone", at(b"doomed\xff"))
    os.unlink(at(b"doomed\xff"))


def _tree(root: bytes) -> dict[bytes, tuple]:
    """Every entry below root, by its exact name: type, size (a link: its target's bytes)."""
    out: dict[bytes, tuple] = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(top, name)
            st = os.lstat(path)
            what = os.readlink(path) if stat.S_ISLNK(st.st_mode) else st.st_size if stat.S_ISREG(st.st_mode) else None
            out[os.path.relpath(path, root)] = (stat.S_IFMT(st.st_mode), what)
    return out


def _traced(mount, *after: bytes) -> tuple:
    """A traced mount's workload (and the programs `after`, each given a file of it), unmounted."""
    m = mount(trace=True)
    _workload(os.fsencode(m.mountpoint))
    for program in after:  # not run in the mount: its chdir would be traced under the name before exec
        subprocess.run([program, os.path.join(os.fsencode(m.mountpoint), LATIN1)], check=True, capture_output=True)
    m.unmount()
    return m, _tree(os.fsencode(m.source))


def test_replay_recreates_names_with_every_byte_exactly(mount, tmp_path):
    m, recorded = _traced(mount)
    assert {b for name in recorded for b in os.path.basename(name)} == set(ALL_BYTES)
    assert {HIGH + b"/" + LONG, BACKSLASH, LATIN1, LOW[::-1] + b"/moved\x81"} <= set(recorded)

    table = pq.read_table(m.trace)
    raw = {r for r in table.column("path_raw").to_pylist() if r is not None}
    assert {b"/" + LATIN1, b"/" + HIGH + b"/" + LONG, b"/" + LOW[::-1] + b"/tmp\x80"} <= raw
    assert b"../\xfe\xff target" in table.column("path2_raw").to_pylist()
    assert "/caf\\xff" in table.column("path").to_pylist()  # the real backslash: text alone, no raw bytes
    assert all(
        r is None
        for p, r in zip(table.column("path").to_pylist(), table.column("path_raw").to_pylist())
        if p == "/caf\\xff"
    )

    target = tmp_path / "again"
    target.mkdir()
    done = fusetrace("replay", str(m.trace), str(target), "--as-fast-as-possible", "--json")
    s = json.loads(done.stdout)
    assert s["differences"]["count"] == 0, s["differences"]
    assert _tree(os.fsencode(target)) == recorded


def test_report_export_and_simulate_read_such_names(mount, tmp_path):
    cat = os.path.join(os.fsencode(tmp_path), b"cat\xff")  # a process named with a byte that is not UTF-8
    shutil.copy(shutil.which("cat"), cat)
    m, _ = _traced(mount, cat)
    text = fusetrace("report", str(m.trace), "--by", "path").stdout  # text=True: strict UTF-8 output
    assert "/caf\\xff" in text and "/caf\ufffd" in text
    by_comm = json.loads(fusetrace("report", str(m.trace), "--json", "--comm", os.fsdecode(b"cat\xff")).stdout)
    assert by_comm["matched"] > 0 and by_comm["filters"]["comm"] == ["cat\ufffd"]
    assert not any(ord(c) < 32 and c != "\n" for c in text)  # names' control bytes not printed as they are
    one = json.loads(fusetrace("report", str(m.trace), "--json", "--path", os.fsdecode(b"/caf\xff")).stdout)
    other = json.loads(fusetrace("report", str(m.trace), "--json", "--path", "/caf\\xff").stdout)
    assert one["matched"] > 0 and other["matched"] > 0 and one["filters"]["path"] == "/caf\ufffd"

    iolog = tmp_path / "x.iolog"
    fusetrace("export", str(m.trace), "--format", "fio-iolog", "-o", str(iolog))
    names = {line.split(b" ")[1] for line in iolog.read_bytes().splitlines()[1:]}
    assert {LATIN1, BACKSLASH, HIGH + b"/" + HIGH[::-1]} <= names  # (HIGH/LONG: over fio's 256 bytes)
    perfetto = tmp_path / "x.json"
    fusetrace("export", str(m.trace), "--format", "perfetto", "-o", str(perfetto))
    args = [e["args"] for e in json.loads(perfetto.read_text())["traceEvents"] if e.get("ph") == "X"]
    assert any(a["path"] == "/caf\ufffd" and bytes.fromhex(a["path_hex"]) == b"/" + LATIN1 for a in args)
    assert all("path_hex" not in a for a in args if a["path"] == "/caf\\xff")
    csv = tmp_path / "x.csv"
    fusetrace("export", str(m.trace), "--format", "csv", "-o", str(csv))
    assert "caf\ufffd" in csv.read_text(encoding="utf-8")

    s = json.loads(fusetrace("simulate", str(m.trace), "--profile", "efs-bursting", "--json").stdout)
    assert s["operations"]["simulated"] > 0


def test_a_fault_rule_matches_a_name_that_is_not_utf8(mount):
    """A glob given with byte 0xFF takes that byte only; `?` takes one byte that is not
    UTF-8; the real name caf\\xff is neither.  The trace names the rule beside the bytes."""
    m = mount(trace=True)
    root = os.fsencode(m.mountpoint)
    for name in (LATIN1, b"caf\xfe", BACKSLASH):
        open(os.path.join(root, name), "wb").close()
    fusetrace(
        "fault",
        str(m.mountpoint),
        "add",
        "--id",
        "ff",
        "--op",
        "open",
        "--path",
        os.fsdecode(b"/caf\xff"),
        "--errno",
        "EIO",
        "--count",
        "9",
    )
    fusetrace(
        "fault",
        str(m.mountpoint),
        "add",
        "--id",
        "one",
        "--op",
        "open",
        "--path",
        "/caf?",
        "--errno",
        "EACCES",
        "--count",
        "9",
    )
    assert fusetrace("fault", str(m.mountpoint), "list").stdout.count("path /caf?") == 2  # ff's 0xFF shown as ?

    def fails(name: bytes) -> int:
        try:
            open(os.path.join(root, name), "rb").close()
        except OSError as exc:
            return exc.errno or -1
        return 0

    assert [fails(n) for n in (LATIN1, b"caf\xfe", BACKSLASH)] == [errno.EIO, errno.EACCES, 0]
    m.unmount()
    faulted = {(r["fault"], r["path_raw"]) for r in pq.read_table(m.trace).to_pylist() if r["fault"]}
    assert faulted == {("ff", b"/caf\xff"), ("one", b"/caf\xfe")}


def _command(*args: str | bytes, **env: str) -> bytes:
    """The fusetrace command line's output, as bytes: it prints a name given to it as given."""
    done = subprocess.run(
        [sys.executable, "-m", "fusetrace", *args], capture_output=True, timeout=120, env={**os.environ, **env}
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_name_given_is_printed_back_as_its_bytes_in_a_strict_locale(tmp_path):
    """Where the locale makes Python's output strict UTF-8 (en_US.UTF-8; C.UTF-8 is not),
    an output file's name with byte 0xFF is printed as given, not a traceback after the work."""
    with TraceWriter(tmp_path / "t", {}) as w:
        w.record(TraceRecord(1, 1, "getattr", 1, os.fsdecode(b"/" + LATIN1), None, 0, 0, 0, 0, 0, 1, 0, 0, 0))
    out = os.path.join(os.fsencode(tmp_path), b"x\xff.csv")
    said = _command("export", str(tmp_path / "t"), "--format", "csv", "-o", out, PYTHONIOENCODING="utf-8:strict")
    assert said.startswith(out + b": nfsslower CSV: 0 R, 0 W, 0 O, 1 G")
    with open(out, encoding="utf-8") as f:
        assert f.read().splitlines()[1].endswith(",caf\ufffd")


# Run in a mount namespace of its own, so that no other process on the host (another test
# run reading /proc/self/mountinfo) meets the mount point that is not UTF-8.
_IN_NAMESPACE = """
set -e
trap 'fusermount3 -uz "$2" 2>/dev/null || true' EXIT
"$0" -m fusetrace mount "$1" "$2" --trace "$3" --log "$4"
: > "$2/$5"
"$0" -m fusetrace stats "$2"
"$0" -m fusetrace umount "$2"
"""


def test_a_mountpoint_that_is_not_utf8(tmp_path):
    """Mounted, asked, unmounted and reported on by its bytes: its line in the mount table
    (not UTF-8) stops no fusetrace command."""
    src, trace = tmp_path / "src", tmp_path / "t"
    src.mkdir()
    mnt = os.path.join(os.fsencode(tmp_path), b"mnt\xff")
    os.mkdir(mnt)
    done = subprocess.run(
        unshared(_IN_NAMESPACE, sys.executable, str(src), mnt, str(trace), str(tmp_path / "log"), LATIN1),
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert mnt in done.stdout and b"inodes known: 2" in done.stdout and b"unmounted " + mnt in done.stdout
    assert os.listdir(os.fsencode(src)) == [LATIN1]
    glob = mnt + b"/caf\xff"  # with the mountpoint in front, as a user may write it
    assert json.loads(_command("report", str(trace), "--json", "--path", glob))["matched"] > 0
