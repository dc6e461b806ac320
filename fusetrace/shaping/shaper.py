"""The async side of the model: ask it when an operation may complete, wait till then.

Each FUSE request goes to the emulated NFS client (emulator/nfsclient.py), which
charges the model what a Linux NFS client would send for the same system call.

Deadline shaping: an operation is admitted when it arrives; the model names the
time it may complete; the real syscall runs meanwhile, and the reply goes out
at the later of the two.  So local disk speed never leaks into the emulation,
and concurrent operations overlap as the model says, never queueing behind one
another's sleeps.

The shaper also watches itself: it adds up the modelled time of the operations
a caller waits on and how late past its deadline each reply went out.  When the
host adds more than a tenth to the modelled time, the host, not the model, set
the pace (`stats`, trace metadata).  A buffered write's lateness (and an O_SYNC
one's, which the NFS client also copies into its page cache and flushes) is left
out: the model acknowledges it into the client's page cache in microseconds, which
no FUSE round trip meets, yet the pace of such writes is set by the write-back the
commits and the dirty budget wait on (dd through a fast host matches the model
while every one of its writes is "late").  Its modelled time counts all the same:
the time requests wait unread in the kernel (shaping/kernelqueue.py), also added,
includes such writes', and a share taken over a modelled time without theirs
measured nothing.  A workload of small buffered writes that the host slows shows
there, as requests waiting unread (dd bs=4k through efs-bursting: docs/BENCHMARKS.md,
"Figures behind design choices: emulator/, shaping/ and request.py").
"""

from collections.abc import Iterator
from contextlib import contextmanager
from time import monotonic_ns
from typing import TypedDict

from ..emulator.model import Model
from ..emulator.nfsclient import NfsClient
from ..emulator.ops import Admission, Gate
from ..request import Request, WriteMode
from .timer import PreciseTimer

_NS = 1_000_000_000
# enum members the hot path names, as plain globals: a member's lookup on its class costs
# more per request (docs/BENCHMARKS.md, "Figures behind design choices: emulator/, shaping/ and request.py")
_CACHE = Gate.CACHE
_KERNEL = Gate.KERNEL
_BUFFERED, _SYNC = WriteMode.BUFFERED, WriteMode.SYNC


class Ticket:
    """What admit() decided for one request: the deadline its reply waits for (None:
    the emulated client answers it at once, so it is not held), and the model's
    account of it, for the trace and `fusetrace stats`: the gate that set its time
    and how the modelled time splits into wait, latency and transfer.

    One is made for every shaped request, so it keeps the model's answer as it is
    and converts a figure only when it is read (the trace reads them all; an
    untraced mount none)."""

    __slots__ = ("adm", "deadline_ns")

    def __init__(self, deadline_ns: int | None, adm: Admission) -> None:
        self.deadline_ns = deadline_ns
        self.adm = adm

    @property
    def gate(self) -> str:
        return self.adm.gate._value_  # the plain str: its hash is cached, an enum member's is a Python call

    @property
    def wait_ns(self) -> int:
        return int(self.adm.wait * _NS)

    @property
    def latency_ns(self) -> int:
        return int(self.adm.latency * _NS)

    @property
    def transfer_ns(self) -> int:
        return int(self.adm.transfer * _NS)

    @property
    def nfs(self) -> str:
        return self.adm.rpcs  # the NFS RPCs the emulated client sent for it ("" where none)

    def __repr__(self) -> str:
        return (
            f"Ticket(deadline_ns={self.deadline_ns}, gate={self.gate!r}, wait_ns={self.wait_ns}, "
            f"latency_ns={self.latency_ns}, transfer_ns={self.transfer_ns}, nfs={self.nfs!r})"
        )


class ShaperCounters(TypedDict):
    """Shaper.counters(): how the host kept up since the mount (see there)."""

    ops: int
    late: int
    late_ns: int
    modelled_ns: int
    busy_ns: int
    compensation_us: float
    extending_writes: int


class GateTotals(TypedDict):
    """One gate's line in Shaper.gates(): operations, and their modelled time split (ns)."""

    ops: int
    wait_ns: int
    latency_ns: int
    transfer_ns: int


class _Tally:
    """One gate's count in Shaper.gates(): added to in place, once per operation (in
    seconds, as the model gives them; gates() converts)."""

    __slots__ = ("latency", "ops", "transfer", "wait")

    def __init__(self) -> None:
        self.ops = 0
        self.wait = self.latency = self.transfer = 0.0


