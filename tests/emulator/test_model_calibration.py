"""The shipped profiles against the published measurements, simulated in virtual time:
every figure a scenario file publishes for a fio job (scenarios/*.toml, the source's own job
lines), the tutorial's dd runs, and the 2018 measurements efs-2018 is calibrated on, within 10%
of what their authors measured."""

import re
from dataclasses import replace

import pytest

from fusetrace.emulator.call import Call
from fusetrace.emulator.model import Model
from fusetrace.emulator.nfsclient import NfsClient
from fusetrace.emulator.params import MiB
from fusetrace.emulator.profiles import apply_overrides, load_profile
from fusetrace.emulator.simulate import closed_loop, dd_write, fio_job
from fusetrace.scenarios import spec

TOLERANCE = 0.10


def _fio_steps() -> list[tuple[spec.Scenario, spec.Step]]:
    return [
        (s, step)
        for s in map(spec.load, spec.ids())
        for step in s.steps
        if step.kind == "fio" and (step.published or step.also_published)
    ]


# (scenario, step, figures): every fio figure published in a scenario file, less those the
# file marks inconsistent (alinas 4k-randread-qd64's 9.2 ms: 64 outstanding at 13,800 ops/s
# complete in 4.6 ms on average, Little's law, so no model that gives the IOPS gives 9.2 ms)
FIO_ROWS = [
    (s, step, {k: v for k, v in step.published.items() if k not in step.inconsistent})
    for s, step in _fio_steps()
    if step.published
]
# the same job at another depth, as the author reports in a note: "iops at iodepth 128" = 310
OTHER_DEPTHS = [
    (s, step, int(m[2]), m[1], want)
    for s, step in _fio_steps()
    for key, want in step.also_published.items()
    if (m := re.fullmatch(r"(\w+) at iodepth (\d+)", key))
]
DD = spec.load("efs-2018-dd")  # the 2018 tutorial on a c5.2xlarge; its [set] is the file system
INSTANCES = spec.load("efs-2018-instances")  # the same dd from three client instances
ERA_2018 = "efs-2018"  # the profile of the service the tutorial measured


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


@pytest.mark.parametrize(
    "scenario, step, measured", FIO_ROWS, ids=[f"{s.profile}:{step.name}" for s, step, _ in FIO_ROWS]
)
def test_fio_rows_within_ten_percent(scenario, step, measured):
    got = _metrics(simulate(scenario.profile, step.fio, overrides=scenario.overrides()))
    for key, want in measured.items():
        assert _close(got[key], want), f"{scenario.profile} {step.name} {key}: model {got[key]:.2f}, measured {want}"


@pytest.mark.parametrize(
    "scenario, step, depth, key, want",
    OTHER_DEPTHS,
    ids=[f"{s.profile}:{step.name}@{depth}" for s, step, depth, _, _ in OTHER_DEPTHS],
)
def test_the_same_jobs_at_other_depths(scenario, step, depth, key, want):
    fio = re.sub(r"-iodepth[= ]\d+", f"-iodepth {depth}", step.fio)
    stats = simulate(scenario.profile, fio, overrides=scenario.overrides())
    assert _close(_metrics(stats)[key], want)


def test_the_tutorial_scenarios_run_on_the_profile_of_their_era():
    tutorial = [s for s in map(spec.load, spec.ids()) if s.id.startswith("efs-2018-")]
    assert len(tutorial) == 5 and {s.profile for s in tutorial} == {ERA_2018}


@pytest.mark.parametrize("block_mib, step", [(1, "bs=1M conv=fsync"), (16, "bs=16M conv=fsync")])
def test_dd_with_fsync_at_the_end_runs_near_the_throughput_cap(block_mib, step):
    """efs-tutorial-2018 dd-2g-1m-fsync-at-end and dd-2g-16m-fsync-at-end (efs-2018-dd): dd 2 GB
    with conv=fsync on a c5.2xlarge, 201 and 202 MB/s; on efs-2018 the file system's 200 MiB/s
    burst is the limit (the client's 250 MB/s is not reached)."""
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
    client = [
        f"client_network_mbps={burst}",
        f"client_network_baseline_mbps={baseline}",
        f"client_network_credit={credit / 1e9:.1f} GB",
    ]
    model = Model(apply_overrides(load_profile(INSTANCES.profile), INSTANCES.overrides(client)), 0.0)
    first = dd_write(model, MiB, 13000)  # 13.6 GB
    assert _close(first.mb_per_s, burst)
    rest = dd_write(model, MiB, 2000, start=first.elapsed)
    assert baseline < rest.mb_per_s < 60
    tail = dd_write(model, MiB, 500, start=first.elapsed + rest.elapsed)
    assert _close(tail.mb_per_s, baseline)


