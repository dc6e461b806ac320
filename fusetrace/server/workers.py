"""A lean thread pool for blocking syscalls, driven from trio.

trio.to_thread.run_sync costs ~350 us per call on small VMs (a thread-cache
handoff, a limiter and a wakeup each time).  Here a fixed set of threads pull
jobs from one queue and hand results back with run_sync_soon, so under load
the threads never sleep between jobs and the loop's wakeups coalesce.
"""

import queue
import threading

import outcome
import trio


class Workers:
    def __init__(self, nthreads: int):
        if nthreads < 1:
            raise ValueError("need at least one worker thread")
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._serve, name=f"fusetrace-io-{i}", daemon=True)
            for i in range(nthreads)
        ]
        for t in self._threads:
            t.start()

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, args, task, token = job
            result = outcome.capture(fn, *args)
            try:
                token.run_sync_soon(trio.lowlevel.reschedule, task, result)
            except trio.RunFinishedError:
                pass

    async def run(self, fn, *args):
        """Run fn(*args) in a worker thread; return its result or raise its exception.

        Not cancellable once submitted: a syscall in flight cannot be taken back,
        and the kernel is owed a reply for it.
        """
        task = trio.lowlevel.current_task()
        self._jobs.put((fn, args, task, trio.lowlevel.current_trio_token()))
        return await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)

    def close(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)
        for t in self._threads:
            t.join()
