"""Several clients of one emulated file system, in virtual time, through each hub (in
process, and a real redis-server): what they get together stays at the file system's
limits, as one model given all of their load would have it; the credits drain at the
aggregate rate; each client's own limits hold apart; a set reaches every client."""

import math

import pytest

from fusetrace.emulator.model import Model, Op, OpClass
from fusetrace.emulator.params import KiB, MiB
from fusetrace.emulator.profiles import apply_overrides, load_profile
from fusetrace.emulator.shared import LocalHub, Reply, Report, SharedClient
from fusetrace.emulator.simulate import closed_loop, fio_job, shared_closed_loop


def model_of(profile: str, *overrides: str, seed: int = 1) -> Model:
    return Model(apply_overrides(load_profile(profile), [*overrides, f"seed={seed}"]), 0.0)


@pytest.fixture(params=["local", "redis"])
def hub(request):
    """A new hub: in process, or on the test's own redis-server under a fresh file system id."""
    if request.param == "local":
        return LocalHub()
    return request.getfixturevalue("redis_hub")()


def together(hub, n: int, profile: str, job: str, duration: float, *overrides: str):
    """n clients running `job` each, sharing `hub`; and one model running n times its depth."""
    clients = []
    for c in range(n):
        factory, depth = fio_job(job)
        clients.append((SharedClient(model_of(profile, *overrides, seed=c + 1), f"c{c}"), factory, depth))
    apart = shared_closed_loop(clients, hub, duration=duration)
    factory, depth = fio_job(job)
    alone = closed_loop(model_of(profile, *overrides), factory, n * depth, duration=duration)
    return apart, alone, [c[0].model for c in clients]


@pytest.mark.parametrize("n", [2, 8])
def test_writes_to_one_file_together_stay_at_the_files_limit(hub, n):
    apart, alone, _ = together(hub, n, "efs-2016", "-rw=randwrite -bs=4k -iodepth 16 -direct=1", 20.0)
    total = sum(s.iops for s in apart)
    assert total == pytest.approx(alone.iops, rel=0.02)  # 3 slots / 9.68 ms: 310 writes/s, however many write
    assert all(s.iops > 0.5 * total / n for s in apart)  # and no client is starved


@pytest.mark.parametrize("n", [2, 8])
def test_reads_together_stay_at_the_file_systems_iops(hub, n):
    apart, alone, _ = together(hub, n, "efs-2016", "-rw=randread -bs=4k -iodepth 256 -direct=1", 10.0)
    assert sum(s.iops for s in apart) == pytest.approx(alone.iops, rel=0.02)  # 7,400/s in all
    assert alone.iops == pytest.approx(7400, rel=0.02)


def test_credits_drain_at_the_aggregate_rate_and_every_client_sees_one_balance(hub):
    overrides = ("stored_size=100GiB",)
    apart, alone, models = together(hub, 2, "efs-bursting", "-rw=read -bs=1M -iodepth 8 -direct=1", 30.0, *overrides)
    single = model_of("efs-bursting", *overrides)
    factory, depth = fio_job("-rw=read -bs=1M -iodepth 16 -direct=1")
    closed_loop(single, factory, depth, duration=30.0)
    start = model_of("efs-bursting", *overrides).metrics(0.0)["BurstCreditBalance"]
    spent_alone = start - single.metrics(30.0)["BurstCreditBalance"]
    for m in models:
        assert start - m.metrics(30.0)["BurstCreditBalance"] == pytest.approx(spent_alone, rel=0.02)
    assert sum(s.mb_per_s for s in apart) == pytest.approx(alone.mb_per_s, rel=0.02)


def test_each_clients_own_limit_holds_apart(hub):
    """A per-client limit well under the file system's: two clients get twice one's."""
    overrides = ("per_client_mibps=50",)
    apart, _, _ = together(hub, 2, "efs-elastic", "-rw=read -bs=1M -iodepth 16 -direct=1", 10.0, *overrides)
    one = closed_loop(
        model_of("efs-elastic", *overrides), *fio_job("-rw=read -bs=1M -iodepth 16 -direct=1"), duration=10.0
    )
    assert one.mb_per_s == pytest.approx(50 * MiB / 1e6, rel=0.03)
    for s in apart:
        assert s.mb_per_s == pytest.approx(one.mb_per_s, rel=0.03)


