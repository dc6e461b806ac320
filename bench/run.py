#!/usr/bin/env python3
"""Benchmark fusetrace against the plain directory and two reference passthrough file systems.

    .venv/bin/python bench/run.py [--quick] [--passthrough-hp PATH] [--baseline REV|DIR] [--out docs/BENCHMARKS.md]

Measures, in one run and each over a fresh directory on the same local disk: native,
fusetrace, fusetrace with --trace, pyfuse3's examples/passthroughfs.py, (given its path)
libfuse's example/passthrough_hp and (given a revision or checkout) the code before a change.
Writes docs/BENCHMARKS.md (the table with every figure's ratio against native from the same
run, and the project's performance targets checked) and prints the table.  Must run as root
(it drops the kernel caches).  bench/README.md has more.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import baseline as B
import handlercost
import roundtrip
import targets as T
import tracecost
import workloads as W
from common import ACCURACY_MARK

DEFAULT_WORKDIR = "/var/tmp/fusetrace-bench"

INTRO = """\
# Benchmarks

How much a fusetrace mount costs against the plain directory below it, with and without
tracing (and without extended attributes, `--no-xattrs`), and against two other passthrough
file systems: the example that ships with pyfuse3 (the Python library fusetrace is built on: a
floor fusetrace must not fall below) and libfuse's multi-threaded C++ `passthrough_hp` (a
ceiling for a FUSE passthrough on this kernel). *Where the time goes* measures what one request
costs a minimal pyfuse3 file system, the floor under any Python server here.

