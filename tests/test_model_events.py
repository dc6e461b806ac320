"""Events on the model's timeline, in virtual time: a set takes effect at its instant and
not before; nothing completes inside a stall, and what comes after it is untouched; the
credits running out at t is the throughput cliff at t; mistakes are one line."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusetrace.emulator.events import Event, parse_event
from fusetrace.emulator.model import Gate, Model, Op, OpClass
from fusetrace.emulator.params import KiB, MiB
from fusetrace.emulator.profiles import apply_overrides, load_profile
from fusetrace.emulator.simulate import closed_loop, fio_job


def model_of(profile: str = "efs-bursting", *overrides: str) -> Model:
    return Model(apply_overrides(load_profile(profile), list(overrides)), 0.0)


def read(n: int = 4 * KiB) -> Op:
    return Op(OpClass.DATA_READ, n, file=1)


@settings(max_examples=40, deadline=None)
@given(at=st.floats(0.5, 100.0), before=st.floats(0.0, 0.49))
def test_a_set_takes_effect_at_its_instant_and_not_before(at, before):
    model = model_of()
    model.schedule(Event(at, set={"burst_credit_balance": 0}), 0.0)
    assert model.metrics(at * before)["BurstCreditBalance"] > 1e9
    assert model.metrics(at)["BurstCreditBalance"] < 1e9  # zero then, plus what accrued since


@settings(max_examples=40, deadline=None)
@given(begin=st.floats(1.0, 50.0), length=st.floats(0.1, 60.0),
       arrivals=st.lists(st.floats(0.0, 120.0), min_size=1, max_size=40))
def test_nothing_completes_inside_a_stall_and_what_follows_is_untouched(begin, length, arrivals):
    stalled, plain = model_of("efs-bursting", "seed=3"), model_of("efs-bursting", "seed=3")
    stalled.schedule(Event(begin, stall=length), 0.0)
    end = begin + length
    for now in sorted(arrivals):
        a, b = stalled.admit(read(), now), plain.admit(read(), now)
        assert not begin < a.done_at < end, (now, a)
        if now >= end:
            assert a.done_at == b.done_at and a.gate == b.gate  # the same sample: same seed, same order
        elif begin <= now:
            assert a.gate is Gate.STALL and a.done_at >= end
            assert a.wait >= end - now - 1e-9  # the stall is time spent waiting


def test_an_rpc_in_service_when_a_stall_begins_completes_that_much_later():
    model, plain = model_of("efs-bursting", "seed=1"), model_of("efs-bursting", "seed=1")
    big = Op(OpClass.DATA_WRITE, 64 * MiB, file=1, write_mode="direct")
    base = plain.admit(big, 0.0)
    model.schedule(Event(base.done_at / 2, stall=10.0), 0.0)
    moved = model.admit(big, 0.0)
    assert moved.gate is Gate.STALL and moved.done_at == pytest.approx(base.done_at + 10.0)


def test_credits_running_out_at_t_is_the_throughput_cliff_at_t():
    """A reader going flat out on a small bursting file system: at the burst rate on
    credits, then at the baseline from the instant the balance is set to zero."""
    model = model_of("efs-bursting", "stored_size=100GiB")
    model.schedule(Event(30.0, set={"burst_credit_balance": 0}), 0.0)
    factory, depth = fio_job("-rw=read -bs=1M -iodepth 16")
    before = closed_loop(model, factory, depth, duration=30.0)
    after = closed_loop(model, factory, depth, duration=30.0, start=30.0)
    baseline = model.metrics(60.0)["PermittedThroughput"]  # bytes/s metered
    assert after.mb_per_s == pytest.approx(3 * baseline / 1e6, rel=0.05)  # reads metered at a third
    assert before.mb_per_s > 10 * after.mb_per_s


def test_events_round_trip_and_durations_read_as_written():
    assert parse_event({"at": "1m", "stall": "250ms"}, "e") == Event(60.0, stall=0.25)
    event = parse_event({"at": 10, "set": {"burst_credit_balance": "0", "seed": 4}}, "e")
    assert event == Event(10.0, set={"burst_credit_balance": 0.0, "seed": 4})
    assert parse_event(event.describe(), "again") == event


@pytest.mark.parametrize("raw, says", [
    ({"stall": "1s"}, "at: missing"),
    ({"at": "1s"}, "exactly one of set"),
    ({"at": "1s", "stall": "2s", "set": {"seed": 1}}, "exactly one of set"),
    ({"at": "soon", "stall": "2s"}, "at 'soon': expected seconds"),
    ({"at": "-1", "stall": "2s"}, "at '-1': expected seconds"),
    ({"at": "1s", "stall": 0}, "stall 0: must be longer than 0"),
    ({"at": "1s", "set": {"burst_credit_balanse": 0}}, "set burst_credit_balanse: unknown parameter (did you mean"),
    ({"at": "1s", "set": {}}, "set: expected profile keys"),
    ({"at": "1s", "stall": "1s", "colour": 1}, "unknown key 'colour'"),
])
def test_a_bad_event_is_one_line_naming_it(raw, says):
    with pytest.raises(ValueError) as caught:
        parse_event(raw, "faults.toml: event 2")
    assert str(caught.value).startswith("faults.toml: event 2: ") and says in str(caught.value)
