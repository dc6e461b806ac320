"""Waiting for a child process (fio, a scenario's command) with a progress callback."""

import subprocess
import time


def wait(proc: subprocess.Popen, on_tick=None, kill=None) -> tuple[str, str]:
    """proc.communicate(), calling on_tick(elapsed) about every 0.2 s meanwhile.  However
    the wait ends (the child exits, an error, Ctrl-C) the child does not outlive it:
    kill(proc) if given (e.g. for its whole process group), else proc.kill()."""
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
            (kill or subprocess.Popen.kill)(proc)
            proc.wait()
