"""For the tests of `fusetrace capture` (tests/capture/): local file systems to capture on
(a tmpfs, a loop-mounted ext4), the capture run as a user runs it, its records read back,
and strace's view of the same run turned into the capture's operations, to count against.

strace is run `-ff -y -s 4096 -o PREFIX`: a file per thread (no interleaved halves of
calls), each descriptor followed by its path (`3</mnt/f>`), names whole.  A call is the
mount's by the rules the capture's probes apply (fusetrace/capture/calls.py, program.py):
a call on a descriptor by the descriptor's file; an open that succeeded by what it opened;
any other named call by its name, absolute below the mount point or relative from a
directory on it (the working directory, followed through chdir, fchdir and clone)."""

import contextlib
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import duckdb

from fusetrace.capture.calls import FD_CALLS, NAMED_CALLS, NOT_RECORDED

from . import is_mounted, poll

FUSETRACE = [sys.executable, "-m", "fusetrace"]
CAPTURE_TIMEOUT_S = 280  # bpftrace's start (8-15 s, much more on a loaded host) and the workload

# the tracepoints' names strace (6.1, x86_64) knows by the older ones; fchmodat2 it does not know
_STRACE_NAME = {"newstat": "stat", "newlstat": "lstat", "newfstat": "fstat"}
_UNKNOWN_TO_STRACE = {"fchmodat2"}
_FORKS = ("clone", "clone3", "fork", "vfork")
OPS_OF = {_STRACE_NAME.get(c.name, c.name): c.op for c in (*FD_CALLS, *NAMED_CALLS) if c.name not in _UNKNOWN_TO_STRACE}
FD_NAMES = {_STRACE_NAME.get(c.name, c.name) for c in FD_CALLS} | {"fgetxattr", "fsetxattr", "fremovexattr"}
STRACE_CALLS = ",".join(sorted(OPS_OF) + list(_FORKS))
# where a named call's paths are: (dirfd index or None, path index), a second one for rename and link
_AT = (0, 1)
_PATHS: dict[str, tuple[tuple[int | None, int], ...]] = {
    **{n: ((None, 0),) for n in OPS_OF if n not in FD_NAMES},
    **dict.fromkeys(
        [
            *("openat", "openat2", "newfstatat", "statx", "faccessat", "faccessat2", "readlinkat", "mkdirat"),
            *("mknodat", "unlinkat", "fchmodat", "fchownat", "utimensat"),
        ],
        (_AT,),
    ),
    "renameat": (_AT, (2, 3)),
    "renameat2": (_AT, (2, 3)),
    "linkat": (_AT, (2, 3)),
    "rename": ((None, 0), (None, 1)),
    "link": ((None, 0), (None, 1)),
    "symlinkat": ((1, 2),),
    "symlink": ((None, 1),),
}
_OPENS = {"open", "openat", "creat", "openat2"}
_FLAGS = {"open": 1, "openat": 2}  # the flags' argument


def bpftrace_json(name: bytes) -> bytes:
    """`name` as a JSON string, escaped as bpftrace 0.17's JSON output escapes it: quote and
    backslash, control bytes as \\u00XX, and each byte above 0x7f as \\uffffffXX (a signed
    char printed with %04x)."""
    out = b""
    for b in name:
        if b in b'"\\':
            out += b"\\" + bytes([b])
        elif b < 0x20:
            out += b"\\u%04x" % b
        elif b > 0x7F:
            out += b"\\u%08x" % (b | 0xFFFFFF00)
        else:
            out += bytes([b])
    return b'"' + out + b'"'


@contextlib.contextmanager
def local_mount(kind: str, where: Path) -> Iterator[Path]:
    """A fresh tmpfs or loop-mounted ext4 at where/mnt; unmounted (polled until it is gone)
    and removed, image and all, whatever happened."""
    mnt = where / "mnt"
    mnt.mkdir(parents=True)
    image = where / "ext4.img"
    try:
        if kind == "tmpfs":
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(mnt)], check=True)
        else:
            with image.open("wb") as f:
                f.truncate(64 << 20)
            subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True)
            subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], check=True)  # (loop freed at umount)
        yield mnt
    finally:
        if is_mounted(mnt):
            subprocess.run(["umount", str(mnt)], check=False)
            if is_mounted(mnt):  # busy: gone once its last user has
                subprocess.run(["umount", "-l", str(mnt)], check=True)
            poll(lambda: not is_mounted(mnt), timeout=60)
        image.unlink(missing_ok=True)
        shutil.rmtree(mnt, ignore_errors=True)


