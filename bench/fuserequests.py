"""The FUSE requests the kernel sends to one mount while a block runs, per kind, from the kernel's
`fuse:fuse_request_send` and `fuse:fuse_request_end` tracepoints.

    with FuseRequests(mnt) as seen:
        run_the_workload()
    seen.kinds  # {"GETXATTR": Kind(count=21339, mean_us=41.2), ...}

The count is what the kernel asked, whoever answers: a C server and fusetrace are counted alike,
and nothing of the server under test runs for it.  The events go to a private ftrace instance
(`/sys/kernel/tracing/instances/NAME`, created here and removed on the way out, error or not), so
the global tracing state is never touched and another user of ftrace is not disturbed.  A filter
on the event's `connection` field (the mount's device number, as the kernel encodes a dev_t:
major << 20 | minor) keeps other FUSE mounts' requests, of other users of a shared host, out of
the buffer.  Events the buffer could not hold are counted (per-CPU `overrun` and `dropped
events`) and reported as `lost`, never silently.  Needs root and a kernel with the fuse
tracepoints (6.x); hist triggers are not needed.
"""

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

TRACING = Path("/sys/kernel/tracing")
EVENTS = ("fuse_request_send", "fuse_request_end")
BUFFER_KB = 65536  # per CPU: ~110 bytes an event, room for ~600,000 a CPU
# "  tar-1234 [001] ..... 1234.567890: fuse_request_send: connection 52 req 8 opcode 22 (FUSE_GETXATTR) len 64"
LINE = re.compile(
    r" (\d+\.\d+): fuse_request_(send|end): connection (\d+) req (\d+) (?:opcode \d+ \((?:FUSE_)?(\w+)\) )?len"
)


class TracingUnavailable(Exception):
    pass


@dataclass
class Kind:
    count: int = 0
    mean_us: float | None = None  # send to end, over the requests that got a reply in the window


@dataclass
class Seen:
    kinds: dict[str, Kind] = field(default_factory=dict)
    lost: int = 0  # events the buffer dropped or overwrote: the counts are then too low

    @property
    def total(self) -> int:
        return sum(k.count for k in self.kinds.values())


def connection_of(mnt: str) -> int:
    """The `connection` field of `mnt`'s requests: its device number as the kernel encodes it."""
    dev = os.stat(mnt).st_dev
    return (os.major(dev) << 20) | os.minor(dev)


def available() -> str | None:
    """Why the tracepoints cannot be used here, or None."""
    if os.geteuid() != 0:
        return "needs root"
    if not (TRACING / "events" / "fuse" / "fuse_request_send").is_dir():
        return f"no fuse tracepoints under {TRACING}/events (tracefs not mounted, or a kernel without them)"
    return None


class FuseRequests:
    """Counts the requests sent to the mount at `mnt` (already mounted) while the block runs."""

    def __init__(self, mnt: str):
        self.connection = connection_of(mnt)
        self.dir = TRACING / "instances" / f"fusetrace-bench-{os.getpid()}"
        self.seen = Seen()

    def __enter__(self) -> Seen:
        why = available()
        if why:
            raise TracingUnavailable(why)
        self.dir.mkdir()
        try:
            (self.dir / "tracing_on").write_text("0")
            (self.dir / "buffer_size_kb").write_text(str(BUFFER_KB))
            for event in EVENTS:
                ev = self.dir / "events" / "fuse" / event
                (ev / "filter").write_text(f"connection == {self.connection}")
                (ev / "enable").write_text("1")
            (self.dir / "tracing_on").write_text("1")
        except BaseException:
            self._remove()
            raise
        return self.seen

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            (self.dir / "tracing_on").write_text("0")
            if kind is None:
                self._count()
        finally:
            self._remove()

    def _count(self) -> None:
        sent: dict[int, tuple[str, float]] = {}
        waited: dict[str, list[float]] = {}
        with open(self.dir / "trace") as f:
            for line in f:
                m = LINE.search(line)
                if m is None or int(m[3]) != self.connection:
                    continue
                ts, what, unique, name = float(m[1]), m[2], int(m[4]), m[5]
                if what == "send":
                    self.seen.kinds.setdefault(name, Kind()).count += 1
                    sent[unique] = (name, ts)
                elif unique in sent:
                    name, began = sent.pop(unique)
                    waited.setdefault(name, []).append(ts - began)
        for name, times in waited.items():
            self.seen.kinds[name].mean_us = sum(times) / len(times) * 1e6
        for stats in (self.dir / "per_cpu").glob("cpu*/stats"):
            for line in stats.read_text().splitlines():
                key, _, value = line.partition(":")
                if key in ("overrun", "dropped events"):
                    self.seen.lost += int(value)

    def _remove(self) -> None:
        for event in EVENTS:
            try:
                (self.dir / "events" / "fuse" / event / "enable").write_text("0")
            except OSError:
                pass
        try:
            self.dir.rmdir()  # tracefs removes an instance's files with it
        except FileNotFoundError:
            pass
