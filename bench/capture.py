#!/usr/bin/env python3
"""`fusetrace capture` (eBPF, nothing in the path): what it costs a `tar x` of 5,000 small
files, against the same tar uncaptured and through a traced FUSE mount, and what it loses
at 100,000 calls a second and past what its probes can deliver.

    .venv/bin/python bench/capture.py [--rounds N] [--fs tmpfs,ext4] [--only cost,loss]
        [--rate N] [--seconds S] [--threads N] [--workdir DIR] [--out docs/BENCHMARKS.md]

On a tmpfs and a loop-mounted ext4 it mounts itself (and unmounts, whatever happens).
Cost: the tar (a deterministic tree, built once in bench/out/) runs bare, under `fusetrace
capture FS --trace DIR -- ...` and through `fusetrace mount SRC MNT --trace DIR` (SRC on
the same file system), alternating from round to round; every tar is timed from the inside
(bench/capturechild.py), so bpftrace's start and the final drain are reported apart
("start", "stop") and not counted in the tar's time.  Loss: a generator of 1-byte preads on
a file of the mount, paced to --rate calls a second, then unpaced, captured; the calls it
made against the trace's records and the capture's `lost` counts.  Writes its section
between the `<!-- capture -->` markers of docs/BENCHMARKS.md and the raw figures to
bench/out/capture-*.json.  As root (it mounts and captures).
"""

import argparse
import contextlib
import io
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyarrow.parquet as pq
import targets as T
from capturechild import STATS_ENV
from common import FUSETRACE, cpu_s, publish, server_pid
from run import _load, _loadavg1, _machine

MARK = "<!-- capture -->"
DEFAULT_WORKDIR = "/var/tmp/fusetrace-bench-capture"
CHILD = [sys.executable, str(Path(__file__).resolve().parent / "capturechild.py")]
FILES, DIRS = 5000, 50
FILE_SIZES = (1024, 8192)
EXT4_MIB = 1024
BPF_STATS = "/proc/sys/kernel/bpf_stats_enabled"
COST_LIMIT = 0.10  # the target: capture adds at most 10 % to the tar's wall time
MODES = ("bare", "captured", "fuse")
MODE_LABELS = {
    "bare": "uncaptured",
    "captured": "`fusetrace capture`",
    "fuse": "`fusetrace mount --trace`",
}


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---- the tree and the file systems ---------------------------------------------------------


