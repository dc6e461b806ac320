"""Run one scenario against a fresh emulated mount and collect its figures.

The mount is made over a new temporary directory with the scenario's profile and
overrides and, given an output directory, a trace into it; it is unmounted however the run ends
(a failed step, Ctrl-C).  While the steps run, a thread samples the emulator's metrics
every half second through the control socket, for the credit plots.

check_ceilings() is the demo's and the calibration's second look at a run: a job that falls
short of a published IOPS figure runs again on a mount with no emulation, which gives the
most this machine drives through FUSE.
"""

import contextlib
import dataclasses
import functools
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..emulator.params import MiB
from ..errors import UserError
from ..hostload import extending_writes_note, host_load, load_words, paced_words
from ..shaping.profile import load_params
from . import application, children, fio
from .progress import Progress
from .redisserver import RedisServer
from .scratch import ScratchMount, scratch_root
from .spec import Scenario, Step, split_step

SAMPLE_EVERY = 0.5  # seconds between metric samples
NO_FIGURE = "no published figure in this repo"  # the note of a row the scenario file has no figure for
CLIFF_SHARE = 0.01  # "cliff": the credit balance under this share of what the run started with
HOST_ALONE_SHARE = 0.5  # a step that takes over this share of its emulated time with no emulation: host-paced
SHORT = 0.85  # under this share of a published IOPS figure, a ceiling check; over it of the ceiling, host-bound
SAMPLED = (
    "BurstCreditBalance",
    "PermittedThroughput",
    "MeteredIOBytes",
    "DataReadIOBytes",
    "DataWriteIOBytes",
    "ClientNetworkCreditBalance",
)

# Debian packages of the tools scenarios use (what ./run.sh installs).
PACKAGES = {
    "fio": "fio",
    "parallel": "parallel",
    "rsync": "rsync",
    "cpio": "cpio",
    "fpsync": "fpart",
    "fpart": "fpart",
    "tar": "tar",
    "dd": "coreutils",
    "bash": "bash",
    "redis-server": "redis-server",
}


def missing_tools(scenario: Scenario) -> list[str]:
    """The tools the scenario needs that are not installed."""
    return [tool for tool in scenario.tools if shutil.which(tool) is None]


def how_to_get(scenario: Scenario, tool: str) -> str:
    return (
        f"scenario {scenario.id} needs {tool}: not installed (Debian: apt-get install "
        f"{PACKAGES.get(tool, tool)}; ./run.sh installs it)"
    )


def preflight(scenario: Scenario, profile: str | None, sets: Sequence[str]) -> None:
    """A missing tool, or a wrong profile key or value: one line, before mounting."""
    missing = missing_tools(scenario)
    if missing:
        raise UserError(how_to_get(scenario, missing[0]))
    load_params(profile or scenario.profile, scenario.overrides(sets))