Every figure below comes from one run of `bench/run.py` on the machine described, each target
over a fresh directory on the same local disk, one target mounted at a time. The run goes
through all targets in rounds (two by default, the second in reverse order) and reports each
figure's best round; every round's figure is listed under the table. Ratios are against native
*in the same run* and always read as speed: above 1 is faster than native, below 1 slower (for
`ls -l`, the ratio is native time / target time). This is a small, shared VM whose idle CPUs
halt: a request that crosses threads pays for waking a CPU, and run-to-run spread is large
for such file systems — read the per-round figures before trusting a difference under ~30%.
A process here also keeps one of two speeds for its whole life: the same handler code timed
in one process after another took 11.6-11.9 µs per call in some and 16.2-16.8 µs in others
(seen while the figures below were made), so each figure is the best of its rounds.
This file is generated; edit the generator (`bench/run.py`), not the file.
"""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes and short runs (a smoke test, < 2 min)")
    p.add_argument(
        "--passthrough-hp",
        metavar="PATH",
        help="libfuse's example/passthrough_hp binary, built by hand (not by this script)",
    )
    p.add_argument("--out", default="docs/BENCHMARKS.md", help="the Markdown report (default docs/BENCHMARKS.md)")
    p.add_argument(
        "--workdir",
        default=DEFAULT_WORKDIR,
        help=f"where the source directories and mount points go; must be on a local disk (default {DEFAULT_WORKDIR})",
    )
    p.add_argument(
        "--rounds",
        type=int,
        metavar="N",
        help="run every target N times, in alternating order, and report the best "
        "figure of each (default 2, 1 with --quick)",
    )
    p.add_argument(
        "--baseline",
        metavar="REV|DIR",
        help="also run the code before a change (a revision of this repository, or another "
        "checkout) as targets baseline and baseline+trace, in the same rounds as fusetrace",
    )
    p.add_argument(
        "--only",
        metavar="KEY[,KEY]",
        help=f"run only these targets ({', '.join(KEYS)}); for development, the report then lacks the other columns",
    )
    args = p.parse_args(argv)
    only = set(args.only.split(",")) if args.only else set(KEYS)
    if only - set(KEYS):
        print(
            f"bench/run.py: --only: no target {', '.join(sorted(only - set(KEYS)))} (targets: {', '.join(KEYS)})",
            file=sys.stderr,
        )
        return 2
    if not args.baseline:
        if args.only and only & BASELINE_KEYS:
            print("bench/run.py: --only baseline needs --baseline REV|DIR", file=sys.stderr)
            return 2
        only -= BASELINE_KEYS

    if os.geteuid() != 0 or not W.can_drop_caches():
        print(
            "bench/run.py: must run as root (it mounts, and drops caches with /proc/sys/vm/drop_caches)",
            file=sys.stderr,
        )
        return 2
    for tool in ("fio", "fusermount3", "ls"):
        if shutil.which(tool) is None:
            print(f"bench/run.py: {tool} not found", file=sys.stderr)
            return 2

    sizes = W.QUICK if args.quick else W.FULL
    rows = W.make_rows(sizes)
    work = Path(args.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    machine = _machine(work)
    if machine["workdir_fs"] in ("tmpfs", "ramfs") or machine["workdir_fs"].startswith("fuse"):
        print(f"bench/run.py: {work} is on {machine['workdir_fs']}, not a local disk", file=sys.stderr)
        return 2
    base = None
    if only & BASELINE_KEYS:
        try:
            base = B.prepare(args.baseline, work)
        except B.BaselineError as exc:
            print(f"bench/run.py: {exc}", file=sys.stderr)
            return 2
        machine["baseline"] = base.label
        _say(f"baseline: {base.label}, {base.modules} modules checked to load from {base.site}")
    targets = [t for t in _targets(args.passthrough_hp, base) if t.key in only]

    if float(machine["load_start"].split()[1]) > 1.0:
        _say(f"warning: the machine is busy ({machine['load_start']}): figures will be skewed")
    t_start = time.monotonic()
    _say(
        f"work directory {work} ({machine['workdir_fs']} on {machine['workdir_dev']}); "
        f"{'quick' if args.quick else 'full'} run"
    )
    pool = work / "pool"
    _make_pool(pool, sizes)

    rounds = args.rounds or sizes.rounds
    results: dict = {
        "sizes": sizes.__dict__,
        "rounds": rounds,
        "machine": machine,
        "targets": {t.key: {"label": t.label, "rounds": []} for t in targets},
        "roundtrip_rounds": [],
    }
    for n in range(rounds):
        order = targets if n % 2 == 0 else targets[::-1]  # alternate, so drift hits all alike
        _say(f"round {n + 1} of {rounds}: " + ", ".join(t.label for t in order))
        for target in order:
            results["targets"][target.key]["rounds"].append(_run_target(target, rows, sizes, work, pool))
        if not args.only:  # in every round, so that the floor is judged as the rows are: best round
            _say("one request at a time: a minimal pyfuse3 file system, fusetrace, passthrough_hp")
            results["roundtrip_rounds"].append(roundtrip.measure_all(work, args.passthrough_hp))
    shutil.rmtree(pool, ignore_errors=True)
    if "fusetrace+trace" in {t.key for t in targets}:
        _say("what tracing adds in CPU: the record on the loop, the writer thread")
        paced, closing = tracecost.paced_us()
        results["tracing_cpu_us"] = {
            "loop": tracecost.loop_us(),
            "write": tracecost.loop_us(op="write"),
            "writer": tracecost.writer_us(),
            "paced": paced,
            "closing": closing,
        }
    if "pyfuse3-example" in {t.key for t in targets}:
        _say("the write handlers alone: fusetrace's, the pyfuse3 example's, a bare pwrite")
        results["write_handler_us"] = handlercost.write_us()
    if results["roundtrip_rounds"]:
        results["roundtrip"] = {
            k: min((r[k] for r in results["roundtrip_rounds"]), key=lambda x: x["wall_us"])
            for k in results["roundtrip_rounds"][0]
        }
    for target in targets:
        _summarise(results["targets"][target.key], rows)
    results["elapsed_s"] = time.monotonic() - t_start
    machine["load_end"] = _load()

    table, checks = _table(rows, targets, results)
    checks += _floor(results, sizes)
    T.CACHE.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    raw = T.CACHE / f"results-{stamp}.json"
    raw.write_text(json.dumps(results, indent=2, default=str))
    out = Path(args.out)
    if not out.is_absolute():
        out = T.REPO / out
    out.parent.mkdir(parents=True, exist_ok=True)
    report = _report(rows, targets, results, table, checks, args, sizes)
    if out.exists():  # bench/accuracy.py owns the part between its markers, from the first on: keep it
        _, mark, rest = out.read_text().partition(ACCURACY_MARK)
        if mark:
            report = report.rstrip("\n") + "\n\n" + mark + rest
    out.write_text(report)
    print()
    print(table)
    print()
    for line in checks:
        print(line)
    print(f"\nwrote {out} (raw figures: {raw}); {results['elapsed_s']:.0f} s in all")
    return 0


# ---- running -------------------------------------------------------------------------------


KEYS = (
    "native",
    "fusetrace",
    "baseline",
    "fusetrace+trace",
    "baseline+trace",
    "fusetrace-noxattrs",
    "pyfuse3-example",
    "passthrough_hp",
)
BASELINE_KEYS = {"baseline", "baseline+trace"}


def _targets(passthrough_hp: str | None, base: B.Baseline | None) -> list[T.Target]:
    """Every target that can run, in the order of a round: each baseline beside the fusetrace it
    is compared with, so that the two are measured as close in time as the rounds allow."""
    targets: list[T.Target] = [T.Native(), T.Fusetrace(trace=False)]
    if base is not None:
        targets.append(T.Fusetrace(trace=False, baseline=base))
    targets.append(T.Fusetrace(trace=True))
    if base is not None:
        targets.append(T.Fusetrace(trace=True, baseline=base))
    targets += [T.Fusetrace(trace=False, no_xattrs=True), T.PyfuseExample()]
    if passthrough_hp:
        targets.append(T.PassthroughHP(passthrough_hp))
    return targets


def _say(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def _make_pool(pool: Path, sizes: W.Sizes) -> None:
    """The files the randread rows read, written once natively; every target's fresh source
    directory gets hard links to them (reads only: no target changes them)."""
    shutil.rmtree(pool, ignore_errors=True)
    pool.mkdir(parents=True)
    for j in range(sizes.jobs):
        _write_file(pool / f"rr.{j}", W.size_bytes(sizes.fio_size))
    os.sync()


def _write_file(path: Path, size: int) -> None:
    chunk = os.urandom(1 << 20)
    with open(path, "wb") as f:
        left = size
        while left > 0:
            left -= f.write(chunk[: min(left, len(chunk))])


def _run_target(target: T.Target, rows, sizes, work: Path, pool: Path) -> dict:
    scratch = work / target.key
    src, mnt = scratch / "src", scratch / "mnt"
    T.force_unmount(str(mnt))
    shutil.rmtree(scratch, ignore_errors=True)
    src.mkdir(parents=True)
    mnt.mkdir()
    for j in range(sizes.jobs):
        os.link(pool / f"rr.{j}", src / f"rr.{j}")
    _write_file(src / "rw.dat", W.size_bytes(sizes.fio_size))
    os.sync()

    out: dict = {"label": target.label, "rows": {}, "errors": {}, "load_before": _loadavg1()}
    t0 = time.monotonic()
    _say(f"{target.label}: mounting")
    try:
        where = target.start(str(src), str(mnt), scratch)
    except Exception as exc:  # a target that cannot run leaves its column empty
        out["error"] = f"{type(exc).__name__}: {exc}"
        _say(f"{target.label}: cannot mount: {exc}")
        T.force_unmount(str(mnt))
        return out
    out["mount_s"] = time.monotonic() - t0
    try:
        for row in rows:
            try:
                before = target.sample()
                value, details = W.run_row(row, where, str(src), sizes)
                after = target.sample()
                if before is not None and after is not None:
                    cpu, ops = (b - a for a, b in zip(before, after))
                    details["server_cpu_us_per_op"] = cpu / ops * 1e6 if ops else None
                    details["requests"] = ops
            except Exception as exc:
                out["errors"][row.key] = f"{type(exc).__name__}: {exc}"
                _say(f"{target.label}: {row.key}: FAILED: {exc}")
                continue
            out["rows"][row.key] = {"value": value, **details}
            _say(f"{target.label}: {row.key}: {_fmt(value, row)}")
    finally:
        t1 = time.monotonic()
        try:
            target.stop()
        except Exception as exc:
            out["stop_error"] = f"{type(exc).__name__}: {exc}"
            _say(f"{target.label}: unmount: {exc}")
        out["umount_s"] = time.monotonic() - t1
        out["load_after"] = _loadavg1()
        out.update(target.after())
        if target.key == "fusetrace+trace" and "trace_records" in out:
            _say(
                f"{target.label}: trace: {out['trace_records']:,} records, "
                f"{out.get('trace_dropped', 0):,} dropped, {out['trace_bytes'] / 2**20:.1f} MiB"
            )
    if not out.get("stop_error"):
        shutil.rmtree(scratch, ignore_errors=True)
    return out


def _summarise(entry: dict, rows) -> None:
    """The best figure of each row over the rounds (the fastest run: noise on a shared VM
    only ever slows a run down), with every round's figure kept beside it."""
    entry["rows"], entry["errors"] = {}, {}
    for row in rows:
        runs = [r["rows"][row.key] for r in entry["rounds"] if row.key in r["rows"]]
        if runs:
            best = max(runs, key=lambda r: row.speed(r["value"]))
            entry["rows"][row.key] = {**best, "runs": [r["value"] for r in runs]}
        errs = [r.get("error") or r["errors"].get(row.key) for r in entry["rounds"]]
        errs = [e for e in errs if e]
        if errs:
            entry["errors"][row.key] = errs[0]
    mount_errors = [r["error"] for r in entry["rounds"] if r.get("error")]
    if mount_errors and not entry["rows"]:
        entry["error"] = mount_errors[0]
    for r in entry["rounds"]:
        for k, v in r.items():
            if k.startswith("trace_"):
                entry[k] = v  # the last round's trace


