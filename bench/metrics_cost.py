"""What `--metrics-port` costs a traced mount (docs/BENCHMARKS.md, "Metrics on a traced mount").

Three figures, each measured against its alternative in the same run:

- per request, in this process: `OpCounts.add` (plain lists and a `bisect`, what the
  pipeline calls) beside prometheus_client's own ways of counting the same request (a
  Histogram child's `observe`; `.labels(op).observe` with a Counter's `.inc`, the usual
  instrumentation), which decided how opmetrics.py counts;
- on the event loop: the loop thread's CPU per `getattr` through the handlers of a traced
  `Operations`, with and without the counters (the median of alternating passes'
  differences, as bench/tracecost.py measures the tracer's);
- through real mounts: a small-file workload (create and write 4 KiB, stat, read back,
  remove) on two traced mounts of one source directory's copies, one with --metrics-port,
  in alternating rounds: wall time and server CPU per round, and their ratios; and the
  time one scrape takes once every operation has been seen.

Run as root: `.venv/bin/python bench/metrics_cost.py [--files N] [--rounds N] [--docs docs/BENCHMARKS.md]`.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
import timeit
import urllib.request
from pathlib import Path

import trio
from prometheus_client import CollectorRegistry, Counter, Histogram

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common import Caller, cpu_s, ft, server_pid, write_between
from tracecost import _drained

from fusetrace.server.handlers import Operations
from fusetrace.server.inline import InlinePolicy
from fusetrace.server.inodes import ROOT
from fusetrace.server.workers import Workers
from fusetrace.shaping.opmetrics import BOUNDS_S, OpCounts
from fusetrace.trace.writer import TraceWriter


def per_request_ns(n: int = 200_000) -> dict[str, float]:
    """ns per request counted, the least of 5 repeats of `n` each."""
    registry = CollectorRegistry()
    hist = Histogram("x_seconds", "x", ["op"], buckets=BOUNDS_S, registry=registry)
    count = Counter("x_ops", "x", ["op"], registry=registry)
    child = hist.labels("getattr")
    counts, start = OpCounts(), time.monotonic_ns()

    def instrumented() -> None:
        hist.labels("getattr").observe(83e-6)
        count.labels("getattr").inc()

    ways = {
        "OpCounts.add (lists, bisect)": lambda: counts.add("getattr", start, None, 0),
        "Histogram child .observe": lambda: child.observe(83e-6),
        ".labels(op).observe + Counter .inc": instrumented,
    }
    return {name: min(timeit.repeat(way, number=n, repeat=5)) / n * 1e9 for name, way in ways.items()}


async def _per_getattr_s(ops: Operations, n: int) -> float:
    who = Caller()
    getattr_ = ops.getattr
    t0 = time.thread_time()
    for _ in range(n):
        await getattr_(ROOT, who)
    return (time.thread_time() - t0) / n


def loop_us(n: int = 50_000, repeats: int = 9) -> tuple[float, float]:
    """(loop CPU per traced getattr, what the counters add to it), in µs."""
    with tempfile.TemporaryDirectory(prefix="fusetrace-metricscost-") as tmp:
        workers = Workers(1)
        writer = TraceWriter(os.path.join(tmp, "trace"), {}, max_pending_bytes=None)
        traced = Operations(tmp, workers=workers, inline=InlinePolicy(50.0), tracer=writer)
        counted = Operations(tmp, workers=workers, inline=InlinePolicy(50.0), tracer=writer, counts=OpCounts())
        bases, diffs = [], []
        for _ in range(repeats):
            with_counts = trio.run(_per_getattr_s, counted, n)
            _drained(writer)
            base = trio.run(_per_getattr_s, traced, n)
            _drained(writer)
            bases.append(base)
            diffs.append(with_counts - base)
        writer.close()
        for ops in (traced, counted):
            ops.close()
        workers.close()
    return statistics.median(bases) * 1e6, statistics.median(diffs) * 1e6


def _small_files(root: Path, files: int) -> None:
    block = b"x" * 4096
    for i in range(files):
        (root / f"f{i}").write_bytes(block)
    for i in range(files):
        os.stat(root / f"f{i}")
        (root / f"f{i}").read_bytes()
    for i in range(files):
        os.unlink(root / f"f{i}")


def mounts(files: int, rounds: int, metrics_first: bool, port: int = 19188) -> dict[str, dict[str, float]]:
    """Rounds of `files` small files on three traced mounts, one with --metrics-port and a
    second without as the control (two servers differ by more than what is measured here:
    bench/tracecost.py; two earlier runs here had the metrics' mount made last 10 % slower
    in wall time, one with it made first 4 % faster: so it is made first or last as asked),
    in an order that turns each round.  Per mount: the median round's wall time and server CPU, and the median of its
    per-round ratios to the traced mount's."""
    names: dict[str, list[str]] = {"traced": [], "control": []}
    names = (
        {"metrics": ["--metrics-port", str(port)], **names}
        if metrics_first
        else {**names, "metrics": ["--metrics-port", str(port)]}
    )
    with tempfile.TemporaryDirectory(prefix="fusetrace-metricscost-") as tmp:
        base = Path(tmp)
        places = {}
        for name, extra in names.items():
            src, mnt = base / f"src-{name}", base / f"mnt-{name}"
            src.mkdir()
            mnt.mkdir()
            ft("mount", str(src), str(mnt), "--trace", str(base / f"trace-{name}"), *extra)
            places[name] = mnt
        try:
            wall: dict[str, list[float]] = {name: [] for name in places}
            cpu: dict[str, list[float]] = {name: [] for name in places}
            order = list(places)
            for r in range(rounds):
                for name in order[r % 3 :] + order[: r % 3]:
                    pid = server_pid(str(places[name]))
                    c0, t0 = cpu_s(pid), time.perf_counter()
                    _small_files(places[name], files)
                    wall[name].append(time.perf_counter() - t0)
                    cpu[name].append(cpu_s(pid) - c0)
            t0 = time.perf_counter()
            scrapes = 20
            for _ in range(scrapes):
                page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
            scrape = {"ms": (time.perf_counter() - t0) / scrapes * 1e3, "kib": len(page) / 1024}
        finally:
            for mnt in places.values():
                ft("umount", str(mnt))

    def ratio(xs: list[float], ys: list[float]) -> float:
        return statistics.median(x / y for x, y in zip(xs, ys, strict=True) if y)

    out = {
        name: {
            "wall_s": statistics.median(wall[name]),
            "cpu_s": statistics.median(cpu[name]),
            "wall_ratio": ratio(wall[name], wall["traced"]),
            "cpu_ratio": ratio(cpu[name], cpu["traced"]),
        }
        for name in places
    }
    out["scrape"] = scrape
    return out


