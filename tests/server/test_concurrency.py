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


def test_sixteen_readers_ten_times_faster_than_one(slow_mount):
    m = slow_mount(DELAY_MS, 256 * BLOCK)
    path = m.mountpoint / "f"
    offsets = [i * BLOCK for i in range(128)]
    serial = _run_readers(path, offsets, 1)
    parallel = _run_readers(path, offsets, 16)
    assert serial / parallel >= 10, f"serial {serial:.3f} s, 16 readers {parallel:.3f} s"


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
    reads = duckdb.sql(
        f"select start_ns, start_ns + dur_ns as end_ns from '{m.trace}/*.parquet' where op = 'read'"
    ).fetchall()
    assert len(reads) == 64
    # The most reads in flight at one instant: sweep over start and end events.
    events = sorted([(s, 1) for s, _ in reads] + [(e, -1) for _, e in reads])
    in_flight = peak = 0
    for _, step in events:
        in_flight += step
        peak = max(peak, in_flight)
    assert peak == 64