# ---- the report ----------------------------------------------------------------------------


def _fmt(value: float, row: W.Row) -> str:
    if row.unit in ("IOPS", "files/s"):
        return f"{value:,.0f} {row.unit}"
    if row.unit == "ms":
        return f"{value:,.0f} ms" if value >= 100 else f"{value:,.1f} ms"
    return f"{value:,.0f} {row.unit}"


def _ratio(x: float) -> str:
    return f"{x:.2f}x" if x < 10 else f"{x:.1f}x"


def _value(results, key, row):
    r = results["targets"].get(key, {}).get("rows", {}).get(row.key)
    return None if r is None else r["value"]


def _table(rows, targets, results):
    keys = [t.key for t in targets]
    have = set(keys)
    head = ["", *[t.label for t in targets]]
    extra = []
    if "pyfuse3-example" in have and have & {"fusetrace", "fusetrace+trace", "fusetrace-noxattrs"}:
        extra.append(EX_COL)
    if {"fusetrace", "fusetrace+trace"} <= have:
        extra.append(TRACE_COL)
    if {"fusetrace", "passthrough_hp"} <= have:
        extra.append("fusetrace ÷ passthrough_hp (target ≥ 0.5 on create, ls -l)")
    pairs = [p for p in BASE_PAIRS if {p[1], p[2]} <= have]
    if pairs:
        extra.append(BASE_COL)
    lines = ["| " + " | ".join(head + extra) + " |", "|" + "---|" * (len(head) + len(extra))]
    misses: dict[str, list[str]] = {"ex": [], "nox": [], "trace": [], "hp": [], "base": []}
    for row in rows:
        native = _value(results, "native", row)
        cells = [row.title]
        for t in targets:
            v = _value(results, t.key, row)
            if v is None:
                err = results["targets"][t.key].get("error") or results["targets"][t.key]["errors"].get(row.key)
                cells.append("failed" if err else "—")
            elif t.key == "native" or native is None:
                cells.append(_fmt(v, row))
            else:
                cells.append(f"{_fmt(v, row)} ({_ratio(row.speed(v) / row.speed(native))})")
        ft, ftt = _value(results, "fusetrace", row), _value(results, "fusetrace+trace", row)
        if EX_COL in extra and row.key in NOT_LIKE_THE_EXAMPLE:
            cells.append("not compared †")
        elif EX_COL in extra:
            ex = _value(results, "pyfuse3-example", row)
            parts = []
            for label, key, miss in (
                ("", "fusetrace", "ex"),
                ("traced ", "fusetrace+trace", "ex"),
                ("--no-xattrs ", "fusetrace-noxattrs", "nox"),
            ):
                v = _value(results, key, row)
                if v is not None and ex is not None:
                    r = row.speed(v) / row.speed(ex)
                    ok = r >= 1.0
                    paired = _paired_median(results, key, "pyfuse3-example", row)
                    parts.append(
                        f"{label}{_ratio(r)} {'✓' if ok else '✗'}"
                        + (f" (median {_ratio(paired)})" if paired is not None else "")
                    )
                    if not ok:
                        misses[miss].append(f"{row.key} ({label or 'untraced '}{_ratio(r)})")
            cells.append(" · ".join(parts) or "—")
        if TRACE_COL in extra:
            share = _tracing_share(results, row)
            wall = f"wall {(1 - row.speed(ftt) / row.speed(ft)) * 100:+.0f}%" if ft and ftt else "wall —"
            if share is not None:
                ok = share <= 0.10
                cells.append(f"{share * 100:.1f}% {'✓' if ok else '✗'} ({wall})")
                if not ok:
                    misses["trace"].append(f"{row.key} ({share * 100:.1f}%)")
            else:
                cells.append(f"— ({wall})")
        if "fusetrace ÷ passthrough_hp (target ≥ 0.5 on create, ls -l)" in extra:
            hp = _value(results, "passthrough_hp", row)
            parts = []
            for label, v in (("", ft), ("traced ", ftt)):
                if v is not None and hp is not None:
                    r = row.speed(v) / row.speed(hp)
                    if row.key in ("create", "ls"):
                        ok = r >= 0.5
                        parts.append(f"{label}{_ratio(r)} {'✓' if ok else '✗'}")
                        if not ok:
                            misses["hp"].append(f"{row.key} ({label or 'untraced '}{_ratio(r)})")
                    else:
                        parts.append(f"{label}{_ratio(r)}")
            cells.append(" · ".join(parts) or "—")
        if pairs:
            cells.append(_against_baseline(results, row, pairs, misses["base"]))
        lines.append("| " + " | ".join(cells) + " |")

    checks = []
    if EX_COL in extra:
        if have & {"fusetrace", "fusetrace+trace"}:
            checks.append(_verdict("fusetrace ≥ pyfuse3 example on every row compared", misses["ex"]))
        if "fusetrace-noxattrs" in have:
            checks.append(
                _verdict(
                    "with `--no-xattrs` (no extended attributes, like the example), "
                    "fusetrace ≥ pyfuse3 example on every row compared",
                    misses["nox"],
                )
            )
        checks += [
            f"- † not compared with the example: {why}"
            for key, why in NOT_LIKE_THE_EXAMPLE.items()
            if any(r.key == key for r in rows)
        ]
    if TRACE_COL in extra:
        checks.append(
            _verdict(
                "tracing costs ≤ 10% against no tracing on every row (in CPU per operation: see *The cost of tracing*)",
                misses["trace"],
            )
        )
    if "fusetrace ÷ passthrough_hp (target ≥ 0.5 on create, ls -l)" in extra:
        checks.append(_verdict("create and ls -l within 2x of passthrough_hp", misses["hp"]))
    if pairs:
        checks.append(
            _verdict(
                "no row slower than the baseline, best round against best round (the same code "
                "run against itself scatters around 1 by the host's noise: read the medians, "
                "and every round's figure below)",
                misses["base"],
            )
        )
    return "\n".join(lines), checks


