"""What `--trace-only` and `--trace-sample` save: a metadata- and small-read-heavy workload
on real mounts, untraced, fully traced, filtered and sampled, in the same run.

Five mounts of one source tree (10 directories of 100 files of 1 KiB), each with
`--attr-timeout 0 --entry-timeout 0` so that every stat reaches the server: each round
lists every directory, stats every file and reads it (its page cache dropped after, so the
next round's read reaches the server too), on each mount in turn, the order rotated every
round.  Per mount and round: the wall time and the server's CPU (all its threads, from
/proc) per operation served (the fully traced mount's records of the round: every mount
serves the same).  Ratios are taken within a round, against the untraced mount, and the
best and the median of the rounds are shown.

Beside it, in this process, what the capture's decision costs the loop per request
(`Capture.keep`): a mount without --trace-only or --trace-sample makes none (one `is None`
test in Pipeline._trace).

    python bench/trace_filters.py [--rounds 7] [--docs docs/BENCHMARKS.md]
"""

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
import timeit
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import cpu_s, ft, server_pid, write_between  # noqa: E402

from fusetrace.request import Kind  # noqa: E402
from fusetrace.trace import metadata as meta  # noqa: E402
from fusetrace.trace.capture import Capture  # noqa: E402

MARK = "<!-- trace-filters -->"
DIRS, FILES, SIZE = 10, 100, 1024
SAMPLED = ["getattr=100", "lookup=100", "read=100", "readdir=100", "opendir=100", "releasedir=100", "getxattr=100"]
MOUNTS: dict[str, list[str] | None] = {  # name: trace options (None: no trace)
    "untraced": None,
    "traced": [],
    "only op=write": ["--trace-only", "op=write"],
    "only path=/d0/**": ["--trace-only", "path=/d0/**"],
    "sampled 1/100": [a for s in SAMPLED for a in ("--trace-sample", s)],
}


def _tree(src: Path) -> None:
    for d in range(DIRS):
        (src / f"d{d}").mkdir()
        for f in range(FILES):
            (src / f"d{d}" / f"f{f}").write_bytes(os.urandom(SIZE))


def _round(mnt: Path) -> None:
    """List every directory, stat and read every file."""
    for d in range(DIRS):
        here = mnt / f"d{d}"
        for name in os.listdir(here):
            path = here / name
            os.stat(path)
            fd = os.open(path, os.O_RDONLY)
            try:
                os.read(fd, SIZE)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # the next round reads through FUSE
            finally:
                os.close(fd)


def _records(trace: Path) -> int:
    m = meta.read(str(trace))
    return int(m.get("records") or 0)


def mounts(rounds: int) -> dict:
    """Per mount: wall s and server CPU µs per operation, each round; records and left-out counts."""
    with tempfile.TemporaryDirectory(prefix="fusetrace-filters-") as tmp:
        base = Path(tmp)
        src = base / "src"
        src.mkdir()
        _tree(src)
        made: dict[str, tuple[Path, Path | None, int]] = {}
        try:
            for i, (name, options) in enumerate(MOUNTS.items()):
                mnt, trace = base / f"mnt{i}", (base / f"trace{i}" if options is not None else None)
                mnt.mkdir()
                extra = [] if trace is None or options is None else ["--trace", str(trace), *options]
                ft("mount", str(src), str(mnt), "--attr-timeout", "0", "--entry-timeout", "0", *extra)
                made[name] = (mnt, trace, server_pid(str(mnt)))
            for name in made:  # a first pass each: the servers' caches and imports warm
                _round(made[name][0])
            wall: dict[str, list[float]] = {n: [] for n in made}
            cpu: dict[str, list[float]] = {n: [] for n in made}
            names = list(made)
            for r in range(rounds):
                order = names[r % len(names) :] + names[: r % len(names)]
                for name in order:
                    mnt, _, pid = made[name]
                    c0, t0 = cpu_s(pid), time.perf_counter()
                    _round(mnt)
                    wall[name].append(time.perf_counter() - t0)
                    cpu[name].append(cpu_s(pid) - c0)
            load = os.getloadavg()[0]
        finally:
            for mnt, _, _ in made.values():
                ft("umount", str(mnt))
        traced = made["traced"][1]
        assert traced is not None
        ops_per_round = _records(traced) / (rounds + 1)
        rows: dict[str, dict] = {}
        for name, (_, trace, _) in made.items():
            left = meta.read(str(trace)).get("left_out", {}) if trace else {}
            rows[name] = {
                "wall": wall[name],
                "cpu_us": [c / ops_per_round * 1e6 for c in cpu[name]],
                "ratio": [w / u for w, u in zip(wall[name], wall["untraced"])],
                "records": _records(trace) if trace else None,
                "left_out": sum(sum(v.values()) for v in left.values()) if left else 0,
            }
        return {"ops_per_round": ops_per_round, "load": load, "rows": rows}


