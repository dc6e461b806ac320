#!/usr/bin/env python3
"""What bench/capture.py runs under `fusetrace capture ... -- COMMAND`: a timed command, and
a generator of calls.  Both time themselves from the inside, so that bpftrace's start (it
compiles its program: seconds) and the capture's final drain are not counted as the work's.

    capturechild.py timed OUT -- CMD ARGS...     # CMD's wall time, its CPU and the capture's
    capturechild.py load OUT FILE RATE SECONDS THREADS   # 1-byte preads of FILE, RATE a second

`timed` reads the CPU time of its parent (the capture process, which starts the command
itself) and of that parent's bpftrace child just before and after CMD, so that what the
capture's own processes spent during the work is known; run bare (its parent is not a
capture), it gives only the command's figures.  With FUSETRACE_BENCH_BPF_STATS=1 (and the
kernel's BPF statistics on) it also reads the run time of bpftrace's programs around CMD.
`load` opens FILE once per thread and preads one byte at offset 0 in a loop, paced to RATE
calls a second over all threads (0: as fast as they go), for SECONDS; it writes how many
calls of each kind it made.
Every figure goes to OUT as JSON (a file off the mount, so it is not captured).
"""

import json
import os
import resource
import subprocess
import sys
import threading
import time

STATS_ENV = "FUSETRACE_BENCH_BPF_STATS"  # "1": the probes' kernel time is read (bench/capture.py --bpf-stats)
BATCH = 256  # calls between two looks at the clock (paced: at most this many early)


def _cpu_s(pid: int) -> float | None:
    """CPU time of all of the process's threads so far, in ns from the scheduler (schedstat),
    finer than /proc/PID/stat's clock ticks: a tar takes a tenth of a second here."""
    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
    except (OSError, ValueError):
        return None
    return total / 1e9


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _children(pid: int) -> list[int]:
    out = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def _capture_pids() -> dict[str, int]:
    """The capture process (this one's parent) and its bpftrace, when run under capture."""
    parent = os.getppid()
    bpf = [c for c in _children(parent) if _comm(c) == "bpftrace"]
    return {"capture": parent, "bpftrace": bpf[0]} if bpf else {}


def _spent(before: dict[str, float | None], after: dict[str, float | None]) -> dict[str, float]:
    return {k: b - a for k, a in before.items() if a is not None and (b := after.get(k)) is not None}


def _programs(pid: int) -> dict[str, tuple[int, int]]:
    """bpftrace's programs (by descriptor): the kernel's run time and run count of each, which
    it keeps only while kernel.bpf_stats_enabled is 1."""
    out = {}
    try:
        fds = os.listdir(f"/proc/{pid}/fdinfo")
    except OSError:
        return {}
    for fd in fds:
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                info = dict(line.split(":\t", 1) for line in f.read().splitlines() if ":\t" in line)
        except (OSError, ValueError):
            continue
        if "prog_type" in info and "run_cnt" in info:
            out[fd] = (int(info["run_time_ns"]), int(info["run_cnt"]))
    return out


def _probe_time(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> dict:
    """What the probes did in between: runs and ns in all, and the five costliest programs'."""
    each = sorted(
        ((ns - before.get(fd, (0, 0))[0], n - before.get(fd, (0, 0))[1]) for fd, (ns, n) in after.items()),
        reverse=True,
    )
    each = [(ns, n) for ns, n in each if n]
    return {"ns": sum(ns for ns, _ in each), "runs": sum(n for _, n in each), "top": each[:5]}


def timed(out: str, cmd: list[str]) -> int:
    pids = _capture_pids()
    stats = bool(pids) and os.environ.get(STATS_ENV) == "1"
    cpu0 = {k: _cpu_s(p) for k, p in pids.items()}
    progs0 = _programs(pids["bpftrace"]) if stats else {}
    t0 = time.monotonic_ns()
    code = subprocess.run(cmd).returncode
    t1 = time.monotonic_ns()
    progs1 = _programs(pids["bpftrace"]) if stats else {}
    cpu1 = {k: _cpu_s(p) for k, p in pids.items()}
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    figures = {
        "start_ns": t0,
        "end_ns": t1,
        "seconds": (t1 - t0) / 1e9,
        "cmd_user_s": ru.ru_utime,
        "cmd_sys_s": ru.ru_stime,
        "cpu_s": _spent(cpu0, cpu1),
        "exit": code,
    }
    if stats:
        figures["probes"] = _probe_time(progs0, progs1)
    with open(out, "w") as f:
        json.dump(figures, f)
    return code


def load(out: str, path: str, rate: float, seconds: float, threads: int) -> int:
    made = [0] * threads
    pids = _capture_pids()
    cpu0 = {k: _cpu_s(p) for k, p in pids.items()}
    t0 = time.monotonic_ns()
    start = t0 / 1e9
    end = start + seconds

    def run(i: int) -> None:
        fd = os.open(path, os.O_RDONLY)
        n, each = 0, rate / threads
        pread, clock = os.pread, time.monotonic
        while (now := clock()) < end:
            due = int((now - start) * each) if rate else n + BATCH
            if due <= n:
                time.sleep(0.0002)  # ahead of the pace: the next batch is due in a few calls
                continue
            for _ in range(min(due - n, BATCH)):
                pread(fd, 1, 0)
            n += min(due - n, BATCH)
        made[i] = n
        os.close(fd)

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    t1 = time.monotonic_ns()
    cpu1 = {k: _cpu_s(p) for k, p in pids.items()}
    took = (t1 - t0) / 1e9
    figures = {
        "start_ns": t0,
        "end_ns": t1,
        "calls": {"open": threads, "read": sum(made), "flush": threads},
        "seconds": took,
        "rate_reached": sum(made) / took,
        "threads": threads,
        "rate_asked": rate,
        "cpu_s": _spent(cpu0, cpu1),
    }
    with open(out, "w") as f:
        json.dump(figures, f)
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["timed"] and len(argv) > 3 and argv[2] == "--":
        return timed(argv[1], argv[3:])
    if argv[:1] == ["load"] and len(argv) == 6:
        return load(argv[1], argv[2], float(argv[3]), float(argv[4]), int(argv[5]))
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
