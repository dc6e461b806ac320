"""The behaviours of docs/EMULATOR.md ("How an operation is timed", "NFS write semantics"), the throughput modes, live changes and
metrics, each run against a shipped profile in virtual time."""

import math
import random

import pytest

from fusetrace.emulator.model import Gate, Model, Op, OpClass
from fusetrace.emulator.params import GiB, KiB, MiB, TiB
from fusetrace.emulator.profiles import apply_overrides, load_profile
from fusetrace.emulator.simulate import closed_loop, dd_write, fio_job


def model_of(profile: str, *overrides: str, now: float = 0.0) -> Model:
    return Model(apply_overrides(load_profile(profile), list(overrides)), now)


def fio(model: Model, args: str, duration: float = 2.0, start: float = 0.0):
    op_factory, depth = fio_job(args)
    return closed_loop(model, op_factory, depth, duration=duration, start=start)


def read(n=4 * KiB, file=1):
    return Op(OpClass.DATA_READ, n, file=file)


def write(n=4 * KiB, file=1, mode="buffered"):
    return Op(OpClass.DATA_WRITE, n, file=file, write_mode=mode)


# ---- 4.1 parallelism wins -------------------------------------------------------------------


@pytest.mark.parametrize("profile", ["efs-2016", "efs-bursting", "alinas-2016"])
def test_parallelism_multiplies_operations_until_a_cap(profile):
    one = fio(model_of(profile), "-rw=randread -bs=4k -iodepth 1").iops
    eight = fio(model_of(profile), "-rw=randread -bs=4k -iodepth 8").iops
    assert 7.0 < eight / one < 8.5
    capped = fio(model_of(profile), "-rw=randread -bs=4k -iodepth 1024", duration=1.0).iops
    p = load_profile(profile)
    cap = min(r for r in (p.read_iops, p.total_iops) if r)
    assert cap * 0.97 < capped < cap * 1.03


def test_large_io_amortises_the_per_operation_cost():
    small = fio(model_of("efs-bursting"), "-rw=read -bs=4k -iodepth 1")
    large = fio(model_of("efs-bursting"), "-rw=read -bs=1M -iodepth 1")
    assert large.mb_per_s > 10 * small.mb_per_s
    assert large.iops < small.iops


# ---- 4.2 metadata in one directory does not parallelise; across directories it does ------------


def _creates(model, depth, directories):
    def op(i):
        return Op(OpClass.META_WRITE, directory=1 + i % directories)

    return closed_loop(model, op, depth, duration=2.0).iops


@pytest.mark.parametrize("profile", ["efs-2016", "efs-bursting"])
def test_creates_in_one_directory_gain_little_from_threads(profile):
    serial = _creates(model_of(profile), 1, 1)
    one_dir = _creates(model_of(profile), 32, 1)
    spread = _creates(model_of(profile), 32, 32)
    assert one_dir < 1.5 * serial
    assert spread > 20 * serial


# ---- 4.3 writes to one file do not parallelise like reads ------------------------------------


def test_random_writes_to_one_file_saturate_while_reads_scale():
    writes = fio(model_of("efs-2016"), "-direct=1 -rw=randwrite -bs=4k -iodepth 16").iops
    deeper = fio(model_of("efs-2016"), "-direct=1 -rw=randwrite -bs=4k -iodepth 128").iops
    reads = fio(model_of("efs-2016"), "-direct=1 -rw=randread -bs=4k -iodepth 16").iops
    many_files = fio(model_of("efs-2016"), "-direct=1 -rw=randwrite -bs=4k -iodepth 1 -numjobs=16").iops
    assert writes == pytest.approx(310, rel=0.05) and deeper == pytest.approx(310, rel=0.05)
    assert reads > 20 * writes
    assert many_files > 5 * writes


# ---- 4.4 synchronous writes pay a round trip each; buffered writes do not --------------------


