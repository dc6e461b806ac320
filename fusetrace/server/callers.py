"""Who made a request: the process and its name behind a FUSE caller's thread id, cached."""

import os
from typing import NamedTuple, Protocol

_WHO_FOR_NS = 1_000_000_000  # how long a thread's process and name are trusted


class Caller(Protocol):
    """Who a request is made on behalf of: a request context (pyfuse3.RequestContext), or
    the open file or directory it names, which remembers who opened it."""

    @property
    def pid(self) -> int: ...
    @property
    def uid(self) -> int: ...
    @property
    def gid(self) -> int: ...


class Process(NamedTuple):
    """The process behind a thread, as traces name it, when that was read (monotonic ns),
    and the thread (the trace's tid: kept here, as this is what the trace stage reads per
    record, so naming the thread costs it an attribute and nothing more)."""

    pid: int
    comm: str
    read_ns: int
    tid: int


class Callers:
    """FUSE names the calling thread; traces name its process (thread group) and the
    process's name, read from /proc at most once a second per thread (a name changes at
    exec, and a shell's child opens its redirections before it)."""

    def __init__(self) -> None:
        self._tgids: dict[int, Process] = {}  # by thread id

    def who(self, tid: int, now: int) -> Process:
        """The process of thread `tid`, from the cache."""
        who_is = self._tgids.get(tid)
        if who_is is None or now - who_is.read_ns > _WHO_FOR_NS:
            who_is = self._process_of(tid, now)
        return who_is

    def _process_of(self, tid: int, now: int) -> Process:
        if len(self._tgids) > 4096:
            self._tgids.clear()  # thread ids get reused; keep the cache small and fresh
        known = self._tgids[tid] = Process(*thread_group(tid), now, tid)
        return known


def thread_group(tid: int) -> tuple[int, str]:
    """(process id, process name) of thread `tid`; (tid, "") when it is gone."""
    try:
        with open(f"/proc/{tid}/status", "rb") as f:  # procfs: answered from memory
            name: bytes | None = None
            tgid: int | None = None
            for line in f:
                if line.startswith(b"Name:"):
                    name = line[5:].strip()
                elif line.startswith(b"Tgid:"):
                    tgid = int(line.split()[1])
                    break
        if tgid is None:
            return tid, ""
        if tgid != tid:  # a thread's Name is its own; the process's is its leader's
            with open(f"/proc/{tgid}/comm", "rb") as f:
                name = f.read().rstrip(b"\n")
        return tgid, os.fsdecode(name or b"")
    except (OSError, ValueError):
        return tid, ""
