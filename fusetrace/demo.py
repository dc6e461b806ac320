"""`fusetrace demo`: mount an emulated EFS over a temporary directory, run the published fio
jobs through it with a progress display, and print emulated against published figures."""

import sys
import time
import tomllib
from pathlib import Path

from . import fio
from .emulation import HOST_BOUND_SHARE
from .errors import UserError
from .scratch import ScratchMount
from .texttable import table as text_table

PUBLISHED = Path(__file__).resolve().parent.parent / "scenarios" / "published.toml"


def published(system: str) -> dict:
    with open(PUBLISHED, "rb") as f:
        data = tomllib.load(f)
    if system not in data:
        raise UserError(f"{PUBLISHED}: no published figures for {system!r} (have: {', '.join(data)})")
    return data[system]


def _progress(step: int, steps: int, name: str, elapsed: float, runtime: float, total_left: float) -> None:
    """A progress bar with the step and an ETA, redrawn in place (on a terminal)."""
    width = 30
    done = min(elapsed / runtime, 1.0)
    bar = "#" * int(done * width) + "-" * (width - int(done * width))
    eta = max(total_left - elapsed, 0)
    sys.stderr.write(f"\r[{step}/{steps}] {name:<20} [{bar}] ETA {eta:4.0f} s ")
    sys.stderr.flush()


def _fio(m: ScratchMount, job: dict, runtime: float, tick=None) -> fio.FioResult:
    args = fio.job_args(job["fio"])
    return fio.run(m.mnt, args, runtime, fio.prepare_file(m.src, args), on_tick=tick)


def run_jobs(system: str, runtime: float, profile: str | None = None, overrides=()) -> list[dict]:
    """Run every published job of `system` on a fresh emulated mount; rows of figures.

    A figure the emulator falls short of is checked against the host: the same job on a
    mount with no emulation gives the most this machine can drive through FUSE.  Where
    the published figure is above that ceiling the row is host-bound, not a model error."""
    spec = published(system)
    sets = [a for kv in overrides for a in ("--set", kv)]
    rows = []
    jobs = spec["jobs"]
    with ScratchMount("--emulate", profile or spec["profile"], *sets) as m:
        for i, job in enumerate(jobs, 1):
            left = (len(jobs) - i + 1) * runtime
            tick = None
            if sys.stderr.isatty():
                tick = lambda t, i=i, job=job, left=left: _progress(i, len(jobs), job["name"], t, runtime, left)
            else:
                print(f"[{i}/{len(jobs)}] {job['name']} ({runtime:g} s, ETA {left:.0f} s)", file=sys.stderr)
            before = _host(m)
            got = _fio(m, job, runtime, tick)
            late_share = _late_share(before, _host(m))
            for metric in ("iops", "lat_ms", "mbps"):
                if metric in job:
                    rows.append({"job": job["name"], "metric": metric, "emulated": getattr(got, metric),
                                 "published": job[metric], "ceiling": None, "late_share": late_share,
                                 "inconsistent": job.get("inconsistent", {}).get(metric)})
    short = [r for r in rows if r["metric"] == "iops" and r["emulated"] < 0.85 * r["published"]]
    if short:
        with ScratchMount() as plain:
            for r in short:
                job = next(j for j in jobs if j["name"] == r["job"])
                ceiling = _fio(plain, job, runtime).iops
                for same_job in (x for x in rows if x["job"] == r["job"]):
                    same_job["ceiling"] = ceiling
    if sys.stderr.isatty():
        sys.stderr.write("\r" + " " * 80 + "\r")
    return rows


def _host(m: ScratchMount) -> dict:
    return m.stats()["host"]


def _late_share(before: dict, after: dict) -> float:
    ops = after["ops"] - before["ops"]
    return (after["late"] - before["late"]) / ops if ops else 0.0


def host_bound(row: dict) -> bool:
    """The published figure is beyond this host: above what a plain mount drives here, or
    the emulated mount said it could not keep up with the model during the job."""
    if row["ceiling"] is None:
        return False
    return row["published"] > 0.85 * row["ceiling"] or row["late_share"] > HOST_BOUND_SHARE


def note(row: dict) -> str:
    if host_bound(row):
        return (f"host-bound: {100 * row['late_share']:.0f}% of replies late; "
                f"a plain mount here drives {row['ceiling']:,.0f} IOPS")
    if row["inconsistent"]:
        return f"published figures disagree: {row['inconsistent']}"
    return ""


def checked(row: dict) -> bool:
    """Whether the row is one the emulator must reproduce within 15 %."""
    return not host_bound(row) and not row["inconsistent"]


def table(rows: list[dict]) -> str:
    head = ["job", "metric", "emulated", "published", "ratio", "note"]
    body = [[r["job"], r["metric"], f"{r['emulated']:,.2f}", f"{r['published']:,.2f}",
             f"{r['emulated'] / r['published']:.2f}",
             note(r)]
            for r in rows]
    return text_table(head, body, "llrrrl")


def run(args) -> int:
    system = args.profile
    spec = published(system)
    runtime = 2.0 if args.quick else 10.0
    print(f"fusetrace demo: emulating {spec['profile']} ({spec['system']})")
    print(f"published figures: {spec['client']}; each fio job runs {runtime:g} s through the mount\n")
    start = time.monotonic()
    rows = run_jobs(system, runtime)
    print(table(rows))
    print(f"\n{len(rows)} figures in {time.monotonic() - start:.0f} s; ratio = emulated / published")
    return 0