BASE_PAIRS = [("", "fusetrace", "baseline"), ("traced ", "fusetrace+trace", "baseline+trace")]
BASE_COL = "fusetrace ÷ baseline, best (median of the rounds' ratios)"


def _against_baseline(results, row, pairs, missed: list[str]) -> str:
    """The current code's speed over the baseline's on `row`: best round over best round, and
    the median of the ratios paired round by round."""
    parts = []
    for label, key, base in pairs:
        v, b = _value(results, key, row), _value(results, base, row)
        if v is None or b is None:
            continue
        r = row.speed(v) / row.speed(b)
        ok = round(r, 2) >= 1.0  # as shown: 0.996 reads 1.00x
        paired = _paired_median(results, key, base, row, least=2)
        parts.append(
            f"{label}{_ratio(r)} {'✓' if ok else '✗'}" + (f" ({_ratio(paired)})" if paired is not None else "")
        )
        if not ok:
            missed.append(f"{row.key} ({label or 'untraced '}{_ratio(r)})")
    return " · ".join(parts) or "—"


NOT_LIKE_THE_EXAMPLE = {
    "seqwrite": "the pyfuse3 example implements no fsync, so the kernel, answered ENOSYS, skips it and its "
    "figure has no fsync in it (fusetrace's has: the whole file written to disk); the row "
    "without fsync compares the writes alone",
}
FLOOR_SHARE = 1.15  # create and ls -l: time above native per request, against the minimal server's round trip