def test_one_client_alone_is_the_model_unshared(hub):
    shared = SharedClient(model_of("efs-bursting"), "only")
    plain = model_of("efs-bursting")
    for k in range(2000):
        now = k * 0.001
        if k % 20 == 0:
            shared.apply(hub.exchange(shared.report(now)), now)
        op = Op(OpClass.DATA_WRITE, 64 * KiB, file=1 + k % 3, write_mode="direct")
        assert shared.model.admit(op, now) == plain.admit(op, now)
    assert shared.model.metrics(2.0)["ClientConnections"] == 1.0


def test_a_set_reaches_every_client_and_a_new_client_takes_the_balance(hub):
    a, b = SharedClient(model_of("efs-bursting"), "a"), SharedClient(model_of("efs-bursting"), "b")
    for c in (a, b):
        c.apply(hub.exchange(c.report(0.0)), 0.0)
    a.model.set("read_latency_p99_ms", 2, 0.1)
    a.changed("read_latency_p99_ms", 2)
    a.model.set("burst_credit_balance", 1 * MiB, 0.1)
    a.changed("burst_credit_balance", 1 * MiB)
    for t in (0.2, 0.25):  # the second round: every client's report carries the set's balance
        for c in (a, b):
            c.apply(hub.exchange(c.report(t)), t)
    assert b.model.params.read_latency_p99_ms == 2 and b.model.metrics(0.2)["ClientConnections"] == 2.0
    late = SharedClient(model_of("efs-bursting"), "late")
    late.apply(hub.exchange(late.report(0.3)), 0.3)
    assert late.model.metrics(0.3)["BurstCreditBalance"] < 2 * MiB  # the file system's, not a fresh one's
    assert late.model.metrics(0.3)["ClientConnections"] == 3.0


def test_the_stored_size_is_the_sum_over_sources_each_counted_once(hub):
    a, b, c = (
        SharedClient(model_of("efs-bursting", "storage_remeasure_s=0"), name, source=src)
        for name, src in (("a", "host1:/data"), ("b", "host1:/data"), ("c", "host2:/data"))
    )
    for client, size in ((a, 10 * MiB), (b, 10 * MiB), (c, 30 * MiB)):
        client.measured(size)
        client.apply(hub.exchange(client.report(0.0)), 0.0)
    a.apply(hub.exchange(a.report(0.1)), 0.1)
    assert a.model.metrics(0.1)["StorageBytes"] == a.model.params.stored_size + 40 * MiB


def test_a_report_the_hub_did_not_take_goes_with_the_next():
    a, b = SharedClient(model_of("efs-2016"), "a"), SharedClient(model_of("efs-2016"), "b")
    hub = LocalHub()
    for c in (a, b):
        c.apply(hub.exchange(c.report(0.0)), 0.0)
    for k in range(100):
        a.model.admit(Op(OpClass.DATA_WRITE, 4 * KiB, file=7, write_mode="direct"), 0.01 * k)
    a.restore(a.report(1.0))  # the hub was away
    a.model.admit(Op(OpClass.DATA_WRITE, 4 * KiB, file=7, write_mode="direct"), 1.5)
    report = a.report(2.0)
    assert [(u[1], u[2]) for u in report.usage] == [(7, 101)]  # kept, per file, and sent with the next
    b.apply(hub.exchange(b.report(2.0)), 2.0)
    b.apply(hub.exchange(report), 2.0)
    b.apply(hub.exchange(b.report(2.0)), 2.0)
    assert b.model.metrics(2.0)["DataWriteIOBytes"] == 101 * 4 * KiB


def test_reply_and_report_defaults_say_nothing_known():
    assert math.isnan(Report("c", 0.0).balance) and Reply().stored == -1.0


def reads(client: SharedClient, n: int, now: float) -> None:
    for _ in range(n):
        client.model.admit(Op(OpClass.DATA_READ, 4 * KiB, file=1), now)


def exchange(hub, now: float, *clients: SharedClient) -> None:
    for c in clients:
        c.apply(hub.exchange(c.report(now)), now)


def test_reports_lost_in_a_redis_restart_are_made_up_from_the_totals(redis_server, redis_hub):
    hub = redis_hub()
    a, b = SharedClient(model_of("efs-2016"), "a"), SharedClient(model_of("efs-2016"), "b")
    exchange(hub, 0.0, a, b)
    reads(a, 100, 3.0)
    exchange(hub, 3.0, a)  # in the log, not read by b yet
    redis_server.stop()
    redis_server.start()  # without persistence: the log is gone
    reads(a, 10, 3.1)
    exchange(hub, 3.1, a)
    exchange(hub, 3.2, b)
    assert b.model.metrics(3.2)["DataReadIOBytes"] == 110 * 4 * KiB


