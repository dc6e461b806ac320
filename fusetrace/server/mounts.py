"""What the kernel says about mounts: /proc/self/mountinfo and mountpoint states.

A FUSE mount whose server is stopped or hung blocks whoever touches it, for as long
as the server does not answer.  So nothing here makes a system call on a path
before /proc/self/mountinfo has said whether a FUSE mount holds it; when one does,
it is first probed with a stat in a child process that is given PROBE_TIMEOUT
seconds (a child, not a thread: a request the server has taken and never answers
leaves its caller in uninterruptible sleep, and a stuck child need not be waited for).
"""

import os
import stat
import subprocess
import sys
from dataclasses import dataclass

from ..errors import UserError
from ..texttable import printable

FSTYPE = "fuse.fusetrace"
PROBE_TIMEOUT = 2.0  # seconds a FUSE mount has to answer a stat before it is called hung
MAX_SYMLINKS = 40  # as the kernel's path walk

HUNG, STALE = "hung", "stale"

_STAT = """
import os, sys
try:
    os.stat(sys.argv[1])
except OSError as exc:
    sys.exit(3 if exc.errno == 107 else 0)  # 107: ENOTCONN, a stale mount; any other answer is one
"""


@dataclass(frozen=True)
class MountInfo:
    mountpoint: str
    fstype: str
    source: str
    dev_minor: int
    owner: int | None = None  # a FUSE mount's user_id=: the uid that mounted it (the kernel's word)


class NotAnswering(UserError):
    """A path at or below a FUSE mount whose server does not answer, or has gone."""

    def __init__(self, what: str, path: str, mount: MountInfo, answer: str, at: str | None = None):
        """`path` as given; `at`, where it led (resolved), when not `path` itself."""
        how = f"fusetrace umount {mount.mountpoint}" if mount.fstype == FSTYPE else f"fusermount3 -u {mount.mountpoint}"
        where = "" if (at or path) == mount.mountpoint else f"on {mount.mountpoint}, "
        if answer == STALE:
            why = f"{where}a stale FUSE mount (transport endpoint is not connected)"
        elif where:
            why = f"{where}whose FUSE server does not answer (hung or stopped; no reply in {PROBE_TIMEOUT:g} s)"
        else:
            why = (
                f"a FUSE server is mounted there and does not answer (hung or stopped; no reply in {PROBE_TIMEOUT:g} s)"
            )
        super().__init__(f"{what + ' ' if what else ''}{path}: {why}; clear it with: {how}")


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def table() -> dict[str, MountInfo]:
    """Every mount point, with its topmost mount."""
    found = {}
    # any user's mount point may be bytes that are not UTF-8: kept as os.fsdecode keeps them
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = left.split()
            point = _unescape(fields[4])
            fstype, source, options = [*right.split(), ""][:3]
            owner = next((o[len("user_id=") :] for o in options.split(",") if o.startswith("user_id=")), "")
            found[point] = MountInfo(
                point, fstype, _unescape(source), int(fields[2].split(":")[1]), int(owner) if owner.isdigit() else None
            )
    return found


def is_fuse(fstype: str) -> bool:
    return fstype in ("fuse", "fuseblk") or fstype.startswith(("fuse.", "fuseblk."))


def holder(path: str, mounts: dict[str, MountInfo]) -> MountInfo:
    """The mount holding `path` (absolute, resolved): that of the longest mount point at
    or above it."""
    while path not in mounts and path != "/":
        path = os.path.dirname(path)
    return mounts.get(path) or MountInfo("/", "", "", 0)  # no root in the table: nothing known


def probe(path: str, timeout: float = PROBE_TIMEOUT) -> str | None:
    """Whether `path` answers a stat within `timeout` seconds: None when it does (with
    its attributes or an error), STALE when its FUSE server has gone (ENOTCONN), HUNG
    when no answer came.  The stat runs in a child process, killed when late."""
    child = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _STAT, path],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        code = child.wait(timeout)
    except subprocess.TimeoutExpired:
        _drop(child)
        return HUNG
    except BaseException:  # interrupted (Ctrl-C, SIGTERM): the child goes too
        _drop(child)
        raise
    return STALE if code == 3 else None


def _drop(child: subprocess.Popen[bytes]) -> None:
    child.kill()
    try:
        child.wait(0.5)
    except subprocess.TimeoutExpired:
        pass  # in uninterruptible sleep on the server: it goes when the mount does


