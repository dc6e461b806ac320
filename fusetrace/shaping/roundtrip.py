"""FUSE's own round trip through a fresh mount, as another process sees it.

A child process statfs's the mount over and over (the kernel never caches statfs, so
each is a full round trip) and prints each one's time.  The emulator replies that much
ahead of the model's time (emulation.py, calibrate); the trace keeps the figure
(`fuse_round_trip_ns`) so `fusetrace report` can say how much of a run's wall time the
operations it recorded account for.  The child waits for a line on its stdin before it
starts, so the server can leave its requests out of the trace first.

Between calls the child pauses (PAUSE_S), so that each statfs finds the server waiting for
a request, as a caller that does anything between its calls does.  One sent the moment
the reply arrives is often already queued when the server looks for its next request,
and is read without a turn of trio's loop (server/fuseread.py): with the pause the probes
measure the trip a caller with think time meets, an idle CPU woken for it, and emulated
qd1 latencies came nearer the profile (docs/BENCHMARKS.md, "Figures behind design choices:
emulator/, shaping/ and request.py").
"""

import statistics
import subprocess
import sys
from collections.abc import Callable

import trio

WARM_UP_PROBES = 20  # the first round trips of a new mount (and a cold machine) run slow
PAUSE_S = 0.0005  # between probes: the server is back waiting in trio well within it

_PROBE = """
import os, sys, time
sys.stdin.readline()
for _ in range(int(sys.argv[2])):
    t = time.monotonic_ns()
    os.statvfs(sys.argv[1])
    print(time.monotonic_ns() - t)
    time.sleep(float(sys.argv[3]))
"""


async def probe(mountpoint: str, probes: int, started: Callable[[int], None]) -> list[int]:
    """The round trips (ns) of `probes` statfs calls on `mountpoint`, warm-up ones
    included; `started(pid)` is told the probing process's id before its first call."""
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-c", _PROBE, mountpoint, str(probes), str(PAUSE_S)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    chunks = []
    try:
        started(proc.pid)
        await proc.stdin.send_all(b"go\n")
        await proc.stdin.aclose()
        while chunk := await proc.stdout.receive_some():
            chunks.append(chunk)
    finally:
        with trio.CancelScope(shield=True):
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
    return [int(x) for x in b"".join(chunks).split()]


def typical(round_trips: list[int]) -> int | None:
    """The round trip to go by: the lower quartile of those after the warm-up (on a busy
    or cold machine most probes can run late; an overestimate would mislead).  None
    when there are none (the probe's statfs failed: the source refused it)."""
    if not round_trips:
        return None
    settled = round_trips[WARM_UP_PROBES:] or round_trips
    return int(statistics.quantiles(settled, n=4)[0]) if len(settled) > 1 else int(settled[0])