def run(
    scenario: Scenario,
    out: Path | None,
    *,
    fast: bool = False,
    profile: str | None = None,
    sets: Sequence[str] = (),
    runtime: float | None = None,
    progress: Progress | None = None,
    clients: int | None = None,
) -> dict[str, Any]:
    """Run `scenario`, writing its trace to out/trace (out None: no trace, for the demo and
    the calibration, which keep only the table); the result (see docs/SCENARIO_FORMAT.md).
    `runtime`: seconds for every fio step instead of the file's; `clients`: how many clients
    run every fio step instead of the file's.  With more than one client, each is a mount of
    its own over the one directory, sharing the emulated file system's state through a
    private redis-server (docs/SCALE.md); the first mount is the one traced and sampled."""
    measured_with = {step.name: step.clients for step in scenario.steps if step.kind == "fio"}
    if clients is not None:
        scenario = dataclasses.replace(
            scenario,
            steps=tuple(
                dataclasses.replace(step, clients=clients) if step.kind == "fio" else step for step in scenario.steps
            ),
        )
    preflight(scenario, profile, sets)
    profile = profile or scenario.profile
    overrides = scenario.overrides(sets)
    options = ["--emulate", profile, *(a for kv in overrides for a in ("--set", kv))]
    traced: list[str] = []
    if out is not None:
        trace = out / "trace"
        if trace.exists():
            shutil.rmtree(trace)
        traced = ["--trace", str(trace)]
    progress = progress or Progress(scenario.id, [])
    steps: list[dict] = []
    samples: list[dict] = []
    result: dict[str, Any] = {
        "id": scenario.id,
        "title": scenario.title,
        "system": scenario.system,
        "source": scenario.source,
        "profile": profile,
        "overrides": dict(kv.split("=", 1) for kv in overrides),
        "scaling": scenario.scaling,
        "fast": fast,
        "fast_note": scenario.fast if fast else "",
        "credits": scenario.credits,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "steps": steps,
        "rows": [],
        "samples": samples,
    }
    n = max((step.clients for step in scenario.steps if step.kind == "fio"), default=1)
    result["clients"] = n
    with contextlib.ExitStack() as stack:
        work = stack.enter_context(tempfile.TemporaryDirectory(prefix="fusetrace-work-", dir=scratch_root()))
        shared = []
        if n > 1:
            redis = stack.enter_context(RedisServer(work))
            shared = ["--shared", redis.url, "--fs-id", scenario.id]
        m = stack.enter_context(ScratchMount(*options, *traced, *shared, prefix="fusetrace-scenario-"))
        clients_mounts = [
            m,
            *(
                stack.enter_context(ScratchMount(*options, *shared, prefix="fusetrace-client-", source=m.src))
                for _ in range(n - 1)
            ),
        ]
        env = {**os.environ, **scenario.variables(fast), "MNT": m.mnt, "WORK": work}
        t0 = time.monotonic()
        result["start_monotonic_ns"] = time.monotonic_ns()
        sampler = _Sampler(m, t0, samples)
        sampler.start()
        try:
            start_balance = _credit_balance(m)
            if scenario.setup:
                progress.note("setting up")
                _shell(scenario, "setup", scenario.setup, m.mnt, env)
            if scenario.events or scenario.faults:
                result["scripted_monotonic_ns"] = time.monotonic_ns()
                result["scripted"] = _script(scenario, m, fast)
            for i, step in enumerate(scenario.steps):
                missing = phase_missing(step.needs, start_balance, _credit_balance(m)) if step.needs else ""
                begin, host = time.monotonic() - t0, m.host()
                if missing:  # not run: its metrics without figures, and why
                    progress.note(f"[{i + 1}/{len(scenario.steps)}] {step.name}: {missing}")
                    record: dict[str, Any] = {
                        "metrics": dict.fromkeys(_metric_names(step)),
                        "series": [],
                        "missing": missing,
                    }
                else:
                    progress.begin(i, step)
                    for key, value in step.set.items():
                        for client in clients_mounts:  # a client's own keys are each mount's
                            client.set(key, value)
                    if "scripted" in result:
                        result["scripted"]["events"] += _schedule(scenario, m, fast, step.name)
                    record = _run_step(scenario, step, clients_mounts, env, fast, runtime, progress, t0)
                    progress.end(i, step, record["metrics"])
                    if step.host_check and step.kind == "shell":
                        record["host_alone_s"] = _host_alone(scenario, step, env, fast, runtime, progress, t0)
                record.update(
                    name=step.name,
                    kind=step.kind,
                    t0=begin,
                    t1=time.monotonic() - t0,
                    published=step.published,
                    inconsistent=step.inconsistent,
                    load=host_load(host, m.host()),
                )
                steps.append(record)
        finally:
            sampler.stop()
            result["duration_s"] = time.monotonic() - t0
    result["rows"] = rows(steps)
    for row in result["rows"]:  # a published figure measured with other clients than this run's
        was = measured_with.get(row["step"], clients)
        if clients is not None and was != clients and row["published"] is not None:
            said = f"{clients} client{'s' if clients > 1 else ''} together; published from {was}"
            row["note"] = f"{row['note']}; {said}" if row["note"] else said
    if out is not None and "scripted" in result:
        result["application"] = application.seen(out / "trace", result["scripted_monotonic_ns"])
    return result


