"""Waiting for a child process (fio, a scenario's command) with a progress callback."""

import os
import signal
import subprocess
import time

from ..processes import descendants


def wait(proc: subprocess.Popen, on_tick=None, kill=None) -> tuple[str, str]:
    """proc.communicate(), calling on_tick(elapsed) about every 0.2 s meanwhile.  However
    the wait ends (the child exits, an error, Ctrl-C) the child does not outlive it:
    kill(proc) if given (e.g. for its whole process group), else kill_tree(proc): the child
    and every process below it."""
    begin = time.monotonic()
    try:
        while True:
            try:
                return proc.communicate(timeout=0.2)
            except subprocess.TimeoutExpired:
                if on_tick:
                    on_tick(time.monotonic() - begin)
    finally:
        if proc.poll() is None:
            (kill or kill_tree)(proc)
            proc.wait()


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL a child and every process below it (fio's job processes outlive fio)."""
    for pid in [*descendants(proc.pid), proc.pid]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
