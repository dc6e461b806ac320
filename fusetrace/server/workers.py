"""A lean thread pool for blocking syscalls, driven from trio.

trio.to_thread.run_sync costs ~350 us per call on small VMs (a thread-cache
handoff, a limiter and a wakeup each time).  Here a fixed set of threads pull
jobs from one queue, so under load the threads never sleep between jobs.

Results come back through a queue of our own and an eventfd, read by one task of
the trio run, not through trio's run_sync_soon: that wakes the loop through trio's
wake-up socket, which trio drains with recv(65536), allocating 64 KiB twice per
hand-off.  Those allocations split whatever large block malloc had free, typically
the buffer of the last large write, so the next write's buffer went to fresh pages;
so did it while the thread that wrote the last one still held it (see _one).
Through the workers alone (`--inline never`, as on an NFS source), 256 MiB written
in 1 MiB calls faulted in 28,000-34,000 pages, and the server spent 0.28-0.34 s of
CPU at 573-701 MiB/s; now 1,260 pages, 0.13-0.15 s and 1,067-1,164 MiB/s.  An
eventfd's read allocates nothing.
"""

import collections
import os
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import outcome
import trio

T = TypeVar("T")
Job = tuple[Callable[..., Any], tuple[Any, ...], trio.lowlevel.Task, "_Run"]


class _Run:
    """The results owed to tasks of one trio run, and its eventfd (a Workers may serve
    several runs, in turn or at once from several threads: the tests' and benchmarks'
    trio.run calls).  The eventfd is closed with the Workers, once no thread can write
    it: a thread may still be writing it as the run ends."""

    __slots__ = ("done", "owed", "ready")

    def __init__(self) -> None:
        # (task, outcome), appended by the threads
        self.done: collections.deque[tuple[trio.lowlevel.Task, outcome.Outcome[Any]]] = collections.deque()
        self.ready = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)  # written once per result
        self.owed = 0  # jobs submitted whose result has not been handed back (the loop's)


class Workers:
    def __init__(self, nthreads: int):
        if nthreads < 1:
            raise ValueError("need at least one worker thread")
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._runs: dict[trio.lowlevel.TrioToken, _Run] = {}
        self._closed = False
        self._threads = [
            threading.Thread(target=self._serve, name=f"fusetrace-io-{i}", daemon=True) for i in range(nthreads)
        ]
        for t in self._threads:
            t.start()

    def _serve(self) -> None:
        while self._one():
            pass

    def _one(self) -> bool:
        """Take a job, run it and report its result; False once told to stop.  The job's
        references go before its result is reported: a thread that kept them until its
        next job (its loop's variables) kept a write's buffer alive, so that the next
        write's buffer could not reuse its memory."""
        job = self._jobs.get()
        if job is None:
            return False
        fn, args, task, run = job
        del job
        result = outcome.capture(fn, *args)
        del fn, args
        run.done.append((task, result))  # before the eventfd says it is there
        os.eventfd_write(run.ready, 1)
        return True

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run fn(*args) in a worker thread; return its result or raise its exception.

        Not cancellable once submitted: a syscall in flight cannot be taken back,
        and the kernel is owed a reply for it.
        """
        run = self._current_run()
        run.owed += 1
        self._jobs.put((fn, args, trio.lowlevel.current_task(), run))
        result: T = await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)
        return result

    def _current_run(self) -> _Run:
        """This trio run's results, and the task that hands them out, started with the
        run's first job (a system task: it ends with the run)."""
        if self._closed:
            raise RuntimeError("the worker threads are closed")
        token = trio.lowlevel.current_trio_token()
        run = self._runs.get(token)
        if run is None:
            run = self._runs[token] = _Run()
            trio.lowlevel.spawn_system_task(self._hand_back, run, name="fusetrace-io-results")
        return run

    async def _hand_back(self, run: _Run) -> None:
        """Wake each task whose job is done, as the threads report them.  trio cancels
        system tasks once the main task returns, when another system task may still be
        owed a result: that is handed back first.  close() inside the run ends it."""
        try:
            await self._hand_back_until(run, lambda: False)
        except trio.Cancelled:
            with trio.CancelScope(shield=True):
                await self._hand_back_until(run, lambda: not run.owed)
            raise
        except trio.ClosedResourceError:
            pass

    async def _hand_back_until(self, run: _Run, enough: Callable[[], bool]) -> None:
        """A thread appends its result before it writes the eventfd, so every result is
        either taken in this pass or leaves the eventfd readable for the next."""
        ready = run.ready
        while not enough():
            await trio.lowlevel.wait_readable(ready)
            if self._closed:
                return
            try:
                os.eventfd_read(ready)
            except BlockingIOError:
                pass  # taken by an earlier pass along with its result
            self._hand_out(run)

    @staticmethod
    def _hand_out(run: _Run) -> None:
        """Wake every task whose result a thread has reported."""
        done = run.done
        while done:
            task, result = done.popleft()
            run.owed -= 1
            trio.lowlevel.reschedule(task, result)

    def close(self) -> None:
        """Stop the threads (each finishes its job first) and close the runs' eventfds;
        once is enough (later calls do nothing).  Called inside a trio run (the tests
        do), it first tells that run's hand-back task its eventfd is going."""
        if self._closed:
            return
        for _ in self._threads:
            self._jobs.put(None)
        for t in self._threads:
            t.join()
        self._closed = True
        try:
            here = trio.lowlevel.current_trio_token()
        except RuntimeError:
            here = None  # outside any run
        for token, run in self._runs.items():
            if token is here:
                self._hand_out(run)  # reported, not yet handed back: the hand-back task is ending
                trio.lowlevel.notify_closing(run.ready)
            os.close(run.ready)
        self._runs.clear()