def _script(scenario: Scenario, m: ScratchMount, fast: bool) -> dict[str, list[dict[str, Any]]]:
    """Put the scenario's fault rules in force and its events on the model's timeline,
    from now (the first step's start); what the server made of them."""
    rules = [m.ask(cmd="fault_add", rule=raw)["rule"] for raw in scenario.rules(fast)]
    return {"faults": rules, "events": _schedule(scenario, m, fast, None)}


def _schedule(scenario: Scenario, m: ScratchMount, fast: bool, step: str | None) -> list[dict]:
    """Put on the model's timeline, from now, the events that count from `step`'s start
    (None: from the first step's start); each as the server made it, with its step."""
    out = []
    for counts_from, raw in map(split_step, scenario.timeline(fast)):
        if counts_from == step:
            event = m.ask(cmd="event_add", event=raw)["event"]
            out.append({**event, "step": step} if step else event)
    return out


def fio_seconds(step: Step, fast: bool, runtime: float | None) -> float:
    """How long a fio step runs: `runtime` when one is given, else the file's."""
    return runtime if runtime is not None else step.seconds(fast)


def rows(steps: list[dict]) -> list[dict]:
    """The side-by-side table: the metrics a step has published figures for (all of its
    metrics when it has none), with those figures; a row with none says so.  A step not
    run for want of its phase (`needs`) has rows without an emulated figure, saying why."""
    out = []
    for step in steps:
        for metric, value in step["metrics"].items():
            if step["published"] and metric not in step["published"]:
                continue
            published = step["published"].get(metric)
            notes = [step.get("missing") or _note(step, metric), "" if published is not None else NO_FIGURE]
            out.append(
                {
                    "step": step["name"],
                    "metric": metric,
                    "emulated": value,
                    "published": published,
                    "ratio": value / published if published and value is not None else None,
                    "note": "; ".join(note for note in notes if note),
                }
            )
    return out


def phase_missing(phase: str, start_balance: float, balance: float) -> str:
    """ "" when the run has reached `phase` (one of spec.PHASES), else why not, for the table.
    `start_balance`: the burst credits when the run began; `balance`: now."""
    return PHASE_CHECKS[phase](start_balance, balance)


def _cliff_missing(start_balance: float, balance: float) -> str:
    if balance <= CLIFF_SHARE * start_balance:
        return ""
    return f"not reached in this run (credits left: {balance / MiB:,.0f} MiB)"


PHASE_CHECKS = {"cliff": _cliff_missing}  # the check of each of spec.PHASES


def _credit_balance(m: ScratchMount) -> float:
    """The emulated file system's BurstCreditBalance now, in bytes."""
    return float(m.stats()["metrics"]["BurstCreditBalance"])


def _metric_names(step: Step) -> list[str]:
    """The metrics a step gives when it runs: its published ones, else what its kind reports."""
    if step.published:
        return list(step.published)
    if step.kind == "fio":
        return ["iops", "mbps", "lat_ms"]
    return ["seconds", *_rates(step, 1.0, 1.0)]


def _note(step: dict, metric: str) -> str:
    if step["load"]["host_bound"]:
        note = f"host-bound: {load_words(step['load'])}"
    else:
        why = step["inconsistent"].get(metric)
        note = f"published figures disagree: {why}" if why else ""
    return "; ".join(n for n in (note, _paced(step), extending_writes_note(step["load"])) if n)


def run_checked(
    scenario: Scenario, *, fast: bool = False, runtime: float | None = None, profile: str | None = None
) -> dict[str, Any]:
    """`scenario` run without a trace, its rows then ceiling-checked: the demo's and the
    calibration's run, whose result is the table."""
    result = run(
        scenario, None, fast=fast, profile=profile, runtime=runtime, progress=Progress(scenario.id, scenario.steps)
    )
    check_ceilings(scenario, result, fast=fast, runtime=runtime)
    return result


