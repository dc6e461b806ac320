"""bpftrace's output (`-f json`, one JSON object a line) back into the probes' records, a
slot at a time and in start order, and the per-operation counts to check them against.

The program (program.py) prints, for each slot, the sets of maps it did not write then
(keyed "tid,start", which the records also hold as numbers): `@f?` the calls on
descriptors, `@p?` the named calls, `@s?` and `@t?` the names of those; then a line that
ends the slot.  A named call whose names are not in the same slot's print was cleared
half-printed: it is not read (so the comparison with the counts says it was lost), never
read without its names.  A slot is held until the next one ends, and the two are sorted
together when the next holds a call that began first (a long call, or the end's sets
printed in another order); at the end bpftrace prints `@n`, the counts by operation, and
a last line, and what is held is given.  JSON keeps names exact: bpftrace escapes every
byte a hostile name may hold (a newline, a quote), so one line is one object whatever the
names are.  Each byte above 0x7f it escapes as "\\uffffffXX" (0.17's signed char), which
json would read as U+FFFF and text: those are put back as their bytes first, so that a
name in UTF-8 or in none is kept.
"""

import json
import re
from collections.abc import Iterator
from typing import NamedTuple

from .program import CWD, END, SETS, SLOT

# bpftrace's escape of a byte above 0x7f, where its backslash is not itself escaped
_HIGH_BYTE = re.compile(rb"(?<!\\)((?:\\\\)*)\\uffffff([0-9a-f]{2})")


class FdCall(NamedTuple):
    """A call on a descriptor, as its probe kept it."""

    op: int
    pid: int
    uid: int
    gid: int
    dur_ns: int
    ret: int
    file: int  # the open file's address (a key only: never written to the trace)
    ino: int
    mode: int
    file_flags: int
    offset: int
    size: int  # -1: the vector calls', whose sizes are in user memory: the result is used
    fd: int
    call: int  # which system call: its index in calls.FD_CALLS
    comm: str
    tid: int
    start_ns: int


class NamedCall(NamedTuple):
    """A call that names a path, as its probe kept it."""

    op: int
    pid: int
    uid: int
    gid: int
    dur_ns: int
    ret: int
    flags: int
    arg: int  # a mode, a size or a length: the call's `y` (calls.py)
    base: int  # inode of the directory a relative first name starts from (ABOVE + i: above the mount); 0 none
    base2: int
    file: int  # an open's new file; a call below a descriptor: that descriptor's file
    ino: int  # an open's file (a chdir: the new working directory)
    mode: int
    dirfd: int
    dirfd2: int
    call: int  # which system call: its index in calls.NAMED_CALLS
    names: int  # which names the probe printed: 1 the first, 2 the second (else "")
    comm: str
    tid: int
    start_ns: int
    name: str  # as the caller gave it (absolute or relative); cut at STRLEN - 1 bytes
    name2: str  # the second path, a symlink's target or an attribute's name


_NAMES = NamedCall._fields.index("names")


class Started(NamedTuple):
    """A program started with its working directory on the mount."""

    pid: int
    ino: int


Call = FdCall | NamedCall


class BadOutput(ValueError):
    """A line of bpftrace's output that is not what the program prints."""


class Events:
    """Feed it bpftrace's lines; it yields the records of each whole slot in start
    order, and once the counts have been read, `counts` holds them."""

    def __init__(self) -> None:
        self.counts: dict[int, int] | None = None  # by operation number, once read
        self.lost_events = 0  # bpftrace's own "lost events" (its prints that never reached it)
        self.unnamed = 0  # named calls whose names were cleared before they were printed: not read
        self.ready = False
        self._fd: list[Call] = []
        self._named: dict[str, list] = {}
        self._names: dict[str, str] = {}
        self._names2: dict[str, str] = {}
        self._waiting: list[Call] = []
        self._read: list[set[tuple[int, int]]] = [set() for _ in range(SETS)]  # keys of the last slots read

    def _unread(self, calls: list[Call]) -> list[Call]:
        """`calls` less those read already: at the end, a set the timer was printing as
        bpftrace stopped is printed again by END, and the two prints, from two CPUs'
        buffers, come in either order (seen: every call on a descriptor of the last slot
        recorded twice).  A call is one by its thread and start."""
        older, keys, fresh = self._read, set(), []
        for c in calls:
            key = (c.tid, c.start_ns)
            if key not in keys and all(key not in s for s in older):
                keys.add(key)
                fresh.append(c)
        self._read = [keys, *older[:-1]]
        return fresh

    def feed(self, line: bytes) -> Iterator[Call | Started]:
        if not line.strip():
            return  # (bpftrace ends a map's print with an empty line)
        if b"\\uffffff" in line:  # (rare: a name or comm not in ASCII)
            line = _HIGH_BYTE.sub(lambda m: m[1] + bytes([int(m[2], 16)]), line)
        try:  # (names that are not UTF-8 come as their bytes: kept as os.fsdecode keeps them)
            obj = json.loads(line.decode(errors="surrogateescape"))
            kind, data = obj["type"], obj["data"]
        except (ValueError, TypeError, KeyError):
            raise BadOutput(f"not bpftrace's JSON: {line[:80]!r}") from None
        if kind == "printf":
            words = str(data).split()
            if words[:1] == [CWD] and len(words) == 3 and words[1].isdigit() and words[2].isdigit():
                yield Started(int(words[1]), int(words[2]))
            elif words == [SLOT]:
                yield from self._slot()
            elif words == [END]:  # after @n, which is not printed when no call was counted
                if self.counts is None:
                    self.counts = {}
                yield from self._waiting
                self._waiting = []
            else:
                self.ready = True
        elif kind == "lost_events":
            self.lost_events += int(data.get("events", 0))
        elif kind == "map":
            try:
                ((name, entries),) = data.items()
                self._map(name, entries)
            except (TypeError, ValueError, AttributeError) as exc:
                raise BadOutput(f"a map bpftrace printed is not the program's: {exc}") from None

    def _map(self, name: str, entries: dict) -> None:
        which = name[1:2]
        if which == "f":
            self._fd.extend(FdCall._make(v) for v in entries.values())
        elif which == "p":
            self._named.update(entries)
        elif which == "s":
            self._names.update(entries)
        elif which == "t":
            self._names2.update(entries)
        elif which == "n":
            self.counts = {int(k): int(v) for k, v in entries.items()}

    def _slot(self) -> Iterator[Call]:
        """The records printed since the last slot's end, in start order, after those held."""
        names, names2 = self._names, self._names2
        slot = self._fd
        try:
            for key, values in self._named.items():
                name, name2 = names.get(key), names2.get(key)
                printed = values[_NAMES]
                if (name is None and printed & 1) or (name2 is None and printed & 2):
                    self.unnamed += 1
                else:
                    slot.append(NamedCall._make([*values, name or "", name2 or ""]))
        except (TypeError, IndexError) as exc:
            raise BadOutput(f"a map bpftrace printed is not the program's: {exc}") from None
        self._fd, self._named, self._names, self._names2 = [], {}, {}, {}
        slot = self._unread(slot)
        slot.sort(key=_start)
        if slot and self._waiting and slot[0].start_ns < self._waiting[-1].start_ns:
            # a call that began before the last slot's (a long one, or the end's sets
            # printed in another order): both are kept, in one order
            self._waiting = sorted(self._waiting + slot, key=_start)
        else:
            yield from self._waiting
            self._waiting = slot


def _start(call: Call) -> int:
    return call.start_ns
