"""What a small-file request costs inside fusetrace's server, part by part, in one process.

A `tar x` sends the server about 13 requests per file (getxattr, setattr,
getattr, lookup, create, flush, release, write, mkdir), and a traced mount is judged
against a C server that answers the same requests.  Across processes a few microseconds
cannot be told apart (bench/handlercost.py says why), so each request is timed here,
called as pyfuse3 calls it, on a mount that neither shapes nor traces, beside the system
calls its handler makes, done bare by this process:

- getxattr of an absent attribute: `getxattr("/proc/self/fd/N")` (the O_PATH descriptor
  cannot take fgetxattr);
- getattr: `fstat` of the O_PATH descriptor;
- lookup of a known name: `openat(O_PATH|O_NOFOLLOW)`, `fstat`, `close`;
- setattr of the mode: `chmod("/proc/self/fd/N")`, then `fstat`;
- create, flush and release of a new file, as the kernel sends them for
  `open(O_CREAT)` and `close`: `openat(O_CREAT|O_NOFOLLOW)`, `fstat`, the O_PATH
  descriptor by `/proc/self/fd`, its `fstat`, a duplicate closed, the two closed;
- mkdir: `mkdirat`, `openat(O_PATH|O_NOFOLLOW)`, `fstat`.

Creates and mkdirs run as root and as another user, whose files are made as that user
(the thread's fsuid, fsgid and groups switched for the call: syscalls.credentials).
CPU per request, the median of the rounds, handler and bare calls taking turns.

    python bench/requestcost.py [--rounds N] [--calls N]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pyfuse3
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fusetrace.server import nofollow, syscalls
from fusetrace.server.handlers import Operations
from fusetrace.server.inline import InlinePolicy
from fusetrace.server.inodes import ROOT
from fusetrace.server.workers import Workers

THRESHOLD_US = 100.0  # the mount's default (--inline auto on a local source)
OTHER_UID = 1000
Step = Callable[[int], Awaitable[None]]


class Ctx:
    """A request context as pyfuse3 gives one: this process, as `uid`."""

    def __init__(self, uid: int) -> None:
        self.pid = os.getpid()
        self.uid = self.gid = uid
        self.umask = 0o022


def _mode_only() -> pyfuse3.SetattrFields:
    """What pyfuse3 passes for a chmod (its SetattrFields cannot be made in Python)."""
    fields = SimpleNamespace(
        update_mode=True,
        update_uid=False,
        update_gid=False,
        update_size=False,
        update_atime=False,
        update_mtime=False,
        update_ctime=False,
    )
    return cast(pyfuse3.SetattrFields, fields)


async def _steps(ops: Operations, tmp: str) -> dict[str, tuple[Step, Step]]:
    """Each request's (handler, bare) pair: step(i) makes call number i."""
    root = Ctx(0)
    entry = await ops.lookup(ROOT, b"f", root)
    ino = entry.st_ino
    fd = os.open(os.path.join(tmp, "f"), os.O_PATH | os.O_CLOEXEC)
    proc = f"/proc/self/fd/{fd}"
    attr = pyfuse3.EntryAttributes()
    attr.st_mode = 0o100600
    fields = _mode_only()
    dirs = {}
    for uid in (0, OTHER_UID):
        made = await ops.mkdir(ROOT, f"d{uid}".encode(), 0o777, root)
        os.chmod(os.path.join(tmp, f"d{uid}"), 0o777)
        dirs[uid] = (made.st_ino, os.open(os.path.join(tmp, f"d{uid}"), os.O_PATH | os.O_CLOEXEC))

    async def getxattr(i: int) -> None:
        try:
            await ops.getxattr(ino, b"security.capability", root)
        except pyfuse3.FUSEError:  # ENODATA, as the kernel gets it
            pass

    async def bare_getxattr(i: int) -> None:
        try:
            os.getxattr(proc, "security.capability")
        except OSError:
            pass

    async def getattr_(i: int) -> None:
        await ops.getattr(ino, root)

    async def bare_getattr(i: int) -> None:
        os.stat(fd)

    async def lookup(i: int) -> None:
        e = await ops.lookup(ROOT, b"f", root)
        await ops.forget([(e.st_ino, 1)])

    async def bare_lookup(i: int) -> None:
        found = os.open("f", os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirs_root)
        os.stat(found)
        os.close(found)

    async def setattr_(i: int) -> None:
        await ops.setattr(ino, attr, fields, None, root)

    async def bare_setattr(i: int) -> None:
        os.chmod(proc, 0o600)
        os.stat(fd)

    dirs_root = os.open(tmp, os.O_PATH | os.O_CLOEXEC)
    steps: dict[str, tuple[Step, Step]] = {
        "getxattr (absent)": (getxattr, bare_getxattr),
        "getattr": (getattr_, bare_getattr),
        "lookup": (lookup, bare_lookup),
        "setattr (mode)": (setattr_, bare_setattr),
    }
    for uid, who in ((0, "root"), (OTHER_UID, f"uid {OTHER_UID}")):
        steps[f"create, flush, release ({who})"] = _create_pair(ops, uid, *dirs[uid])
        steps[f"mkdir ({who})"] = _mkdir_pair(ops, uid, *dirs[uid])
    return steps