def decision_ns() -> dict[str, float]:
    """ns per Capture.keep on the loop's thread, per kind of setting (the best of 5 timings)."""
    req = SimpleNamespace(op="getattr", kind=Kind.META_READ)
    cases = {
        "op filter": Capture({"op": ["read", "write"]}, {}, seed=1),
        "path glob": Capture({"path": ["/d0/**"]}, {}, seed=1),
        "op, path, comm, uid": Capture(
            {"op": ["getattr"], "path": ["/d*/**"], "comm": ["python3"], "uid": ["0"]}, {}, seed=1
        ),
        "sample 1/100": Capture({}, {"getattr": 100}, seed=1),
    }
    out = {}
    n = 200_000
    for name, capture in cases.items():
        call = functools.partial(capture.keep, req, "/d3/f7", 0, "python3")
        out[name] = min(timeit.repeat(call, number=n, repeat=5)) / n * 1e9
    none = None
    out["no capture (is None)"] = min(timeit.repeat(lambda: none is not None, number=n, repeat=5)) / n * 1e9
    return out


def render(res: dict, decisions: dict[str, float], rounds: int) -> str:
    lines = [
        f"`python bench/trace_filters.py --rounds {rounds}` on the 2-core VM, "
        f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC (1-minute load average {res['load']:.1f} "
        f"at the end). Five mounts of one "
        f"tree ({DIRS} directories of {FILES} files of {SIZE} B, `--attr-timeout 0 --entry-timeout 0`); a "
        f"round lists, stats and reads every file on each mount in turn, order rotated each round "
        f"({res['ops_per_round']:,.0f} operations a round). Ratio: the round's wall time over the "
        f"untraced mount's in the same round. Sampled: `--trace-sample` 1 in 100 of "
        f"{', '.join(s.split('=')[0] for s in SAMPLED)} (open, flush, release change state and are "
        f"never sampled).",
        "",
        "| mount | wall s, best / median | ratio to untraced, best / median | server CPU µs/op, best / median "
        "| records kept | left out |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in res["rows"].items():
        lines.append(
            f"| {name} | {min(r['wall']):.3f} / {statistics.median(r['wall']):.3f} "
            f"| {min(r['ratio']):.2f} / {statistics.median(r['ratio']):.2f} "
            f"| {min(r['cpu_us']):.0f} / {statistics.median(r['cpu_us']):.0f} "
            f"| {'-' if r['records'] is None else format(r['records'], ',')} | {r['left_out']:,} |"
        )
    lines += [
        "",
        "The capture's decision per request on the loop (`Capture.keep`, in one process, best of 5 "
        "timings of 200,000 calls, a getattr of `/d3/f7`):",
        "",
        "| setting | ns per request |",
        "|---|---|",
        *(f"| {k} | {v:.0f} |" for k, v in decisions.items()),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--docs", help="write the figures into this page, between its marks")
    args = parser.parse_args()
    decisions = decision_ns()
    res = mounts(args.rounds)
    text = render(res, decisions, args.rounds)
    print(text)
    if args.docs:
        write_between(Path(args.docs), MARK, text)


if __name__ == "__main__":
    main()
