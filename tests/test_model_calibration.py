"""The shipped profiles against the published measurements, simulated in virtual time:
every figure a scenario file publishes for a fio job (scenarios/*.toml, the source's own job
lines) and the tutorial's dd runs within 10% of what its author measured."""

import re

import pytest

from fusetrace.emulator.model import Model
from fusetrace.emulator.params import MiB
from fusetrace.emulator.profiles import apply_overrides, load_profile
from fusetrace.emulator.simulate import closed_loop, dd_write, fio_job
from fusetrace.scenarios import spec

TOLERANCE = 0.10


def _fio_steps() -> list[tuple[spec.Scenario, spec.Step]]:
    return [(s, step) for s in map(spec.load, spec.ids()) for step in s.steps
            if step.kind == "fio" and (step.published or step.also_published)]


# (scenario, step, figures): every fio figure published in a scenario file, less those the
# file marks inconsistent (alinas 4k-randread-qd64's 9.2 ms: 64 outstanding at 13,800 ops/s
# complete in 4.6 ms on average, Little's law, so no model that gives the IOPS gives 9.2 ms)
FIO_ROWS = [(s, step, {k: v for k, v in step.published.items() if k not in step.inconsistent})
            for s, step in _fio_steps() if step.published]
# the same job at another depth, as the author reports in a note: "iops at iodepth 128" = 310
OTHER_DEPTHS = [(s, step, int(m[2]), m[1], want) for s, step in _fio_steps()
                for key, want in step.also_published.items()
                if (m := re.fullmatch(r"(\w+) at iodepth (\d+)", key))]
DD = spec.load("efs-2018-dd")  # the 2018 tutorial on a c5.2xlarge; its [set] is the file system
INSTANCES = spec.load("efs-2018-instances")  # the same dd from three client instances


def _step(scenario: spec.Scenario, name: str) -> spec.Step:
    return next(step for step in scenario.steps if step.name == name)


def simulate(profile: str, fio: str, duration: float = 3.0, overrides=()):
    model = Model(apply_overrides(load_profile(profile), list(overrides)), 0.0)
    op_factory, depth = fio_job(fio)
    return closed_loop(model, op_factory, depth, duration=duration)


def _close(got: float, want: float) -> bool:
    return abs(got / want - 1) <= TOLERANCE


def _metrics(stats) -> dict:
    return {"iops": stats.iops, "lat_ms": stats.mean_latency_ms, "mbps": stats.mb_per_s}


def test_the_scenario_files_carry_the_published_fio_rows():
    assert {s.id for s, _, _ in FIO_ROWS} >= {"efs-2016-fio", "alinas-2016-fio"}
    assert len(FIO_ROWS) >= 12 and OTHER_DEPTHS


@pytest.mark.parametrize("scenario, step, measured", FIO_ROWS, ids=[f"{s.profile}:{step.name}" for s, step, _ in FIO_ROWS])
def test_fio_rows_within_ten_percent(scenario, step, measured):
    got = _metrics(simulate(scenario.profile, step.fio, overrides=scenario.overrides()))
    for key, want in measured.items():
        assert _close(got[key], want), f"{scenario.profile} {step.name} {key}: model {got[key]:.2f}, measured {want}"


@pytest.mark.parametrize("scenario, step, depth, key, want", OTHER_DEPTHS,
                         ids=[f"{s.profile}:{step.name}@{depth}" for s, step, depth, _, _ in OTHER_DEPTHS])
def test_the_same_jobs_at_other_depths(scenario, step, depth, key, want):
    fio = re.sub(r"-iodepth[= ]\d+", f"-iodepth {depth}", step.fio)
    stats = simulate(scenario.profile, fio, overrides=scenario.overrides())
    assert _close(_metrics(stats)[key], want)


@pytest.mark.parametrize("block_mib, step", [(1, "bs=1M conv=fsync"), (16, "bs=16M conv=fsync")])
def test_dd_with_fsync_at_the_end_runs_near_the_throughput_cap(block_mib, step):
    """efs-2018-dd: dd 2 GB with conv=fsync on a c5.2xlarge, 201 and 202 MB/s."""
    model = Model(apply_overrides(load_profile(DD.profile), DD.overrides()), 0.0)
    stats = dd_write(model, block_mib * MiB, 2048 // block_mib)
    assert _close(stats.mb_per_s, _step(DD, step).published["MB/s"])


def test_dd_on_an_m4_large_is_held_by_its_network():
    """efs-2018-instances m4.large: 56 MB/s, with the scenario's model of the instance."""
    m4 = _step(INSTANCES, "m4.large")
    client = [f"{k}={v}" for k, v in m4.set.items()]
    model = Model(apply_overrides(load_profile(INSTANCES.profile), INSTANCES.overrides(client)), 0.0)
    assert _close(dd_write(model, MiB, 20480).mb_per_s, m4.published["MB/s"])


def test_dd_on_a_t2_micro_bursts_then_falls_to_its_baseline():
    """efs-2018-instances t2.micro: 120 MB/s, falling to 7 MB/s after about 15 GB.
    (Its 30 MB/s average over 20 GB does not follow from those three figures: 15 GB at 120
    MB/s and 5.5 GB at 7 MB/s average 20 MB/s.  The model keeps the three; see docs.)"""
    figures = _step(INSTANCES, "t2.micro").also_published
    burst, baseline = figures["burst MB/s"], figures["baseline MB/s"]
    credit = figures["burst GB"] * 1e9 * (burst - baseline) / burst  # spent at burst - baseline until the fall
    client = [f"client_network_mbps={burst}", f"client_network_baseline_mbps={baseline}",
              f"client_network_credit={credit / 1e9:.1f} GB"]
    model = Model(apply_overrides(load_profile(INSTANCES.profile), INSTANCES.overrides(client)), 0.0)
    first = dd_write(model, MiB, 13000)  # 13.6 GB
    assert _close(first.mb_per_s, burst)
    rest = dd_write(model, MiB, 2000, start=first.elapsed)
    assert baseline < rest.mb_per_s < 60
    tail = dd_write(model, MiB, 500, start=first.elapsed + rest.elapsed)
    assert _close(tail.mb_per_s, baseline)
