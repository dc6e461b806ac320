"""The shipped profiles against the published measurements (shared/reference/calibration.toml),
simulated in virtual time: every calibrated row within 10% of what its author measured."""

import tomllib
from pathlib import Path

import pytest

from fusetrace.emulator.model import Model
from fusetrace.emulator.params import MiB
from fusetrace.emulator.profiles import apply_overrides, load_profile
from fusetrace.emulator.simulate import closed_loop, dd_write, fio_job

TOLERANCE = 0.10

# (profile, row name, fio arguments, measured figures) -- copied from calibration.toml, which
# test_rows_match_the_reference checks where the shared reference directory is present.
FIO_ROWS = [
    ("efs-2016", "efs-ga-2016-cn", "4k-write-qd1", "-direct=1 -iodepth 1 -thread -rw=write -ioengine=libaio -bs=4k -numjobs=1 -runtime=30 -size=100M", {"iops": 110, "lat_ms": 8.72}),
    ("efs-2016", "efs-ga-2016-cn", "4k-read-qd1", "-direct=1 -iodepth 1 -thread -rw=read -ioengine=libaio -bs=4k -numjobs=1 -runtime=30 -size=100M", {"iops": 402, "lat_ms": 2.27}),
    ("efs-2016", "efs-ga-2016-cn", "512k-write-qd16", "-direct=1 -iodepth 16 -thread -rw=write -ioengine=libaio -bs=512K -numjobs=1 -runtime=30 -size=1000M", {"mbps": 40}),
    ("efs-2016", "efs-ga-2016-cn", "512k-read-qd16", "-direct=1 -iodepth 16 -thread -rw=read -ioengine=libaio -bs=512K -numjobs=1 -runtime=30 -size=1000M", {"mbps": 40}),
    ("efs-2016", "efs-ga-2016-cn", "4k-randwrite-qd16", "-direct=1 -iodepth 16 -thread -rw=randwrite -ioengine=libaio -bs=4K -numjobs=1 -runtime=30 -size=1000M", {"iops": 310}),
    ("efs-2016", "efs-ga-2016-cn", "4k-randread-qd1024", "-direct=1 -iodepth 1024 -thread -rw=randread -ioengine=libaio -bs=4K -numjobs=1 -runtime=30 -size=1000M", {"iops": 7449}),
    ("alinas-2016", "alinas-2016", "4k-write-qd1", "-direct=1 -iodepth 1 -rw=write -ioengine=libaio -bs=4k -size=128M", {"iops": 610, "lat_ms": 1.6}),
    ("alinas-2016", "alinas-2016", "4k-read-qd1", "-direct=1 -iodepth 1 -rw=read -ioengine=libaio -bs=4k -size=128M", {"iops": 880, "lat_ms": 1.1}),
    ("alinas-2016", "alinas-2016", "1m-write-qd8", "-direct=1 -iodepth 8 -rw=write -ioengine=libaio -bs=1M -runtime=30", {"mbps": 90}),
    ("alinas-2016", "alinas-2016", "1m-read-qd8", "-direct=1 -iodepth 8 -rw=read -ioengine=libaio -bs=1M -runtime=30", {"mbps": 93}),
    ("alinas-2016", "alinas-2016", "4k-randwrite-qd32", "-direct=1 -iodepth 32 -rw=randwrite -ioengine=libaio -bs=4k -runtime=30", {"iops": 7000, "lat_ms": 4.6}),
    # lat_ms 9.2 is left out: 64 outstanding at 13,800 ops/s complete in 4.6 ms on average
    # (Little's law), so no model that reproduces the IOPS can give 9.2 ms.
    ("alinas-2016", "alinas-2016", "4k-randread-qd64", "-direct=1 -iodepth 64 -rw=randread -ioengine=libaio -bs=4k -runtime=30", {"iops": 13800}),
]
EXTRA_DEPTHS = [  # the same job at another depth, as the author reports in a note
    ("efs-2016", "4k-randwrite-qd16", 128, "iops", 310),  # "same at iodepth 128"
]
# The 2018 tutorial's file system permitted over 200 MB/s (here: 2 TiB stored, 200 MiB/s burst)
TUTORIAL = ["stored_size=2 TiB"]
CLIENTS = {  # the tutorial's client instances, as overrides (docs/EMULATOR.md)
    "c5.2xlarge": [],
    "m4.large": ["client_network_mbps=56"],
    "t2.micro": ["client_network_mbps=120", "client_network_baseline_mbps=7", "client_network_credit=14.1 GB"],
}


