"""Waiting for a child process (fio, a scenario's command) with a progress callback."""

import os
import signal
import subprocess
import time


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


def proc_state(pid: int) -> str | None:
    """The state letter of process `pid` (R, S, D, T stopped, t traced...), None when it
    has exited (a zombie, not yet reaped by its parent, has exited)."""
    fields = _stat_fields(pid)
    return None if fields is None or fields[0] in ("Z", "X") else fields[0]


def stopped(pid: int) -> bool:
    return proc_state(pid) in ("T", "t")


def progress(pid: int) -> tuple[int, ...]:
    """Counters that move while process `pid` works: its CPU time (all threads) and the
    characters it has read and written."""
    fields = _stat_fields(pid)
    cpu = (int(fields[11]), int(fields[12])) if fields else ()
    try:
        with open(f"/proc/{pid}/io") as f:
            io = tuple(int(line.split()[1]) for line in f if line.startswith(("rchar", "wchar")))
    except (OSError, ValueError, IndexError):
        io = ()
    return cpu + io


def is_fusetrace(pid) -> bool:
    """Whether `pid` (a recorded server pid, maybe stale) is a live fusetrace process,
    not another that reuses the number."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"fusetrace" in f.read()
    except OSError:
        return False


def descendants(pid: int) -> list[int]:
    """The processes below `pid` (children, theirs, ...), from /proc."""
    parent_of = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat_fields(int(name))
            if fields is not None:
                parent_of[int(name)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        kids = [p for p, parent in parent_of.items() if parent in frontier]
        found += kids
        frontier = kids
    return found


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL a child and every process below it (fio's job processes outlive fio)."""
    for pid in [*descendants(proc.pid), proc.pid]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat after the command name: state, ppid, pgrp, ..., utime (11), stime (12)."""
    try:
        with open(f"/proc/{pid}/stat", errors="replace") as f:  # the command name is any bytes
            text = f.read()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()
