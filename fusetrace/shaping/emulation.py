"""An emulated mount's EFS side: the model, its shaper and timer, metrics and live control.

The model (emulator/) decides; this wires it into a running server: it samples
the CloudWatch-named metrics once a minute (saved with the trace), re-measures
the stored size of the source for the bursting baseline, and applies
`fusetrace set` changes.
"""

import dataclasses
import itertools
import os
import statistics
import time
from collections.abc import Callable
from time import monotonic_ns
from typing import TYPE_CHECKING, Any, Protocol

import trio

from ..emulator.events import parse_event
from ..emulator.metrics import lowest_permitted
from ..emulator.model import Model
from ..emulator.params import Params, ProfileError
from ..errors import ControlError, UserError
from ..hostload import NO_LOAD, extending_writes_note, host_load
from . import roundtrip
from .kernelqueue import LOOP_STANDS_IN, KernelQueue
from .loopload import LoopLoad
from .profile import load_params
from .shaper import Shaper
from .timer import PreciseTimer

if TYPE_CHECKING:
    from .sharing import Sharing


class _Tracer(Protocol):
    """The trace writer, as the emulation sees it: where its per-minute metrics go."""

    def update_metadata(self, **extra: Any) -> None: ...


# What the control socket and the trace's metadata carry of the emulation: JSON objects
Json = dict[str, Any]

SAMPLE_EVERY = 60.0  # seconds: CloudWatch's period
MEASURE_EVERY = 60.0  # seconds between walks of the source for its stored size
CALIBRATE_WAIT = 5.0  # seconds the first walk waits for calibrate() to finish, at most
MAX_COMPENSATION_NS = 200_000  # a bound on the measured FUSE round-trip share (docs/BENCHMARKS.md)


def _now() -> float:
    return monotonic_ns() / 1e9


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _tree_bytes(root: str) -> int:
    """The bytes in the regular files below `root`.  Walked from directory descriptors,
    each subdirectory opened relative to its parent's with O_NOFOLLOW: a directory
    swapped for a symlink mid-walk is skipped, never followed out of the source.
    Depth first, so it holds one descriptor per level, not one per directory seen."""
    try:
        fd = os.open(root, _DIR_FLAGS & ~os.O_NOFOLLOW)  # the source itself, as mounted
    except OSError:
        return 0
    total, stack = 0, []  # stack: (descriptor, names of its subdirectories still to walk)
    while True:
        size, subdirs = _dir_bytes(fd)
        total += size
        stack.append((fd, subdirs))
        below: int | None = None
        while stack and below is None:
            parent, names = stack[-1]
            if not names:
                os.close(parent)
                stack.pop()
                continue
            try:
                below = os.open(names.pop(), _DIR_FLAGS, dir_fd=parent)
            except OSError:
                pass  # gone, or no longer a directory
        if below is None:
            return total
        fd = below


def _dir_bytes(fd: int) -> tuple[int, list[str]]:
    """The bytes in the regular files of the directory open at `fd`, and the names of
    its subdirectories (symlinks are neither)."""
    total, subdirs = 0, []
    try:
        with os.scandir(fd) as entries:
            for e in entries:
                try:
                    if e.is_dir(follow_symlinks=False):
                        subdirs.append(e.name)
                    elif e.is_file(follow_symlinks=False):
                        total += e.stat(follow_symlinks=False).st_size
                except OSError:
                    pass  # removed meanwhile
    except OSError:
        pass
    return total, subdirs


def _fixed_at_mount(key: str) -> str:
    """Why `key` cannot change on a mounted file system ("" when it can): the kernel was
    given its value at mount, and neither `fusetrace set` nor an event reaches it."""
    if key == "xattrs":
        return "xattrs: fixed at mount (the kernel remembers the file system's answer)"
    if key.startswith("nfs_ac"):
        return f"{key}: fixed at mount (the kernel's own caches were given it)"
    return ""