def capture(
    mountpoint: Path, trace: Path, *command: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`fusetrace capture MOUNTPOINT --trace TRACE -- COMMAND`, as a user runs it; it must succeed."""
    done = subprocess.run(
        [*FUSETRACE, "capture", str(mountpoint), "--trace", str(trace), "--", *command],
        capture_output=True,
        text=True,
        timeout=CAPTURE_TIMEOUT_S,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return done


def records(trace: Path) -> list[dict]:
    """The trace's records in start order, each a dict of its columns."""
    rel = duckdb.sql(f"SELECT * FROM read_parquet('{trace}/*.parquet') ORDER BY start_ns")
    return [dict(zip(rel.columns, row)) for row in rel.fetchall()]


def raw(rec: dict, column: str = "path") -> bytes:
    """A record's path as the bytes the caller named (path_raw when they are not UTF-8)."""
    kept = rec[f"{column}_raw"]
    return bytes(kept) if kept is not None else (rec[column] or "").encode()


def strace_argv(prefix: Path, *command: str) -> list[str]:
    """`command` under strace, following the calls a capture follows, a file per thread."""
    return ["strace", "-ff", "-y", "-s", "4096", "-o", str(prefix), "-e", f"trace={STRACE_CALLS}", *command]


def strace_ops(prefix: Path, mountpoint: Path, cwd: Path) -> tuple[Counter[str], set[int]]:
    """From strace's files PREFIX.TID of a command started in `cwd`: its calls on the mount,
    counted by the operation the capture names them, and its threads."""
    calls = {int(p.suffix[1:]): _parsed(p) for p in prefix.parent.glob(prefix.name + ".*")}
    children = {int(ret) for lines in calls.values() for name, _, ret, _ in lines if name in _FORKS and ret.isdigit()}
    (first,) = set(calls) - children
    mount = os.fsencode(mountpoint)
    count: Counter[str] = Counter()
    todo = [(first, os.fsencode(cwd))]
    while todo:
        tid, where = todo.pop()
        for name, args, ret, ret_path in calls.pop(tid, []):
            if name in _FORKS:
                if ret.isdigit():
                    todo.append((int(ret), where))
                continue
            if name in ("chdir", "fchdir") and ret == "0":
                where = _at(where, args[0]) if name == "chdir" else _fd_path(args[0]) or b""
            op = _op(name, args, ret, ret_path, where, mount)
            if op and op not in NOT_RECORDED:
                count[op] += 1
    return count, {int(p.suffix[1:]) for p in prefix.parent.glob(prefix.name + ".*")}


def _op(name: str, args: list[str], ret: str, ret_path: bytes | None, cwd: bytes, mount: bytes) -> str | None:
    """The operation the capture records for one strace line; None: not the mount's."""
    op = OPS_OF[name]
    if name in FD_NAMES:
        path = _fd_path(args[0])
        if path is None or not _below(path, mount):
            return None
        if op in ("flush", "fsync") and os.path.isdir(path):
            return "releasedir" if op == "flush" else "fsyncdir"
        return op
    if name in _OPENS and ret_path is not None:  # opened: by what it opened
        if not _below(ret_path, mount):
            return None
        mine = True
    else:
        mine = any(_named_below(args, d, p, cwd, mount) for d, p in _PATHS[name])
    if not mine:
        return None
    flags = args[_FLAGS[name]] if name in _FLAGS else ""
    if name in _OPENS:
        if "O_CREAT" in flags or name == "creat":
            op = "create"
        if "O_DIRECTORY" in flags or (ret_path is not None and os.path.isdir(ret_path)):
            op = "opendir"
    if name == "unlinkat" and "AT_REMOVEDIR" in args[2]:
        op = "rmdir"
    return op


def _named_below(args: list[str], dirfd: int | None, at: int, cwd: bytes, mount: bytes) -> bool:
    name = b"" if args[at] == "NULL" else _string(args[at])  # (NULL: the descriptor's own file, futimens(3))
    if name is None:
        return False
    if name.startswith(b"/"):
        return name == mount or name.startswith(mount + b"/")
    start = cwd if dirfd is None else _fd_path(args[dirfd])
    return start is not None and _below(start, mount)


def _below(path: bytes, mount: bytes) -> bool:
    path = path.removesuffix(b" (deleted)")
    return path == mount or path.startswith(mount + b"/")


def _at(cwd: bytes, arg: str) -> bytes:
    name = _string(arg) or b""
    return os.path.normpath(os.path.join(cwd, name))


_FD = re.compile(r"^(?:-?\d+|AT_FDCWD)<(.*)>$", re.S)  # (-y: AT_FDCWD</the working directory>)


def _fd_path(arg: str) -> bytes | None:
    m = _FD.match(arg)
    return _unescape(m.group(1)) if m else None


def _string(arg: str) -> bytes | None:
    if not arg.startswith('"'):
        return None  # NULL, or a name strace could not read
    return _unescape(arg[1 : arg.rindex('"')])


def _unescape(text: str) -> bytes:
    return text.encode("latin-1", "backslashreplace").decode("unicode_escape").encode("latin-1")


_CALL = re.compile(r"^(\w+)\(")
_RET = re.compile(r"^\s*=\s*(-?\d+|\?)(?:<(.*?)>)?")


def _parsed(path: Path) -> list[tuple[str, list[str], str, bytes | None]]:
    """strace's lines: (call, its arguments as printed, its result, the path of the
    descriptor it returned), the calls it follows only."""
    out = []
    for line in path.read_text(encoding="latin-1").splitlines():
        m = _CALL.match(line)
        if not m or (m.group(1) not in OPS_OF and m.group(1) not in _FORKS):
            continue  # +++ exited +++, --- SIGCHLD ---
        args, end = _split(line, m.end())
        r = _RET.match(line[end:])
        if r is None or r.group(1) == "?":
            continue
        out.append((m.group(1), args, r.group(1), _unescape(r.group(2)) if r.group(2) is not None else None))
    return out


def _split(line: str, i: int) -> tuple[list[str], int]:
    """The arguments of the call whose "(" ends before `i`, split at its own commas; and the
    index past its ")"."""
    args, start, depth = [], i, 0
    while i < len(line):
        ch = line[i]
        if ch == '"':
            i += 1
            while line[i] != '"':
                i += 2 if line[i] == "\\" else 1
        elif ch == "<" and (line[i - 1 : i].isdigit() or line.endswith("AT_FDCWD", 0, i)):  # a descriptor's path
            i = line.index(">", i)
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                args.append(line[start:i].strip())
                return [a for a in args if a], i + 1
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(line[start:i].strip())
            start = i + 1
        i += 1
    raise AssertionError(f"an strace line cut short: {line!r}")