def test_dd_with_fsync_runs_at_the_cap_and_oflag_sync_1m_much_slower():
    fsync = dd_write(model_of("efs-bursting", "stored_size=2 TiB"), MiB, 2048)
    sync = dd_write(model_of("efs-bursting", "stored_size=2 TiB"), MiB, 2048, sync=True)
    cap = 200 * MiB / 1e6
    assert fsync.mb_per_s == pytest.approx(cap, rel=0.02)
    assert sync.mb_per_s < fsync.mb_per_s / 2  # a round trip per MiB, one WRITE at a time


def test_buffered_writes_are_acknowledged_early_and_the_commit_waits_for_them():
    model = model_of("efs-2016")
    p = model.params
    acks = [model.admit(write(128 * KiB), 1.0) for _ in range(64)]  # 8 MiB at 40 MB/s: 0.21 s to drain
    assert all(a.done_at == pytest.approx(1.0 + p.buffered_write_ms / 1000) for a in acks)
    assert all(a.gate is Gate.BUFFERED for a in acks)
    commit = model.admit(Op(OpClass.COMMIT, file=1), 1.001)
    assert commit.gate is Gate.WRITEBACK
    assert commit.done_at > 1.0 + 8 * MiB / 40e6  # the drain through the 40 MB/s network
    other = model.admit(Op(OpClass.COMMIT, file=2), 1.001)  # no dirty data: queues only in the pipe
    assert other.gate is Gate.THROUGHPUT and other.done_at < commit.done_at - 0.1


def test_a_long_buffered_stream_waits_at_the_dirty_limit_and_runs_at_the_cap():
    model = model_of("efs-2016")
    stats = dd_write(model, MiB, 2048)  # 2 GiB through a 512 MiB dirty limit
    assert stats.mb_per_s == pytest.approx(40, rel=0.02)
    assert model.metrics(stats.elapsed)["DirtyBytes"] == 0
    late = model.admit(write(MiB), stats.elapsed)
    assert late.gate is Gate.BUFFERED


def test_the_dirty_limit_holds_writers_back():
    model = model_of("efs-tiny")
    acks = [model.admit(write(MiB), 0.0) for _ in range(12)]
    assert [a.gate for a in acks[:8]] == [Gate.BUFFERED] * 8 and {a.gate for a in acks[8:]} == {Gate.DIRTY}
    assert model.metrics(acks[-1].done_at)["DirtyBytes"] <= model.params.client_dirty_limit


# ---- 4.5 the client has limits of its own -------------------------------------------------


def test_the_client_network_caps_throughput_whatever_the_file_system_allows():
    model = model_of("efs-2016", "burst_mibps=1000")
    assert fio(model, "-direct=1 -rw=read -bs=512k -iodepth 64").mb_per_s == pytest.approx(40, rel=0.01)


def test_elastic_throughput_per_client():
    model = model_of("efs-elastic")
    stats = fio(model, "-direct=1 -rw=read -bs=1M -iodepth 64")
    assert stats.mb_per_s == pytest.approx(1500 * MiB / 1e6, rel=0.01)


# ---- 4.6 when credits run out, everything slows ------------------------------------------------


def test_the_credit_cliff_on_the_tiny_profile():
    model = model_of("efs-tiny")
    burst = fio(model, "-direct=1 -rw=write -bs=1M -iodepth 16", duration=2.0)  # over 4 stripes
    assert burst.mb_per_s == pytest.approx(100 * MiB / 1e6, rel=0.05)
    cliff = fio(model, "-direct=1 -rw=write -bs=64k -iodepth 4", duration=6.0, start=2.0)
    assert 1.0 < cliff.mb_per_s < 30
    base = fio(model, "-direct=1 -rw=write -bs=64k -iodepth 4", duration=10.0, start=8.0)
    assert base.mb_per_s == pytest.approx(MiB / 1e6, rel=0.1)
    m = model.metrics(18.0)
    assert m["BurstCreditBalance"] == 0 and m["PermittedThroughput"] == MiB


