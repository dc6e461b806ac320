"""The shaper in process: requests in, the model's deadlines out, replies held by the
real timer (no mount)."""

from time import monotonic_ns

import pytest
import trio

from fusetrace.emulator.call import Call
from fusetrace.emulator.model import Model
from fusetrace.emulator.nfsclient import VFS_OPS, NfsClient
from fusetrace.emulator.ops import Gate
from fusetrace.request import Kind, Request, WriteMode
from fusetrace.server.handlers import HANDLED
from fusetrace.shaping.profile import load_params
from fusetrace.shaping.shaper import Shaper
from fusetrace.shaping.timer import PreciseTimer

MS = 1_000_000
# Fixed latencies (median = p99), one namespace change per directory at a time, each
# holding its directory's slot 100 ms: what a request is charged to shows in its deadline.
STEADY = [
    "meta_write_latency_ms=1",
    "meta_write_latency_p99_ms=1",
    "read_latency_ms=5",
    "read_latency_p99_ms=5",
    "dir_write_slots=1",
    "dir_write_hold_ms=100",
]


def shaper(*overrides: str, timer=None) -> Shaper:
    params = load_params("efs-bursting", [*STEADY, *overrides])
    return Shaper(Model(params, monotonic_ns() / 1e9), timer)


def test_every_request_a_handler_makes_is_an_operation_the_nfs_client_knows():
    assert set(HANDLED) <= VFS_OPS
    with pytest.raises(ValueError, match="unknown VFS operation"):
        NfsClient(Model(load_params("efs-bursting", STEADY), 0.0)).admit(Call("ioctl"), 0.0)


def test_what_the_client_answers_alone_is_not_held():
    sh = shaper()
    now = monotonic_ns()
    first = sh.admit(Request("getattr", Kind.META_READ, 7), now)
    again = sh.admit(Request("getattr", Kind.META_READ, 7), now + MS)  # within acregmin: the attribute cache
    assert first is not None and first.deadline_ns is not None and first.nfs == "GETATTR"
    assert again is not None and again.deadline_ns is None and again.gate == "cache"
    assert sh.ops == 1  # only what waits is counted as shaped


def test_an_unknown_kind_or_a_mismatched_request_cannot_be_made():
    with pytest.raises(ValueError):
        Kind("metadata")
    with pytest.raises(ValueError, match="write mode"):
        Request("write", Kind.WRITE, 7, size=1)  # a write says how it is written
    with pytest.raises(ValueError, match="write mode"):
        Request("read", Kind.READ, 7, write_mode=WriteMode.BUFFERED)
    with pytest.raises(ValueError, match="directory"):
        Request("getattr", Kind.META_READ, 7, directory=1)  # only lookups and namespace changes name one


def test_link_is_charged_to_the_new_parent_directory():
    sh = shaper()
    now = monotonic_ns()
    first = sh.admit(Request("link", Kind.META_WRITE, 7, directory=5), now)
    same_dir = sh.admit(Request("link", Kind.META_WRITE, 8, directory=5), now)
    other_dir = sh.admit(Request("link", Kind.META_WRITE, 7, directory=6), now)  # the same file
    assert first is not None and same_dir is not None and other_dir is not None
    assert same_dir.deadline_ns - first.deadline_ns >= 99 * MS  # waited for directory 5's one slot
    assert other_dir.deadline_ns == first.deadline_ns  # directory 6's slot was free: the file's own links do not queue
    assert (first.gate, same_dir.gate) == (Gate.LATENCY, Gate.DIRECTORY)


def test_nothing_is_shaped_while_calibrating_and_each_handler_time_is_a_sample():
    sh = shaper()
    req = Request("statfs", Kind.META_READ, 1)

    async def main():
        with sh.calibration() as samples:
            start = monotonic_ns()
            ticket = sh.admit(req, start)
            assert ticket is None
            assert await sh.hold(req, ticket, start) == 0
            assert len(samples) == 1 and samples[0] >= 0
        assert sh.ops == 0
        assert sh.admit(req, monotonic_ns()) is not None  # shaped again afterwards
        assert len(samples) == 1

    trio.run(main)


def test_compensation_sends_replies_that_much_earlier():
    params = load_params("efs-bursting", STEADY)
    plain, early = (Shaper(Model(params, 0.0), None) for _ in range(2))
    early.compensate(40_000)
    req = Request("getattr", Kind.META_READ, 1)
    a, b = plain.admit(req, 10**9), early.admit(req, 10**9)
    assert a is not None and b is not None and a.deadline_ns - b.deadline_ns == 40_000


def test_the_time_the_model_had_work_in_hand_is_the_union_of_modelled_spans():
    """busy_ns (hostload's host-paced verdict): two reads at once count once, the second
    the model was idle between them not at all."""
    s = Shaper(Model(load_params("efs-bursting", STEADY), 0.0), None)
    for start, file in ((10**9, 1), (10**9, 2), (2 * 10**9, 3)):
        s.admit(Request("read", Kind.READ, file, size=1), start)
    assert s.counters()["busy_ns"] == pytest.approx(2 * 5 * MS, abs=1_000)


def _with_timer(body) -> None:
    """Run `await body(shaper)` in trio with a real precise timer running beside it."""

    async def main():
        timer = PreciseTimer()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(timer.run)
                await body(shaper(timer=timer))
                nursery.cancel_scope.cancel()
        finally:
            timer.close()

    trio.run(main)


def test_a_reply_is_held_by_the_timer_until_its_deadline():
    async def body(sh):
        req = Request("read", Kind.READ, 7, size=4096)
        start = monotonic_ns()
        ticket = sh.admit(req, start)
        assert ticket is not None and ticket.deadline_ns is not None
        deadline = ticket.deadline_ns
        assert deadline - start >= 5 * MS
        before = monotonic_ns()
        held = await sh.hold(req, ticket, start)
        slack = sh.slack_share * (deadline - start)
        assert monotonic_ns() >= deadline - slack  # never before its time
        assert held > 0 or before >= deadline  # held, unless the host was late reaching hold()
        assert (sh.ops, sh.modelled_ns) == (1, deadline - start)

    _with_timer(body)


@pytest.mark.parametrize("mode", [WriteMode.BUFFERED, WriteMode.SYNC])
def test_a_buffered_write_counts_its_modelled_time_but_never_its_lateness(mode):
    async def body(sh):
        req = Request("write", Kind.WRITE, 7, size=4096, write_mode=mode)
        start = monotonic_ns() - 1_000_000_000  # it came a second ago: its reply is late
        ticket = sh.admit(req, start)
        assert ticket is not None and ticket.deadline_ns is not None
        assert await sh.hold(req, ticket, start) == 0
        # the share's base has its modelled time (requests left unread are added over it)
        assert sh.ops == 1 and sh.modelled_ns == ticket.deadline_ns - start > 0
        assert sh.late == sh.late_ns == 0  # the write-back, not the reply, sets its pace

    _with_timer(body)
