"""What fault rules cost an operation: the injector's decision in process, and stat(2)
through a real mount with no rules against ten rules in force that match nothing (every
request is then checked against each), rounds alternating, best of each in one run.  The
figures go between the `<!-- faults-bench -->` markers of docs/FAULTS.md.

    .venv/bin/python bench/faults.py [--rounds N] [--stats N] [--docs FILE]
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

from fusetrace.faults.injector import Injector
from fusetrace.request import Kind

ROOT = Path(__file__).resolve().parent.parent
FUSETRACE = [sys.executable, "-m", "fusetrace"]
MARK = "<!-- faults-bench -->"
TEN = [{"op": "write,fsync", "path": f"/never/{i}/*.db", "errno": "EIO"} for i in range(10)]


def ft(*args: str) -> str:
    return subprocess.run([*FUSETRACE, *args], check=True, capture_output=True, text=True, timeout=600).stdout


def in_process() -> list[tuple[str, float]]:
    """µs per Injector.check for rule sets a user would have in force."""
    cases = {
        "1 rule, another op": [{"op": "fsync", "errno": "EIO"}],
        "10 rules, globs that do not match": TEN,
        "1 rule with pid and name, matching, p = 0.01": [{"comm": "app", "pid": [1], "probability": 0.01,
                                                         "errno": "EIO"}],
        "1 rule firing (errno, no condition)": [{"errno": "EIO"}],
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


def stat_loop(path: Path, n: int) -> float:
    """µs per stat(2) through the mount (attributes never cached: each one is a getattr)."""
    t0 = time.perf_counter()
    for _ in range(n):
        os.stat(path)
    return (time.perf_counter() - t0) / n * 1e6


def on_mount(rounds: int, stats: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="fusetrace-faults-bench-") as tmp:
        src, mnt = Path(tmp) / "src", Path(tmp) / "mnt"
        src.mkdir()
        mnt.mkdir()
        (src / "f").write_text("x")
        ft("mount", str(src), str(mnt), "--attr-timeout", "0", "--entry-timeout", "0")
        try:
            stat_loop(mnt / "f", stats // 10)  # warm up
            plain, ruled = [], []
            for _ in range(rounds):
                plain.append(stat_loop(mnt / "f", stats))
                for r in TEN:
                    ft("fault", str(mnt), "add", "--op", r["op"], "--path", r["path"], "--errno", r["errno"])
                ruled.append(stat_loop(mnt / "f", stats))
                ft("fault", str(mnt), "clear")
        finally:
            ft("umount", str(mnt))
    return {"plain": plain, "ruled": ruled}


def render(process: list[tuple[str, float]], mount: dict, stats: int) -> str:
    lines = ["| the injector's decision (in process) | µs per request |", "|---|---|"]
    lines += [f"| {name} | {us:.2f} |" for name, us in process]
    best_plain, best_ruled = min(mount["plain"]), min(mount["ruled"])
    spread = max(mount["plain"]) - best_plain
    lines += ["", f"stat(2) through a trace-only mount, attributes not cached ({stats:,} per round, "
                  f"{len(mount['plain'])} rounds alternating):", "",
              "| rules in force | µs per stat, per round | best |", "|---|---|---|",
              f"| none | {', '.join(f'{x:.1f}' for x in mount['plain'])} | {best_plain:.1f} |",
              f"| ten that match nothing | {', '.join(f'{x:.1f}' for x in mount['ruled'])} | {best_ruled:.1f} |",
              "", f"Ten rules in force change a stat by {best_ruled - best_plain:+.1f} µs "
                  f"({100 * (best_ruled / best_plain - 1):+.1f} %, best against best)"
                  + (f", within the {spread:.1f} µs that rounds without rules differ by: the injector's "
                     f"microseconds do not show through a FUSE round trip." if abs(best_ruled - best_plain) <= spread
                     else ".")]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--stats", type=int, default=20_000)
    p.add_argument("--docs", default=str(ROOT / "docs" / "FAULTS.md"))
    args = p.parse_args()
    text = render(in_process(), on_mount(args.rounds, args.stats), args.stats)
    print(text)
    docs = Path(args.docs)
    body = docs.read_text()
    head, _, rest = body.partition(MARK)
    _, _, tail = rest.partition(MARK)
    docs.write_text(f"{head}{MARK}\n{text}\n{MARK}{tail}")


if __name__ == "__main__":
    main()
