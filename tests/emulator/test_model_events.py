"""Events on the model's timeline, in virtual time: a set takes effect at its instant and
not before; nothing completes inside a stall, and what comes after it is untouched; the
credits running out at t is the throughput cliff at t; mistakes are one line."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusetrace.emulator.events import Event, parse_event
from fusetrace.emulator.model import Gate, Model, Op, OpClass
from fusetrace.emulator.params import KiB, MiB, ProfileError
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
@given(
    begin=st.floats(1.0, 50.0),
    length=st.floats(0.1, 60.0),
    arrivals=st.lists(st.floats(0.0, 120.0), min_size=1, max_size=40),
)
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


def test_a_buffered_write_acknowledged_before_a_stall_reaches_the_server_after_it():
    """The page cache takes the write at once; its write-back, and so the fsync's COMMIT
    behind it, waits out the stall like any request."""
    model = model_of("efs-bursting", "seed=2")
    model.schedule(Event(0.001, stall=5.0), 0.0)
    ack = model.admit(Op(OpClass.DATA_WRITE, 4 * KiB, file=1, write_mode="buffered"), 0.0)
    assert ack.done_at < 0.001 and ack.gate is Gate.BUFFERED
    assert model.drained_at(1) >= 5.001
    assert model.admit(Op(OpClass.COMMIT, 0, file=1), 0.0005).done_at > 5.001


def test_overlapping_stalls_join_rather_than_add_up():
    model = model_of("efs-bursting", "seed=4")
    model.schedule(Event(1.0, stall=4.0), 0.0)
    model.schedule(Event(2.0, stall=4.0), 0.0)  # the server is silent from 1 s to 6 s
    model.schedule(Event(1.0, stall=1.0), 0.0)
    done = model.admit(read(), 1.5)
    assert done.gate is Gate.STALL and 6.0 <= done.done_at < 6.1


@settings(max_examples=40, deadline=None)
@given(
    stalls=st.lists(st.tuples(st.floats(1.0, 50.0), st.floats(0.1, 20.0)), min_size=1, max_size=5),
    off=st.data(),
    arrivals=st.lists(st.floats(0.0, 80.0), min_size=1, max_size=30),
)
def test_an_event_called_off_before_it_happens_leaves_the_others_as_if_alone(stalls, off, arrivals):
    """Calling off scheduled stalls and sets leaves the model as if only the others had been
    scheduled (the same seed, the same completions); one that has happened cannot be."""
    cancelled = set(off.draw(st.sets(st.sampled_from(range(len(stalls))))))
    model, alone = model_of("efs-bursting", "seed=5"), model_of("efs-bursting", "seed=5")
    numbers = [model.schedule(Event(b, stall=n), 0.0) for b, n in stalls]
    for i, (b, n) in enumerate(stalls):
        if i not in cancelled:
            alone.schedule(Event(b, stall=n), 0.0)
    credits = model.schedule(Event(60.0, set={"burst_credit_balance": 0}), 0.0)
    assert all(model.unschedule(numbers[i], 0.5) for i in cancelled)
    assert model.unschedule(credits, 0.5)
    for now in sorted(a for a in arrivals if a >= 0.5):
        a, b = model.admit(read(), now), alone.admit(read(), now)
        assert (a.done_at, a.gate) == (b.done_at, b.gate)
    assert model.metrics(80.0)["BurstCreditBalance"] > 1e9  # the set never happened
    assert not model.unschedule(credits, 81.0)


def test_a_stall_called_off_while_in_force_holds_nothing_after():
    model = model_of("efs-bursting", "seed=6")
    number = model.schedule(Event(1.0, stall=10.0), 0.0)
    held = model.admit(read(), 2.0)
    assert held.gate is Gate.STALL and held.done_at >= 11.0
    assert model.unschedule(number, 3.0)
    assert model.admit(read(), 3.5).gate is not Gate.STALL
    assert not model.unschedule(number, 4.0)  # gone


def test_keys_set_at_one_instant_are_checked_together_when_scheduled():
    """Two keys only consistent together go in at once; one inconsistent event is refused
    when scheduled, not at its instant inside some request's admission; events at one instant
    happen in the order given."""
    model = model_of()
    model.schedule(Event(1.0, set={"meta_read_latency_ms": 50, "meta_read_latency_p99_ms": 60}), 0.0)
    with pytest.raises(ProfileError, match="meta_read_latency_p99_ms: must not be below"):
        model.schedule(Event(1.0, set={"meta_read_latency_p99_ms": 0.001}), 0.0)
    model.schedule(Event(1.0, stall=0.5), 0.0)
    model.schedule(Event(1.0, set={"seed": 5}), 0.0)
    model.schedule(Event(1.0, set={"seed": 6}), 0.0)
    model.admit(read(), 2.0)
    assert (model.params.meta_read_latency_ms, model.params.seed) == (50, 6) and not model.refused_events


def test_a_set_made_inconsistent_by_a_later_change_is_refused_and_said():
    model = model_of()
    number = model.schedule(Event(5.0, set={"meta_read_latency_p99_ms": 20}), 0.0)
    model.set("meta_read_latency_p99_ms", 100, 1.0)
    model.set("meta_read_latency_ms", 30, 1.0)
    model.admit(read(), 6.0)
    assert model.params.meta_read_latency_p99_ms == 100
    assert model.refused_events == {number: "set meta_read_latency_p99_ms: must not be below meta_read_latency_ms (30)"}


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


@pytest.mark.parametrize(
    "raw, says",
    [
        ({"stall": "1s"}, "at: missing"),
        ({"at": "1s"}, "exactly one of set"),
        ({"at": "1s", "stall": "2s", "set": {"seed": 1}}, "exactly one of set"),
        ({"at": "soon", "stall": "2s"}, "at 'soon': expected seconds"),
        ({"at": "-1", "stall": "2s"}, "at '-1': expected seconds"),
        ({"at": "1s", "stall": 0}, "stall 0: must be longer than 0"),
        ({"at": "1s", "stall": "9000h"}, "stall '9000h': must be longer than 0 and at most a year"),
        ({"at": 1e300, "stall": "1s"}, "at 1e+300: at most a year"),
        ({"at": "1s", "set": {"burst_credit_balanse": 0}}, "set burst_credit_balanse: unknown parameter (did you mean"),
        ({"at": "1s", "set": {}}, "set: expected profile keys"),
        ({"at": "1s", "stall": "1s", "colour": 1}, "unknown key 'colour'"),
    ],
)
def test_a_bad_event_is_one_line_naming_it(raw, says):
    with pytest.raises(ValueError) as caught:
        parse_event(raw, "faults.toml: event 2")
    assert str(caught.value).startswith("faults.toml: event 2: ") and says in str(caught.value)


def test_a_write_acknowledged_after_a_stall_leaves_the_stall_for_what_arrives_in_it():
    """A buffered write that waits past a stall's end for room among the dirty data does not
    end the stall for a request arriving inside it (found by review: a getattr then went
    through the stall)."""
    model = model_of("efs-bursting", "seed=7", "client_dirty_limit=1 MiB")
    model.schedule(Event(1.0, stall=10.0), 0.0)
    for _ in range(4):
        model.admit(Op(OpClass.DATA_WRITE, MiB, file=1, write_mode="buffered"), 2.0)
    held = model.admit(Op(OpClass.META_READ, 0, file=1), 3.0)
    assert held.gate is Gate.STALL and held.done_at >= 11.0
