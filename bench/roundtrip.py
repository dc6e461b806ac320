"""What one FUSE request costs, one at a time: the floor a Python server stands on.

A caller asks for an extended attribute that is not there (getxattr, answered ENODATA: the
request `ls -l` makes twice per file) over and over through each server, each over a
directory holding one empty file: a minimal pyfuse3 file system (`minimal_fs.py`: pyfuse3,
trio and the kernel, nothing of fusetrace's), the same reading a queued request at once (the
part of pyfuse3's cost a server can avoid, as fusetrace does), fusetrace, and passthrough_hp
when given.
Per request: the caller's wall time and the server's CPU (all its threads, from /proc);
of three passes the fastest (noise on a shared VM only ever slows a pass down).

    python bench/roundtrip.py [--passthrough-hp PATH]
"""

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import targets as T
from common import cpu_s, server_pid

REQUESTS = 20_000
PASSES = 3


class MinimalPyfuse3(T.Target):
    def __init__(self, read_at_once: bool = False) -> None:
        self.read_at_once = read_at_once
        self.key = "minimal-pyfuse3" + ("-read-at-once" if read_at_once else "")
        self.label = "minimal pyfuse3 file system" + (", reading a queued request at once" if read_at_once else "")

    def command(self, src, mnt, placeholder=False):
        return [T.PY, str(Path(__file__).with_name("minimal_fs.py")), mnt] + (
            ["--read-at-once"] if self.read_at_once else []
        )

    def start(self, src, mnt, scratch):
        return self._spawn(src, mnt, scratch / "minimal_fs.log")

    def stop(self):
        T._stop_server(self.mnt, self.proc)


def _server_pid(target: T.Target, mnt: str) -> int:
    proc = getattr(target, "proc", None)
    return proc.pid if proc is not None else server_pid(mnt)


def _pass(path: str, pid: int, n: int) -> tuple[float, float]:
    """(wall µs, server CPU µs) per request over n requests."""
    cpu0, t0 = cpu_s(pid), time.perf_counter()
    for _ in range(n):
        try:
            os.getxattr(path, "user.fusetrace.absent")
        except OSError:
            pass
    t1, cpu1 = time.perf_counter(), cpu_s(pid)
    return (t1 - t0) / n * 1e6, (cpu1 - cpu0) / n * 1e6


def measure(target: T.Target, work: Path, n: int = REQUESTS) -> dict:
    scratch = work / f"roundtrip-{target.key}"
    shutil.rmtree(scratch, ignore_errors=True)
    src, mnt = scratch / "src", scratch / "mnt"
    src.mkdir(parents=True)
    mnt.mkdir()
    (src / "f").write_bytes(b"")
    where = target.start(str(src), str(mnt), scratch)
    try:
        pid = _server_pid(target, str(mnt))
        path = os.path.join(where, "f")
        _pass(path, pid, n // 10)  # warm up: the inode looked up, the server's tasks started
        wall, cpu = min(_pass(path, pid, n) for _ in range(PASSES))
    finally:
        target.stop()
    shutil.rmtree(scratch, ignore_errors=True)
    return {"label": target.label, "wall_us": wall, "cpu_us": cpu}


def measure_all(work: Path, passthrough_hp: str | None) -> dict:
    servers = [MinimalPyfuse3(), MinimalPyfuse3(read_at_once=True), T.Fusetrace(trace=False)]
    if passthrough_hp:
        servers.append(T.PassthroughHP(passthrough_hp))
    return {s.key: measure(s, work) for s in servers}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--passthrough-hp", metavar="PATH")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="fusetrace-roundtrip-", dir="/var/tmp") as tmp:
        for r in measure_all(Path(tmp), args.passthrough_hp).values():
            print(f"{r['label']}: {r['wall_us']:.1f} µs per request, {r['cpu_us']:.1f} µs of server CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