def _floor(results, sizes) -> list[str]:
    """Create and `ls -l` against what any pyfuse3 server pays here: fusetrace's time above
    native per request (the requests counted in the traced round), against the minimal
    server's round trip (bench/roundtrip.py, best round)."""
    rt = results.get("roundtrip", {}).get("minimal-pyfuse3")
    traced = results["targets"].get("fusetrace+trace", {}).get("rows", {})
    if not rt:
        return []
    parts, missed = [], []
    for key, units, unit in (("create", sizes.create_reps * sizes.nfiles, "file"), ("ls", sizes.ls_reps, "ls -l")):
        ft = results["targets"].get("fusetrace", {}).get("rows", {}).get(key, {}).get("value")
        native = results["targets"].get("native", {}).get("rows", {}).get(key, {}).get("value")
        requests = traced.get(key, {}).get("requests")
        if not (ft and native and requests):
            continue
        above_us = (1e6 / ft - 1e6 / native) if key == "create" else (ft - native) * 1e3
        per_unit = requests / units
        share = above_us / per_unit / rt["wall_us"]
        label = "create" if key == "create" else "`ls -l`"
        parts.append(
            f"{label} {above_us / per_unit:.1f} µs per request ({per_unit:,.1f} requests per {unit}"
            f"{', the release the caller does not wait for among them' if key == 'create' else ''}), "
            f"{share:.2f}x {'✓' if share <= FLOOR_SHARE else '✗'}"
        )
        if share > FLOOR_SHARE:
            missed.append(f"{key} ({share:.2f}x)")
    if not parts:
        return []
    verdict = _verdict(
        f"create and ls -l within {FLOOR_SHARE - 1:.0%} of the minimal pyfuse3 server's round trip "
        f"({rt['wall_us']:.1f} µs) per request they take, counting their time above native",
        missed,
    )
    return [verdict + ": " + "; ".join(parts)]


def _paired_median(results, key: str, other: str, row, least: int = 3) -> float | None:
    """The median over rounds of `key`'s speed ÷ `other`'s in the same round: rounds pair
    runs taken minutes apart, so the host's drift between rounds cancels, and one round's
    outlier (which decides a best-of-rounds ratio) moves the median little.  None with
    fewer than `least` rounds, or rounds that do not pair (a round failed)."""
    a = results["targets"].get(key, {}).get("rows", {}).get(row.key, {}).get("runs", [])
    b = results["targets"].get(other, {}).get("rows", {}).get(row.key, {}).get("runs", [])
    if len(a) < least or len(a) != len(b):
        return None
    return statistics.median(row.speed(x) / row.speed(y) for x, y in zip(a, b))


def _tracing_share(results, row) -> float | None:
    """The CPU tracing adds to an operation, as a share of what the row's operations cost
    the traced server."""
    added = results.get("tracing_cpu_us")
    r = results["targets"].get("fusetrace+trace", {}).get("rows", {}).get(row.key, {})
    per_op = r.get("server_cpu_us_per_op")
    if not added or not per_op:
        return None
    return (added["loop"] + added["writer"]) / per_op


def _verdict(target: str, missed: list[str]) -> str:
    if not missed:
        return f"- **met**: {target}"
    return f"- **not met**: {target}; missed on " + ", ".join(missed)


EX_COL = "fusetrace ÷ pyfuse3 example (target ≥ 1; in brackets the median of the rounds' ratios)"
TRACE_COL = "cost of tracing: CPU it adds per operation (target ≤ 10%), and wall-clock difference"


def _machine(work: Path) -> dict:
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_kb = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    real = str(work)
    found = subprocess.run(
        ["findmnt", "-n", "-o", "FSTYPE,SOURCE", "--target", real], capture_output=True, text=True
    ).stdout.split()  # the mount holding it
    fs, dev = ([*found, "?", "?"])[:2]
    import pyfuse3
    import trio

    def out(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, cwd=T.REPO).stdout.strip()
        except OSError:
            return ""

    rev = out(["git", "rev-parse", "--short", "HEAD"])
    dirty = out(["git", "status", "--porcelain", "--", "fusetrace"])
    return {
        "load_start": _load(),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "mem_gib": round(mem_kb / 2**20, 1),
        "kernel": platform.release(),
        "os": out(["sh", "-c", ". /etc/os-release && echo $PRETTY_NAME"]),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "fio": out(["fio", "--version"]),
        "python": platform.python_version(),
        "pyfuse3": pyfuse3.__version__,
        "trio": trio.__version__,
        "fusetrace": rev + (" with uncommitted changes in fusetrace/" if dirty else ""),
        "workdir": real,
        "workdir_fs": fs,
        "workdir_dev": dev,
    }


