"""What fault rules cost an operation: the injector's decision in process, and stat(2)
through a real mount with no rules against ten rules in force that match nothing (every
request is then checked against each), rounds alternating, best of each in one run.  The
figures go between the `<!-- faults-bench -->` markers of docs/FAULTS.md.

    .venv/bin/python bench/faults.py [--rounds N] [--stats N] [--docs FILE]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
import timeit
from pathlib import Path

from fusetrace.client import server_of
from fusetrace.faults.injector import Injector
from fusetrace.request import Kind

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from common import cpu_s, ft, write_between  # noqa: E402

MARK = "<!-- faults-bench -->"
TEN = [{"op": "write,fsync", "path": f"/never/{i}/*.db", "errno": "EIO"} for i in range(10)]


def in_process() -> list[tuple[str, float]]:
    """µs per Injector.check for rule sets a user would have in force."""
    cases: dict[str, list[dict]] = {
        "1 rule, another op": [{"op": "fsync", "errno": "EIO"}],
        "10 rules, globs that do not match": TEN,
        "1 rule with pid and name, matching, p = 0.01": [
            {"comm": "app", "pid": [1], "probability": 0.01, "errno": "EIO"}
        ],
        "1 rule firing (errno, no condition)": [{"errno": "EIO"}],
        "1 rule delaying, drawn (lognormal, no condition)": [{"delay": "lognormal:p50=5ms,p99=200ms"}],
    }
    out = []
    for name, rules in cases.items():
        inj = Injector()
        for r in rules:
            inj.add(r, 0)

        def one(inj=inj):
            inj.check("write", Kind.WRITE, 7, 0, "/data/table.db", 4096, lambda: (1, "app", 0), 1)

        n = 100_000
        out.append((name, min(timeit.repeat(one, number=n, repeat=5)) / n * 1e6))
    return out


def stat_loop(path: Path, n: int, server: int) -> tuple[float, float]:
    """µs per stat(2) through the mount (neither names nor attributes cached: each one is a
    lookup and a getattr), and the server's CPU µs per stat."""
    c0, t0 = cpu_s(server), time.perf_counter()
    for _ in range(n):
        os.stat(path)
    return (time.perf_counter() - t0) / n * 1e6, (cpu_s(server) - c0) / n * 1e6


def on_mount(rounds: int, stats: int) -> dict[str, list[tuple[float, float]]]:
    with tempfile.TemporaryDirectory(prefix="fusetrace-faults-bench-") as tmp:
        src, mnt = Path(tmp) / "src", Path(tmp) / "mnt"
        src.mkdir()
        mnt.mkdir()
        (src / "f").write_text("x")
        ft("mount", str(src), str(mnt), "--attr-timeout", "0", "--entry-timeout", "0")
        server = server_of(str(mnt))["pid"]
        try:
            stat_loop(mnt / "f", stats // 10, server)  # warm up
            plain, ruled = [], []
            for i in range(rounds):  # which goes first alternates: no order effect either way
                for ruled_now in (False, True) if i % 2 == 0 else (True, False):
                    if not ruled_now:
                        plain.append(stat_loop(mnt / "f", stats, server))
                        continue
                    for r in TEN:
                        ft("fault", str(mnt), "add", "--op", r["op"], "--path", r["path"], "--errno", r["errno"])
                    stat_loop(mnt / "f", stats // 10, server)  # settle after starting ten processes
                    ruled.append(stat_loop(mnt / "f", stats, server))
                    ft("fault", str(mnt), "clear")
        finally:
            ft("umount", str(mnt))
    return {"plain": plain, "ruled": ruled}


def render(process: list[tuple[str, float]], mount: dict, stats: int) -> str:
    lines = ["| the injector's decision (in process) | µs per request |", "|---|---|"]
    lines += [f"| {name} | {us:.2f} |" for name, us in process]

    def cells(runs: list[tuple[float, float]], i: int) -> str:
        return ", ".join(f"{r[i]:.1f}" for r in runs)

    plain, ruled = mount["plain"], mount["ruled"]
    cpu_plain, cpu_ruled = (statistics.median(r[1] for r in runs) for runs in (plain, ruled))
    wall_plain, wall_ruled = (min(r[0] for r in runs) for runs in (plain, ruled))
    lines += [
        "",
        f"stat(2) through a trace-only mount, names and attributes not cached, so each is a lookup "
        f"and a getattr ({stats:,} per round, {len(plain)} rounds, which goes first alternating):",
        "",
        "| rules in force | µs per stat, per round | best | server CPU µs per stat, per round | median |",
        "|---|---|---|---|---|",
        f"| none | {cells(plain, 0)} | {wall_plain:.1f} | {cells(plain, 1)} | {cpu_plain:.1f} |",
        f"| ten that match nothing | {cells(ruled, 0)} | {wall_ruled:.1f} | {cells(ruled, 1)} | {cpu_ruled:.1f} |",
        "",
        f"Ten rules in force cost the server {cpu_ruled - cpu_plain:+.1f} µs of CPU per stat "
        f"({100 * (cpu_ruled / cpu_plain - 1):+.1f} %, medians), two requests checked against ten "
        f"rules each; the caller's time per stat changed by {wall_ruled - wall_plain:+.1f} µs "
        f"(best against best).",
    ]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--stats", type=int, default=20_000)
    p.add_argument("--docs", default=str(ROOT / "docs" / "FAULTS.md"))
    args = p.parse_args()
    text = render(in_process(), on_mount(args.rounds, args.stats), args.stats)
    print(text)
    write_between(Path(args.docs), MARK, text)


if __name__ == "__main__":
    main()