# ---- efs-2018: the 2018 measurements no scenario carries ----------------------------------
# famzah-efs-2018: "Amazon EFS benchmarks", blog.famzah.net, 2018 (small operations, one NFS
# operation per call); kx-kdb-efs-2018: KX kdb+ documentation, "Appendix B - Amazon EFS", 2018
# (mean time per call sequence on one file).  The profile's comments say how each key follows.


def _era_2018(*overrides: str) -> Model:
    return Model(apply_overrides(load_profile(ERA_2018), list(overrides)), 0.0)


FAMZAH = [
    # twenty threads on one file: its write slots (12 held 8 ms each) are the limit
    ("famzah-efs-2018 'write ops, 20 threads'", "-direct=1 -iodepth 20 -rw=randwrite -bs=4k", 1500),
    # writes spread over 64 files, 1,024 at once: the write IOPS limit
    ("famzah-efs-2018 'ceiling, writes'", "-direct=1 -iodepth 16 -rw=randwrite -bs=4k -numjobs=64", 3000),
    # reads, 1,024 at once: the read IOPS limit
    ("famzah-efs-2018 'ceiling, reads'", "-direct=1 -iodepth 1024 -rw=randread -bs=4k", 3500),
]


@pytest.mark.parametrize("row, fio, want", FAMZAH, ids=[row for row, _, _ in FAMZAH])
def test_efs_2018_small_operations(row, fio, want):
    op_factory, depth = fio_job(fio)
    stats = closed_loop(_era_2018(), op_factory, depth, duration=3.0)
    assert _close(stats.iops, want), f"{row}: model {stats.iops:.0f} ops/s, measured {want}"


def test_efs_2018_small_stable_write_lies_within_the_eras_measurements():
    """famzah-efs-2018 'write ops, 1 thread' (130 ops/s, 7.7 ms a 4 KiB write) and
    diskracer-2020-dsync's 8 KiB row (10.7 ms) differ by 39%: the model's one-thread small
    write lies between them, fitted to the diskracer series (docs/EMULATOR.md)."""
    op_factory, depth = fio_job("-direct=1 -iodepth 1 -rw=write -bs=4k")
    stats = closed_loop(_era_2018(), op_factory, depth, duration=3.0)
    assert 1000 / 130 < stats.mean_latency_ms < 2748 / 256


DSYNC = spec.load("efs-2020-dsync")  # diskracer-2020-dsync: dd oflag=dsync, 8 KiB to 32 MiB


@pytest.mark.parametrize("step", DSYNC.steps, ids=[step.name for step in DSYNC.steps])
def test_a_stable_write_grows_with_its_size_as_measured_in_2020(step):
    """diskracer-2020-dsync, every row within 15% (the end-to-end target): one WRITE up to
    1 MiB, then WRITEs one after another within a 4 MiB stripe and stripes in parallel up to
    the burst (the profile's comments and docs/EMULATOR.md say why)."""
    block = int(step.run.split("bs=")[1].split("k")[0]) * 1024
    count = int(DSYNC.vars[step.run.split('count="$')[1].split('"')[0]])
    model = Model(apply_overrides(load_profile(DSYNC.profile), DSYNC.overrides()), 0.0)
    stats = dd_write(model, block, count, sync=True)
    assert abs(stats.mb_per_s / step.published["MB/s"] - 1) <= 0.15, f"{step.name}: {stats.mb_per_s:.2f} MB/s"


def _mean_ms(client: NfsClient, sequence: list[Call], times: int = 2000) -> float:
    """Mean time of `sequence` (each call made when the one before it completes) over
    `times` runs back to back, each on a new file, as kx's nano repeats its call sequences."""
    now = 0.0
    for i in range(times):
        for call in sequence:
            now = client.admit(replace(call, file=i + 1), now).done_at
    return now / times * 1000


def test_efs_2018_open_stat_close_is_an_open_and_a_close():
    """kx-kdb-efs-2018 'open-stat-close': 3.059 ms: an OPEN, whose attributes answer the
    stat, and the CLOSE close(2) waits for."""
    sequence = [Call("open"), Call("getattr"), Call("flush", writable=False), Call("release")]
    assert _close(_mean_ms(NfsClient(_era_2018()), sequence), 3.059)


def test_efs_2018_append_is_an_open_one_stable_write_and_a_close():
    """kx-kdb-efs-2018 'append: open-stat-seek-write-close': 11.64 ms.  OPEN, then at close
    the appended bytes as one WRITE, sent stable (one RPC: no COMMIT), and the CLOSE."""
    sequence = [Call("open"), Call("getattr"), Call("write", size=8), Call("flush"), Call("release")]
    assert _close(_mean_ms(NfsClient(_era_2018()), sequence), 11.64)
