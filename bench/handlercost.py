"""What fusetrace's write handler costs beyond the pyfuse3 example's, in one process.

A server's rate on a small VM moves by up to a fifth between processes running the same
code (a process keeps one of two speeds for its life), so a difference of a few per cent
between two servers cannot be read from their IOPS.  The handlers are timed apart
instead, in this process, called as pyfuse3 calls them, alternating: CPU per 4 KiB write
of a cached file by

- fusetrace's `Operations.write` on a mount that neither shapes nor traces (its plain
  path: the inline policy's check and timing, the file's size and unwritten state kept);
- the pyfuse3 example's write handler (a seek, then a write);
- a bare pwrite, the least any handler does.
"""

import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common import Caller

from fusetrace.server.handlers import Operations
from fusetrace.server.inline import InlinePolicy
from fusetrace.server.inodes import ROOT
from fusetrace.server.workers import Workers

BLOCK = 4096
BLOCKS = 4096  # a 16 MiB file, written at random blocks as fio's randwrite row does
THRESHOLD_US = 100.0  # the mount's default (--inline auto on a local source)

Handler = Callable[[int, int, bytes], Awaitable[int]]


async def _example_write(fh: int, off: int, buf: bytes) -> int:
    os.lseek(fh, off, os.SEEK_SET)
    return os.write(fh, buf)


async def _bare_write(fh: int, off: int, buf: bytes) -> int:
    return os.pwrite(fh, buf, off)


async def _times(ops: Operations, n: int, repeats: int) -> dict[str, list[float]]:
    """CPU seconds per write of each handler, `repeats` times each, the handlers taking
    turns, on one file opened by fusetrace's handlers as the kernel would ask."""
    entry = await ops.lookup(ROOT, b"data", Caller())
    info = await ops.open(entry.st_ino, os.O_RDWR, Caller())
    handlers: dict[str, Handler] = {"fusetrace": ops.write, "example": _example_write, "bare": _bare_write}
    buf = os.urandom(BLOCK)
    rand = random.Random(1)
    offsets = [rand.randrange(BLOCKS) * BLOCK for _ in range(n)]
    spent: dict[str, list[float]] = {name: [] for name in handlers}
    names = list(handlers)
    for turn in range(repeats):
        for name in names[turn % len(names) :] + names[: turn % len(names)]:  # each goes first in turn
            write = handlers[name]
            t0 = time.process_time()
            for off in offsets:
                await write(info.fh, off, buf)
            spent[name].append((time.process_time() - t0) / n)
    await ops.release(info.fh)
    await ops.forget([(entry.st_ino, 1)])
    return spent


def write_us(n: int = 50_000, repeats: int = 7) -> dict[str, float]:
    """CPU (µs) per 4 KiB write of each handler: the median of `repeats` turns."""
    with tempfile.TemporaryDirectory(prefix="fusetrace-handlercost-") as tmp:
        with open(os.path.join(tmp, "data"), "wb") as f:
            f.write(os.urandom(BLOCKS * BLOCK))
        workers = Workers(1)
        ops = Operations(tmp, workers=workers, inline=InlinePolicy(THRESHOLD_US))
        try:
            spent = trio.run(_times, ops, n, repeats)
        finally:
            ops.close()
            workers.close()
    return {name: statistics.median(s) * 1e6 for name, s in spent.items()}


if __name__ == "__main__":
    for name, us in write_us().items():
        print(f"{name:10s} {us:5.2f} µs per 4 KiB write")