def _loadavg1() -> float:
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def _load() -> str:
    """Load averages and CPU pressure: other work on the machine skews every figure."""
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    try:
        with open("/proc/pressure/cpu") as f:
            some = f.readline().split()[2].partition("=")[2]  # avg60
        return f"load {load}, CPU pressure {some}% (avg60)"
    except OSError:
        return f"load {load}"


def _tracing_part(rows, results) -> list[str]:
    added = results.get("tracing_cpu_us")
    if not added:
        return []
    traced = results["targets"].get("fusetrace+trace", {}).get("rows", {})
    per_op = [
        f"{row.key} {traced[row.key]['server_cpu_us_per_op']:.0f} µs"
        for row in rows
        if traced.get(row.key, {}).get("server_cpu_us_per_op")
    ]
    return [
        "## The cost of tracing",
        "",
        "Two fusetrace servers differ in speed by up to ±20 % on this VM even when neither traces "
        "(seen while this benchmark was written: two untraced mounts, run in alternating 1-second "
        "slices, differed by a median of −29 % on one row and +9 % on another), so a 10 % cost "
        "cannot be read from the traced and untraced columns; their difference is shown, as *wall*, "
        "for what it is. "
        "What tracing adds is CPU work, measured apart (`bench/tracecost.py`): "
        f"{added['loop']:.2f} µs per operation on the event loop (the loop thread's CPU per `Operations.read` "
        "of a cached block, with and without a tracer, in one process, the writer thread draining the "
        "queue meanwhile as a mount's does; the median of 7 alternations) and "
        f"{added['writer']:.2f} µs per record in the writer "
        "thread (turning queued records into Parquet)"
        + (
            f"; a write adds {added['write']:.2f} µs on the loop, and at 20,000 records a second the writer "
            f"spends {added['paced']:.2f} µs a record (a part every 0.5 s, and the merges that come due) "
            f"and {added['closing']:.2f} µs more at close"
            if "paced" in added
            else ""
        )
        + ", against what an operation of each row cost "
        "the traced server in CPU (all its threads, from /proc, over the row, per record queued): "
        + ", ".join(per_op)
        + ". The count leaves out one effect: while the writer thread "
        "converts a row group of 16,384 records it holds the interpreter lock in calls of up to "
        "about 1 ms (a column of 16,384 paths), and a request that arrives then waits; over a "
        "second that is the writer's CPU share again, not more.",
        "",
    ]


def _where_time_goes(results, sizes) -> list[str]:
    L = ["## Where the time goes", ""]
    rt = results.get("roundtrip", {})
    if rt:
        L += [
            "One request at a time (`bench/roundtrip.py`: `getxattr` of an attribute that is not "
            "there, the request `ls -l` makes twice per file; the fastest of 3 passes of "
            f"{roundtrip.REQUESTS:,}, after every round, the best round shown as for the rows), the "
            "caller's wall time and the server's CPU per request:",
            "",
            "| server | µs per request | server CPU, µs per request |",
            "|---|---|---|",
        ]
        L += [f"| {r['label']} | {r['wall_us']:.1f} | {r['cpu_us']:.1f} |" for r in rt.values()]
        L += [
            "",
            "The minimal pyfuse3 file system (`bench/minimal_fs.py`) runs no file system code: "
            "its figure is what pyfuse3, trio and the kernel cost a Python server per request "
            "on this machine. What decides a row is how many requests it takes:",
            "",
        ]
    L += [
        "- **Writes.** Before every buffered write the kernel asks the file system for the "
        "`security.capability` attribute (to drop set-uid bits and capabilities): two requests "
        "per write. The pyfuse3 example implements no extended attributes; its first answer is "
        "ENOSYS, the kernel stops asking, and its writes take one request each. fusetrace passes "
        "extended attributes through (the differential test checks them), so it cannot skip the "
        "question, except when the source has no extended attributes at all (NFS, so EFS: "
        "then it answers ENOSYS like the example) or with `--no-xattrs` (its column). The kernel "
        "would stop asking on its own (`SB_NOSEC`) if the server took "
        "`FUSE_CAP_HANDLE_KILLPRIV_V2`, which pyfuse3 3.5 does not let a file system ask for."
    ]
    L += _write_handler(results, rt)
    L += [
        "- **create.** A create takes four requests the caller waits for: a getattr of the "
        "directory (with `default_permissions` the kernel checks the caller may write there, and "
        "the create before made the directory's attributes stale), lookup, create and flush (the "
        "close: NFS commits there, and the trace and the emulator count it), and a release it "
        "does not wait for. The pyfuse3 example implements no flush: three. The create itself "
        "varies with the state of ext4 below: its inode allocator passes over recently deleted "
        "inodes (`recently_deleted` in `ext4_create` took a "
        "quarter of the server's time in a `perf` profile made while writing this), which took an "
        "`open(O_CREAT)` from 20 µs to 60-115 µs after earlier runs had deleted many files; each "
        "target's fresh directory lands where it lands, so compare the per-round figures "
        "(native's too)."
    ]
    L += [_ls_bound(results, sizes, rt)]
    L += [
        "- **Worker threads.** Handing a syscall to a thread and back costs 150-300 µs here for a "
        "call that comes alone (a CPU is woken for it), 55-85 µs back to back, so calls measured "
        "under 100 µs run on the event loop, and writes under 100 µs plus 2 ns a byte (README, "
        "*Where system calls run*).",
        "",
    ]
    return L


