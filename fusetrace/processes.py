"""Other processes as /proc shows them: whether one is a fusetrace server, its state, its
progress, the processes below it (the CLI's umount, the report, the scenarios' children)."""

import os


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


def age(pid: int) -> float | None:
    """Seconds since process `pid` started (its start time in /proc/PID/stat, in clock ticks
    since boot, against /proc/uptime), None when it has gone."""
    fields = _stat_fields(pid)
    try:
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return None if fields is None else max(0.0, uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))


def is_fusetrace(pid: object) -> bool:
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
    parent_of: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat_fields(int(name))
            if fields is not None:
                parent_of[int(name)] = int(fields[1])
    found: list[int] = []
    frontier = [pid]
    while frontier:
        kids = [p for p, parent in parent_of.items() if parent in frontier]
        found += kids
        frontier = kids
    return found


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat after the command name: state, ppid, pgrp, ..., utime (11), stime (12)."""
    try:
        with open(f"/proc/{pid}/stat", errors="replace") as f:  # the command name is any bytes
            text = f.read()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()