class Shaper:
    def __init__(
        self, model: Model, timer: PreciseTimer | None, *, late_share: float = 0.10, slack_share: float = 0.02
    ):
        self.model = model
        self.client = NfsClient(model)  # what a Linux NFS client would send for each request
        self.timer = timer
        self.late_share = late_share
        # A reply may leave up to this share of its modelled time early or late when the
        # timer is waking others then (a reply alone leaves on time): deep queues hold
        # many replies due within microseconds of one another, and one wake-up for all of
        # them is what keeps the host's cost per operation down.  A 2.3 ms read may
        # leave up to 46 us early or late; the time the timer chose is not counted late.
        self.slack_share = slack_share
        self.ops = 0  # operations shaped (all; buffered writes too)
        self.late = 0  # replies later than deadline + late_share x modelled time (see hold)
        self.late_ns = 0  # all replies' time past their deadlines (see hold)
        self.modelled_ns = 0  # all shaped operations' modelled time
        # the time at least one operation was in the model's hands (the union of their
        # modelled spans, taken in order of arrival): the rest of a run's time the mount
        # waited for its callers, whose process starts and work set that part of the pace
        self.busy_ns = 0
        self._busy_until = 0
        self._gates: dict[str, _Tally] = {}  # per gate: the operations it held and their modelled time
        # O_DIRECT writes past the end of their file (counted by the write handler): the
        # FUSE kernel runs them one at a time (fs/fuse/file.c cannot extend a file
        # asynchronously), where an NFS client keeps them in flight.  No server can tell
        # that queue from one a single writer makes, so the model cannot charge the
        # difference; the count flags the run instead (stats, trace metadata, scenarios).
        self.extending_writes = 0
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

    def counters(self) -> ShaperCounters:
        """How the host kept up, since the mount: operations shaped, replies late past
        their share, their lateness and the modelled time in all, the time the model had
        an operation in hand (hostload.host_load() compares two readings), the FUSE round
        trip share replies leave early, and the O_DIRECT writes FUSE serialised because
        they extended their file."""
        return {
            "ops": self.ops,
            "late": self.late,
            "late_ns": self.late_ns,
            "modelled_ns": self.modelled_ns,
            "busy_ns": self.busy_ns,
            "compensation_us": self.compensation_ns / 1e3,
            "extending_writes": self.extending_writes,
        }

    def gates(self) -> dict[str, GateTotals]:
        """Since the mount, per gate (the model's Gate values): the operations it held
        (`ops`: those answered at once are counted under theirs) and their modelled
        time in all, split into `wait_ns`, `latency_ns` and `transfer_ns`; most
        operations first."""
        tallies = sorted(self._gates.items(), key=lambda item: -item[1].ops)
        return {
            gate: {
                "ops": t.ops,
                "wait_ns": int(t.wait * _NS),
                "latency_ns": int(t.latency * _NS),
                "transfer_ns": int(t.transfer * _NS),
            }
            for gate, t in tallies
        }

    def client_restarted(self) -> None:
        """The emulated client crashed (a crash fault): its caches and dirty data are gone."""
        self.model.client_restarted()
        self.serve(self.model)

    def serve(self, model: Model) -> None:
        """Shape what arrives from now on with `model`, behind a new NFS client of it (a
        reset, Emulation.reset); what was admitted keeps its deadline.  The counters stay
        the mount's: they say how the host kept up."""
        self.model, self.client = model, NfsClient(model)

    def trusted(
        self, node_id: int, is_dir: bool, directory: int = 0, name: str = "", handle: int | None = None
    ) -> tuple[float, float]:
        """The entry and attribute timeouts of a reply about to leave: how long the emulated
        client trusts that name and those attributes from now (NfsClient.trusted)."""
        return self.client.trusted(node_id, is_dir, monotonic_ns() / _NS, directory, name, handle)

    def compensate(self, ns: int) -> None:
        """Reply this many ns before the model's time from now on (see compensation_ns)."""
        self.compensation_ns = ns

    def admit(self, request: Request, start_ns: int, uid: int = 0) -> Ticket | None:
        """The emulated NFS client's decision on the operation (its deadline in
        monotonic ns, and why), or None while calibrating; `uid` is the caller's user.
        An operation the client answers without waiting on the server gets no deadline."""
        if self._samples is not None:
            return None
        adm = self.client.admit(request.call(uid), start_ns / _NS)
        if adm.gate is _CACHE or adm.gate is _KERNEL:
            return Ticket(None, adm)
        self.ops += 1
        done_ns = int(adm.done_at * _NS)
        if done_ns > self._busy_until:
            self.busy_ns += done_ns - (start_ns if start_ns > self._busy_until else self._busy_until)
            self._busy_until = done_ns
        return Ticket(done_ns - self.compensation_ns, adm)

    async def hold(self, request: Request, ticket: Ticket | None, start_ns: int) -> int:
        """Wait for the deadline admit() gave (None: none); return how long the
        operation was held after its real completion (0 if the real syscall took
        longer than the model).  A buffered write's lateness does not count towards
        host-bound, its modelled time does (see above)."""
        if ticket is None:
            if self._samples is not None:
                self._samples.append(monotonic_ns() - start_ns)
            return 0
        adm = ticket.adm
        gate = adm.gate._value_  # see Ticket.gate
        tally = self._gates.get(gate)
        if tally is None:
            tally = self._gates[gate] = _Tally()
        tally.ops += 1
        tally.wait += adm.wait
        tally.latency += adm.latency
        tally.transfer += adm.transfer
        deadline_ns = ticket.deadline_ns
        if deadline_ns is None:
            return 0
        now = monotonic_ns()
        modelled = deadline_ns + self.compensation_ns - start_ns
        slack = int(self.slack_share * modelled)
        if now < deadline_ns:
            assert self.timer is not None, "a shaper made without a timer only admits"
            woke_for = await self.timer.sleep_until(deadline_ns, slack)
            after = monotonic_ns()
            held = after - now  # as slept: the timer may wake it a little early or late
        else:
            after, held, woke_for = now, 0, 0
        self.modelled_ns += modelled
        mode = request.write_mode
        if mode is _BUFFERED or mode is _SYNC:
            return held
        # past its deadline, or past the later time the timer chose to wake it with others
        late = after - (deadline_ns if deadline_ns > woke_for else woke_for)
        if late > 0:
            self.late_ns += late
            if late > self.late_share * modelled:
                self.late += 1
        return held
