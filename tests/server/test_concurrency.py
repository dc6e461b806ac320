"""Concurrency through the mount: blocking syscalls below must overlap.

The mount's source is a slow FUSE file system of the tests' own (tests/support/slow_fs.py),
every read of which takes a fixed delay, as a network file system's round trips do;
the claims are ratios and overlaps measured in one run.
"""

import os
import threading
import time

import duckdb

DELAY_MS = 20
BLOCK = 4096


def _read_all(fd, offsets):
    for off in offsets:
        assert len(os.pread(fd, BLOCK, off)) == BLOCK


def _run_readers(path, offsets, nthreads):
    """Seconds for nthreads readers, each on its own descriptor opened beforehand
    (O_DIRECT: direct_io, so every pread reaches the server), to read all offsets."""
    fds = [os.open(path, os.O_RDONLY | os.O_DIRECT) for _ in range(nthreads)]
    threads = [threading.Thread(target=_read_all, args=(fd, offsets[i::nthreads])) for i, fd in enumerate(fds)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    for fd in fds:
        os.close(fd)
    return elapsed


def _peak_reads(trace) -> tuple[int, int]:
    """(reads in the trace, the most of them in flight at one instant: a sweep over their
    start and end events)."""
    reads = duckdb.sql(f"select start_ns, start_ns + dur_ns as end_ns from '{trace}/*.parquet' where op = 'read'")
    rows = reads.fetchall()
    events = sorted([(s, 1) for s, _ in rows] + [(e, -1) for _, e in rows])
    in_flight = peak = 0
    for _, step in events:
        in_flight += step
        peak = max(peak, in_flight)
    return len(rows), peak


def test_sixteen_readers_overlap_below_the_mount(slow_mount):
    """Sixteen readers of a file whose every read blocks 20 ms below the mount: their reads
    are in flight together (the trace's own times), and the run takes a fraction of one
    reader's (a loose bound: the host's scheduling is not the claim)."""
    m = slow_mount(DELAY_MS, 256 * BLOCK, trace=True)
    path = m.mountpoint / "f"
    offsets = [i * BLOCK for i in range(128)]
    serial = _run_readers(path, offsets, 1)
    parallel = _run_readers(path, offsets, 16)
    m.unmount()
    count, peak = _peak_reads(m.trace)
    assert count == 256 and peak >= 12, f"{count} reads, at most {peak} at once"
    assert serial / parallel >= 3, f"serial {serial:.3f} s, 16 readers {parallel:.3f} s"


def test_sixty_four_requests_in_flight(slow_mount):
    m = slow_mount(300, 64 * BLOCK, trace=True)
    path = m.mountpoint / "f"
    barrier = threading.Barrier(64)

    def read_one(i):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        barrier.wait()
        os.pread(fd, BLOCK, i * BLOCK)
        os.close(fd)

    threads = [threading.Thread(target=read_one, args=(i,)) for i in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    m.unmount()
    assert _peak_reads(m.trace) == (64, 64)