def _write_handler(results, rt) -> list[str]:
    """What fusetrace's write handler costs beyond the example's, timed in one process."""
    us = results.get("write_handler_us")
    if not us:
        return []
    extra = us["fusetrace"] - us["example"]
    text = (
        f"- **The write handler.** Timed in one process (`bench/handlercost.py`: CPU per 4 KiB write "
        "of a cached file, called as pyfuse3 calls it, the handlers taking turns, median of 7), "
        f"fusetrace's `write` on a mount that neither shapes nor traces took {us['fusetrace']:.2f} µs, "
        f"the pyfuse3 example's (a seek, then a write) {us['example']:.2f} µs and a bare `pwrite` "
        f"{us['bare']:.2f} µs. fusetrace's {extra:+.2f} µs is the inline policy timing the call, the "
        "guard that answers EIO for a handler's bug rather than ending the mount, the handle's lookup, "
        "the test that nothing shapes, traces or injects faults, and the file's size and unwritten "
        "state kept"
    )
    floor = rt.get("minimal-pyfuse3", {}).get("cpu_us")
    if floor:
        text += (
            f": {extra / floor:.0%} of the {floor:.1f} µs of CPU the minimal pyfuse3 server spends "
            "per request (above), so at most that much of the randwrite row's ratio; the spread "
            "between processes (top of this file) is larger"
        )
    return [text + "."]


def _ls_bound(results, sizes, rt) -> str:
    """How far the `ls -l` target is from what any pyfuse3 server could do here."""
    text = (
        "- **`ls -l`.** Two attribute requests per file (`security.selinux`, "
        "`system.posix_acl_access`) on top of the listing"
    )
    traced = results["targets"].get("fusetrace+trace", {}).get("rows", {}).get("ls", {})
    native = results["targets"].get("native", {}).get("rows", {}).get("ls", {}).get("value")
    hp = results["targets"].get("passthrough_hp", {}).get("rows", {}).get("ls", {}).get("value")
    if not (traced.get("requests") and native and hp and "minimal-pyfuse3" in rt):
        return text + "."
    per_ls = traced["requests"] / sizes.ls_reps
    floor_ms = per_ls * rt["minimal-pyfuse3"]["wall_us"] / 1e3 + native
    spare_us = (2 * hp - floor_ms) * 1e3 / per_ls
    text += (
        f": about {per_ls:,.0f} requests for 2,000 files (the traced round). At the minimal "
        f"pyfuse3 server's round trip, and with the native `ls -l`'s {native:.0f} ms of cold "
        f"reads below, that is {floor_ms:.0f} ms before any file system code runs, against "
        f"passthrough_hp's {hp:.0f} ms (within 2x: {2 * hp:.0f} ms)"
    )
    if spare_us <= 0:
        return text + ": out of reach for a pyfuse3 server on this machine, whatever it does."
    own = rt.get("fusetrace", {}).get("wall_us", 0) - rt["minimal-pyfuse3"]["wall_us"]
    return (
        text + f": that leaves a file system {spare_us:.1f} µs of its own per request; "
        f"fusetrace takes {own:.1f} µs more per request than the minimal server (its handler, "
        "and the system call below)."
    )