MARK = "<!-- metrics-cost -->"  # around this benchmark's figures in docs/BENCHMARKS.md


def report(files: int, rounds: int) -> str:
    """Every figure, as the lines of a Markdown part, with the run's command, time and load."""
    load0, started = os.getloadavg(), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    per_request = per_request_ns()
    base, added = loop_us()
    sessions = {"made last": mounts(files, rounds, False), "made first": mounts(files, rounds, True)}
    load1 = os.getloadavg()
    ours = per_request["OpCounts.add (lists, bisect)"]
    lines = [
        f"`bench/metrics_cost.py --files {files} --rounds {rounds}` (as root), {started}, on this 2-CPU VM "
        f"loaded by other engineers' tests and benchmarks (load {load0[0]:.1f} at the start, {load1[0]:.1f} at "
        f"the end).",
        "",
        "| what | figure |",
        "|---|---|",
        *(f"| one request counted: {name} | {ns:,.0f} ns ({ns / ours:.1f}x) |" for name, ns in per_request.items()),
        f"| loop CPU of a traced `getattr` through the handlers, and what the counters add | {base:.2f} µs, "
        f"+{added:.2f} µs ({added / base:.1%}); median of 9 alternations |",
    ]
    for when, m in sessions.items():
        for name, title in (("control", "a second traced mount (the control)"), ("metrics", "traced, --metrics-port")):
            f = m[name]
            lines.append(
                f"| {title} ÷ traced, the metrics' mount {when}: {rounds} rounds of {files} small files (create "
                f"4 KiB, stat, read, remove), median of the rounds' ratios | wall {f['wall_ratio']:.3f}, server "
                f"CPU {f['cpu_ratio']:.3f} |"
            )
    m = sessions["made first"]
    t = m["traced"]
    lines += [
        f"| a round on the traced mount (median) | {t['wall_s']:.3f} s, server CPU {t['cpu_s']:.3f} s |",
        f"| one scrape, every operation of the workload seen | {m['scrape']['ms']:.1f} ms, "
        f"{m['scrape']['kib']:.0f} KiB |",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=300, help="files a round (default 300)")
    ap.add_argument("--rounds", type=int, default=30, help="rounds a mount, in turn (default 30)")
    ap.add_argument("--docs", type=Path, help=f"write the figures between the {MARK} lines of this file")
    args = ap.parse_args()
    text = report(args.files, args.rounds)
    print(text)
    if args.docs:
        write_between(args.docs, MARK, text)


if __name__ == "__main__":
    main()
