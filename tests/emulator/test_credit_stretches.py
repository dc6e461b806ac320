"""When the burst credits ran out, as the credit pipe records it (the stretches its balance
was at zero) and the minute's lowest permitted throughput taken from that, in virtual time."""

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from fusetrace.emulator.credits import JOIN_S, KEEP, CreditPipe
from fusetrace.emulator.metrics import MINUTE, lowest_permitted
from fusetrace.emulator.model import Model, Op, OpClass
from fusetrace.emulator.params import MiB
from fusetrace.emulator.profiles import apply_overrides, load_profile

HI, LO = 100.0 * MiB, 1.0 * MiB


@settings(max_examples=200, deadline=None)
@given(
    balance=st.floats(0, 8 * MiB),
    steps=st.lists(
        st.tuples(st.floats(0, 3.0), st.integers(0, 4 * MiB), st.sampled_from([None, None, None, 0.0, 2.0 * MiB])),
        max_size=40,
    ),
)
def test_every_instant_at_the_baseline_lies_in_a_stretch(balance, steps):
    """Whatever the arrivals, idle times and balances set: each instant the pipe passes bytes
    at its low rate lies in a recorded stretch; stretches are in time order, apart by JOIN_S.
    (An idle pipe at zero earns at once: that instant is no stretch.)"""
    pipe = CreditPipe(HI, LO, LO, 16 * MiB, balance, 0.0)
    now, low = 0.0, []
    for gap, nbytes, set_to in steps:
        now += gap
        if set_to is not None:  # from this instant on: the rate it had here lasted no time
            pipe.set_balance(set_to, now)
            low = [t for t in low if t < now]
            continue
        if pipe.rate_at(now) == LO and now < pipe.free_at:
            low.append(now)
        pipe.transmit(now, nbytes)
    stretches = pipe.stretches(now)
    for (a, b, lo), (c, _, _) in itertools.pairwise(stretches):
        assert a < b and c - b >= JOIN_S and lo == LO
    assert all(b is not None for _, b, _ in stretches[:-1])
    for t in low:
        assert any(a <= t and (b is None or t <= b) for a, b, _ in stretches), (t, stretches)


def test_a_stream_past_its_credits_is_one_stretch_until_its_bytes_have_passed():
    # 256 MiB of credits, burst 100 MiB/s, baseline 1 MiB/s; no stripes: each MiB takes its
    # 4.3 ms and 10 ms at the stream's 100 MiB/s, so the credits last about 3.7 s
    model = Model(apply_overrides(load_profile("efs-tiny"), ["file_stripe_size=0"]), 0.0)
    t = 0.0
    for _ in range(300):  # 300 MiB, one after another
        t = model.admit(Op(OpClass.DATA_WRITE, MiB, file=1, write_mode="direct"), t).done_at
    [(start, end, baseline)] = model.credit_stretches(t - 1.0)
    assert 3.0 < start < 4.5 and end is None and baseline == MiB  # still at the baseline
    [(start2, end, _)] = model.credit_stretches(t + 1.0)
    assert start2 == start and end == t  # over when the last bytes passed
    metrics = model.metrics(t + 1.0)
    assert metrics["PermittedThroughput"] > 50 * MiB  # earned back while idle
    assert lowest_permitted(metrics["PermittedThroughput"], model.credit_stretches(t + 1.0), t + 1.0) == MiB
    later = t + MINUTE + 1.0
    assert lowest_permitted(HI, model.credit_stretches(later), later) == HI


def test_setting_the_balance_to_zero_under_load_starts_a_stretch_and_elastic_has_none():
    params = load_profile("efs-tiny")
    model = Model(params, 0.0)
    model.set("burst_credit_balance", 0, 10.0)
    done = max(model.admit(Op(OpClass.DATA_WRITE, MiB, file=1, write_mode="direct"), 10.0).done_at for _ in range(3))
    [(start, end, _)] = model.credit_stretches(11.0)
    assert 10.0 <= start < 10.1 and end is None and done > 12.0
    model.set("throughput_mode", "elastic", 20.0)
    assert model.credit_stretches(20.0) == []


def test_the_record_is_bounded():
    pipe = CreditPipe(HI, LO, LO, 16 * MiB, 0.0, 0.0)
    now = 0.0
    for _ in range(KEEP + 10):  # each burst runs the credits out, each pause earns some back
        pipe.transmit(now, 20 * MiB)  # more than the 10 MiB earned in a pause
        now = pipe.free_at + 10 * JOIN_S
    stretches = pipe.stretches(now)
    assert len(stretches) == KEEP and stretches[0][0] == 0.0
