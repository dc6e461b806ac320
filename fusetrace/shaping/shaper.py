"""The async side of the model: ask it when an operation may complete, wait till then.

Deadline shaping: an operation is admitted when it arrives; the model names the
time it may complete; the real syscall runs meanwhile, and the reply goes out
at the later of the two.  So local disk speed never leaks into the emulation,
and concurrent operations overlap as the model says, never queueing behind one
another's sleeps.

The shaper also watches itself: it adds up the modelled time of the operations
a caller waits on and how late past its deadline each reply went out.  When the
host adds more than a tenth to the modelled time, the host, not the model, set
the pace (`stats`, trace metadata).  Buffered writes are left out: the model
acknowledges them into the client's page cache in microseconds, which no FUSE
round trip meets, yet their pace is set by the write-back the commits and the
dirty budget wait on (dd through a fast host matches the model while every one
of its writes is "late").  So a workload of tiny buffered writes (cpio's 512-byte
pieces) is slowed by the host without being flagged.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from time import monotonic_ns

from ..emulator.model import Model
from ..emulator.ops import Admission, Op, OpClass
from ..request import Kind, Request, WriteMode
from .timer import PreciseTimer

_NS = 1_000_000_000


def model_op(request: Request) -> Op | None:
    """The model's view of a request; None for one that is never shaped."""
    kind = request.kind
    if kind is Kind.READ:
        return Op(OpClass.DATA_READ, nbytes=request.size, file=request.file)
    if kind is Kind.WRITE:
        assert request.write_mode is not None  # Request refuses a write without one
        return Op(OpClass.DATA_WRITE, nbytes=request.size, file=request.file, write_mode=request.write_mode)
    if kind is Kind.COMMIT:
        return Op(OpClass.COMMIT, file=request.file)
    if kind is Kind.META_WRITE:
        return Op(OpClass.META_WRITE, file=request.file, directory=request.directory)
    if kind is Kind.META_READ:
        return Op(OpClass.META_READ, file=request.file)
    return None  # Kind.NONE


class Ticket:
    """What admit() decided for one request: the deadline its reply waits for (None:
    the emulated client answers it at once, so it is not held), and the model's
    account of it, for the trace and `fusetrace stats`: the gate that set its time
    and how the modelled time splits into wait, latency and transfer.

    A plain slotted class, like Request: one is made for every shaped request."""

    __slots__ = ("deadline_ns", "gate", "latency_ns", "nfs", "transfer_ns", "wait_ns")

    def __init__(self, deadline_ns: int | None, adm: Admission, nfs: str = "") -> None:
        self.deadline_ns = deadline_ns
        self.gate = str(adm.gate)
        self.wait_ns = int(adm.wait * _NS)
        self.latency_ns = int(adm.latency * _NS)
        self.transfer_ns = int(adm.transfer * _NS)
        self.nfs = nfs  # the NFS RPCs the emulated client sent for it ("" where none)

    def __repr__(self) -> str:
        return (f"Ticket(deadline_ns={self.deadline_ns}, gate={self.gate!r}, wait_ns={self.wait_ns}, "
                f"latency_ns={self.latency_ns}, transfer_ns={self.transfer_ns}, nfs={self.nfs!r})")


class Shaper:
    def __init__(self, model: Model, timer: PreciseTimer | None, *, late_share: float = 0.10,
                 slack_share: float = 0.02):
        self.model = model
        self.timer = timer
        self.late_share = late_share
        # A reply may leave this share of its modelled time early when the timer is
        # waking others then: deep queues hold many replies due within microseconds of
        # one another, and one wake-up for all of them is what keeps the host's cost
        # per operation down.  A 2.3 ms read may leave up to 46 us early.
        self.slack_share = slack_share
        self.ops = 0  # operations shaped (all; buffered writes too)
        self.late = 0  # replies later than deadline + late_share x modelled time
        self.late_ns = 0  # all replies' time past their deadlines
        self.modelled_ns = 0  # all shaped operations' modelled time
        # The kernel's and the caller's share of a round trip, outside the handler:
        # replies go out this much before the model's time, so the caller sees the
        # model's latency rather than the model's plus FUSE's.  Measured at mount
        # (fusetrace/shaping/emulation.py, calibrate) and set with compensate().
        self.compensation_ns = 0
        self._samples: list[int] | None = None  # while calibrating: handler times; nothing is shaped

    @contextmanager
    def calibration(self) -> Iterator[list[int]]:
        """While inside: nothing is shaped, and the list given fills with the time
        (ns) each request spent in its handler."""
        samples: list[int] = []
        self._samples = samples
        try:
            yield samples
        finally:
            self._samples = None

    def counters(self) -> dict[str, float]:
        """How the host kept up, since the mount: operations shaped, replies late past
        their share, their lateness and the modelled time in all (hostload.host_load()
        compares two readings), and the FUSE round trip share replies leave early."""
        return {"ops": self.ops, "late": self.late, "late_ns": self.late_ns, "modelled_ns": self.modelled_ns,
                "compensation_us": self.compensation_ns / 1e3}

    def compensate(self, ns: int) -> None:
        """Reply this many ns before the model's time from now on (see compensation_ns)."""
        self.compensation_ns = ns

    def admit(self, request: Request, start_ns: int) -> Ticket | None:
        """The model's decision on the operation (its deadline in monotonic ns, and
        why), or None if it is not shaped at all."""
        if self._samples is not None:
            return None
        op = model_op(request)
        if op is None:
            return None
        adm = self.model.admit(op, start_ns / _NS)
        self.ops += 1
        return Ticket(int(adm.done_at * _NS) - self.compensation_ns, adm)

    async def hold(self, request: Request, ticket: Ticket | None, start_ns: int) -> int:
        """Wait for the deadline admit() gave (None: none); return how long the
        operation was held after its real completion (0 if the real syscall took
        longer than the model).  A buffered write's lateness does not count towards
        host-bound (see above)."""
        deadline_ns = None if ticket is None else ticket.deadline_ns
        if deadline_ns is None:
            if self._samples is not None:
                self._samples.append(monotonic_ns() - start_ns)
            return 0
        now = monotonic_ns()
        modelled = deadline_ns + self.compensation_ns - start_ns
        if now < deadline_ns:
            assert self.timer is not None, "a shaper made without a timer only admits"
            await self.timer.sleep_until(deadline_ns, int(self.slack_share * modelled))
            held = deadline_ns - now
        else:
            held = 0
        if request.write_mode is WriteMode.BUFFERED:
            return held
        late = max(monotonic_ns() - deadline_ns, 0)
        self.modelled_ns += modelled
        self.late_ns += late
        if late > self.late_share * modelled:
            self.late += 1
        return held
