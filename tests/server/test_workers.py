"""The worker threads: results come back to trio through an eventfd, with nothing of a
job kept by its thread afterwards and no large buffer allocated per hand-off; then a real
mount whose writes all go through the workers (as over NFS), whose 1 MiB buffers are
reused rather than faulted in fresh."""

import errno
import gc
import os
import socket
import threading
import time
import tracemalloc
import weakref

import pytest
import trio

from fusetrace.server.workers import Workers


@pytest.fixture
def workers():
    pool = Workers(4)
    yield pool
    pool.close()


def test_results_and_errors_come_back_to_each_of_several_runs(workers):
    """One pool serves trio runs in turn (the benchmarks' and tests' trio.run calls);
    an OSError keeps its errno."""

    async def main(n: int) -> list:
        out: list = []
        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(lambda i=i: _collect(out, workers.run(pow, i, 2)))
        return sorted(out)

    async def _collect(out: list, call) -> None:
        out.append(await call)

    for _ in range(3):
        assert trio.run(main, 50) == [i * i for i in range(50)]

    async def fails() -> int:
        with pytest.raises(OSError) as caught:
            await workers.run(os.close, -1)
        return caught.value.errno

    assert trio.run(fails) == errno.EBADF


def test_two_runs_at_once_each_get_their_results(workers):
    """Two trio runs in two threads share the pool: each run's results wake its own
    tasks (with one eventfd for both, a run could take the other's wake-up)."""
    results: dict = {}

    def runner(name: str) -> None:
        async def main() -> str:
            for i in range(500):
                assert await workers.run(pow, i, 2) == i * i
                if i % 10 == 0:
                    await trio.sleep(0.0005)
            return "ok"

        try:
            results[name] = trio.run(main)
        except BaseException as exc:  # reported by the assertion below
            results[name] = repr(exc)

    threads = [threading.Thread(target=runner, args=(name,), daemon=True) for name in "AB"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)  # a lost wake-up leaves a task waiting for good: no cancel reaches it
    assert results == {"A": "ok", "B": "ok"}


def test_closing_twice_is_harmless():
    pool = Workers(2)
    trio.run(pool.run, id, None)
    pool.close()
    pool.close()


class _Buffer:
    """Stands in for a write's buffer (bytes cannot be weakly referenced)."""


def test_a_thread_keeps_nothing_of_a_job_once_its_result_is_back(workers):
    """The thread that ran a job drops its arguments before it reports: a thread that
    kept them until its next job kept each write's buffer alive, so that the next write's
    buffer went to fresh memory."""

    async def main() -> bool:
        buf = _Buffer()
        gone = weakref.ref(buf)
        await workers.run(id, buf)
        del buf
        gc.collect()
        return gone() is None

    assert trio.run(main)


def test_a_hand_off_allocates_no_large_buffer(workers):
    """trio's run_sync_soon wakes the loop through a socket it drains with
    recv(65536): 64 KiB allocated twice per hand-off, which split the freed buffer of
    the last large write.  The eventfd's read allocates nothing of that size."""

    async def main() -> int:
        await workers.run(id, None)  # the run's result task, started
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            for _ in range(200):
                await workers.run(id, None)
            return tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()

    assert trio.run(main) < 32 << 10


def _minor_faults(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def test_large_writes_through_the_workers_reuse_their_buffers(mount):
    """64 writes of 1 MiB through a mount whose calls all run in the workers (as on an
    NFS source): each write's buffer in fresh memory is 16,384 pages faulted in (23,215
    before the workers let go of them); reused, about 1,000 (the request tasks' own
    buffers among them)."""
    m = mount("--inline", "never", "--no-xattrs")
    pid = m.server_pid()
    before = _minor_faults(pid)
    block = os.urandom(1 << 20)
    fd = os.open(m.mountpoint / "seq.dat", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for i in range(64):
            os.pwrite(fd, block, i << 20)
    finally:
        os.close(fd)
    assert (m.source / "seq.dat").stat().st_size == 64 << 20
    assert _minor_faults(pid) - before < 64 * 256 // 4


def test_closing_inside_a_run_ends_its_hand_back_task():
    """The tests close the pool inside trio.run: results reported by then reach their
    tasks, and the eventfd's number, once closed, is free for the run to wait on again
    (trio still held it as the hand-back task's, and a new descriptor given that number
    could not be waited on)."""
    pool = Workers(4)

    async def main() -> bytes:
        async with trio.open_nursery() as nursery:
            for i in range(64):
                nursery.start_soon(pool.run, pow, i, 2)
        pool.close()
        a, b = socket.socketpair()
        with a, b:
            b.send(b"x")
            with trio.fail_after(10):
                await trio.lowlevel.wait_readable(a)
            return a.recv(1)

    assert trio.run(main) == b"x"


def test_a_system_task_owed_a_result_when_the_main_task_returns_gets_it(workers):
    """trio cancels system tasks once the main task returns; the hand-back task first
    hands back what another system task is still owed, so that the run can end."""
    got: list = []

    async def waits() -> None:
        got.append(await workers.run(lambda: time.sleep(0.3) or "slept"))

    async def main() -> None:
        trio.lowlevel.spawn_system_task(waits)

    runner = threading.Thread(target=trio.run, args=(main,), daemon=True)
    runner.start()
    runner.join(timeout=30)
    assert not runner.is_alive() and got == ["slept"]