class Emulation:
    def __init__(self, name: str, params: Params, source: str):
        self.name, self.source = name, source
        self.mount_params = params  # as mounted: what reset() builds the model from again
        self.started_ns = monotonic_ns()  # the model's time 0, which the trace's metadata keeps for simulate
        self.model = Model(params, self.started_ns / 1e9)  # latency samples seeded by the `seed` parameter
        self.timer = PreciseTimer()
        self.shaper = Shaper(self.model, self.timer)
        self.loop = LoopLoad()
        self.kernel_queue: KernelQueue | None = None  # watch_kernel_queue(); None: not measured
        self.series: list[Json] = []
        self._tracer: _Tracer | None = None
        self._calibrated = trio.Event()
        self.measured = False  # whether a walk of the source has given its size yet
        self._stored: int | None = None  # the source's size, as the last walk found it
        self._events: list[Json] = []  # scheduled on the model's timeline, for `fault list`
        self._event_ids = itertools.count(1)  # ids stay unique past a reset
        self._numbers: dict[str, int] = {}  # an event's id: its number in the model (cancel_events)
        self._counters: Callable[[], dict[str, int]] = _no_counters  # more counters for Prometheus (the server's)
        self.sharing: Sharing | None = None  # --shared: the file system's state shared with other mounts

    def share(self, url: str, fs_id: str) -> None:
        """Share the file system's state with every mount of `fs_id` through Redis at
        `url` (shaping/sharing.py); a UserError if Redis does not answer now, or the file
        system's live clients emulate it with other parameters."""
        from .sharing import Sharing  # imports redis: only for a shared mount

        self.sharing = Sharing(self.model, url, fs_id, self.source, _now)
        self.sharing.join()

    def watch_kernel_queue(
        self, connection: str, queued: Callable[[], bool] | None, held: Callable[[], int], server_cap: int
    ) -> str | None:
        """Measure how long requests wait unread in the FUSE connection whose counters are
        in `connection` while the model has room for them (kernelqueue.py): `queued()`
        says whether a request is queued on the server's /dev/fuse descriptor (None: the
        descriptor was not found), `held()` counts the requests the server holds, at most
        `server_cap` at once.  None, or why it cannot (then the loop's busy share stands
        in for it)."""
        if queued is None:
            return f"cannot find the server's /dev/fuse descriptor: {LOOP_STANDS_IN}"
        try:
            self.kernel_queue = KernelQueue(connection, queued, held, self._room, server_cap)
        except OSError as exc:
            return f"cannot read the FUSE connection's queue ({exc}): {LOOP_STANDS_IN}"
        return None

    def _room(self, now_ns: int) -> bool:
        return not self.model.busy(now_ns / 1e9)

    @classmethod
    def open(cls, profile: str, overrides: list[str], source: str) -> "Emulation":
        return cls(profile, load_params(profile, overrides), source)

    def describe(self) -> Json:
        return {
            "profile": self.name,
            "params": dataclasses.asdict(self.model.params),
            "started_monotonic_ns": self.started_ns,
        }

    async def start(
        self,
        nursery: trio.Nursery,
        tracer: _Tracer | None,
        counters: Callable[[], dict[str, int]] | None = None,
    ) -> None:
        """Run the timer and the samplers; `counters()`: the server's own figures that
        prometheus_metrics adds to the model's and the host's."""
        self._tracer = tracer
        self._counters = counters or _no_counters
        self.loop = LoopLoad()  # on the loop's thread, whose CPU time it reads
        nursery.start_soon(self.timer.run)
        if self.kernel_queue is not None:
            nursery.start_soon(self.kernel_queue.run, monotonic_ns, self._calibrated)
        nursery.start_soon(self._sample_every_minute)
        nursery.start_soon(self._measure_storage)
        if self.sharing is not None:
            nursery.start_soon(self.sharing.run)

    async def calibrate(self, mountpoint: str, started: Callable[[int], None], probes: int = 80) -> int | None:
        """Measure FUSE's own share of a round trip (statfs, which the kernel never
        caches: caller's time minus the handler's) and have the shaper reply that much
        early, so the caller sees the model's latency, not the model's plus FUSE's.
        Returns the whole round trip (roundtrip.typical: None if none was measured, and
        then nothing is compensated); `started` as roundtrip.probe's."""
        try:
            with self.shaper.calibration() as handler_ns:
                # from another process: a thread of this one would wait for the GIL on return
                rtts = await roundtrip.probe(mountpoint, probes, started)
        finally:
            self._calibrated.set()
        handler = handler_ns[roundtrip.WARM_UP_PROBES :] or handler_ns
        whole = roundtrip.typical(rtts)
        if whole is None or not handler:
            return whole
        outside = whole - statistics.median_low(handler)
        self.shaper.compensate(min(max(int(outside), 0), MAX_COMPENSATION_NS))
        return whole

    async def _sample_every_minute(self) -> None:
        while True:
            await trio.sleep(SAMPLE_EVERY)
            self._sample()

    def _sample(self) -> None:
        now = _now()
        self.series.append({"wall_time": time.time(), **self.model.metrics(now)})
        if self._tracer is not None:
            self._tracer.update_metadata(metrics_per_minute=self.series, credits_at_zero=self.credits_at_zero(now))

    def credits_at_zero(self, now: float) -> list[Json]:
        """When the burst credits were spent (Model.credit_stretches), on the trace's clock:
        `from_ns`, `to_ns` (None while they still are) and the baseline that held the
        workload meanwhile; what `fusetrace report` says of them."""
        return [
            {"from_ns": round(a * 1e9), "to_ns": None if b is None else round(b * 1e9), "baseline_bytes_per_s": lo}
            for a, b, lo in self.model.credit_stretches(now)
        ]

    def _credits(self, now: float, permitted: float) -> Json:
        """For `fusetrace stats`: the lowest throughput permitted in the last minute, and
        when the credits last ran out, in seconds before now."""
        stretches = self.model.credit_stretches(now)
        last = None
        if stretches:
            start, end, baseline = stretches[-1]
            last = {
                "ago_s": now - start,
                "ended_ago_s": None if end is None else now - end,
                "held_s": (now if end is None else end) - start,
                "baseline_bytes_per_s": baseline,
            }
        return {"lowest_permitted_minute": lowest_permitted(permitted, stretches, now), "last_ran_out": last}

    async def _measure_storage(self) -> None:
        """The source's size, now and then every MEASURE_EVERY seconds.  The walk runs in
        a thread, never on the loop nor before the mount is ready (over a slow source it
        takes minutes), and is abandoned at unmount; until the first one completes, the
        model has the profile's stored_size alone.  It waits for calibrate() first (or a
        few seconds), so that the walk's share of the GIL does not skew that."""
        with trio.move_on_after(CALIBRATE_WAIT):
            await self._calibrated.wait()
        while True:
            size = await trio.to_thread.run_sync(_tree_bytes, self.source, abandon_on_cancel=True)
            if self.sharing is not None:  # the file system's size is every client's source's
                self.sharing.client.measured(size)
            else:
                self.model.set_stored_bytes(size, _now())
                self._stored = size
            self.measured = True
            await trio.sleep(MEASURE_EVERY)

    def host(self) -> Json:
        """How the host keeps up with the model since mounting: its counters, and
        host_load() over them."""
        loop = self.loop.reading()
        counters: Json = {
            **self.shaper.counters(),
            "loop_elapsed_ns": loop["elapsed_ns"],
            "loop_idle_ns": loop["idle_ns"],
        }
        queue = self.kernel_queue
        if queue is not None and queue.failed is None:
            counters["queued_ns"] = queue.wait.queued_ns
            counters["queue_samples"] = queue.samples
        return {**counters, **host_load(NO_LOAD, counters)}

    def _warnings(self, host: Json) -> list[str]:
        """What a run's readers must be told of, beside its figures (`host`, a reading of
        Emulation.host()): extending writes, a kernel queue that is no longer measured."""
        out = [note] if (note := extending_writes_note(host)) else []
        queue = self.kernel_queue
        if queue is not None and queue.failed is not None:
            out.append(f"the FUSE kernel's queue is no longer measured ({queue.failed}): {LOOP_STANDS_IN}")
        return out

    def stats(self) -> Json:
        """For `fusetrace stats`: the metrics, how the host keeps up, what held the
        operations (Shaper.gates) and what the run should be warned of."""
        host = self.host()
        now = _now()
        metrics = self.model.metrics(now)
        out = {
            "profile": self.name,
            "metrics": metrics,
            "credits": self._credits(now, metrics["PermittedThroughput"]),
            "host": host,
            "gates": self.shaper.gates(),
            "warnings": self._warnings(host),
        }
        if self.sharing is not None:
            out["shared"] = self.sharing.describe()
        return out

    def set(self, key: str, value: str) -> Json:
        fixed = _fixed_at_mount(key)
        if fixed:
            raise ControlError(fixed)
        try:
            stored = self.model.set(key, value, _now())
        except ProfileError as exc:
            raise ControlError(str(exc)) from None
        if self.sharing is not None:
            self.sharing.client.changed(key, stored)
        return {"key": key, "value": stored}

    def add_event(self, raw: object, where: str = "event") -> Json:
        """Schedule an event (emulator/events.py) `at` seconds from now on the model's
        timeline; a mistake is one line naming `where`."""
        try:
            event = parse_event(raw, where)
            fixed = next(filter(None, map(_fixed_at_mount, event.set)), "")
            if fixed:
                raise ValueError(f"{where}: {fixed}")
            number = self.model.schedule(event, _now())
        except (ValueError, ProfileError) as exc:
            raise UserError(f"{where}: {exc}" if isinstance(exc, ProfileError) else str(exc)) from None
        event_id = f"e{next(self._event_ids)}"
        described = {"id": event_id, **event.describe(), "wall_time": time.time() + event.at}
        self._events.append(described)
        self._numbers[event_id] = number
        return described

    def cancel_events(self, ids: list[str] | None) -> list[str]:
        """Call off the events named (all when None) that have not happened yet (a stall
        in force: from now on); the ids called off.  An unknown id is one line."""
        known = {e["id"] for e in self._events}
        unknown = [i for i in ids or [] if i not in known]
        if unknown:
            raise UserError(f"no event {unknown[0]!r} (events: {', '.join(sorted(known)) or 'none'})")
        off = []
        for e in self._events:
            if (
                (ids is None or e["id"] in ids)
                and not e.get("called_off")
                and self.model.unschedule(self._numbers[e["id"]], _now())
            ):
                e["called_off"] = time.time()
                off.append(e["id"])
        return off

    def reset(self) -> list[str]:
        """The emulated file system as it was mounted: a model built afresh from the
        mount's parameters (burst credits, throughput and IOPS history, keys `set` and
        events changed, latency samples from the seed again) behind a new NFS client (its
        caches and dirty data dropped), and no event scheduled.  Returns the events it
        called off (those still to happen).  Requests in flight keep the times the old
        model gave them.  The files are still there, so the size the last walk measured
        is the new model's as a first walk's is at mount (taken at its next re-measure)."""
        if self.sharing is not None:  # the file system's state is every client's, in Redis
            raise UserError("reset: a shared file system (--shared) is every mount's: unmount them all to reset it")
        called_off = self.cancel_events(None)
        now = _now()
        self.model = Model(self.mount_params, now)
        if self._stored is not None:
            self.model.set_stored_bytes(self._stored, now)
        self.shaper.serve(self.model)
        self._events, self._numbers = [], {}
        return called_off

    def events(self) -> list[Json]:
        """The events scheduled since mounting, each with the wall time it happens at, and a
        `set` that a later change made inconsistent at its instant (not applied) with why
        ("refused")."""
        refused = self.model.refused_events
        return [{**e, "refused": refused[n]} if (n := self._numbers[e["id"]]) in refused else e for e in self._events]

    def prometheus_metrics(self) -> dict[str, float]:
        """The model's CloudWatch-named metrics and the host's counters at one instant,
        for prometheus.METRICS; on the loop's thread (prometheus.EmulationCollector runs it there)."""
        host = self.host()
        return {
            **self.model.metrics(_now()),
            **host,
            "loop_busy_ns": host["loop_elapsed_ns"] - host["loop_idle_ns"],
            **self._counters(),
        }

    def final_metadata(self) -> Json:
        self._sample()
        host = self.host()
        out = {
            "metrics_per_minute": self.series,
            "credits_at_zero": self.credits_at_zero(_now()),
            "host_load": host,
            "emulation": self.describe(),
            "warnings": self._warnings(host),
        }
        if self.sharing is not None:
            out["shared"] = self.sharing.describe()
        return out


def _no_counters() -> dict[str, int]:
    """The server's own counters for Prometheus, until it hands them in (Emulation.start)."""
    return {"faults_fired": 0, "open_descriptors": 0, "inode_descriptors": 0, "opens_refused": 0}
