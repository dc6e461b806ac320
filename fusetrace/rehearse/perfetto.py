"""A trace as Chrome / Perfetto trace JSON (the Trace Event Format), which ui.perfetto.dev
and chrome://tracing open.

Every operation is one complete event ("ph": "X", `ts` and `dur` in microseconds since
the trace's first operation, to the nanosecond) named after its op, in its process (`pid`,
named by a "process_name" metadata event from `comm`).  A viewer nests the complete
events of one thread by time, so a process's operations that overlap (its threads, or
asynchronous I/O) go on separate tracks: `Lanes` puts each on the first lane of its
process free by then; lane 0 is the track whose tid is the pid, lane n > 0 gets a tid of
its own above the largest pid Linux gives (2**22), so no track is taken for another
process's thread.  An event's args hold its path, size, result and errno (and the errno's
name), and every other column the record has a value in (path2, fh, offset, the model's
gate, nfs, ...).  JSON holds text, not bytes: a name that is not UTF-8 is its text, U+FFFD
for those bytes, and its exact bytes in hex beside it (`path_hex`, `path2_hex`).

Written as it streams: one event a line, never the whole list in memory.
"""

import errno as errnos
import itertools
import json
from collections.abc import Iterable
from typing import TextIO

from ..trace import names
from .lanes import Lanes
from .rows import Outcome

COLUMNS = [
    "start_ns",
    "dur_ns",
    "op",
    "inode",
    "path",
    "path2",
    "fh",
    "offset",
    "size",
    "result",
    "errno",
    "pid",
    "uid",
    "gid",
    "shaped_ns",
    "gate",
    "wait_ns",
    "latency_ns",
    "transfer_ns",
    "nfs",
    "comm",
    "kind",
    "flags",
    "mode",
    "entry",
    "tid",
]
ALWAYS = ("path", "size", "result", "errno")  # args every event carries; the rest only when set
# the rest, when set; a name that is not UTF-8 adds its bytes in hex (path_hex, path2_hex)
_SET = [k for k in COLUMNS if k not in ALWAYS and k not in ("start_ns", "dur_ns", "op", "pid", "comm")]
_HEX = ("path_hex", "path2_hex")
PID_LIMIT = 1 << 22  # Linux's largest pid_max: tids of lanes past 0 start above it
# Lanes keep this much room between one operation's end and the next one's start: viewers
# that truncate ts*1000 and dur*1000 separately may end an event up to 2 ns late against the next.
GUARD_NS = 1


def _us(ns: int) -> float:
    """Microseconds, exact to the nanosecond as JSON writes the float (below ~10**15 ns)."""
    return ns / 1000


def write(rows: Iterable[tuple], out: TextIO, metadata: dict) -> Outcome:
    """Write the trace JSON of `rows` (COLUMNS, in start order) to `out`; `metadata` (the
    trace's) is kept in otherData, with the CLOCK_MONOTONIC ns that `ts` 0 stands for."""
    rows = iter(rows)
    first = next(rows, None)
    t0 = first[0] if first else 0
    if first:
        rows = itertools.chain([first], rows)
    dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
    other = {
        "exported_by": "fusetrace export --format perfetto",
        "ts_zero_monotonic_ns": t0,
        **{
            k: metadata[k]
            for k in ("source", "mountpoint", "host", "start_wall_ns", "start_monotonic_ns", "format_version")
            if k in metadata
        },
    }
    out.write('{"otherData":' + dumps(other) + ',\n"traceEvents":[\n')
    lanes = Lanes()
    comms: dict[int, str] = {}  # pid -> the process name last given
    tids: dict[tuple[int, int], int] = {}  # (pid, lane) -> tid
    count = 0
    sep = ""

    def emit(event: dict) -> None:
        nonlocal sep
        out.write(sep + dumps(event))
        sep = ",\n"

    for row in rows:
        rec = dict(zip(COLUMNS, row))
        start, dur, pid, comm = rec["start_ns"], rec["dur_ns"], rec["pid"], rec["comm"]
        if comm and comms.get(pid) != comm:
            comms[pid] = comm
            emit({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": comm}})
        lane = lanes.place(pid, start, start + dur + GUARD_NS)
        tid = tids.get((pid, lane))
        if tid is None:
            tid = tids[pid, lane] = pid if lane == 0 else PID_LIMIT + len(tids)
            emit(
                {
                    "name": "thread_name",
                    "ph": "M",
                    "pid": pid,
                    "tid": tid,
                    "args": {"name": f"{comm or pid} ops" if lane == 0 else f"{comm or pid} ops, lane {lane}"},
                }
            )
        for k in ("path", "path2"):  # JSON holds text: a name that is not UTF-8 as text, and its bytes in hex
            text, raw = (None, None) if rec[k] is None else names.stored(rec[k])
            rec[k] = text
            if raw is not None:
                rec[k + "_hex"] = raw.hex()
        args = {k: rec[k] for k in ALWAYS}
        if rec["op"] in ("read", "write"):
            args["offset"] = rec["offset"]
        if rec["errno"]:
            args["error"] = errnos.errorcode.get(rec["errno"], str(rec["errno"]))
        args.update((k, rec[k]) for k in _SET if rec[k])
        args.update((k, rec[k]) for k in _HEX if k in rec)
        emit(
            {
                "name": rec["op"],
                "cat": rec["kind"] or "fuse",
                "ph": "X",
                "ts": _us(start - t0),
                "dur": _us(dur),
                "pid": pid,
                "tid": tid,
                "args": args,
            }
        )
        count += 1
    out.write("\n]}\n")
    processes = len({pid for pid, _ in tids})
    return Outcome(
        f"Perfetto trace JSON: {count:,} operations of {processes:,} processes on {len(tids):,} "
        f"tracks (open it in ui.perfetto.dev)"
    )