def _owner(uid: int) -> nofollow.Owner:
    return nofollow.owner_for(Ctx(uid))


def _create_pair(ops: Operations, uid: int, dir_ino: int, dir_fd: int) -> tuple[Step, Step]:
    ctx, owner = Ctx(uid), _owner(uid)

    async def handler(i: int) -> None:
        info, e = await ops.create(dir_ino, f"h{i}".encode(), 0o644, os.O_WRONLY | os.O_CREAT, ctx)
        await ops.flush(info.fh)
        await ops.release(info.fh)
        await ops.forget([(e.st_ino, 1)])

    async def bare(i: int) -> None:
        with syscalls.credentials(owner):
            f = os.open(f"b{i}", os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
        os.stat(f)
        path = os.open(f"/proc/self/fd/{f}", os.O_PATH | os.O_CLOEXEC)
        os.stat(path)
        os.close(os.dup(f))
        os.close(f)
        os.close(path)

    return handler, bare


def _mkdir_pair(ops: Operations, uid: int, dir_ino: int, dir_fd: int) -> tuple[Step, Step]:
    ctx, owner = Ctx(uid), _owner(uid)

    async def handler(i: int) -> None:
        e = await ops.mkdir(dir_ino, f"hm{i}".encode(), 0o755, ctx)
        await ops.forget([(e.st_ino, 1)])

    async def bare(i: int) -> None:
        with syscalls.credentials(owner):
            os.mkdir(f"bm{i}", 0o755, dir_fd=dir_fd)
        made = os.open(f"bm{i}", os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        os.stat(made)
        os.close(made)

    return handler, bare


async def _measure(ops: Operations, tmp: str, calls: int, rounds: int) -> dict[str, tuple[float, float]]:
    """CPU µs per request of (handler, bare calls): medians over `rounds`, in turns."""
    steps = await _steps(ops, tmp)
    spent: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in steps}
    n = 0
    for r in range(rounds):
        for name, pair in steps.items():
            order = (0, 1) if r % 2 == 0 else (1, 0)
            for side in order:
                step = pair[side]
                t0 = time.process_time()
                for i in range(n, n + calls):
                    await step(i)
                spent[name][side].append((time.process_time() - t0) / calls * 1e6)
            n += calls
    return {k: (statistics.median(h), statistics.median(b)) for k, (h, b) in spent.items()}


def request_us(calls: int = 2000, rounds: int = 5) -> dict[str, tuple[float, float]]:
    """{request: (handler µs, bare system calls µs)} of CPU per request."""
    with tempfile.TemporaryDirectory(prefix="fusetrace-requestcost-", dir="/var/tmp") as tmp:
        open(os.path.join(tmp, "f"), "w").close()
        workers = Workers(1)
        ops = Operations(tmp, workers=workers, inline=InlinePolicy(THRESHOLD_US))
        try:
            return trio.run(_measure, ops, tmp, calls, rounds)
        finally:
            ops.close()
            workers.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    print("| request | fusetrace's handler | the same system calls, bare | the handler's own |")
    print("|---|---|---|---|")
    for name, (handler, bare) in request_us(args.calls, args.rounds).items():
        print(f"| {name} | {handler:.1f} µs | {bare:.1f} µs | {handler - bare:+.1f} µs |")


if __name__ == "__main__":
    main()
