"""A write on a mount that only traces skips the Request and the pipeline's other stages
(Pipeline.traced_write): its record must be the one the whole pipeline writes."""

import errno
import os

import pyarrow.parquet as pq
import pytest
import trio
from pyfuse3 import FUSEError

from fusetrace.server.handlers import Operations
from fusetrace.server.inline import InlinePolicy
from fusetrace.server.inodes import ROOT
from fusetrace.server.workers import Workers
from fusetrace.trace.capture import Capture
from fusetrace.trace.writer import TraceWriter


class Caller:
    pid = os.getpid()
    uid = os.getuid()
    gid = os.getgid()


CTX = Caller()
TIMES = ("start_ns", "dur_ns", "time")


def _writes(source, trace, capture, inline_us):
    """The records of writes through Operations, their handles checked and left out:
    buffered ones, one that extends the file, one through a read-only handle (EBADF); and
    whether the lone tracer's path took them."""
    (source / "f").write_bytes(b"x" * 10_000)

    async def main():
        workers = Workers(2)
        tracer = TraceWriter(trace, {}, flush_interval=3600, capture=capture)
        ops = Operations(str(source), workers=workers, inline=InlinePolicy(inline_us), tracer=tracer)
        try:
            entry = await ops.lookup(ROOT, b"f", CTX)
            w = await ops.open(entry.st_ino, os.O_WRONLY, CTX)
            assert await ops.write(w.fh, 0, b"a" * 4096) == 4096
            assert await ops.write(w.fh, 9_000, b"b" * 5_000) == 5_000
            r = await ops.open(entry.st_ino, os.O_RDONLY, CTX)
            with pytest.raises(FUSEError) as failed:
                await ops.write(r.fh, 0, b"c")
            assert failed.value.errno == errno.EBADF
            assert tracer.dropped == 0
            return ops.pipeline.lone_tracer, [w.fh, w.fh, r.fh]
        finally:
            ops.close()
            workers.close()
            tracer.close()

    lone, handles = trio.run(main)
    rows = [r for r in pq.read_table(trace).drop_columns(list(TIMES)).to_pylist() if r["op"] == "write"]
    assert [r.pop("fh") for r in rows] == handles  # the one column that differs between two runs but for times
    return lone, rows


@pytest.mark.parametrize("inline_us", [100.0, 0.0], ids=["on the loop", "in a worker"])
def test_a_lone_tracers_write_records_what_the_whole_pipeline_records(tmp_path, inline_us):
    source = tmp_path / "src"
    source.mkdir()
    lone, fast = _writes(source, tmp_path / "ta", None, inline_us)
    # a capture that keeps everything turns the lone tracer's path off, and changes nothing else
    whole, full = _writes(source, tmp_path / "tb", Capture({}, {}, seed=1), inline_us)
    assert lone and not whole
    assert len(fast) == 3
    assert fast == full
    assert [(r["offset"], r["size"], r["result"], r["errno"], r["kind"]) for r in fast] == [
        (0, 4096, 4096, 0, "buffered"),
        (9_000, 5_000, 5_000, 0, "buffered"),
        (0, 1, 0, errno.EBADF, "buffered"),
    ]
