"""The rehearsal loop, end to end, at a size where percentiles mean something.

A mixed workload (tests/workloads/mixed.sh: small files created and written, files made
durable with dd conv=fsync, an fsync-heavy sqlite database, random 4 KiB I/O, a namespace
of directories made, renamed and removed, listings and stats, tar and cat reading it all
back; several processes at once) runs on a mount emulating each profile, traced;
`fusetrace fit` fits a profile to that trace (its base: the trace's own profile); a second
mount emulates the fitted profile; `fusetrace replay --prepare-into` makes the trace's
starting tree in its source and re-issues the trace into it, traced again; `fusetrace
compare` sets the two traces side by side; and the same workload runs again, not replayed,
on a third mount of the fitted profile, whose wall time is set beside the recording's.  The
figures go between the `<!-- rehearsal -->` markers of docs/BENCHMARKS.md.

    .venv/bin/python bench/rehearsal.py [--rounds N] [--profiles P ...] [--docs FILE]

Operations whose median is under ten FUSE round trips take the time the host gives them,
not the model (a getattr answered by the emulated client's cache, a buffered write): their
rows are shown, and the verdict the issue asks for (p50 within 10 %, p99 within 15 %) is
counted over the others.
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
from fusetrace.hostload import load_words  # noqa: E402

FUSETRACE = [sys.executable, "-m", "fusetrace"]
WORKLOAD = ROOT / "tests" / "workloads" / "mixed.sh"
MARK = "<!-- rehearsal -->"
MODEL_SET = 10  # round trips: below this median the host, not the model, sets an operation's time


def sh(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run(args, check=True, capture_output=True, text=True, timeout=timeout)


def ft(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([*FUSETRACE, *args], check=check, capture_output=True, text=True, timeout=3600)


def workload(profile: str, src: Path, mnt: Path, rounds: int, trace: Path | None = None) -> float:
    """The workload's wall time on a mount of `profile` over `src` (traced into `trace`)."""
    ft("mount", str(src), str(mnt), "--emulate", profile, *(["--trace", str(trace)] if trace else []))
    t0 = time.monotonic()
    try:
        sh("sh", str(WORKLOAD), str(mnt), str(rounds))
    finally:
        ft("umount", str(mnt))
    return time.monotonic() - t0


def run(rounds: int, profile: str, work: Path) -> dict:
    for name in ("src-a", "mnt-a", "src-b", "mnt-b", "src-c", "mnt-c"):
        (work / name).mkdir()
    trace_a, trace_b, fitted = work / "trace-a", work / "trace-b", work / "fitted.toml"
    recorded_s = workload(profile, work / "src-a", work / "mnt-a", rounds, trace_a)
    fit_out = ft("fit", str(trace_a), "-o", str(fitted)).stdout.strip()
    ft("mount", str(work / "src-b"), str(work / "mnt-b"), "--emulate", str(fitted), "--trace", str(trace_b))
    try:
        # the starting tree made in the source, untraced: B's trace holds the replay alone
        replay = json.loads(
            ft("replay", str(trace_a), str(work / "mnt-b"), "--prepare-into", str(work / "src-b"), "--json").stdout
        )
    finally:
        ft("umount", str(work / "mnt-b"))
    rerun_s = workload(str(fitted), work / "src-c", work / "mnt-c", rounds)
    compared = ft("compare", str(trace_a), str(trace_b), "--json", check=False)
    result = json.loads(compared.stdout)
    meta = {k: json.loads((t / "_metadata.json").read_text()) for k, t in (("a", trace_a), ("b", trace_b))}
    return {
        "rounds": rounds,
        "profile": profile,
        "recorded_s": recorded_s,
        "rerun_s": rerun_s,
        "fit": fit_out,
        "fitted": fitted.read_text(),
        "replay": replay,
        "compare": result,
        "exit": compared.returncode,
        "meta": meta,
    }


