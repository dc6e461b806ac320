"""Small buffered writes through an emulated mount, with and without FUSE's write-back cache.

Without it, the kernel's FUSE path hands every write(2) to the server and waits for the
reply, where an NFS client copies the data into its page cache and returns: the FUSE round
trip per write is the host's, not EFS's, and a run of small writes is paced by it (and
flagged host-bound).  With the write-back cache (an emulated mount's default) the kernel
gathers them and the mount gets write-back of up to 1 MiB, as an NFS server gets WRITEs.  Each workload runs on a fresh
mount of each kind, alternating, and beside it is the model's time for the same system
calls in virtual time (emulator/simulate.py: dd_write, dd_writers), which is what the run
should take.  The figures go between the `<!-- writeback -->` markers of docs/BENCHMARKS.md.

    .venv/bin/python bench/writeback.py [--rounds N] [--profile P] [--docs FILE]
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from common import ft, write_between  # noqa: E402

from fusetrace.emulator.model import Model  # noqa: E402
from fusetrace.emulator.simulate import dd_writers  # noqa: E402
from fusetrace.hostload import load_words  # noqa: E402
from fusetrace.shaping.profile import load_params  # noqa: E402

MARK = "<!-- writeback -->"
# (name, writers, dd block, blocks each): one dd of 4 KiB blocks; eight of 512 bytes at once, as
# cpio -p writes (the efs-2018-transfer scenario's fpart + cpio row)
WORKLOADS = [
    ("dd bs=4k, 78 MiB, conv=fsync", 1, 4096, 20_000),
    ("8 x dd bs=512, 4 MiB each, conv=fsync", 8, 512, 8_192),
]
KINDS = [("--no-writeback-cache", ("--no-writeback-cache",)), ("write-back cache (default)", ())]


def _once(work: Path, profile: str, flags: tuple[str, ...], writers: int, block: int, count: int) -> dict:
    src, mnt = work / "src", work / "mnt"
    src.mkdir()
    mnt.mkdir()
    ft("mount", str(src), str(mnt), "--emulate", profile, *flags)
    try:
        t0 = time.monotonic()
        procs = [
            subprocess.Popen(
                [
                    "dd",
                    "if=/dev/zero",
                    f"of={mnt / f'f{i}'}",
                    f"bs={block}",
                    f"count={count}",
                    "conv=fsync",
                    "status=none",
                ]
            )
            for i in range(writers)
        ]
        if any(p.wait() for p in procs):
            raise RuntimeError("dd failed")
        seconds = time.monotonic() - t0
        stats = json.loads(ft("stats", str(mnt), "--json"))
    finally:
        ft("umount", str(mnt))
    gates = stats["gates"]
    writes = sum(gates.get(g, {}).get("ops", 0) for g in ("buffered", "dirty"))
    return {"seconds": seconds, "writes": writes, "host": stats["host"]}


def run(rounds: int, profile: str) -> list[dict]:
    params = load_params(profile, [])
    rows = []
    for name, writers, block, count in WORKLOADS:
        model = dd_writers(Model(params, 0.0), writers, block, count).elapsed
        runs: dict[str, list[dict]] = {kind: [] for kind, _ in KINDS}
        for r in range(rounds):
            for kind, flags in KINDS if r % 2 == 0 else KINDS[::-1]:
                with tempfile.TemporaryDirectory(prefix="writeback-", dir="/var/tmp") as work:
                    runs[kind].append(_once(Path(work), profile, flags, writers, block, count))
        rows.append({"name": name, "calls": writers * count, "model_s": model, "runs": runs})
    return rows


def render(rows: list[dict], rounds: int, profile: str) -> str:
    lines = [
        "## Small buffered writes and FUSE's write-back cache",
        "",
        f"`bench/writeback.py --rounds {rounds} --profile {profile}`, run "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on this machine: each workload on a fresh "
        f"mount emulating `{profile}`, with `--no-writeback-cache` and as it comes (FUSE's write-back "
        "cache on), alternating; *model* is "
        "the time the emulated NFS client and server take for the same system calls, in virtual time "
        "(`emulator/simulate.py`, `dd_writers`), which the run should take. *Write requests* are those "
        "the mount received (the `buffered` and `dirty` gates of `fusetrace stats`). Every round is "
        "listed.",
        "",
        "| workload | write(2) calls | model | mount | seconds | ÷ model | write requests | host |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        for kind, runs in row["runs"].items():
            for one in runs:
                verdict = "host-bound" if one["host"]["host_bound"] else "kept up"
                lines.append(
                    f"| {row['name']} | {row['calls']:,} | {row['model_s']:.2f} s | {kind} | "
                    f"{one['seconds']:.2f} | {one['seconds'] / row['model_s']:.2f} | {one['writes']:,} | "
                    f"{verdict}: {load_words(one['host'])} |"
                )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--profile", default="efs-bursting")
    p.add_argument("--docs", default=str(ROOT / "docs" / "BENCHMARKS.md"))
    args = p.parse_args()
    part = render(run(args.rounds, args.profile), args.rounds, args.profile)
    print(part)
    write_between(Path(args.docs), MARK, part)


if __name__ == "__main__":
    main()
