"""A trace as CSV in the layout of bcc's `nfsslower -j` (tools/nfsslower.py), so scripts
written for its output read it:

    ENDTIME_us,TASK,PID,TYPE,BYTES,OFFSET_b,LATENCY_us,FILE

nfsslower traces four operations of the NFS client, TYPE R (read), W (write), O (open)
and G (getattr); so does this: FUSE read, write, open and create (an open that creates
the file is an open to nfsslower too) and getattr.  The other operations are left out.
Each row is as nfsslower prints it: ENDTIME_us the operation's end and LATENCY_us its
duration, in whole microseconds of CLOCK_MONOTONIC (nfsslower's bpf_ktime_get_ns is the
same clock); TASK the process name; PID the process; BYTES the operation's return value
as an unsigned 32-bit number (bytes read or written; 0 for open and getattr; a failed
call's negative errno, 4294967294 for ENOENT); OFFSET_b the file offset of a read or
write, else 0; FILE the file's base name (nfsslower prints the dentry's name, decoded as
UTF-8 with U+FFFD for bytes that are not: so is it here).  Rows come
in end order, as nfsslower prints them; every operation is written (nfsslower's threshold
0).  Fields that hold a comma, a quote or a line break are quoted (nfsslower does not).
"""

import csv
import heapq
import posixpath
from collections.abc import Iterable
from typing import TextIO

from ..trace import names
from .rows import Outcome

COLUMNS = ["start_ns", "dur_ns", "op", "path", "offset", "result", "errno", "pid", "comm"]
WHERE = "op in ('read', 'write', 'open', 'create', 'getattr')"
HEADER = ["ENDTIME_us", "TASK", "PID", "TYPE", "BYTES", "OFFSET_b", "LATENCY_us", "FILE"]
TYPES = {"read": "R", "write": "W", "open": "O", "create": "O", "getattr": "G"}


def row(
    start_ns: int, dur_ns: int, op: str, path: str, offset: int, result: int, errno: int, pid: int, comm: str
) -> list:
    """One operation's CSV fields."""
    data = op in ("read", "write")
    returned = -errno if errno else (result if data else 0)
    return [
        (start_ns + dur_ns) // 1000,
        comm,
        pid,
        TYPES[op],
        returned & 0xFFFF_FFFF,
        offset if data else 0,
        dur_ns // 1000,
        names.readable(posixpath.basename(path) or path),
    ]


def write(rows: Iterable[tuple], out: TextIO) -> Outcome:
    """Write the CSV of `rows` (COLUMNS, in start order) to `out`, in end order.  An
    operation that started cannot end before one that ends by its start: those are
    written then, so only the operations in flight together wait in memory."""
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(HEADER)
    pending: list[tuple[int, int, list]] = []  # (end, sequence, fields)
    counts = dict.fromkeys("RWOG", 0)
    for n, rec in enumerate(rows):
        start, dur = rec[0], rec[1]
        while pending and pending[0][0] <= start:
            writer.writerow(heapq.heappop(pending)[2])
        fields = row(*rec)
        counts[fields[3]] += 1
        heapq.heappush(pending, (start + dur, n, fields))
    while pending:
        writer.writerow(heapq.heappop(pending)[2])
    return Outcome(
        "nfsslower CSV: "
        + ", ".join(f"{n:,} {t}" for t, n in counts.items())
        + " (read, write, open, getattr; other operations left out)"
    )