def simulate(profile: str, fio: str, duration: float = 3.0, overrides=()):
    model = Model(apply_overrides(load_profile(profile), list(overrides)), 0.0)
    op_factory, depth = fio_job(fio)
    return closed_loop(model, op_factory, depth, duration=duration)


def _close(got: float, want: float) -> bool:
    return abs(got / want - 1) <= TOLERANCE


@pytest.mark.parametrize("profile, section, row, fio, measured", FIO_ROWS, ids=[f"{r[0]}:{r[2]}" for r in FIO_ROWS])
def test_fio_rows_within_ten_percent(profile, section, row, fio, measured):
    stats = simulate(profile, fio)
    got = {"iops": stats.iops, "lat_ms": stats.mean_latency_ms, "mbps": stats.mb_per_s}
    for key, want in measured.items():
        assert _close(got[key], want), f"{profile} {row} {key}: model {got[key]:.2f}, measured {want}"


@pytest.mark.parametrize("profile, row, depth, key, want", EXTRA_DEPTHS)
def test_the_same_jobs_at_other_depths(profile, row, depth, key, want):
    fio = next(r[3] for r in FIO_ROWS if r[0] == profile and r[2] == row).replace("-iodepth 16", f"-iodepth {depth}")
    stats = simulate(profile, fio)
    assert _close(getattr(stats, key), want)


@pytest.mark.parametrize("block_mib, measured", [(1, 201), (16, 202)])
def test_dd_with_fsync_at_the_end_runs_near_the_throughput_cap(block_mib, measured):
    """efs-tutorial-2018 dd-2g-{1m,16m}-fsync-at-end, c5.2xlarge."""
    model = Model(apply_overrides(load_profile("efs-bursting"), TUTORIAL), 0.0)
    stats = dd_write(model, block_mib * MiB, 2048 // block_mib)
    assert _close(stats.mb_per_s, measured)


def test_dd_on_an_m4_large_is_held_by_its_network():
    """efs-tutorial-2018 dd-20g-m4.large: 56 MB/s."""
    model = Model(apply_overrides(load_profile("efs-bursting"), TUTORIAL + CLIENTS["m4.large"]), 0.0)
    assert _close(dd_write(model, MiB, 20480).mb_per_s, 56)


def test_dd_on_a_t2_micro_bursts_then_falls_to_its_baseline():
    """efs-tutorial-2018 dd-20g-t2.micro: 120 MB/s, falling to 7 MB/s after about 15 GB.
    (Its 30 MB/s average over 20 GB does not follow from those three figures: 15 GB at 120
    MB/s and 5.5 GB at 7 MB/s average 20 MB/s.  The model keeps the three; see docs.)"""
    model = Model(apply_overrides(load_profile("efs-bursting"), TUTORIAL + CLIENTS["t2.micro"]), 0.0)
    first = dd_write(model, MiB, 13000)  # 13.6 GB
    assert _close(first.mb_per_s, 120)
    rest = dd_write(model, MiB, 2000, start=first.elapsed)
    assert 7 < rest.mb_per_s < 60
    tail = dd_write(model, MiB, 500, start=first.elapsed + rest.elapsed)
    assert _close(tail.mb_per_s, 7)


def test_rows_match_the_reference():
    reference = Path(__file__).resolve().parents[2] / "shared" / "reference" / "calibration.toml"
    if not reference.is_file():
        reference = Path("/work/shared/reference/calibration.toml")
    if not reference.is_file():
        pytest.skip("shared/reference/calibration.toml is not beside this checkout")
    published = tomllib.loads(reference.read_text())
    for _, section, row, fio, measured in FIO_ROWS:
        source = next(r for r in published[section]["rows"] if r["name"] == row)
        assert source["fio"] == fio
        assert {k: source[k] for k in measured} == measured