def render_all(results: list[dict]) -> str:
    rounds = results[0]["rounds"]
    lines = [
        MARK,
        "## The rehearsal loop: record, fit, emulate, replay, compare",
        "",
        f"`bench/rehearsal.py --rounds {rounds} --profiles {' '.join(r['profile'] for r in results)}`, "
        f"run {time.strftime('%Y-%m-%d')} on this machine. `tests/workloads/mixed.sh` ran on a mount "
        f"emulating each profile, traced (A); `fusetrace fit` fitted a profile to A on its own base; a "
        f"second mount emulated the fitted profile while `fusetrace replay --prepare-into` made A's "
        f"starting tree in its source and re-issued A into it, traced (B); `fusetrace compare A B` set "
        f"them side by side; the workload then ran again on a third mount of the fitted profile.",
        "",
        "| recorded on | judged operations within p50 10 %, p99 15 % | creates A / B | opens A / B "
        "| fsyncs A / B | wall time recorded | the same workload on the fitted profile | ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        judged, passed = _verdicts(r)
        counts = {row["op"]: row for row in r["compare"]["ops"]}

        def ab(op: str, counts: dict = counts) -> str:
            row = counts.get(op) or {}
            return f"{(row.get('a') or {}).get('count', 0):,} / {(row.get('b') or {}).get('count', 0):,}"

        lines.append(
            f"| `{r['profile']}` | {passed} of {judged} | {ab('create')} | {ab('open')} | {ab('fsync')} | "
            f"{r['recorded_s']:.1f} s | {r['rerun_s']:.1f} s | {r['rerun_s'] / r['recorded_s']:.2f} |"
        )
    for r in results:
        lines += ["", *render(r)]
    lines.append(MARK)
    return "\n".join(lines) + "\n"


def _verdicts(r: dict) -> tuple[int, int]:
    """(judged, passed): the operations whose median the model sets, and those within the tolerances."""
    rt = min(m.get("fuse_round_trip_ns") or 0 for m in r["meta"].values())
    judged = [row for row in r["compare"]["ops"] if _judged(row, rt)]
    return len(judged), sum(row["verdict"].startswith("pass") for row in judged)


def _judged(row: dict, rt: float) -> bool:
    """Whether the model sets this operation's time (its median is at least MODEL_SET round
    trips) and compare gave it a verdict."""
    p50 = (row.get("a") or {}).get("p50_ns")
    verdict = row["verdict"]
    return bool(p50 and p50 >= MODEL_SET * rt and (verdict == "fail" or verdict.startswith("pass")))


def render(r: dict) -> list[str]:
    meta = r["meta"]
    rt = min(m.get("fuse_round_trip_ns") or 0 for m in meta.values())
    lines = [f"### Recorded on `{r['profile']}`", ""]
    for side in ("a", "b"):
        host = meta[side].get("host_load") or {}
        verdict = "host-bound" if host.get("host_bound") else "the host kept up"
        words = load_words(host) if host else "no host figures"
        lines.append(
            f"- {side.upper()}: {verdict} ({words}); FUSE round trip "
            f"{(meta[side].get('fuse_round_trip_ns') or 0) / 1e3:.0f} µs."
        )
    rp = r["replay"]
    lines += [
        f"- Replay: {_replay_line(rp)}",
        "",
        "| op | A count | B count | A p50 | B p50 | p50 B/A | A p99 | B p99 | p99 B/A | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    judged, passed = _verdicts(r)
    for row in r["compare"]["ops"]:
        a, b = row.get("a") or {}, row.get("b") or {}
        verdict = row["verdict"]
        if not _judged(row, rt) and verdict not in ("too few",) and not verdict.startswith("only"):
            verdict += " (host-set: not counted)"
        lines.append(
            f"| {row['op']} | {a.get('count', 0):,} | {b.get('count', 0):,} | {_us(a.get('p50_ns'))} | "
            f"{_us(b.get('p50_ns'))} | {_ratio(row.get('p50_ratio'))} | {_us(a.get('p99_ns'))} | "
            f"{_us(b.get('p99_ns'))} | {_ratio(row.get('p99_ratio'))} | {verdict} |"
        )
    lines += [
        "",
        f"Of the {judged} operations whose median is at least {MODEL_SET} FUSE round trips "
        f"({MODEL_SET * rt / 1e3:.0f} µs: the model sets their time), {passed} are within the "
        f"tolerances (p50 {r['compare'].get('tolerance', 10):g} %, p99 "
        f"{r['compare'].get('tail_tolerance', 15):g} %). `fusetrace fit` said: {r['fit']}",
    ]
    return lines


def _replay_line(rp: dict) -> str:
    drift = "" if rp["drift"] is None else f", drift {100 * rp['drift']:+.1f} %"
    late = rp["late_ns"] or {}
    return (
        f"{rp['replayed']:,} of {rp['records']:,} records re-issued in {rp['span_ns'] / 1e9:.2f} s against "
        f"{rp['recorded_span_ns'] / 1e9:.2f} s recorded{drift}; issued late p50 {_us(late.get('p50'))}, "
        f"p99 {_us(late.get('p99'))}; {rp['differences']['count']} outcomes differ."
    )


def _us(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e3:,.0f} µs" if ns < 1e7 else f"{ns / 1e6:,.1f} ms"


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--profiles", nargs="+", default=["efs-2016", "efs-bursting"])
    p.add_argument("--docs", default=str(ROOT / "docs" / "BENCHMARKS.md"))
    args = p.parse_args()
    results = []
    for profile in args.profiles:
        with tempfile.TemporaryDirectory(prefix="rehearsal-") as work:
            results.append(run(args.rounds, profile, Path(work)))
    part = render_all(results)
    print(part)
    docs = Path(args.docs)
    text = docs.read_text() if docs.exists() else "# Benchmarks\n"
    if MARK in text:
        before, _, rest = text.partition(MARK)
        after = rest.partition(MARK)[2]
        text = before + part.rstrip("\n") + after
    else:
        text = text.rstrip("\n") + "\n\n" + part
    docs.write_text(text)


if __name__ == "__main__":
    main()