def check_ceilings(scenario: Scenario, result: dict, *, fast: bool = False, runtime: float | None = None) -> None:
    """The ceiling check of a run's rows (the demo's and the calibration's).

    Each fio step that falls short of a published IOPS figure runs again, as long, on a
    mount with no emulation: the most this machine drives through FUSE.  Where the
    published figure is over 85 % of that ceiling, or the emulated mount said during the step that
    it could not keep up with the model, the step's rows are host-bound, not a model error.
    Every row gets `ceiling` (IOPS, None where not measured) and `checked`: whether the
    emulator must reproduce its published figure within 15 % (neither host-bound nor
    inconsistent)."""
    records = {record["name"]: record for record in result["steps"]}
    short = [
        step
        for step in scenario.steps
        if step.kind == "fio"
        and any(
            row["step"] == step.name
            and row["metric"] == "iops"
            and row["published"]
            and row["emulated"] is not None
            and row["emulated"] < SHORT * row["published"]
            for row in result["rows"]
        )
    ]
    ceilings: dict[str, float] = {}
    if short:
        progress = Progress(f"{scenario.id} on a plain mount", short)
        with ScratchMount() as plain:
            for i, step in enumerate(short):
                progress.begin(i, step)
                ceilings[step.name] = fio_step(step, [plain], fio_seconds(step, fast, runtime), progress)["iops"]
                progress.end(i, step, {"iops": ceilings[step.name]})
    # host-bound is the step's verdict, from its IOPS figure: every row of the step shares it
    published_iops = {
        row["step"]: row["published"] for row in result["rows"] if row["metric"] == "iops" and row["published"]
    }
    bound_steps = {
        name
        for name, ceiling in ceilings.items()
        if published_iops[name] > SHORT * ceiling or records[name]["load"]["host_bound"]
    }
    for row in result["rows"]:
        record, ceiling = records[row["step"]], ceilings.get(row["step"])
        bound = row["step"] in bound_steps
        row["ceiling"] = ceiling
        row["checked"] = (
            None not in (row["published"], row["emulated"])
            and not bound
            and row["metric"] not in record["inconsistent"]
        )
        if ceiling is None:
            continue
        plain_note = f"a plain mount here drives {ceiling:,.0f} IOPS"
        if bound:
            row["note"] = f"host-bound: {load_words(record['load'])}; {plain_note}"
        else:
            row["note"] = "; ".join(note for note in (row["note"], plain_note) if note)


def _host_alone(
    scenario: Scenario, step: Step, env: dict, fast: bool, runtime: float | None, progress: Progress, t0: float
) -> float:
    """The seconds `step` takes on a mount of this host with no emulation: what the host's
    own work (process starts, the loop between system calls, FUSE) costs it alone."""
    progress.note(f"{step.name}: again on a plain mount, for the host's own pace")
    with ScratchMount() as plain:
        record = _run_step(scenario, step, [plain], {**env, "MNT": plain.mnt}, fast, runtime, progress, t0)
    return float(record["metrics"]["seconds"])


def _paced(step: dict) -> str:
    """Whether this host, not the model, set most of a step's pace, in words ("" if not):
    the model had the mount busy under half the time, or the step alone on a plain mount
    took over half as long as emulated."""
    alone, took = step.get("host_alone_s"), step["metrics"].get("seconds")
    if alone is not None and took and alone > HOST_ALONE_SHARE * took:
        return (
            f"host-paced: this host takes {alone:.2f} s for the step with no emulation, "
            f"{100 * alone / took:.0f} % of the emulated {took:.2f} s: its process starts and the work "
            f"between system calls, not the model, set most of this row"
        )
    return paced_words(step["load"])


def _run_step(
    scenario: Scenario,
    step: Step,
    clients: list[ScratchMount],
    env: dict,
    fast: bool,
    runtime: float | None,
    progress: Progress,
    t0: float,
) -> dict[str, Any]:
    # the step's record, which the caller extends (name, kind, times, load): open keys
    m = clients[0]
    if step.kind == "fio":
        return {"metrics": fio_step(step, clients, fio_seconds(step, fast, runtime), progress), "series": []}
    if step.setup:
        _shell(scenario, step.name, step.setup, m.mnt, env)
    count = _count(scenario, step, env["WORK"], env)  # outside the mount: it costs the model nothing
    series, total = [], 0.0
    n = step.iterations(fast)
    for i in range(1, n + 1):
        begin = time.monotonic()
        _shell(
            scenario,
            step.name,
            step.run,
            m.mnt,
            {**env, "I": str(i)},
            tick=functools.partial(_tick_iteration, progress, i, n),
        )
        took = time.monotonic() - begin
        total += took
        if n > 1:
            series.append({"i": i, "t": begin - t0, "seconds": took, **_rates(step, count, took)})
    if step.cleanup:
        _shell(scenario, step.name, step.cleanup, m.mnt, env)
    return {"metrics": {"seconds": total, **_rates(step, count * n, total)}, "series": series}


