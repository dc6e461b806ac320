"""What a wider fixture saves: one pytest run of N small tests with `efs` (a mount per
test) against the same N tests with `efs_module` (one mount, a reset before each test),
rounds alternating, in one run.  The figures go between the `<!-- fixtures-bench -->`
markers of docs/PYTEST.md.

    .venv/bin/python bench/fixtures.py [--tests N] [--rounds N] [--docs FILE]
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from common import write_between  # noqa: E402

MARK = "<!-- fixtures-bench -->"
TEST = """
def test_{i}({fixture}):
    (({fixture}).workdir / "f").write_text("x")
    assert (({fixture}).workdir / "f").read_text() == "x"
"""


def run_once(project: Path, fixture: str, tests: int) -> float:
    """Seconds one pytest process takes for `tests` tests with `fixture`, start to end."""
    (project / "test_bench.py").write_text("".join(TEST.format(i=i, fixture=fixture) for i in range(tests)))
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(project)],
        cwd=project,
        capture_output=True,
        text=True,
    )
    took = time.monotonic() - began
    if done.returncode != 0:
        raise SystemExit(f"pytest with {fixture} failed:\n{done.stdout[-2000:]}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tests", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--docs", type=Path, default=ROOT / "docs" / "PYTEST.md")
    args = ap.parse_args()
    times: dict[str, list[float]] = {"efs": [], "efs_module": []}
    with tempfile.TemporaryDirectory(prefix="fixtures-bench-") as tmp:
        for r in range(args.rounds):
            order = list(times) if r % 2 == 0 else list(reversed(times))
            for fixture in order:
                times[fixture].append(run_once(Path(tmp), fixture, args.tests))
                print(f"round {r + 1}: {fixture}: {times[fixture][-1]:.1f} s", flush=True)
    per = {f: statistics.median(t) / args.tests for f, t in times.items()}
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    rows = "\n".join(
        f"| `{f}` | {', '.join(f'{s:.1f}' for s in t)} | {statistics.median(t):.1f} | {per[f]:.2f} |"
        for f, t in times.items()
    )
    text = (
        f"{args.tests} tests that each write and read one file, one pytest process per run, "
        f"{args.rounds} rounds alternating (`bench/fixtures.py`; load average {load} at the end: "
        f"the host was shared and loaded):\n\n"
        f"| fixture | runs (s) | median (s) | per test (s) |\n|---|---|---|---|\n{rows}\n\n"
        f"(per test: the median run over its tests, pytest's start and `efs_module`'s one mount "
        f"included.) "
        f"`efs_module` saved {per['efs'] - per['efs_module']:.2f} s a test "
        f"({per['efs'] / per['efs_module']:.1f}x as many tests a second)."
    )
    print(text)
    write_between(args.docs, MARK, text)


if __name__ == "__main__":
    main()
