"""The shaper's timer: every sleeper wakes, none much before its deadline nor lost, whether the
loop is idle or busy with other tasks, and a cancelled sleep leaves the others alone; a
sleeper's slack lets it wake with another before or after its deadline, and one alone wakes
on time."""

import itertools
import random
from time import monotonic_ns

import pytest
import trio
import trio.testing

from fusetrace.shaping.timer import MAX_LEAD_NS, PreciseTimer

LOST = 1_000_000_000  # ns: a sleeper this late past its deadline was not woken by the timer


def _run(start_sleepers, busy: bool = False) -> int:
    """Run the timer and, beside it, `start_sleepers(timer, nursery, now)` until every sleeper
    it started has returned (10 s at most); with `busy`, another task keeps the loop turning.
    Returns `now`, the time the sleepers were started."""
    timer = PreciseTimer()

    async def spin(stop: trio.Event) -> None:
        while not stop.is_set():
            await trio.lowlevel.checkpoint()

    async def main() -> int:
        async with trio.open_nursery() as outer:
            outer.start_soon(timer.run)
            stop = trio.Event()
            if busy:
                outer.start_soon(spin, stop)
            now = monotonic_ns()
            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    await start_sleepers(timer, nursery, now)
            stop.set()
            outer.cancel_scope.cancel()
        return now

    try:
        return trio.run(main)
    finally:
        timer.close()