def _tick_iteration(progress: Progress, i: int, n: int, elapsed: float) -> None:
    progress.tick(elapsed, i, n)


def _rates(step: Step, count: float, seconds: float) -> dict[str, float]:
    if not step.unit or seconds <= 0:
        return {}
    if step.unit == "bytes":
        return {"MB/s": count / seconds / 1e6}
    one = step.unit[:-1] if step.unit.endswith("s") else step.unit
    return {f"{step.unit}/s": count / seconds, f"ms/{one}": 1000 * seconds / count if count else 0.0}


def _count(scenario: Scenario, step: Step, cwd: str, env: dict) -> float:
    if not step.count:
        return 0.0
    text = _shell(scenario, step.name, f'printf "%s" "{step.count}"', cwd, env)
    try:
        return float(text)
    except ValueError:
        raise UserError(
            f"{scenario.path}: step '{step.name}': count {step.count!r} gives {text!r}, not a number"
        ) from None


def fio_step(step: Step, mounts: list[ScratchMount], seconds: float, progress: Progress) -> dict[str, float]:
    """Run a fio step's job from each of its clients for `seconds`, client i on mounts[i]
    (or all on one, given one mount); its metrics."""
    args = fio.job_args(step.fio)
    name = fio.prepare_file(mounts[0].mnt, args)
    procs = [fio.start(mounts[i % len(mounts)].mnt, args, seconds, name) for i in range(step.clients)]
    try:
        results = [fio.collect(p, args, on_tick=lambda t: progress.tick(t, None, seconds)) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return _fio_metrics(results)


def _fio_metrics(results: list[fio.FioResult]) -> dict[str, float]:
    """Several clients add up (their latencies average); a mixed job gives both sides."""

    def side(name: str) -> dict[str, float]:
        sides = [getattr(r, name) for r in results]
        out = {"iops": sum(s.iops for s in sides), "mbps": sum(s.mbps for s in sides)}
        lat = [s.lat_ms for s in sides if s.lat_ms]
        if lat:
            out["lat_ms"] = sum(lat) / len(lat)
        return out

    read, write = side("read"), side("write")
    if read["iops"] and write["iops"]:
        return {f"{name}_{k}": v for name, s in (("read", read), ("write", write)) for k, v in s.items() if k != "mbps"}
    return write if write["iops"] else read


def _shell(
    scenario: Scenario, step: str, command: str, cwd: str, env: dict, tick: Callable[[float], None] | None = None
) -> str:
    """Run a step's command; its standard output.  A failure is one line with the step
    and the command's last words; a child never outlives an interrupted run."""
    shell = "/bin/bash" if scenario.shell == "bash" else "/bin/sh"
    proc = subprocess.Popen(
        [shell, "-c", command],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    out, err = children.wait(proc, tick, kill=lambda p: os.killpg(p.pid, signal.SIGKILL))
    if proc.returncode != 0:
        last = err.strip().splitlines()[-1] if err.strip() else f"exit status {proc.returncode}"
        raise UserError(f"scenario {scenario.id}, step '{step}': {last}")
    return out


class _Sampler:
    """Emulator metrics every SAMPLE_EVERY seconds, in a thread (the steps block)."""

    def __init__(self, m: ScratchMount, t0: float, into: list):
        self.m, self.t0, self.into = m, t0, into
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="scenario-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while True:
            try:
                metrics = self.m.stats().get("metrics", {})
            except (OSError, UserError, ValueError):
                metrics = None  # the mount is going away; the run says why
            if metrics:
                self.into.append({"t": time.monotonic() - self.t0, **{k: metrics[k] for k in SAMPLED if k in metrics}})
            if self._stop.wait(SAMPLE_EVERY):
                return
