"""The request path in process, for the tests that drive handlers without a mount:
a caller's context, a quick profile, and `serve`, which runs a body against Operations
with a real shaper, timer, workers and trace writer."""

import os
from time import monotonic_ns

import pyarrow.parquet as pq
import trio

from fusetrace.emulator.model import Model
from fusetrace.request import Request
from fusetrace.server.handlers import Operations
from fusetrace.server.inline import InlinePolicy
from fusetrace.server.workers import Workers
from fusetrace.shaping.profile import load_params
from fusetrace.shaping.shaper import Shaper, Ticket
from fusetrace.shaping.timer import PreciseTimer
from fusetrace.trace.writer import TraceWriter

QUICK = [
    "meta_read_latency_ms=0.2",
    "meta_read_latency_p99_ms=0.4",
    "meta_write_latency_ms=0.2",
    "meta_write_latency_p99_ms=0.4",
    "read_latency_ms=0.2",
    "read_latency_p99_ms=0.4",
    "write_latency_ms=0.2",
    "write_latency_p99_ms=0.4",
    "commit_latency_ms=0.2",
    "commit_latency_p99_ms=0.4",
    "dir_write_hold_ms=0.2",
]


class Caller:
    """A request's context, as pyfuse3 gives it: the calling process and its user."""

    pid = os.getpid()
    uid = os.getuid()
    gid = os.getgid()


CTX = Caller()


class SeenShaper(Shaper):
    """The real shaper, keeping each request it was handed."""

    def __init__(self, model, timer):
        super().__init__(model, timer)
        self.requests: list[Request] = []

    def admit(self, request: Request, start_ns: int, uid: int = 0) -> Ticket | None:
        self.requests.append(request)
        return super().admit(request, start_ns, uid)


def serve(tmp_path, body, *, threshold_us: float = 50.0) -> tuple[list[Request], list[dict]]:
    """Run `body(ops)` on a trio loop against Operations over tmp_path/src, shaped and
    traced; return the requests the shaper saw and the trace's records in order."""
    source = tmp_path / "src"
    source.mkdir(exist_ok=True)
    trace = tmp_path / "trace"

    async def main() -> list[Request]:
        timer = PreciseTimer()
        shaper = SeenShaper(Model(load_params("efs-bursting", QUICK), monotonic_ns() / 1e9), timer)
        workers = Workers(4)
        tracer = TraceWriter(trace, {}, flush_interval=3600)
        ops = Operations(str(source), workers=workers, inline=InlinePolicy(threshold_us), tracer=tracer, shaper=shaper)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(timer.run)
                await body(ops)
                nursery.cancel_scope.cancel()
        finally:
            ops.close()
            workers.close()
            tracer.close()
            timer.close()
        return shaper.requests

    requests = trio.run(main)
    rows = sorted(pq.read_table(trace).to_pylist(), key=lambda r: r["start_ns"]) if any(trace.glob("*.parquet")) else []
    return requests, rows