def _report(rows, targets, results, table, checks, args, sizes) -> str:
    m = results["machine"]
    cmd = ".venv/bin/python bench/run.py" + (" --quick" if args.quick else "")
    if args.passthrough_hp:
        cmd += f" --passthrough-hp {args.passthrough_hp}"
    if args.rounds:
        cmd += f" --rounds {args.rounds}"
    if args.baseline:
        cmd += f" --baseline {args.baseline}"
    if args.only:
        cmd += f" --only {args.only}"
    if args.out != "docs/BENCHMARKS.md":
        cmd += f" --out {args.out}"
    L = [INTRO]
    if args.quick:
        L += [
            "> **Quick run** (`--quick`: small files, short runs): a smoke test of the benchmark, "
            "not figures to quote.\n"
        ]
    L += [
        "## Machine and run",
        "",
        f"- {m['nproc']} CPUs ({m['cpu']}), {m['mem_gib']} GiB RAM; kernel {m['kernel']}; {m['os']}",
        f"- file system under test: {m['workdir_fs']} on {m['workdir_dev']} ({m['workdir']})",
        f"- {m['date']}; {m['fio']}; Python {m['python']}, pyfuse3 {m['pyfuse3']}, trio {m['trio']}; "
        f"fusetrace {m['fusetrace']}" + (f"; baseline {m['baseline']}" if "baseline" in m else ""),
        f"- command: `{cmd}` (as root); {results['elapsed_s'] / 60:.1f} minutes in all",
        f"- other work on the machine: at the start {m['load_start']}; at the end {m['load_end']} "
        f"(this run itself adds 1–2 to the load)",
        "",
        "## Results",
        "",
        table,
        "",
        "Targets:",
        "",
        *checks,
        "",
    ]
    L += _tracing_part(rows, results)
    tr = results["targets"].get("fusetrace+trace", {})
    if "trace_records" in tr:
        L += [
            f"The last traced round wrote {tr['trace_records']:,} records ({tr.get('trace_dropped', 0):,} dropped) "
            f"in {tr['trace_files']} Parquet files, {tr['trace_bytes'] / 2**20:.1f} MiB.",
            "",
        ]
    failed = [
        (t.label, results["targets"][t.key].get("error")) for t in targets if results["targets"][t.key].get("error")
    ]
    failed += [(f"{t.label}, {k}", v) for t in targets for k, v in results["targets"][t.key]["errors"].items()]
    if failed:
        L += ["Failures:", ""] + [f"- {who}: {why}" for who, why in failed] + [""]
    if results["rounds"] > 1:
        L += [
            f"Every round's figure (the table above shows the best of {results['rounds']}; rounds "
            "alternate the order of the targets):",
            "",
            "| | " + " | ".join(t.label for t in targets) + " |",
            "|---|" + "---|" * len(targets),
        ]
        for row in rows:
            cells = []
            for t in targets:
                r = results["targets"][t.key].get("rows", {}).get(row.key)
                cells.append(" / ".join(_fmt(v, row).split(" ")[0] for v in r["runs"]) if r else "—")
            L.append(f"| {row.key} ({row.unit}) | " + " | ".join(cells) + " |")
        cells = []
        for t in targets:
            rs = results["targets"][t.key]["rounds"]
            cells.append(
                " / ".join(f"{r['load_before']:.1f}→{r['load_after']:.1f}" for r in rs if "load_after" in r) or "—"
            )
        L.append("| *1-min load average before → after* | " + " | ".join(cells) + " |")
        L += [
            "",
            "The load average (a one-minute moving average of runnable tasks) is a rough gauge: this "
            "benchmark alone holds it at about 1–2, briefly more in the numjobs=8 row; a target "
            "whose figures were taken well above that shared the CPUs with other work.",
            "",
        ]
    L += [
        "Latency (fio completion latency, mean / p99, µs, of the run shown above) of the 4k rows:",
        "",
        "| | " + " | ".join(t.label for t in targets) + " |",
        "|---|" + "---|" * len(targets),
    ]
    for row in rows:
        if row.unit != "IOPS":
            continue
        cells = []
        for t in targets:
            r = results["targets"][t.key].get("rows", {}).get(row.key)
            cells.append(f"{r['clat_mean_us']:.0f} / {r['clat_p99_us']:.0f}" if r else "—")
        L.append(f"| {row.key} | " + " | ".join(cells) + " |")
    L += ["", *_where_time_goes(results, sizes)]
    L += ["## The targets", ""]
    for t in targets:
        L.append(f"- **{t.label}**: {t.describe()}")
    L += ["", "Mount commands (SRC is the target's fresh source directory, MNT an empty directory):", "", "```"]
    for t in targets:
        if t.fuse:
            c = t.command("SRC", "MNT", placeholder=True)
            if c[0] == sys.executable:
                c[0] = "python"
            if t.key == "pyfuse3-example":
                c[1] = "passthroughfs.py"
            L.append(("PYTHONPATH=BASELINE " if t.key in BASELINE_KEYS else "") + " ".join(c))
    L += [
        "```",
        "",
        "Unmounted with `python -m fusetrace umount MNT` (fusetrace) or `fusermount3 -u MNT` "
        "(the others), and the server waited for, before the next target.",
        "",
    ]
    L += [
        "## The rows",
        "",
        f"Each target gets a fresh source directory holding `rw.dat` ({sizes.fio_size}, written natively "
        f"just before mounting) and hard links to `rr.0` … `rr.{sizes.jobs - 1}` ({sizes.fio_size} each "
        "of random data, written natively once per run and only ever read). The rows run in this "
        "order in `$DIR`, the source directory (`$SRC`) itself for native, the mount point otherwise:",
        "",
    ]
    for i, row in enumerate(rows, 1):
        L.append(f"{i}. **{row.title}** ({row.unit}): {row.notes}.")
        L.append("")
        L.append("   ```")
        L += [f"   {c}" for c in row.commands]
        L.append("   ```")
    L += [
        "",
        "fio's JSON output (`--output-format=json`) gives IOPS (`read.iops` / `write.iops`) and "
        "bandwidth (`write.bw_bytes`, which includes the end_fsync). Raw figures of this run, fio "
        "latencies and the per-repetition create and ls times, go to `bench/out/results-*.json` "
        "(not committed).",
        "",
    ]
    return "\n".join(L)


if __name__ == "__main__":
    sys.exit(main())