def test_with_no_credits_metadata_queues_behind_data():
    model = model_of("efs-tiny")
    model.set("burst_credit_balance", 0, 0.0)
    for _ in range(4):
        model.admit(write(MiB, mode="direct", file=1), 0.0)  # 4 MiB at 1 MiB/s
    ls = model.admit(Op(OpClass.META_READ, file=2), 0.0)
    assert ls.gate is Gate.THROUGHPUT and ls.done_at > 4.0
    fresh = model_of("efs-tiny")
    for _ in range(4):
        fresh.admit(write(MiB, mode="direct", file=1), 0.0)
    assert fresh.admit(Op(OpClass.META_READ, file=2), 0.0).done_at < 0.05


def test_setting_the_balance_to_zero_applies_now():
    model = model_of("efs-bursting")
    assert model.metrics(5.0)["PermittedThroughput"] == 100 * MiB
    assert model.set("burst_credit_balance", "0", 5.0) == 0
    m = model.metrics(5.0)
    assert m["BurstCreditBalance"] == 0 and m["PermittedThroughput"] == MiB
    assert model.metrics(6.0)["BurstCreditBalance"] == pytest.approx(MiB)  # earning at baseline


# ---- 4.7 random reads can beat sequential reads ---------------------------------------------


def test_random_reads_are_no_slower_than_sequential_reads():
    rand = fio(model_of("efs-2016"), "-direct=1 -rw=randread -bs=4k -iodepth 16").iops
    seq = fio(model_of("efs-2016"), "-direct=1 -rw=read -bs=4k -iodepth 16").iops
    assert rand >= seq * 0.99


# ---- throughput modes, stored size -----------------------------------------------------------


def test_baseline_and_burst_follow_the_stored_size():
    small = model_of("efs-2016", "burst_credit_balance=0")
    assert small.metrics(0)["PermittedThroughput"] == 5 * 50 * KiB  # 5 GiB, no floor
    floor = model_of("efs-bursting", "burst_credit_balance=0")
    assert floor.metrics(0)["PermittedThroughput"] == MiB
    big = model_of("efs-bursting", "stored_size=4 TiB")
    assert big.metrics(0)["PermittedThroughput"] == 400 * MiB
    assert big.metrics(0)["BurstCreditBalance"] == pytest.approx(2.1 * TiB)


def test_the_measured_size_applies_at_the_hourly_remeasure():
    model = model_of("efs-2016", "burst_credit_balance=0", now=100.0)
    model.set_stored_bytes(95 * GiB, 200.0)
    assert model.metrics(3699.0)["StorageBytes"] == 5 * GiB
    assert model.metrics(3700.0)["StorageBytes"] == 100 * GiB
    # idle time earned credits at the old baseline until the boundary, at the new one after it
    earned = model.metrics(3800.0)["BurstCreditBalance"]
    assert earned == pytest.approx(3600 * 5 * 50 * KiB + 100 * 100 * 50 * KiB)


def test_provisioned_mode_takes_the_higher_of_provisioned_and_bursting():
    model = model_of("efs-provisioned", "burst_credit_balance=0")
    assert model.metrics(0)["PermittedThroughput"] == 128 * MiB
    assert fio(model, "-direct=1 -rw=write -bs=1M -iodepth 16").mb_per_s == pytest.approx(128 * MiB / 1e6, rel=0.02)
    big = model_of("efs-provisioned", "stored_size=10 TiB")
    assert big.metrics(0)["PermittedThroughput"] == 1000 * MiB


def test_elastic_mode_has_no_credits_to_run_out():
    model = model_of("efs-elastic", "per_client_mibps=0")
    model.set("burst_credit_balance", 0, 0.0)
    stats = fio(model, "-direct=1 -rw=randwrite -bs=1M -iodepth 16 -numjobs=4")  # 4 files, many stripes
    assert stats.mb_per_s == pytest.approx(GiB / 1e6, rel=0.02)  # the 1 GiB/s write limit


