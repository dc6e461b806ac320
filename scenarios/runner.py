"""Run one scenario against a fresh emulated mount and collect its figures.

The mount is made over a new temporary directory with the scenario's profile and
overrides and a trace into the output directory; it is unmounted however the run ends
(a failed step, Ctrl-C).  While the steps run, a thread samples the emulator's metrics
every half second through the control socket, for the credit plots.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from fusetrace.errors import UserError
from fusetrace.scenarios.scratch import ScratchMount, load_text, scratch_root

from ..shaping.hostload import host_load
from ..shaping.profile import load_params
from . import children, fio
from .progress import Progress
from .spec import Scenario, Step

SAMPLE_EVERY = 0.5  # seconds between metric samples
SAMPLED = ("BurstCreditBalance", "PermittedThroughput", "MeteredIOBytes", "DataReadIOBytes",
           "DataWriteIOBytes", "ClientNetworkCreditBalance")

# Debian packages of the tools scenarios use (what ./run.sh installs).
PACKAGES = {"fio": "fio", "parallel": "parallel", "rsync": "rsync", "cpio": "cpio", "fpsync": "fpart",
            "fpart": "fpart", "tar": "tar", "dd": "coreutils", "bash": "bash"}


def missing_tools(scenario: Scenario) -> list[str]:
    """The tools the scenario needs that are not installed."""
    return [tool for tool in scenario.tools if shutil.which(tool) is None]


def how_to_get(scenario: Scenario, tool: str) -> str:
    return (f"scenario {scenario.id} needs {tool}: not installed (Debian: apt-get install "
            f"{PACKAGES.get(tool, tool)}; ./run.sh installs it)")


def preflight(scenario: Scenario, profile: str | None, sets: list[str]) -> None:
    """A missing tool, or a wrong profile key or value: one line, before mounting."""
    missing = missing_tools(scenario)
    if missing:
        raise UserError(how_to_get(scenario, missing[0]))
    load_params(profile or scenario.profile, scenario.overrides(sets))


def run(scenario: Scenario, out: Path, *, fast: bool = False, profile: str | None = None,
        sets: list[str] = (), progress: Progress | None = None) -> dict:
    """Run `scenario`, writing its trace to out/trace; the result (see docs/SCENARIOS.md)."""
    preflight(scenario, profile, sets)
    profile = profile or scenario.profile
    overrides = scenario.overrides(sets)
    trace = out / "trace"
    if trace.exists():
        shutil.rmtree(trace)
    options = ["--emulate", profile, *(a for kv in overrides for a in ("--set", kv)), "--trace", str(trace)]
    progress = progress or Progress(scenario.id, [])
    result = {
        "id": scenario.id, "title": scenario.title, "system": scenario.system, "source": scenario.source,
        "profile": profile, "overrides": dict(kv.split("=", 1) for kv in overrides),
        "scaling": scenario.scaling, "fast": fast, "fast_note": scenario.fast if fast else "",
        "credits": scenario.credits, "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "steps": [], "rows": [], "samples": [],
    }
    with tempfile.TemporaryDirectory(prefix="fusetrace-work-", dir=scratch_root()) as work, \
            ScratchMount(*options, prefix="fusetrace-scenario-") as m:
        env = {**os.environ, **scenario.variables(fast), "MNT": m.mnt, "WORK": work}
        t0 = time.monotonic()
        result["start_monotonic_ns"] = time.monotonic_ns()
        sampler = _Sampler(m, t0, result["samples"])
        sampler.start()
        try:
            if scenario.setup:
                progress.note("setting up")
                _shell(scenario, "setup", scenario.setup, m.mnt, env)
            for i, step in enumerate(scenario.steps):
                progress.begin(i, step)
                for key, value in step.set.items():
                    m.set(key, value)
                begin, host = time.monotonic() - t0, m.host()
                record = _run_step(scenario, step, m, env, fast, progress, t0)
                record.update(name=step.name, kind=step.kind, t0=begin, t1=time.monotonic() - t0,
                              published=step.published, inconsistent=step.inconsistent,
                              load=host_load(host, m.host()))
                result["steps"].append(record)
                progress.end(i, step, record["metrics"])
        finally:
            sampler.stop()
            result["duration_s"] = time.monotonic() - t0
    result["rows"] = rows(result["steps"])
    return result


def rows(steps: list[dict]) -> list[dict]:
    """The side-by-side table: the metrics a step has published figures for (all of its
    metrics when it has none), with those figures."""
    out = []
    for step in steps:
        for metric, value in step["metrics"].items():
            if step["published"] and metric not in step["published"]:
                continue
            published = step["published"].get(metric)
            out.append({"step": step["name"], "metric": metric, "emulated": value, "published": published,
                        "ratio": value / published if published else None, "note": _note(step, metric)})
    return out


def _note(step: dict, metric: str) -> str:
    if step["load"]["host_bound"]:
        return f"host-bound: {load_text(step['load'])}"
    why = step["inconsistent"].get(metric)
    return f"published figures disagree: {why}" if why else ""


def _run_step(scenario: Scenario, step: Step, m: ScratchMount, env: dict, fast: bool,
              progress: Progress, t0: float) -> dict:
    if step.kind == "fio":
        return {"metrics": _fio_step(step, m, fast, progress), "series": []}
    if step.setup:
        _shell(scenario, step.name, step.setup, m.mnt, env)
    count = _count(scenario, step, m.mnt, env)
    series, total = [], 0.0
    n = step.iterations(fast)
    for i in range(1, n + 1):
        begin = time.monotonic()
        _shell(scenario, step.name, step.run, m.mnt, {**env, "I": str(i)},
               tick=lambda t, i=i: progress.tick(t, i, n))
        took = time.monotonic() - begin
        total += took
        if n > 1:
            series.append({"i": i, "t": begin - t0, "seconds": took, **_rates(step, count, took)})
    if step.cleanup:
        _shell(scenario, step.name, step.cleanup, m.mnt, env)
    return {"metrics": {"seconds": total, **_rates(step, count * n, total)}, "series": series}


def _rates(step: Step, count: float, seconds: float) -> dict:
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
        raise UserError(f"{scenario.path}: step '{step.name}': count {step.count!r} gives {text!r}, "
                        f"not a number") from None


def _fio_step(step: Step, m: ScratchMount, fast: bool, progress: Progress) -> dict:
    args = fio.job_args(step.fio)
    name = fio.prepare_file(m.src, args)
    runtime = step.seconds(fast)
    procs = [fio.start(m.mnt, args, runtime, name) for _ in range(step.clients)]
    try:
        results = [fio.collect(p, args, on_tick=lambda t: progress.tick(t, None, runtime)) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return _fio_metrics(results)


def _fio_metrics(results: list[fio.FioResult]) -> dict:
    """Several clients add up (their latencies average); a mixed job gives both sides."""
    def side(name: str) -> dict:
        sides = [getattr(r, name) for r in results]
        out = {"iops": sum(s.iops for s in sides), "mbps": sum(s.mbps for s in sides)}
        lat = [s.lat_ms for s in sides if s.lat_ms]
        if lat:
            out["lat_ms"] = sum(lat) / len(lat)
        return out

    read, write = side("read"), side("write")
    if read["iops"] and write["iops"]:
        return {f"{name}_{k}": v for name, s in (("read", read), ("write", write)) for k, v in s.items()
                if k != "mbps"}
    return write if write["iops"] else read


def _shell(scenario: Scenario, step: str, command: str, cwd: str, env: dict, tick=None) -> str:
    """Run a step's command; its standard output.  A failure is one line with the step
    and the command's last words; a child never outlives an interrupted run."""
    shell = "/bin/bash" if scenario.shell == "bash" else "/bin/sh"
    proc = subprocess.Popen([shell, "-c", command], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
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
                self.into.append({"t": time.monotonic() - self.t0,
                                  **{k: metrics[k] for k in SAMPLED if k in metrics}})
            if self._stop.wait(SAMPLE_EVERY):
                return
