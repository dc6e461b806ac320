"""/proc/self/mountstats, the kernel's per-mount NFS counters (what `nfsiostat` and
`mountstats` read): the parser, and the difference between two readings.

The file has one `device SRV:/path mounted on /mnt with fstype nfs4 statvers=1.1` line
per mount; an NFS mount's is followed by indented lines: `opts:`, `age:`, `events:`,
`bytes:`, `xprt:`... and, after `per-op statistics`, one line per RPC:

    OP: ops transmissions timeouts bytes_sent bytes_recv queue_ms rtt_ms execute_ms [errors]

(`errors`, ops that ended with an error status, since Linux 5.3).  Every counter counts
up from the mount; a difference of two readings is what the interval saw.  The text is
the kernel's, but a stand-in file (the sampler's test hook) or a copy is anyone's: a line
that is not as above is skipped and counted, never a traceback.  Pure: no I/O.
"""

import re
from dataclasses import dataclass, field
from typing import NamedTuple

MAX_COUNTER = 2**64 - 1  # the kernel's counters are u64; a bigger number is not one of them


class OpStats(NamedTuple):
    """One RPC's counters (or their difference over an interval)."""

    ops: int
    transmissions: int
    timeouts: int
    bytes_sent: int
    bytes_recv: int
    queue_ms: int  # summed: from the request's queueing to its transmission
    rtt_ms: int  # summed: transmission to reply
    execute_ms: int  # summed: queueing to the end of its handling
    errors: int = 0  # only on Linux 5.3 and later; 0 where not given


FIELDS = len(OpStats._fields)


@dataclass
class Entry:
    """One device line and, for an NFS mount, what followed it."""

    device: str
    mountpoint: str
    fstype: str
    statvers: str = ""
    opts: str = ""  # the mount options as the kernel lists them
    age_s: int | None = None  # seconds since the mount
    events: tuple[int, ...] = ()
    bytes: tuple[int, ...] = ()
    ops: dict[str, OpStats] = field(default_factory=dict)

    @property
    def is_nfs(self) -> bool:
        return self.fstype in ("nfs", "nfs4")


@dataclass
class Parsed:
    entries: list[Entry]
    bad_lines: int  # lines skipped: neither a device line nor one of its entry's fields as known


def _counters(words: list[str]) -> tuple[int, ...] | None:
    out = []
    for w in words:
        if not w.isascii() or not w.isdigit():
            return None
        n = int(w)
        if n > MAX_COUNTER:
            return None
        out.append(n)
    return tuple(out)


_ESCAPED = re.compile(r"\\([0-7]{3})")


def _unescape(field: str) -> str:
    """The kernel writes a space, tab, newline or backslash of a name as \\ooo (octal),
    as in /proc/self/mountinfo: undone, so that the names compare with mountinfo's."""
    return _ESCAPED.sub(lambda m: chr(int(m.group(1), 8)), field)


def _device(line: str) -> Entry | None:
    # "device D mounted on M with fstype T [statvers=V]"
    rest = line[len("device ") :]
    dev, sep, rest = rest.partition(" mounted on ")
    point, sep2, rest = rest.rpartition(" with fstype ")
    if not (sep and sep2 and dev and point):
        return None
    words = rest.split()
    if not words or len(words) > 2:
        return None
    statvers = words[1].removeprefix("statvers=") if len(words) == 2 else ""
    return Entry(_unescape(dev), _unescape(point), words[0], statvers)


def parse(text: str) -> Parsed:
    """Every device of a mountstats text, each NFS one with its counters."""
    entries: list[Entry] = []
    bad = 0
    current: Entry | None = None
    in_ops = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if raw.startswith("device "):
            current = _device(raw)
            in_ops = False
            if current is None:
                bad += 1
            else:
                entries.append(current)
            continue
        if current is None or not current.is_nfs or not _field(current, line, in_ops):
            bad += 1
        elif line == "per-op statistics":
            in_ops = True
    return Parsed(entries, bad)


def _field(e: Entry, line: str, in_ops: bool) -> bool:
    """Take one indented line of an NFS entry; False when it is not one as known."""
    if line == "per-op statistics":
        return not in_ops and not e.ops
    key, sep, value = line.partition(":")
    if not sep:
        return False
    words = value.split()
    if in_ops:
        numbers = _counters(words)
        if numbers is None or not FIELDS - 1 <= len(numbers) <= FIELDS or not key.isidentifier() or key in e.ops:
            return False
        e.ops[key] = OpStats(*numbers)
        return True
    if key in ("events", "bytes"):
        numbers = _counters(words)
        if numbers is None or not numbers:
            return False
        setattr(e, key, numbers)
        return True
    if key == "age":
        numbers = _counters(words)
        if numbers is None or len(numbers) != 1:
            return False
        e.age_s = numbers[0]
        return True
    if key == "opts":
        e.opts = value.strip()
        return True
    # the lines kept as they are (caps, sec, nfsv4, xprt, the RPC iostats version, fsc...)
    # are the kernel's: any other key is taken as theirs, not counted as bad
    return key.replace(" ", "").replace("_", "").isalnum()


def find(parsed: Parsed, mountpoint: str, device: str | None = None) -> Entry | None:
    """The NFS entry mounted on `mountpoint` (of `device`, when given); the last one when
    several are stacked there, as the topmost mount is the one paths reach."""
    found = None
    for e in parsed.entries:
        if e.is_nfs and e.mountpoint == mountpoint and (device is None or e.device == device):
            found = e
    return found


def delta(before: Entry, after: Entry) -> dict[str, OpStats] | None:
    """What each RPC did between two readings of the same mount, for the RPCs that moved
    (their ops counter grew); None when any counter went backwards (the mount was
    remounted, or the text is not the same mount's): the series restarts from `after`."""
    out = {}
    for name, now in after.ops.items():
        was = before.ops.get(name, OpStats(*[0] * FIELDS))
        diff = OpStats(*(a - b for a, b in zip(now, was)))
        if min(diff) < 0:
            return None
        if diff.ops:
            out[name] = diff
    if any(name not in after.ops for name in before.ops):
        return None
    if after.age_s is not None and before.age_s is not None and after.age_s < before.age_s:
        return None
    return out


def mean_ms(total_ms: int, ops: int) -> float | None:
    """A summed time's mean per RPC (None for none)."""
    return total_ms / ops if ops else None