def test_switching_mode_live():
    model = model_of("efs-bursting", "burst_credit_balance=0")
    model.set("provisioned_mibps", 64, 1.0)
    model.set("throughput_mode", "provisioned", 1.0)
    model.set("burst_credit_balance", 0, 1.0)  # idle time had earned a little
    assert model.metrics(1.0)["PermittedThroughput"] == 64 * MiB
    model.set("throughput_mode", "bursting", 2.0)
    model.set("burst_credit_balance", 0, 2.0)
    assert model.metrics(2.0)["PermittedThroughput"] == MiB


# ---- metrics, admissions, reproducibility -----------------------------------------------------


def test_metrics_carry_the_cloudwatch_names():
    model = model_of("efs-bursting")
    model.admit(read(3 * MiB), 0.0)
    model.admit(write(MiB, mode="direct"), 0.0)
    model.admit(Op(OpClass.META_READ, file=1), 0.0)
    m = model.metrics(1.0)
    for name in (
        "PermittedThroughput",
        "BurstCreditBalance",
        "MeteredIOBytes",
        "TotalIOBytes",
        "DataReadIOBytes",
        "DataWriteIOBytes",
        "MetadataIOBytes",
        "PercentIOLimit",
        "StorageBytes",
        "ClientConnections",
    ):
        assert name in m
    assert m["DataReadIOBytes"] == 3 * MiB and m["DataWriteIOBytes"] == MiB and m["MetadataIOBytes"] == 4 * KiB
    assert m["MeteredIOBytes"] == pytest.approx(MiB + MiB + 4 * KiB / 3)
    assert m["TotalIOBytes"] == 4 * MiB + 4 * KiB
    assert (m["DataReadOps"], m["DataWriteOps"], m["MetadataReadOps"]) == (1, 1, 1)


def test_percent_io_limit_follows_the_rate_against_the_limit():
    model = model_of("efs-2016", "total_iops=500")
    fio(model, "-direct=1 -rw=randread -bs=4k -iodepth 64", duration=60.0)
    assert model.metrics(60.0)["PercentIOLimit"] == pytest.approx(100, abs=3)
    assert model.metrics(200.0)["PercentIOLimit"] == 0


def test_an_admission_adds_up():
    model = model_of("efs-2016")
    for i in range(200):
        op = [read(64 * KiB), write(4 * KiB, mode="direct"), Op(OpClass.META_WRITE, directory=3)][i % 3]
        adm = model.admit(op, i * 1e-4)
        assert adm.done_at - i * 1e-4 == pytest.approx(adm.wait + adm.latency + adm.transfer, abs=1e-12)
        assert adm.wait >= 0 and adm.done_at >= i * 1e-4


def test_runs_are_reproducible_and_latency_follows_its_distribution():
    def run(rng=None):
        model = Model(load_profile("efs-bursting"), 0.0, rng)
        return [model.admit(read(), i * 0.01).done_at - i * 0.01 for i in range(4000)]

    first = run()
    assert first == run() and first == run(random.Random(0)) and first != run(random.Random(1))
    first.sort()
    transfer = 4 * KiB / (100 * MiB)
    assert first[2000] - transfer == pytest.approx(0.9e-3, rel=0.05)
    assert first[3960] - transfer == pytest.approx(2.7e-3, rel=0.12)


def test_time_never_runs_backwards():
    model = model_of("efs-bursting")
    model.admit(read(), 10.0)
    late = model.admit(read(), 9.0)  # an earlier time is taken as the latest seen
    assert late.done_at >= 10.0 and math.isfinite(late.done_at)


def test_bad_operations_are_refused():
    with pytest.raises(ValueError, match="write_mode"):
        Op(OpClass.DATA_WRITE, 1, write_mode="async")
    with pytest.raises(ValueError, match="negative"):
        Op(OpClass.DATA_READ, -1)