def _resolve(path: str, what: str, probe_last: bool) -> str:
    """`path` absolute with every symlink resolved, never touching a mount point (they
    are never symlinks) and probing each FUSE mount before the first system call below
    it; a stale or hung one raises NotAnswering.  probe_last: when `path` itself is a
    FUSE mount point, probe it too (it is about to be used, not only named)."""
    mounts = table()
    probed: set[str] = set()

    def answers(p: str) -> None:
        m = holder(p, mounts)
        if is_fuse(m.fstype) and m.mountpoint not in probed:
            probed.add(m.mountpoint)
            answer = probe(m.mountpoint)
            if answer is not None:
                raise NotAnswering(what, path, m, answer, at=p)

    rest = [c for c in os.path.abspath(path).split("/") if c]
    done, hops = "/", 0
    while rest:
        name = rest.pop(0)
        if name == ".":
            continue
        if name == "..":
            done = os.path.dirname(done)
            continue
        here = os.path.join(done, name)
        if here in mounts:
            if probe_last and not rest:
                answers(here)
            done = here
            continue
        answers(here)
        try:
            mode = os.lstat(here).st_mode
        except OSError:
            mode = 0  # missing (yet), or not reachable: taken as written, as realpath does
        if not stat.S_ISLNK(mode):
            done = here
            continue
        hops += 1
        if hops > MAX_SYMLINKS:  # a loop: the rest as written, as realpath does
            return os.path.join(here, *rest)
        target = os.readlink(here)
        if target.startswith("/"):
            done = "/"
        rest = [c for c in target.split("/") if c] + rest
    return done


def canonical(path: str) -> str:
    """`path` absolute with its symlinks resolved, where that touches no mount point: the
    mount itself is never touched (a stat of a live mount from its own server, or of a
    hung one, blocks).  A stale or hung FUSE mount on the way raises NotAnswering."""
    return _resolve(path, "", probe_last=False)


def reachable(path: str, what: str = "") -> str:
    """canonical(path), and when `path` is itself a FUSE mount point it was probed too:
    a path about to be used (a source, a trace directory) raises NotAnswering, named as
    `what`, rather than blocking."""
    return _resolve(path, what, probe_last=True)


def mounted_at(path: str) -> MountInfo | None:
    """The topmost mount whose mount point is exactly `path` (absolute), if any."""
    return table().get(path)


def fstype_of(path: str) -> str:
    """The type of the file system holding `path` (absolute, resolved): that of the
    longest mount point above it."""
    return holder(path, table()).fstype


def stale(path: str) -> bool:
    """True when a FUSE server has gone away and left its mount behind (bounded: a hung
    one is not stale, and does not block)."""
    m = mounted_at(path)
    return m is not None and is_fuse(m.fstype) and probe(path) == STALE


def check_mountpoint(source: str, mountpoint: str, trace_dir: str | None) -> None:
    """The mount point (canonical) is a directory with nothing mounted on it, neither the
    source (resolved) nor inside it, and the trace directory is not inside it; each
    failure one line.  Nothing touches the mount point before the mount table says what
    is there, and a FUSE mount there is probed with a bounded stat."""
    busy = mounted_at(mountpoint)
    if busy is not None:
        if is_fuse(busy.fstype):
            answer = probe(mountpoint)
            if answer is not None:
                raise NotAnswering("mountpoint", mountpoint, busy, answer)
        raise UserError(f"mountpoint {mountpoint}: busy, {busy.fstype} from {busy.source} is mounted there")
    if not os.path.exists(mountpoint):
        raise UserError(f"mountpoint {mountpoint}: no such directory")
    if not os.path.isdir(mountpoint):
        raise UserError(f"mountpoint {mountpoint}: not a directory")
    # the server would reach its own mount through the source, and deadlock on it
    if mountpoint == source:
        raise UserError(f"mountpoint {mountpoint}: is the source itself; mount on another directory")
    if mountpoint.startswith(source.rstrip("/") + "/"):
        raise UserError(f"mountpoint {mountpoint}: inside the source {source}; mount outside it")
    if trace_dir is not None:
        trace = reachable(trace_dir, "--trace")
        if trace == mountpoint or trace.startswith(mountpoint.rstrip("/") + "/"):
            raise UserError(
                f"--trace {trace_dir}: inside the mountpoint {mountpoint}, which the mount "
                f"would hide (its records would be lost); trace outside the mount"
            )


def users(mountpoint: str, most: int = 5) -> list[str]:
    """What keeps a mount busy: up to `most` processes whose working directory, root,
    program, an open descriptor or a mapped file lies in it, as 'name (pid N)'.  Read from /proc's links,
    which the kernel writes out without asking the mount, so a hung server stops nothing
    here.  (A process waiting inside a request holds no descriptor there yet: the server
    names those it holds long, Holds.held_long, server/holds.py.)"""
    inside = mountpoint.rstrip("/") + "/"
    found = []
    for pid in sorted((p for p in os.listdir("/proc") if p.isdigit()), key=int):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            links = [os.readlink(f"/proc/{pid}/{what}") for what in ("cwd", "root", "exe", *(f"fd/{fd}" for fd in fds))]
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="surrogateescape") as f:  # mapped, fd closed
                links += [line.split(maxsplit=5)[-1].rstrip("\n") for line in f if line.count(" ") >= 5]
            if any(link == mountpoint or link.startswith(inside) for link in links):
                with open(f"/proc/{pid}/comm", errors="replace") as f:
                    found.append(f"{printable(f.read().strip())} (pid {pid})")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if len(found) == most:
            break
    return found