def tarball() -> dict:
    """FILES files of FILE_SIZES bytes in DIRS directories, the same bytes every time."""
    dest = T.CACHE / f"capture-{FILES}.tar"
    if not dest.exists():
        T.CACHE.mkdir(parents=True, exist_ok=True)
        rng = random.Random(43)
        tmp = dest.with_suffix(".tmp")
        with tarfile.open(tmp, "w", format=tarfile.GNU_FORMAT) as tar:
            for d in range(DIRS):
                info = tarfile.TarInfo(f"tree/d{d:02}")
                info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 1_700_000_000
                tar.addfile(info)
                for i in range(FILES // DIRS):
                    data = rng.randbytes(rng.randint(*FILE_SIZES))
                    info = tarfile.TarInfo(f"tree/d{d:02}/f{i:03}")
                    info.size, info.mode, info.mtime = len(data), 0o644, 1_700_000_000
                    tar.addfile(info, io.BytesIO(data))
        tmp.rename(dest)
    return {"path": str(dest), "files": FILES, "dirs": DIRS, "bytes": dest.stat().st_size}


class FileSystems:
    """A tmpfs and a loop-mounted ext4 under the work directory, gone again at exit."""

    def __init__(self, work: Path, kinds: list[str]):
        self.work, self.kinds = work, kinds
        self.mounts: dict[str, Path] = {}

    def __enter__(self) -> dict[str, Path]:
        try:
            for kind in self.kinds:
                mnt = self.work / kind
                T.force_unmount(str(mnt))
                subprocess.run(["umount", str(mnt)], capture_output=True)  # an earlier run's
                mnt.mkdir(parents=True, exist_ok=True)
                if kind == "tmpfs":
                    _must(["mount", "-t", "tmpfs", "-o", "size=1g", "fusetrace-bench", str(mnt)])
                else:
                    img = self.work / "ext4.img"
                    img.unlink(missing_ok=True)
                    with open(img, "wb") as f:
                        f.truncate(EXT4_MIB << 20)
                    _must(["mkfs.ext4", "-q", "-F", str(img)])
                    _must(["mount", "-o", "loop", str(img), str(mnt)])
                self.mounts[kind] = mnt
        except BaseException:
            self.__exit__()
            raise
        return self.mounts

    def __exit__(self, *exc: object) -> None:
        for kind, mnt in self.mounts.items():
            if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
            if kind == "ext4":
                (self.work / "ext4.img").unlink(missing_ok=True)
        self.mounts.clear()


@contextlib.contextmanager
def bpf_stats(on: bool) -> Iterator[None]:
    """The kernel's run time of every BPF program, kept while this is on (--bpf-stats): a
    setting of the whole host that costs every program a clock read, so restored after."""
    if not on:
        yield
        return
    with open(BPF_STATS) as f:
        before = f.read().strip()
    with open(BPF_STATS, "w") as f:
        f.write("1")
    os.environ[STATS_ENV] = "1"  # (to the timed tar, through the capture)
    try:
        yield
    finally:
        del os.environ[STATS_ENV]
        with open(BPF_STATS, "w") as f:
            f.write(before)


def _must(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bench/capture.py: `{' '.join(cmd)}` failed: {done.stderr.strip()}")


def _fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


# ---- one run -------------------------------------------------------------------------------


def _child_figures(out: Path) -> dict:
    try:
        return json.loads(out.read_text())
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"the timed child left no figures in {out}: {exc}") from exc


def captured(mnt: Path, trace: Path, cmd: list[str], out: Path) -> dict:
    """`cmd` (a capturechild.py command writing `out`) under `fusetrace capture mnt`: its
    figures, the capture's start and stop, its metadata and the trace's records by op."""
    shutil.rmtree(trace, ignore_errors=True)
    out.unlink(missing_ok=True)
    t0 = time.monotonic_ns()
    proc = subprocess.Popen(
        [*FUSETRACE, "capture", str(mnt), "--trace", str(trace), "--", *cmd],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=T.REPO,
    )
    try:
        _, err = proc.communicate()
    finally:
        if proc.poll() is None:  # interrupted: let the capture stop its bpftrace and write
            proc.send_signal(signal.SIGINT)
            proc.wait(120)
    t1 = time.monotonic_ns()
    if proc.returncode != 0:
        raise RuntimeError(f"capture exited {proc.returncode}: {err.strip().splitlines()[-1:]}")
    one = _child_figures(out)
    meta = json.loads((trace / "_metadata.json").read_text())
    one["start_s"] = (one["start_ns"] - t0) / 1e9
    one["stop_s"] = (t1 - one["end_ns"]) / 1e9
    one["capture"] = meta["capture"]
    one["trace_records"] = meta.get("records")
    one["trace_dropped"] = meta.get("dropped")
    one["ops"], one["repeated"] = _ops(trace)
    one["said"] = err.strip().splitlines()[-1:]
    return one


def _ops(trace: Path) -> tuple[dict[str, int], int]:
    """The trace's records by op, and how many repeat an earlier one (a call is one thread's
    at one start time: the same pair twice is one call recorded twice)."""
    parts = sorted(trace.glob("*.parquet"))
    if not parts:
        return {}, 0
    table = pq.read_table(parts, columns=["op", "tid", "start_ns"])
    ops = table.column("op").to_pylist()
    calls = Counter(zip(table.column("tid").to_pylist(), table.column("start_ns").to_pylist(), strict=True))
    return dict(Counter(ops).most_common()), sum(n - 1 for n in calls.values())


def cost_once(mode: str, fs: Path, tar: str, work: Path, tag: str) -> dict:
    out = work / f"timed-{tag}.json"
    out.unlink(missing_ok=True)
    timed = [*CHILD, "timed", str(out), "--", "tar", "xf", tar, "-C"]
    if mode == "bare":
        dest = _fresh(fs / "x")
        os.sync()
        subprocess.run([*timed, str(dest)], check=True)
        one = _child_figures(out)
    elif mode == "captured":
        dest = _fresh(fs / "x")
        os.sync()
        one = captured(fs, work / "traces" / tag, [*timed, str(dest)], out)
    else:
        src, mnt = _fresh(fs / "fuse-src"), _fresh(work / "fusemnt")
        target = T.Fusetrace(trace=True)
        root = target.start(str(src), str(mnt), _fresh(work / "traces" / tag))
        try:
            pid = server_pid(root)
            dest = Path(root) / "x"
            dest.mkdir()
            os.sync()
            cpu0 = cpu_s(pid)
            subprocess.run([*timed, str(dest)], check=True)
            server = cpu_s(pid) - cpu0
        finally:
            target.stop()
        one = _child_figures(out)
        one["cpu_s"] = {"server": server}
        one.update(target.after())
        shutil.rmtree(src, ignore_errors=True)
    if one["exit"] != 0:
        raise RuntimeError(f"tar exited {one['exit']} ({mode}, {tag})")
    one["load"] = _loadavg1()
    shutil.rmtree(fs / "x", ignore_errors=True)
    return one


def load_once(fs: Path, work: Path, rate: int, seconds: float, threads: int, tag: str, bare: bool) -> dict:
    target = fs / "load"
    target.write_bytes(b"x" * 4096)
    out = work / f"load-{tag}.json"
    out.unlink(missing_ok=True)
    cmd = [*CHILD, "load", str(out), str(target), str(rate), str(seconds), str(threads)]
    if bare:
        subprocess.run(cmd, check=True)
        one = _child_figures(out)
    else:
        one = captured(fs, work / "traces" / tag, cmd, out)
    one["load"] = _loadavg1()
    return one


def run_cost(mounts: dict[str, Path], tar: str, rounds: int, work: Path) -> dict:
    results: dict = {fs: {m: [] for m in MODES} for fs in mounts}
    for r in range(rounds):
        for fs, path in mounts.items():
            for mode in MODES if r % 2 == 0 else MODES[::-1]:
                one = cost_once(mode, path, tar, work, f"cost-{fs}-{mode}-{r}")
                one["round"] = r
                results[fs][mode].append(one)
                extra = f", start {one['start_s']:.1f} s, stop {one['stop_s']:.1f} s" if "start_s" in one else ""
                _say(f"round {r + 1} cost {fs} {mode}: tar {one['seconds']:.3f} s{extra}, load {one['load']}")
    return results


def run_loss(mounts: dict[str, Path], rounds: int, work: Path, rate: int, seconds: float, threads: int) -> dict:
    results: dict = {fs: {"paced": [], "unpaced": [], "unpaced-bare": []} for fs in mounts}
    for r in range(rounds):
        for fs, path in mounts.items():
            runs = [("paced", rate, False), ("unpaced", 0, False), ("unpaced-bare", 0, True)]
            for kind, rt, bare in runs if r % 2 == 0 else runs[::-1]:
                one = load_once(path, work, rt, seconds, threads, f"loss-{fs}-{kind}-{r}", bare)
                one["round"] = r
                results[fs][kind].append(one)
                lost = one.get("capture", {}).get("lost")
                _say(f"round {r + 1} loss {fs} {kind}: {one['rate_reached']:,.0f} calls/s, lost {lost}")
    return results


# ---- figures -------------------------------------------------------------------------------


def _bm(xs: list[float]) -> tuple[float, float]:
    return min(xs), statistics.median(xs)


def _fmt(xs: list[float], unit: str = " s", digits: int = 2) -> str:
    if not xs:
        return "—"
    b, m = _bm(xs)
    return f"{b:.{digits}f}{unit} ({m:.{digits}f})"


def _ratios(runs: dict, mode: str) -> tuple[float, float] | None:
    """mode ÷ bare: best ÷ best, and the median of the rounds' ratios."""
    a = {one["round"]: one["seconds"] for one in runs[mode]}
    b = {one["round"]: one["seconds"] for one in runs["bare"]}
    both = sorted(set(a) & set(b))
    if not both:
        return None
    return min(a.values()) / min(b.values()), statistics.median(a[r] / b[r] for r in both)


def cost_table(cost: dict) -> list[str]:
    lines = [
        "| file system | how | tar x: best (median) | ÷ uncaptured: best (median of rounds) | "
        "tar's CPU, user + sys: best (median) | the tracer's CPU during the tar: median | "
        "start, stop: median |",
        "|---|---|---|---|---|---|---|",
    ]
    for fs, runs in cost.items():
        for mode in MODES:
            rs = runs[mode]
            if not rs:
                continue
            rt = _ratios(runs, mode) if mode != "bare" else None
            ratio = f"{rt[0]:.2f}x ({rt[1]:.2f}x)" if rt else "—"
            tar_cpu = [one["cmd_user_s"] + one["cmd_sys_s"] for one in rs]
            tracer = "—"
            if mode != "bare":
                who = sorted({k for one in rs for k in one["cpu_s"]})
                tracer = ", ".join(f"{k} {statistics.median(one['cpu_s'].get(k, 0) for one in rs):.2f} s" for k in who)
            ends = "—"
            if mode == "captured":
                ends = (
                    f"{statistics.median(one['start_s'] for one in rs):.1f} s, "
                    f"{statistics.median(one['stop_s'] for one in rs):.1f} s"
                )
            lines.append(
                f"| {fs} | {MODE_LABELS[mode]} | {_fmt([one['seconds'] for one in rs], digits=3)} | {ratio} | "
                f"{_fmt(tar_cpu, digits=3)} | {tracer} | {ends} |"
            )
    return lines


def ops_table(cost: dict) -> list[str]:
    """The records of each file system's fastest captured tar, by op, and per file."""
    best = {fs: min(runs["captured"], key=lambda one: one["seconds"]) for fs, runs in cost.items() if runs["captured"]}
    if not best:
        return []
    ops: Counter[str] = Counter()
    for one in best.values():
        ops.update(one["ops"])
    lines = ["| op | " + " | ".join(f"{fs}: records (per file)" for fs in best) + " |", "|---|" + "---|" * len(best)]
    for op, _ in ops.most_common():
        cells = [f"{one['ops'].get(op, 0):,} ({one['ops'].get(op, 0) / FILES:.2f})" for one in best.values()]
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    totals = [f"**{sum(one['ops'].values()):,}** ({sum(one['ops'].values()) / FILES:.2f})" for one in best.values()]
    lines.append("| **all** | " + " | ".join(totals) + " |")
    lost = [_lost(one["capture"]) for one in best.values()]
    lines.append("| lost | " + " | ".join(lost) + " |")
    lines.append(
        "| records that repeat another | " + " | ".join(f"{one['repeated']:,}" for one in best.values()) + " |"
    )
    return lines


def _lost(cap: dict) -> str:
    lost = cap.get("lost") or {}
    return ", ".join(f"{n:,} {op}" for op, n in lost.items()) or "none"


def probe_lines(cost: dict) -> list[str]:
    """With --bpf-stats: the probes' own kernel time during the captured tars (medians)."""
    out = []
    for fs, runs in cost.items():
        seen = [one for one in runs["captured"] if "probes" in one]
        if not seen or not runs["bare"]:
            continue
        ns = statistics.median(one["probes"]["ns"] for one in seen)
        n = statistics.median(one["probes"]["runs"] for one in seen)
        records = statistics.median(sum(one["ops"].values()) - one["repeated"] for one in seen)
        added = statistics.median(one["cmd_user_s"] + one["cmd_sys_s"] for one in seen) - statistics.median(
            one["cmd_user_s"] + one["cmd_sys_s"] for one in runs["bare"]
        )
        top = min(seen, key=lambda one: one["seconds"])["probes"]["top"][0]
        out.append(
            f"- the probes on {fs} (kernel.bpf_stats_enabled, medians of {len(seen)} captured tar(s)): "
            f"{n:,.0f} runs during the tar, {ns / 1e6:.1f} ms in all, {ns / n:,.0f} ns a run, "
            f"{ns / records / 1e3:.2f} µs a record; the tar's CPU grew by {added * 1e3:.0f} ms "
            f"(the probes: {ns / 1e9 / added:.0%} of that); the costliest program ran {top[1]:,} times, "
            f"{top[0] / top[1]:,.0f} ns a run"
        )
    return out


def cost_checks(cost: dict) -> list[str]:
    out = []
    for fs, runs in cost.items():
        rt = _ratios(runs, "captured")
        if rt is None:
            continue
        verdict = "met" if rt[0] - 1 <= COST_LIMIT else "not met"
        out.append(
            f"- capture adds ≤ {COST_LIMIT:.0%} to the tar's wall time on {fs}: {verdict}: "
            f"{rt[0] - 1:+.1%} best ÷ best, {rt[1] - 1:+.1%} median of the rounds' ratios"
        )
        fuse = _ratios(runs, "fuse")
        if fuse:
            out.append(
                f"- the same tar through a traced FUSE mount on {fs}: "
                f"{fuse[0]:.1f}x best ÷ best ({fuse[1]:.1f}x median of the rounds' ratios)"
            )
    return out


def loss_table(loss: dict) -> list[str]:
    lines = [
        "| file system | load | round | calls/s reached | calls made (open, read, flush) | records in the trace "
        "(open, read, flush) | records that repeat another | dropped by the trace writer | `lost` | "
        "`bpftrace_lost_events` | records − repeats + dropped + lost = calls made | CPU during the load: capture, "
        "bpftrace |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for fs, kinds in loss.items():
        for kind, runs in kinds.items():
            for one in runs:
                made = one["calls"]
                cells = [fs, kind, str(one["round"] + 1), f"{one['rate_reached']:,.0f}"]
                cells.append(", ".join(f"{made[k]:,}" for k in ("open", "read", "flush")))
                if "capture" not in one:
                    lines.append("| " + " | ".join([*cells, "(not captured)", "—", "—", "—", "—", "—", "—"]) + " |")
                    continue
                ops, lost = one["ops"], one["capture"].get("lost") or {}
                cells.append(", ".join(f"{ops.get(k, 0):,}" for k in ("open", "read", "flush")))
                cells += [
                    f"{one['repeated']:,}",
                    f"{one['trace_dropped']:,}",
                    _lost(one["capture"]),
                    f"{one['capture'].get('bpftrace_lost_events')}",
                ]
                # (a repeated record is not a call: records − repeats + lost is what was counted)
                counted = sum(ops.values()) - one["repeated"] + one["trace_dropped"] + sum(lost.values())
                short = sum(made.values()) - counted
                whole = short == 0
                extra = sorted(set(ops) - set(made))
                cells.append(
                    (
                        "yes"
                        if whole
                        else f"**no**: {short:,} unaccounted"
                        if short > 0
                        else f"**no**: {-short:,} too many"
                    )
                    + (f" (other ops: {extra})" if extra else "")
                )
                cpu = one.get("cpu_s", {})
                cells.append(", ".join(f"{cpu[k]:.2f} s" for k in ("capture", "bpftrace") if k in cpu) or "—")
                lines.append("| " + " | ".join(cells) + " |")
    return lines


def _accounted(one: dict) -> bool:
    """Every call made is one record or one lost, by op, none repeated nor dropped unnamed."""
    ops, lost = one["ops"], one["capture"].get("lost") or {}
    return one["repeated"] == one["trace_dropped"] == 0 and all(
        ops.get(k, 0) + lost.get(k, 0) == n for k, n in one["calls"].items()
    )


def loss_checks(loss: dict, rate: int) -> list[str]:
    out = []
    for fs, kinds in loss.items():
        paced = kinds["paced"]
        if paced:
            nothing = all(
                not one["capture"].get("lost") and not one["capture"].get("bpftrace_lost_events") and _accounted(one)
                for one in paced
            )
            out.append(
                f"- nothing lost at {rate:,} calls a second on {fs}: {'met' if nothing else 'not met'} "
                f"({len(paced)} run(s), {min(one['rate_reached'] for one in paced):,.0f} calls/s reached at least)"
            )
        counted = kinds["unpaced"]
        if counted:
            exact = all(_accounted(one) for one in counted)
            verdict = "met" if exact else "not met"
            out.append(
                f"- past what the probes deliver, every call counted on {fs} (a record or lost, by op, "
                f"no record repeated): {verdict}"
            )
    return out


def per_call(loss: dict, threads: int) -> list[str]:
    """What a captured pread costs its caller: the unpaced generator's time per call, captured
    and bare (threads × seconds ÷ calls)."""
    out = []
    for fs, kinds in loss.items():
        bare = [threads / one["rate_reached"] * 1e6 for one in kinds["unpaced-bare"]]
        cap = [threads / one["rate_reached"] * 1e6 for one in kinds["unpaced"]]
        if bare and cap:
            out.append(
                f"- {fs}: a 1-byte pread in the unpaced generator takes {statistics.median(bare):.2f} µs bare and "
                f"{statistics.median(cap):.2f} µs captured (median of the rounds, each of {threads} threads): "
                f"{statistics.median(cap) - statistics.median(bare):+.2f} µs a call"
            )
    return out


def report(results: dict, machine: dict, tar: dict, args: argparse.Namespace, command: str) -> str:
    loads = [
        one["load"]
        for part in ("cost", "loss")
        for fs in results.get(part, {}).values()
        for runs in fs.values()
        for one in runs
    ]
    L = [
        f"`{command}`, run {machine['date']} on {machine['nproc']} CPUs ({machine['cpu']}), "
        f"{machine['mem_gib']} GiB, Linux {machine['kernel']}, Python {machine['python']}, fusetrace "
        f"{machine['fusetrace']}, {results.get('bpftrace', 'bpftrace')}. Other work on the machine (a shared host, "
        f"other engineers' tests running): at the start {machine['load_start']}; at the end {machine['load_end']}"
        + (f"; 1-minute load average {min(loads):.2f}-{max(loads):.2f} over the runs." if loads else "."),
        "",
    ]
    if "cost" in results:
        L += [
            f"**Cost.** `tar xf TAR -C DIR` of {tar['files']:,} files of {FILE_SIZES[0] // 1024}-"
            f"{FILE_SIZES[1] // 1024} KiB in {tar['dirs']} directories ({tar['bytes'] / 1e6:.1f} MB, built "
            "once, the same bytes every time), into a fresh directory on each file system: *uncaptured*; "
            "under `fusetrace capture FS --trace DIR -- capturechild.py timed OUT -- tar xf ...`; and "
            "through `fusetrace mount SRC MNT --trace DIR` with SRC on the same file system, "
            f"{args.rounds} round(s), the three in alternating order. The tar is timed from the inside "
            "(bench/capturechild.py: the clock read just before and after the tar), so bpftrace's start "
            "(it compiles its program) and the drain after the tar are not in its time: they are "
            "*start* (from starting `fusetrace capture` to the tar's start) and *stop* (from the tar's "
            "end to the capture's exit: bpftrace's END, its last maps read, the trace written). *tar's "
            "CPU* is the tar's user and system time (getrusage): the probes run in the tar's system "
            "calls and are counted there. *The tracer's CPU* is what the capture process and bpftrace "
            "(all threads, `/proc/PID/task/*/schedstat`), or the FUSE server (`/proc/PID/stat`), used during the tar.",
            "",
            *cost_table(results["cost"]),
            "",
            "Records of the fastest captured tar on each file system, by op (per file extracted):",
            "",
            *ops_table(results["cost"]),
            "",
            *cost_checks(results["cost"]),
            *probe_lines(results["cost"]),
            "",
        ]
    if "loss" in results:
        L += [
            f"**Loss.** `capturechild.py load`: {args.threads} threads, each opening one 4 KiB file on the "
            f"mount and calling `os.pread(fd, 1, 0)` in a loop, paced to {args.rate:,} calls a second "
            f"over both (*paced*), or as fast as they go (*unpaced*), for {args.seconds:g} s, under "
            "`fusetrace capture`; *unpaced-bare* is the unpaced generator uncaptured, for its rate. The "
            "calls it made are counted by the generator; the records by op are the trace's; *records that "
            "repeat another* have the same thread and start time as an earlier one (one call recorded twice); "
            "*dropped by the trace writer* is `_metadata.json`'s `dropped` (records the capture read that the "
            "writer's queue had no room for); `lost` and `bpftrace_lost_events` are its `capture` section. "
            "*CPU during the load* is the capture process's and bpftrace's (all threads, schedstat).",
            "",
            *loss_table(results["loss"]),
            "",
            *loss_checks(results["loss"], args.rate),
            *per_call(results["loss"], args.threads),
        ]
    return "\n".join(L)


# ---- main ----------------------------------------------------------------------------------


def _fail(msg: str) -> int:
    print(f"bench/capture.py: {msg}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, metavar="N", help="rounds, alternating order (default 3)")
    p.add_argument("--fs", default="tmpfs,ext4", help="the file systems: tmpfs, ext4 (default both)")
    p.add_argument("--only", default="cost,loss", help="cost, loss (default both)")
    p.add_argument("--rate", type=int, default=100_000, help="the paced generator's calls a second (default 100000)")
    p.add_argument("--seconds", type=float, default=4.0, help="how long each generator runs (default 4)")
    p.add_argument("--threads", type=int, default=2, help="the generator's threads (default 2)")
    p.add_argument(
        "--bpf-stats",
        action="store_true",
        help="turn kernel.bpf_stats_enabled on during the cost runs (restored after): the probes' kernel time",
    )
    p.add_argument("--workdir", default=DEFAULT_WORKDIR, help=f"on a local disk (default {DEFAULT_WORKDIR})")
    p.add_argument("--out", default="docs/BENCHMARKS.md", help="the page whose capture section is written")
    args = p.parse_args(argv)
    kinds, parts = args.fs.split(","), args.only.split(",")
    if set(kinds) - {"tmpfs", "ext4"} or not kinds:
        return _fail(f"--fs {args.fs}: tmpfs, ext4 or both")
    if set(parts) - {"cost", "loss"} or not parts:
        return _fail(f"--only {args.only}: cost, loss or both")
    if args.rounds < 1 or args.threads < 1 or args.seconds <= 0 or args.rate < 1:
        return _fail("--rounds, --threads, --rate and --seconds must be positive")
    if os.geteuid() != 0:
        return _fail("must run as root (it mounts and captures)")
    for tool in ("tar", "bpftrace", "mkfs.ext4", "fusermount3"):
        if shutil.which(tool) is None:
            return _fail(f"{tool} not found")
    work = Path(args.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    machine = _machine(work)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # through the finally clauses: unmount
    tar = tarball()
    _say(f"{tar['path']}: {tar['files']:,} files, {tar['bytes'] / 1e6:.1f} MB; {machine['load_start']}")
    results: dict = {
        "bpftrace": subprocess.run(["bpftrace", "--version"], capture_output=True, text=True).stdout.strip()
    }
    with FileSystems(work, kinds) as mounts:
        if "cost" in parts:
            with bpf_stats(args.bpf_stats):
                results["cost"] = run_cost(mounts, tar["path"], args.rounds, work)
        if "loss" in parts:
            results["loss"] = run_loss(mounts, args.rounds, work, args.rate, args.seconds, args.threads)
    machine["load_end"] = _load()
    command = "bench/capture.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = report(results, machine, tar, args, command.strip())
    publish("capture", command, {"machine": machine, "tar": tar, "results": results}, text, args.out, MARK)
    return 0


if __name__ == "__main__":
    sys.exit(main())
