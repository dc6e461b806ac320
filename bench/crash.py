"""What arming the crash fault (`--crashable`) costs: two trace-only mounts of one kind,
one armed, the same workloads through each, rounds alternating which goes first, server
CPU per MiB or per file and the caller's wall time.  The figures go between the
`<!-- crash-bench -->` markers of docs/FAULTS.md.

    .venv/bin/python bench/crash.py [--rounds N] [--mib N] [--docs FILE]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from fusetrace.client import server_of

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from common import cpu_s, ft, write_between  # noqa: E402

MARK = "<!-- crash-bench -->"
BLOCK = 4096
FILES = 500


def rewrite(mnt: Path, mib: int) -> int:
    """Overwrite a file that exists in 4 KiB writes, then fsync: every page saved first."""
    fd = os.open(mnt / "big", os.O_WRONLY)
    try:
        block = b"r" * BLOCK
        for off in range(0, mib << 20, BLOCK):
            os.pwrite(fd, block, off)
        os.fsync(fd)
    finally:
        os.close(fd)
    return mib


def append(mnt: Path, mib: int) -> int:
    """A new file written in 4 KiB writes, then fsync: past the durable end, nothing saved."""
    fd = os.open(mnt / "new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        block = b"a" * BLOCK
        for _ in range(0, mib << 20, BLOCK):
            os.write(fd, block)
        os.fsync(fd)
    finally:
        os.close(fd)
    return mib


def small_files(mnt: Path, _mib: int) -> int:
    """Files of 4 KiB created, written and closed (each close a commit)."""
    d = mnt / "small"
    d.mkdir(exist_ok=True)
    for i in range(FILES):
        with open(d / f"f{i}", "wb") as f:
            f.write(b"s" * BLOCK)
    return FILES


WORKLOADS: dict[str, tuple[Callable[[Path, int], int], str]] = {
    "overwrite, 4 KiB writes, fsync": (rewrite, "MiB"),
    "new file, 4 KiB writes, fsync": (append, "MiB"),
    f"{FILES} files of 4 KiB, each closed": (small_files, "file"),
}


def measure(fn: Callable[[Path, int], int], mnt: Path, mib: int, server: int) -> tuple[float, float]:
    """(wall ms, server CPU ms) per unit of the workload."""
    c0, t0 = cpu_s(server), time.perf_counter()
    units = fn(mnt, mib)
    return (time.perf_counter() - t0) / units * 1e3, (cpu_s(server) - c0) / units * 1e3


def run(rounds: int, mib: int) -> dict[str, dict[bool, list[tuple[float, float]]]]:
    out: dict[str, dict[bool, list[tuple[float, float]]]] = {name: {False: [], True: []} for name in WORKLOADS}
    with tempfile.TemporaryDirectory(prefix="fusetrace-crash-bench-") as tmp:
        mounts = {}
        for armed in (False, True):
            src, mnt = Path(tmp) / f"src{armed:d}", Path(tmp) / f"mnt{armed:d}"
            src.mkdir()
            mnt.mkdir()
            (src / "big").write_bytes(b"o" * (mib << 20))
            ft("mount", str(src), str(mnt), *(["--crashable"] if armed else []))
            mounts[armed] = (mnt, server_of(str(mnt))["pid"])
        try:
            for i in range(rounds):
                for armed in (False, True) if i % 2 == 0 else (True, False):
                    mnt, server = mounts[armed]
                    for name, (fn, _unit) in WORKLOADS.items():
                        out[name][armed].append(measure(fn, mnt, mib, server))
        finally:
            for mnt, _ in mounts.values():
                ft("umount", str(mnt))
    return out


def render(results: dict[str, dict[bool, list[tuple[float, float]]]], rounds: int, mib: int) -> str:
    lines = [
        f"Trace-only mounts over a local directory, {rounds} rounds alternating which goes first, "
        f"{mib} MiB per file workload (medians; wall time is the caller's):",
        "",
        "| workload | per | unarmed wall ms | armed wall ms | unarmed server CPU ms | armed server CPU ms "
        "| CPU ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, (_fn, unit) in WORKLOADS.items():
        plain, armed = results[name][False], results[name][True]
        wall = [statistics.median(r[0] for r in runs) for runs in (plain, armed)]
        cpu = [statistics.median(r[1] for r in runs) for runs in (plain, armed)]
        lines.append(
            f"| {name} | {unit} | {wall[0]:.2f} | {wall[1]:.2f} | {cpu[0]:.2f} | {cpu[1]:.2f} "
            f"| {cpu[1] / cpu[0]:.2f}x |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--mib", type=int, default=16)
    p.add_argument("--docs", default=str(ROOT / "docs" / "FAULTS.md"))
    args = p.parse_args()
    text = render(run(args.rounds, args.mib), args.rounds, args.mib)
    print(text)
    write_between(Path(args.docs), MARK, text)


if __name__ == "__main__":
    main()
