"""A traced mount's memory while its trace disk does not answer (docs/RELIABILITY.md, trace memory).

The trace directory is put on a second fusetrace mount whose server is then stopped
(SIGSTOP), so the traced server's writer hangs in its first write; meanwhile `--ops` stat
calls go through the traced mount (a lookup and a getattr each, with no attribute cache).
Printed: the traced server's resident memory (VmRSS) before and after the calls, its peak
(VmHWM) while the queue is written once the trace disk answers again and its RSS after, and
how many records were queued and dropped.

    .venv/bin/python bench/stalledtrace.py [--ops 800000] [--workdir /var/tmp/fusetrace-stalled]
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common import FUSETRACE, ft, memory_kib, server_pid


def _memory_mb(pid: int) -> dict[str, float]:
    return {k: kib / 1024 for k, kib in memory_kib(pid).items()}


def _trace_stats(mountpoint: Path) -> dict:
    return json.loads(ft("stats", str(mountpoint), "--json"))["trace"]


def _wait(predicate, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.2)


def run(ops: int, workdir: Path) -> str:
    shutil.rmtree(workdir, ignore_errors=True)
    dirs = {name: workdir / name for name in ("disk-src", "disk", "src", "mnt")}
    for d in dirs.values():
        d.mkdir(parents=True)
    (dirs["src"] / "f").write_bytes(b"x")
    mounted: list[Path] = []
    stopped = None
    try:
        ft("mount", str(dirs["disk-src"]), str(dirs["disk"]))
        mounted.append(dirs["disk"])
        ft("mount", str(dirs["src"]), str(dirs["mnt"]), "--trace", str(dirs["disk"] / "trace"), "--attr-timeout", "0")
        mounted.append(dirs["mnt"])
        server = server_pid(str(dirs["mnt"]))
        stopped = server_pid(str(dirs["disk"]))
        before = _memory_mb(server)["VmRSS"]
        os.kill(stopped, signal.SIGSTOP)
        target = dirs["mnt"] / "f"
        for _ in range(ops):
            os.stat(target)
        during = _memory_mb(server)
        held = _trace_stats(dirs["mnt"])
        os.kill(stopped, signal.SIGCONT)
        stopped = None
        _wait(lambda: _trace_stats(dirs["mnt"])["queued"] == 0, "the queue written once the trace disk answers")
        after = _memory_mb(server)
        return (
            f"{ops:,} stat calls with the trace disk stopped: RSS {before:.0f} -> {during['VmRSS']:.0f} MB "
            f"(peak {during['VmHWM']:.0f}; {held['queued']:,} records queued, {held['dropped']:,} dropped); "
            f"peak {after['VmHWM']:.0f} MB and {after['VmRSS']:.0f} MB once the queue was written"
        )
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        for m in reversed(mounted):
            subprocess.run([*FUSETRACE, "umount", str(m)], check=False, capture_output=True, timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", type=int, default=800_000)
    parser.add_argument("--workdir", type=Path, default=Path("/var/tmp/fusetrace-stalled"))
    args = parser.parse_args()
    print(run(args.ops, args.workdir))


if __name__ == "__main__":
    main()
