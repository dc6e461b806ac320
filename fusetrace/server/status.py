"""The running server's answers on the control socket: one method a command (stats, held,
set, fault and event rules, reset); the asking side is fusetrace/control_client.py.
"""

from collections.abc import Awaitable, Callable
from time import monotonic_ns
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import ControlError, UserError
from . import fuseread
from .faulting import FaultStage
from .handlers import Operations

if TYPE_CHECKING:  # a mount that does not emulate never imports the emulator
    from ..shaping.emulation import Emulation
    from ..trace.writer import TraceWriter

Json = dict[str, Any]  # a control request or answer, as JSON has it


class FaultsFile(NamedTuple):
    """The mount's --faults file as read at mount: its rules and events are put in force
    then, and again by `reset`."""

    path: str | None
    rules: list[Json]
    events: list[tuple[int, Json]]  # the model's events, with their numbers in the file
    crashes: list[float]  # crash events (durable.py): seconds from the mount, once

    def add_rules(self, stage: FaultStage) -> list[str]:
        """The file's rules in force from now (their windows and counts start now); their ids."""
        return [stage.add(raw, f"--faults {self.path}: rule {i}")["id"] for i, raw in enumerate(self.rules, 1)]

    def schedule_events(self, emulation: "Emulation") -> list[str]:
        """The file's events on the emulated file system's timeline, `at` counted from now; their ids."""
        return [emulation.add_event(raw, f"--faults {self.path}: event {i}")["id"] for i, raw in self.events]


NO_FAULTS_FILE = FaultsFile(None, [], [], [])


class Status:
    """What `fusetrace stats` and `fusetrace set` reach through the control socket."""

    def __init__(
        self,
        ops: Operations,
        tracer: "TraceWriter | None",
        emulation: "Emulation | None",
        reads: fuseread.ReadWaits | None,
        faults_file: FaultsFile = NO_FAULTS_FILE,
    ) -> None:
        self.ops, self.tracer, self.emulation, self.reads = ops, tracer, emulation, reads
        self.faults_file = faults_file

    def stats(self, _request: Json) -> Json:
        out: Json = dict(self.ops.stats())  # inodes, open files, inode descriptors, where calls run
        out["fuse_reads"] = self.reads.stats() if self.reads is not None else None
        if self.tracer is not None:
            out["trace"] = self.tracer.stats()  # written, queued, dropped, lost, write errors
        if self.emulation is not None:
            out.update(self.emulation.stats())
        faults = self.ops.pipeline.faults
        out["faults"] = {"rules": faults.listing(), **faults.counters()}
        if self.ops.durability is not None:  # armed for a crash
            out["faults"]["crashes"] = self.ops.durability.crashes
        if self.ops.pipeline.counts is not None:  # counted where metrics are served
            from ..shaping.opmetrics import figures

            out["operations"] = figures(self.ops.pipeline.counts)
        return out

    def counters(self) -> dict[str, int]:
        """The server's own figures for Prometheus (Emulation.start): faults fired, descriptors."""
        ops = self.ops
        return {
            "faults_fired": ops.pipeline.faults.fired,
            "open_descriptors": ops.fds.open,
            "inode_descriptors": ops.inodes.stats()["held"],
            "opens_refused": ops.fds.refused,
        }

    def set(self, request: Json) -> Json:
        if self.emulation is None:
            raise ControlError("this mount does not emulate: nothing to set")
        return self.emulation.set(request["key"], request["value"])

    def fault_add(self, request: Json) -> Json:
        try:
            return {"rule": self.ops.pipeline.fault_stage.add(request["rule"])}
        except UserError as exc:
            raise ControlError(str(exc)) from None

    def fault_list(self, _request: Json) -> Json:
        events = self.emulation.events() if self.emulation is not None else []
        return {"rules": self.ops.pipeline.faults.listing(), "events": events, **self.ops.pipeline.faults.counters()}

    def fault_clear(self, request: Json) -> Json:
        ids = request.get("ids")
        if ids is not None and (not isinstance(ids, list) or not all(isinstance(i, str) for i in ids)):
            raise ControlError("fault clear: ids must be a list of rule ids")
        try:
            return {"removed": self.ops.pipeline.fault_stage.clear(ids)}
        except UserError as exc:
            raise ControlError(str(exc)) from None

    def event_add(self, request: Json) -> Json:
        if self.emulation is None:
            raise ControlError("this mount does not emulate: events script the emulated file system's timeline")
        try:
            return {"event": self.emulation.add_event(request["event"], "fault event")}
        except UserError as exc:
            raise ControlError(str(exc)) from None

    def event_clear(self, request: Json) -> Json:
        ids = request.get("ids")
        if ids is not None and (not isinstance(ids, list) or not all(isinstance(i, str) for i in ids)):
            raise ControlError("fault clear: ids must be a list of event ids")
        if self.emulation is None:
            raise ControlError("this mount does not emulate: it has no events")
        try:
            return {"removed": self.emulation.cancel_events(ids)}
        except UserError as exc:
            raise ControlError(f"fault clear: {exc}") from None

    async def crash(self, _request: Json) -> Json:
        try:
            return {"crashed": await self.ops.crash()}
        except UserError as exc:
            raise ControlError(str(exc)) from None

    def reset(self, _request: Json) -> Json:
        """The mount as it was mounted, without remounting (the pytest plugin's wider
        fixtures, between tests): the emulated file system afresh (Emulation.reset), every
        fault rule cleared (the requests its stalls hold go on) and what rules left behind,
        then the faults file's rules and events in force again, counted from now.  The
        files stay.  `at_ns`: the instant, on the trace's clock (records that start from
        it on are after the reset)."""
        at_ns = monotonic_ns()
        emulation = self.emulation
        try:
            called_off = emulation.reset() if emulation is not None else []  # refused (--shared): nothing changed
        except UserError as exc:
            raise ControlError(str(exc)) from None
        stage = self.ops.pipeline.fault_stage
        cleared = stage.clear(None)
        return {
            "at_ns": at_ns,
            "profile": emulation.name if emulation is not None else None,
            "rules_cleared": cleared,
            "events_called_off": called_off,
            "rules_again": self.faults_file.add_rules(stage),
            "events_again": self.faults_file.schedule_events(emulation) if emulation is not None else [],
        }

    def held(self, _request: Json) -> Json:
        return {"held": self.ops.pipeline.holds.held_long(monotonic_ns())}

    def handlers(self) -> dict[str, Callable[[Json], Json | Awaitable[Json]]]:
        return {
            "stats": self.stats,
            "held": self.held,
            "set": self.set,
            "fault_add": self.fault_add,
            "fault_list": self.fault_list,
            "fault_clear": self.fault_clear,
            "event_add": self.event_add,
            "event_clear": self.event_clear,
            "crash": self.crash,
            "reset": self.reset,
        }