@pytest.mark.parametrize("busy", [False, True], ids=["idle loop", "busy loop"])
def test_every_sleeper_wakes_and_none_early(busy):
    base = monotonic_ns() + 20_000_000
    rng = random.Random(3)
    # staggered, some equal, some a few microseconds apart, some already past
    deadlines = [base + rng.choice([0, 1, 5, 50, 300, 2_000]) * 1_000 * i // 4 for i in range(200)]
    deadlines += [monotonic_ns() - 1_000_000] * 5
    woke: dict = {}

    async def sleeper(timer, i):
        await timer.sleep_until(deadlines[i])
        woke[i] = monotonic_ns()

    async def start(timer, nursery, _now):
        order = list(range(len(deadlines)))
        random.Random(7).shuffle(order)
        for i in order:
            nursery.start_soon(sleeper, timer, i)

    _run(start, busy)
    assert sorted(woke) == list(range(len(deadlines)))
    for i, at in woke.items():
        assert at >= deadlines[i] - MAX_LEAD_NS, (i, at - deadlines[i])
        # a lost wake-up waits for something else to wake the loop
        assert at < max(deadlines[i], base) + LOST, (i, at - deadlines[i])


def test_a_cancelled_sleep_leaves_the_others_alone():
    woke: list[int] = []

    async def sleeper(timer, deadline, tag):
        await timer.sleep_until(deadline)
        assert monotonic_ns() >= deadline - MAX_LEAD_NS
        woke.append(tag)

    async def start(timer, nursery, now):
        nursery.start_soon(sleeper, timer, now + 5_000_000, 1)
        nursery.start_soon(sleeper, timer, now + 10_000_000, 2)
        # the earliest sleeper goes away before its deadline
        with trio.CancelScope() as scope:
            scope.cancel()
            await timer.sleep_until(now + 1_000_000)
        assert scope.cancelled_caught

    _run(start)
    assert sorted(woke) == [1, 2]


def test_slack_lets_a_sleeper_wake_early_with_another_never_earlier():
    """A sleeper next in the order of latest times (deadline + slack) whose slack reaches
    back to another's wake-up leaves with it."""
    woke: dict = {}

    async def sleeper(timer, tag, deadline, slack):
        await timer.sleep_until(deadline, slack)
        woke[tag] = monotonic_ns()

    async def start(timer, nursery, now):
        nursery.start_soon(sleeper, timer, "first", now + 20_000_000, 0)
        nursery.start_soon(sleeper, timer, "slack", now + 60_000_000, 45_000_000)
        # a millisecond after the slack one's latest time (105 ms): the timer wakes in that
        # order, so a strict sleeper due first would stop it there (tasks start in no set order)
        nursery.start_soon(sleeper, timer, "strict", now + 106_000_000, 0)

    start_ns = _run(start)
    assert woke["first"] >= start_ns + 20_000_000 - MAX_LEAD_NS
    assert woke["slack"] >= start_ns + 15_000_000 - MAX_LEAD_NS
    assert woke["strict"] >= start_ns + 106_000_000 - MAX_LEAD_NS
    # the slack sleeper went with the first (its slack reached back to then), not alone later
    assert woke["slack"] < woke["strict"]


MS = 1_000_000


def test_slack_lets_the_first_sleeper_wait_for_one_that_can_go_with_it():
    """Two sleepers 90 ms apart whose slacks (60 ms) overlap: the timer waits for the first
    one's latest time, when the second's slack reaches back, and wakes both then (one
    wake-up, not two); neither outside its window."""
    woke: dict = {}
    woke_for: dict = {}

    async def sleeper(timer, tag, deadline, slack):
        woke_for[tag] = await timer.sleep_until(deadline, slack)
        woke[tag] = monotonic_ns()

    async def start(timer, nursery, now):
        nursery.start_soon(sleeper, timer, "first", now + 100 * MS, 60 * MS)
        nursery.start_soon(sleeper, timer, "second", now + 190 * MS, 60 * MS)

    start_ns = _run(start)
    assert woke["first"] >= start_ns + 40 * MS - MAX_LEAD_NS
    assert woke["second"] >= start_ns + 130 * MS - MAX_LEAD_NS
    # together (woken alone at their deadlines they would be 90 ms apart), and the
    # first after its deadline: it waited for the second
    assert abs(woke["second"] - woke["first"]) < 20 * MS
    assert woke["first"] > start_ns + 100 * MS
    # each is told the time it was woken for (the first's latest), which the shaper does
    # not count as late
    assert woke_for == {"first": start_ns + 160 * MS, "second": start_ns + 160 * MS}


def test_a_sleeper_alone_wakes_at_its_deadline_not_at_the_end_of_its_slack():
    woke: list[int] = []

    async def sleeper(timer, deadline, slack):
        woke_for = await timer.sleep_until(deadline, slack)
        assert woke_for == deadline  # its lateness past the deadline is the host's
        woke.append(monotonic_ns())

    async def start(timer, nursery, now):
        nursery.start_soon(sleeper, timer, now + 100 * MS, 60 * MS)

    start_ns = _run(start)
    assert start_ns + 100 * MS - MAX_LEAD_NS <= woke[0] < start_ns + 140 * MS  # its latest: 160 ms


def test_a_sleeper_left_alone_by_a_cancelled_one_wakes_at_its_deadline():
    """The timer waits past the first sleeper's deadline only for a second that can go with
    it; when the second goes away, the first wakes at its own deadline again."""
    woke: list[int] = []

    async def sleeper(timer, deadline, slack):
        woke_for = await timer.sleep_until(deadline, slack)
        assert woke_for == deadline
        woke.append(monotonic_ns())

    async def start(timer, nursery, now):
        nursery.start_soon(sleeper, timer, now + 100 * MS, 60 * MS)
        with trio.CancelScope() as scope:
            nursery.start_soon(_cancel_later, scope)
            await timer.sleep_until(now + 190 * MS, 60 * MS)  # the timer waits for 160 ms, till...
        assert scope.cancelled_caught

    start_ns = _run(start)
    assert start_ns + 100 * MS - MAX_LEAD_NS <= woke[0] < start_ns + 140 * MS


async def _cancel_later(scope: trio.CancelScope) -> None:
    await trio.sleep(0.01)
    scope.cancel()


@pytest.mark.parametrize("apart", [1 << 20, 1 << 32, 1 << 40], ids=["2**20", "2**32", "2**40"])
def test_sleepers_with_one_deadline_however_many_sleeps_apart_all_wake(apart):
    """fsyncs waiting on one file's write-back share a deadline; sleepers that went to sleep
    any number of sleeps apart must not share a place in the timer (one would never wake),
    and cancelling one leaves the other waiting."""
    woke: list[str] = []

    async def sleeper(timer, deadline, tag):
        await timer.sleep_until(deadline)
        woke.append(tag)

    async def start(timer, nursery, now):
        deadline = now + 20_000_000
        timer._seq = itertools.count(0)
        nursery.start_soon(sleeper, timer, deadline, "first")
        await trio.testing.wait_all_tasks_blocked()
        timer._seq = itertools.count(apart)  # as after that many other sleeps
        nursery.start_soon(sleeper, timer, deadline, "second")
        await trio.testing.wait_all_tasks_blocked()
        timer._seq = itertools.count(2 * apart)
        with trio.CancelScope() as scope:
            scope.cancel()
            await timer.sleep_until(deadline)  # goes away at once, before its deadline

    _run(start)
    assert sorted(woke) == ["first", "second"]