@pytest.mark.parametrize(
    "first, then",
    [((100, 4 * KiB, 1), (20, 4 * KiB, 1)), ((1, 1 * MiB, 1), (1, 4 * KiB, 1)), ((1, 4 * KiB, 8), (0, 0, 1))],
)
def test_a_report_sent_twice_counts_once(first, then):
    """The hub took a report but its answer was lost: the client sends the usage again with the
    next, and the others take in what the totals say, not twice: operations, bytes and files
    (one write on each of eight files, then nothing) each agree."""
    hub = LocalHub()
    a, b = SharedClient(model_of("efs-2016"), "a"), SharedClient(model_of("efs-2016"), "b")
    exchange(hub, 0.0, a, b)

    def writes(n: int, size: int, files: int, now: float) -> None:
        for f in range(files):
            for _ in range(n):
                a.model.admit(Op(OpClass.DATA_WRITE, size, file=1 + f, write_mode="direct"), now)

    writes(*first, 0.5)
    report = a.report(0.5)
    hub.exchange(report)  # taken ...
    a.restore(report)  # ... but a never heard so
    writes(*then, 0.6)
    exchange(hub, 0.6, a)
    exchange(hub, 0.7, b)
    mine, theirs = a.model.metrics(0.7), b.model.metrics(0.7)
    assert theirs["DataWriteIOBytes"] == mine["DataWriteIOBytes"]
    assert theirs["DataWriteOps"] == mine["DataWriteOps"]


def test_a_client_joining_takes_in_no_history_even_from_one_silent_at_first(hub):
    a = SharedClient(model_of("efs-2016"), "a")
    exchange(hub, 0.0, a)
    reads(a, 500, 0.5)
    exchange(hub, 0.5, a)
    late = SharedClient(model_of("efs-2016"), "late")
    exchange(hub, 0.6, late)
    exchange(hub, 3.0, late)  # a says nothing for over two seconds (its exchanges failing) ...
    reads(a, 7, 3.5)
    exchange(hub, 3.5, a)  # ... then reports: late takes in what a did since late joined, no more
    exchange(hub, 3.6, late)
    assert late.model.metrics(3.6)["DataReadIOBytes"] == 7 * 4 * KiB


def test_sets_crossing_converge_and_a_client_joining_takes_every_set(hub):
    a, b = SharedClient(model_of("efs-2016"), "a"), SharedClient(model_of("efs-2016"), "b")
    exchange(hub, 0.0, a, b)
    for c, value in ((a, 2000), (b, 1000)):  # the same key, set on two clients within one period
        c.model.set("total_iops", value, 0.1)
        c.changed("total_iops", value)
    exchange(hub, 0.2, a, b)
    exchange(hub, 0.3, a, b)
    assert a.model.params.total_iops == b.model.params.total_iops == 1000  # the later set, everywhere
    late = SharedClient(model_of("efs-2016"), "late")
    exchange(hub, 0.4, late)
    assert late.model.params.total_iops == 1000


def test_a_client_catching_up_takes_the_backlog_a_batch_at_a_time(redis_hub):
    from fusetrace.shaping.redis_hub import BATCH

    hub = redis_hub()
    a, b = SharedClient(model_of("efs-2016"), "a"), SharedClient(model_of("efs-2016"), "b")
    exchange(hub, 0.0, a, b)
    for k in range(2 * BATCH + 10):  # b hears nothing meanwhile
        reads(a, 1, 0.001 * k)
        exchange(hub, 0.001 * k, a)
    answers = 0
    while True:
        reply = hub.exchange(b.report(3.0))
        b.apply(reply, 3.0)
        answers += 1
        if not reply.more:
            break
    assert answers == 3
    assert b.model.metrics(3.0)["DataReadIOBytes"] == a.model.metrics(3.0)["DataReadIOBytes"]


def test_a_set_refused_here_is_listed_until_a_later_one_of_its_key_is_taken():
    client = SharedClient(model_of("efs-bursting", "throughput_mode=provisioned", "provisioned_mibps=50"), "a")
    client.apply(Reply(params={"provisioned_mibps": 0}), 1.0)  # provisioned mode needs a rate above 0
    assert list(client.refused) == ["provisioned_mibps"] and client.model.params.provisioned_mibps == 50
    client.apply(Reply(params={"provisioned_mibps": 80}), 2.0)
    assert client.refused == {} and client.model.params.provisioned_mibps == 80
