#!/usr/bin/env python3
"""Small files: `tar x` of a tree and a cold `ls -lR` of it, through fusetrace (untraced,
traced, traced with the faster named options, --no-xattrs) and libfuse's passthrough_hp,
with the FUSE requests the kernel sent for each, per kind.

    .venv/bin/python bench/smallfiles.py [--quick] [--passthrough-hp PATH] [--rounds N]
        [--only KEY,KEY] [--tree DIR] [--trace DIR] [--workdir DIR] [--out docs/BENCHMARKS.md]

Each workload runs on a fresh mount over a fresh source directory, one mount at a time, the
targets in alternating order from round to round: (1) `tar xf TARBALL -C MNT && sync`, (2) a
cold `ls -lR MNT > /dev/null` of the same tree, extracted natively into the source first, the
caches dropped once the mount is up.  The requests come from the kernel's fuse tracepoints
(bench/fuserequests.py), so a C server is counted as fusetrace is.  Writes its section between
the `<!-- smallfiles -->` markers of docs/BENCHMARKS.md and the raw figures to
bench/out/smallfiles-*.json.  As root (it mounts, drops caches and reads tracefs).
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fuserequests as FR
import targets as T
from common import cpu_s, publish, server_pid
from run import _load, _machine
from workloads import can_drop_caches, drop_caches

MARK = "<!-- smallfiles -->"
DEFAULT_WORKDIR = "/var/tmp/fusetrace-bench-smallfiles"
DEFAULT_TREE = "/usr/share/doc"
QUICK_ENTRIES = 500
# the traced variants with the faster named options, which trade what the trace sees for fewer
# round trips (README, "Performance: small files", says which requests each then misses):
# "fast" keeps every request an NFS client sends; "nfs" also drops the attribute requests an
# NFS client of EFS never sends (security.capability before each write and chown)
VARIANTS = {"fast": ("--writeback-cache",), "nfs": ("--writeback-cache", "--no-xattrs")}
PHP = "passthrough_hp"
WORKLOADS = {
    "tar": "`tar xf TARBALL -C MNT && sync`",
    "ls": "cold `ls -lR MNT > /dev/null`",
}
C_LOCALE = dict(os.environ, LC_ALL="C")  # ls's plain sorting and formats, as the report says
KEYS = (
    "native",
    "fusetrace",
    "fusetrace+trace",
    "fusetrace+trace+fast",
    "fusetrace+trace+nfs",
    "fusetrace-noxattrs",
    PHP,
    "passthrough_hp-nocache",
    "pyfuse3-example",
)
DEFAULT_KEYS = [k for k in KEYS if k != "pyfuse3-example"]


def _targets(php: str | None) -> list[T.Target]:
    out: list[T.Target] = [
        T.Native(),
        T.Fusetrace(trace=False),
        T.Fusetrace(trace=True),
        *(T.Fusetrace(trace=True, extra=extra, tag=tag) for tag, extra in VARIANTS.items()),
        T.Fusetrace(trace=False, no_xattrs=True),
    ]
    if php:
        out += [T.PassthroughHP(php), T.PassthroughHP(php, nocache=True)]
    return [*out, T.PyfuseExample()]


# ---- the tree ------------------------------------------------------------------------------


def tarball(tree: Path, quick: bool) -> dict:
    """A tar of `tree` (its first QUICK_ENTRIES entries with --quick), built once in bench/out/."""
    slug = str(tree).strip("/").replace("/", "-") or "root"
    dest = T.CACHE / f"smallfiles-{slug}{'-quick' if quick else ''}.tar"
    if not dest.exists():
        T.CACHE.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(".tmp")
        cmd = ["tar", "cf", str(tmp), "-C", str(tree.parent)]
        if quick:  # the walk's first entries, directories listed before their files
            names = sorted(str(p.relative_to(tree.parent)) for p in tree.rglob("*"))
            listing = T.CACHE / "smallfiles-quick.list"
            listing.write_text("\n".join([tree.name, *names[: QUICK_ENTRIES - 1]]) + "\n")
            cmd += ["--no-recursion", "-T", str(listing)]
        else:
            cmd.append(tree.name)
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode not in (0, 1):  # 1: a file changed as it was read, which is fine here
            raise SystemExit(f"bench/smallfiles.py: tar of {tree} failed: {done.stderr.strip()}")
        tmp.rename(dest)
    listed = subprocess.run(["tar", "tf", str(dest)], capture_output=True, text=True, check=True)
    return {"path": str(dest), "entries": len(listed.stdout.splitlines()), "bytes": dest.stat().st_size}


# ---- one run -------------------------------------------------------------------------------


def _server(target: T.Target) -> int | None:
    if target.proc is not None:
        return target.proc.pid
    if isinstance(target, T.Fusetrace):
        return server_pid(target.mnt)
    return None


def _fresh(work: Path, key: str) -> tuple[Path, Path, Path]:
    base = work / key.replace("+", "-")
    if base.exists():
        T.force_unmount(str(base / "mnt"))
        shutil.rmtree(base)
    src, mnt, scratch = base / "src", base / "mnt", base / "scratch"
    for d in (src, mnt, scratch):
        d.mkdir(parents=True)
    return src, mnt, scratch


def _run(*commands: list[str]) -> None:
    """Run the commands one after the other, as `a && b` does, their output discarded."""
    for cmd in commands:
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=C_LOCALE)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            raise T.TargetError(f"`{' '.join(cmd)}` failed: {last}")


def once(target: T.Target, workload: str, tar: str, work: Path, trace: Path | None) -> dict:
    """One workload on a fresh mount of `target` over a fresh source: seconds, server CPU, requests."""
    src, mnt, scratch = _fresh(work, target.key)
    if workload == "ls":
        _run(["tar", "xf", tar, "-C", str(src)])
    if isinstance(target, T.Fusetrace) and target.trace and trace is not None:
        scratch = trace / target.key.replace("+", "-")
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
    root = target.start(str(src), str(mnt), scratch)
    out: dict = {}
    try:
        pid = _server(target)
        if workload == "ls":
            drop_caches()
        cmds = [["tar", "xf", tar, "-C", root], ["sync"]] if workload == "tar" else [["ls", "-lR", root]]
        cpu0 = cpu_s(pid) if pid else None
        counter: AbstractContextManager[FR.Seen | None] = FR.FuseRequests(root) if target.fuse else nullcontext()
        with counter as seen:
            t0 = time.monotonic()
            _run(*cmds)
            out["seconds"] = time.monotonic() - t0
        if pid and cpu0 is not None:
            out["server_cpu_s"] = cpu_s(pid) - cpu0
    finally:
        target.stop()
    if seen is not None:
        out["requests"] = {k: {"count": v.count, "mean_us": v.mean_us} for k, v in seen.kinds.items()}
        out["lost_events"] = seen.lost
    out.update(target.after())
    shutil.rmtree(src.parent)
    return out


def run_all(targets: list[T.Target], tar: str, rounds: int, work: Path, trace: Path | None) -> dict:
    """results[key]: label, runs[workload] (one entry per round), skipped (why)."""
    results: dict = {t.key: {"label": t.label, "runs": {w: [] for w in WORKLOADS}} for t in targets}
    for r in range(rounds):
        for workload in WORKLOADS:
            for target in targets if r % 2 == 0 else targets[::-1]:
                entry = results[target.key]
                if "skipped" in entry:
                    continue
                try:
                    one = once(target, workload, tar, work, trace)
                except T.TargetError as exc:
                    entry["skipped"] = str(exc).splitlines()[0]
                    _say(f"round {r + 1} {workload} {target.key}: skipped: {entry['skipped']}")
                    continue
                one["round"] = r
                entry["runs"][workload].append(one)
                _say(
                    f"round {r + 1} {workload} {target.key}: {one['seconds']:.2f} s"
                    + (f", {sum(k['count'] for k in one['requests'].values()):,} requests" if "requests" in one else "")
                )
    return results


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---- figures -------------------------------------------------------------------------------


def _by_round(entry: dict, workload: str, what: str = "seconds") -> dict[int, float]:
    return {one["round"]: one[what] for one in entry["runs"][workload] if what in one}


def summary(results: dict, workload: str, key: str, what: str = "seconds") -> tuple[float, float] | None:
    """(best, median) over the rounds."""
    xs = list(_by_round(results.get(key, {"runs": {workload: []}}), workload, what).values())
    return (min(xs), statistics.median(xs)) if xs else None


def ratio(results: dict, workload: str, key: str, other: str, what: str = "seconds") -> tuple[float, float] | None:
    """key ÷ other: (best ÷ best, median of the rounds' ratios), from rounds both ran."""
    if key not in results or other not in results:
        return None
    a, b = _by_round(results[key], workload, what), _by_round(results[other], workload, what)
    both = sorted(set(a) & set(b))
    if not both or not all(b[r] for r in both):
        return None
    return min(a.values()) / min(b.values()), statistics.median(a[r] / b[r] for r in both)


def times_table(results: dict) -> list[str]:
    head = "| target | " + " | ".join(f"{WORKLOADS[w]}: best (median) | ÷ {PHP}: best (median)" for w in WORKLOADS)
    lines = [head + " | server CPU, tar x / ls, best |", "|---|" + "---|---|" * len(WORKLOADS) + "---|"]
    for key, entry in results.items():
        cells = []
        for w in WORKLOADS:
            s, rt = summary(results, w, key), ratio(results, w, key, PHP)
            cells.append(f"{s[0]:.2f} s ({s[1]:.2f})" if s else "—")
            cells.append(f"{rt[0]:.2f}x ({rt[1]:.2f}x)" if rt and key != PHP else "—")
        cpu = [summary(results, w, key, "server_cpu_s") for w in WORKLOADS]
        cells.append(" / ".join(f"{c[0]:.2f} s" for c in cpu if c) or "—")
        label = entry["label"] + (" (skipped, below)" if "skipped" in entry else "")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    skipped = [f"{e['label']} skipped: {e['skipped']}" for e in results.values() if "skipped" in e]
    return [*lines, "", *skipped] if skipped else lines


def _best_run(entry: dict, workload: str) -> dict | None:
    runs = [one for one in entry["runs"][workload] if "requests" in one]
    return min(runs, key=lambda one: one["seconds"]) if runs else None


def requests_table(results: dict, workload: str) -> list[str]:
    """Requests per kind per FUSE target, from each target's fastest round of the workload."""
    best = {k: run for k, e in results.items() if (run := _best_run(e, workload)) is not None}
    if not best:
        return []
    kinds: dict[str, int] = {}
    for run in best.values():
        for kind, v in run["requests"].items():
            kinds[kind] = max(kinds.get(kind, 0), v["count"])
    lines = [
        "| request | " + " | ".join(results[k]["label"] for k in best) + " |",
        "|---|" + "---|" * len(best),
    ]
    first = next(iter(best.values()))["requests"]  # rows in the order of the first column's counts
    for kind in sorted(kinds, key=lambda k: (-first.get(k, {"count": 0})["count"], -kinds[k])):
        cells = []
        for run in best.values():
            v = run["requests"].get(kind)
            mean = f" ({v['mean_us']:,.0f} µs)" if v and v["mean_us"] is not None else ""
            cells.append(f"{v['count']:,}{mean}" if v else "—")
        lines.append(f"| {kind.lower()} | " + " | ".join(cells) + " |")
    totals = [f"**{sum(v['count'] for v in run['requests'].values()):,}**" for run in best.values()]
    lines.append("| **all** | " + " | ".join(totals) + " |")
    lines.append("| events lost | " + " | ".join(f"{run['lost_events']:,}" for run in best.values()) + " |")
    return lines


def checks(results: dict) -> list[str]:
    """The targets, met or not, with their figures (judged on the best rounds)."""
    out = []
    for key in ("fusetrace+trace", *(f"fusetrace+trace+{tag}" for tag in VARIANTS)):
        if key in results:
            label = results[key]["label"]
            out.append(f"- traced `tar x` ≤ {PHP} ({label}): {_verdict(results, 'tar', key, PHP, 1.0)}")
    for what, unit in (("seconds", "wall time"), ("server_cpu_s", "server CPU")):
        verdict = _verdict(results, "tar", "fusetrace+trace", "fusetrace", 1.05, what)
        out.append(f"- cost of tracing on `tar x` ≤ 5 % ({unit}, traced ÷ untraced − 1): {verdict}")
    out.append(f"- cold `ls -lR` through fusetrace ≤ {PHP}: {_verdict(results, 'ls', 'fusetrace', PHP, 1.0)}")
    return out


def _verdict(results: dict, workload: str, key: str, other: str, most: float, what: str = "seconds") -> str:
    """Met when key's best ÷ other's best ≤ `most`; a cost (most above 1) is given as a percentage."""
    rt = ratio(results, workload, key, other, what)
    if rt is not None:
        figures = (
            f"{rt[0] - 1:+.1%} best ÷ best, {rt[1] - 1:+.1%} median of the rounds' ratios"
            if most > 1
            else f"{rt[0]:.2f}x best, {rt[1]:.2f}x median of the rounds' ratios"
        )
        return f"{'met' if rt[0] <= most else 'not met'}: {figures}"
    for k in (key, other):
        if k not in results:
            return f"not measured: no {k}" + (" (needs --passthrough-hp PATH)" if k == PHP else "")
        if "skipped" in results[k]:
            return f"not measured: {results[k]['label']} skipped"
    return "not measured"


def report(results: dict, machine: dict, tar: dict, args: argparse.Namespace, command: str) -> str:
    L = [
        f"`{command}`, run {machine['date']} on {machine['nproc']} CPUs ({machine['cpu']}), "
        f"{machine['mem_gib']} GiB, Linux {machine['kernel']}, Python {machine['python']}, pyfuse3 "
        f"{machine['pyfuse3']}, fusetrace {machine['fusetrace']}; work directory on {machine['workdir_fs']}. "
        f"Other work on the machine: at the start {machine['load_start']}; at the end {machine['load_end']}."
        + (
            " **A smoke test (`--quick`) on a shared, loaded host: for orientation only, not the measure.**"
            if args.quick
            else ""
        ),
        "",
        f"The tree: `{args.tree}`{f', its first {QUICK_ENTRIES} entries (`--quick`)' if args.quick else ''}, "
        f"{tar['entries']:,} entries, a tar of {tar['bytes'] / 1e6:,.1f} MB. Each workload ran on a fresh "
        f"mount over a fresh source directory, one mount at a time, {args.rounds} round(s), the targets in "
        "alternating order; *tar x* is `tar xf TARBALL -C MNT && sync`; *cold ls -lR* is `LC_ALL=C ls -lR "
        "MNT > /dev/null` of the same tree extracted natively into the source (extended attributes as "
        "they come on the source's file system), `sync; echo 3 > /proc/sys/vm/drop_caches` once the "
        f"mount is up. Ratios are times ÷ {PHP}'s in the same run (below 1: faster). *Server CPU* is the "
        "server process's user and system time during the workload (`/proc/PID/stat`). passthrough_hp "
        "here is libfuse 3.14.0's example, which has no kernel passthrough of reads and writes: its "
        "default is what later versions call `passthrough_hp --nopassthrough` (day-long caches); "
        "`--nocache` sets its timeouts to 0. The traced variants add "
        + "; ".join(f"{tag}: `{' '.join(extra)}`" for tag, extra in VARIANTS.items())
        + " (`VARIANTS` in bench/smallfiles.py).",
        "",
        *times_table(results),
        "",
    ]
    for w in WORKLOADS:
        table = requests_table(results, w)
        if table:
            L += [
                f"Requests the kernel sent during {WORKLOADS[w]}, per kind (the `fuse:fuse_request_send` "
                "tracepoint, filtered to the mount's connection; in brackets the mean time from send to "
                "reply, `fuse:fuse_request_end`), from each target's fastest round (the tracepoints are on "
                "during every timed FUSE run, two events a request, alike for every FUSE target):",
                "",
                *table,
                "",
            ]
    L += ["The targets:", "", *checks(results)]
    return "\n".join(L)


# ---- main ----------------------------------------------------------------------------------


def _fail(msg: str) -> int:
    print(f"bench/smallfiles.py: {msg}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help=f"the first {QUICK_ENTRIES} entries of the tree (a smoke test)")
    p.add_argument("--tree", default=DEFAULT_TREE, help=f"the tree to tar and list (default {DEFAULT_TREE})")
    p.add_argument("--passthrough-hp", metavar="PATH", help="libfuse's example/passthrough_hp, built by hand")
    p.add_argument("--rounds", type=int, default=3, metavar="N", help="rounds, alternating order (default 3)")
    p.add_argument("--only", metavar="KEY[,KEY]", help=f"these targets ({', '.join(KEYS)})")
    p.add_argument("--trace", metavar="DIR", help="where the traced targets' traces go (default: the work directory)")
    p.add_argument("--workdir", default=DEFAULT_WORKDIR, help=f"on a local disk (default {DEFAULT_WORKDIR})")
    p.add_argument("--out", default="docs/BENCHMARKS.md", help="the page whose smallfiles section is written")
    args = p.parse_args(argv)
    only = args.only.split(",") if args.only else DEFAULT_KEYS
    if set(only) - set(KEYS):
        return _fail(f"--only: no target {', '.join(sorted(set(only) - set(KEYS)))} (targets: {', '.join(KEYS)})")
    if args.rounds < 1:
        return _fail(f"--rounds {args.rounds}: must be at least 1")
    tree = Path(args.tree).resolve()
    if not tree.is_dir():
        return _fail(f"--tree {args.tree}: not a directory")
    if os.geteuid() != 0 or not can_drop_caches() or FR.available():
        return _fail(f"must run as root (it mounts, drops caches and reads tracefs): {FR.available() or 'not root'}")
    for tool in ("tar", "ls", "fusermount3"):
        if shutil.which(tool) is None:
            return _fail(f"{tool} not found")
    work = Path(args.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    machine = _machine(work)
    if machine["workdir_fs"] in ("tmpfs", "ramfs") or machine["workdir_fs"].startswith("fuse"):
        return _fail(f"--workdir {work} is on {machine['workdir_fs']}, not a local disk")
    trace = Path(args.trace).resolve() if args.trace else None
    targets = [t for t in _targets(args.passthrough_hp) if t.key in only]
    if args.only is None and not args.passthrough_hp:
        _say(f"note: without --passthrough-hp PATH there is no {PHP} to compare with")

    tar = tarball(tree, args.quick)
    _say(f"{tar['path']}: {tar['entries']:,} entries, {tar['bytes'] / 1e6:,.1f} MB; {machine['load_start']}")
    results = run_all(targets, tar["path"], args.rounds, work, trace)
    machine["load_end"] = _load()
    command = "bench/smallfiles.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = report(results, machine, tar, args, command.strip())
    publish("smallfiles", command, {"machine": machine, "tar": tar, "results": results}, text, args.out, MARK)
    return 0


if __name__ == "__main__":
    sys.exit(main())
