"""`fusetrace report DIR --nfs`: per interval, the FUSE operations a trace recorded beside
the NFS RPCs its source received, from the mount's samples of /proc/self/mountstats
(`_nfs.jsonl`, written by fusetrace/server/nfssampler.py when the source was on NFS), or,
for a trace taken on an emulated mount, from the model's `nfs` column: what the emulated
client sent (docs/REPORT.md, "The NFS view").

The sidecar is read as hostile text: a line that is not a sample is one NfsViewError (exit 2) naming
the file and line (exit 2), except a torn last line (a killed server's), which is left
out and counted.
"""

import json
import os
import stat
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any, TypedDict

from ..errors import UserError
from ..texttable import count, int_text, num_text, printable, table
from ..trace.mountstats import FIELDS, OpStats, mean_ms
from .query import Trace

SIDECAR = "_nfs.jsonl"  # as fusetrace/server/nfssampler.py names it
MAX_LINE = 1 << 20  # a sample of every RPC of NFSv4.2 is a few kB
MAX_RPC_NAME = 64
MAX_INT = 2**64 - 1
DATA_OPS = ("read", "write")


class NfsViewError(UserError):
    """A damaged sidecar, or a trace with neither samples nor the model's column: bad input."""

    exit_code = 2


class Rpc(TypedDict):
    rpc: str
    count: int
    mb: float  # bytes sent and received (samples), or the operations' data (model)
    rtt_ms: float | None  # mean round trip per RPC (samples); the model's time per operation carrying it
    exec_ms: float | None  # mean execution per RPC (samples); None for the model
    errors: int


class Interval(TypedDict):
    t_s: float  # the interval's start, seconds from the view's origin
    fuse_ops: int
    fuse_mb: float  # bytes read and written by the FUSE operations
    fuse: dict[str, int]  # operations by name
    rpcs: list[Rpc]


class NfsView(TypedDict):
    source: str  # "samples" (/proc/self/mountstats) or "model" (the emulated client's nfs column)
    device: str | None
    mountpoint: str | None
    fstype: str | None
    origin_ns: int  # CLOCK_MONOTONIC of t_s 0: the first sample (samples), the first record (model)
    interval_s: float
    intervals: list[Interval]  # those in which a FUSE operation or an RPC was counted
    quiet: int  # intervals left out: nothing counted in them
    total: Interval
    torn_lines: int  # a torn last line of the sidecar, left out


class _Sums:
    """One interval's RPCs, summed."""

    def __init__(self) -> None:
        self.rpcs: dict[str, list[int]] = defaultdict(lambda: [0] * FIELDS)
        self.model_ns: Counter[str] = Counter()

    def add(self, name: str, values: list[int]) -> None:
        into = self.rpcs[name]
        for i, v in enumerate(values):
            into[i] += v

    def listing(self, model: bool) -> list[Rpc]:
        out: list[Rpc] = []
        for name, v in sorted(self.rpcs.items(), key=lambda kv: -kv[1][0]):
            s = OpStats(*v)
            out.append(
                {
                    "rpc": name,
                    "count": s.ops,
                    "mb": (s.bytes_sent + s.bytes_recv) / 1e6,
                    "rtt_ms": (self.model_ns[name] / s.ops / 1e6 if s.ops else None)
                    if model
                    else mean_ms(s.rtt_ms, s.ops),
                    "exec_ms": None if model else mean_ms(s.execute_ms, s.ops),
                    "errors": s.errors,
                }
            )
        return out


def _bad(path: str, n: int, why: str) -> NfsViewError:
    return NfsViewError(f"{path}: line {n}: not an NFS sample ({why}); the sidecar is damaged")


def _count(v: object) -> bool:
    return type(v) is int and 0 <= v <= MAX_INT


def _lines(path: str) -> Iterator[tuple[int, bytes, bool]]:
    """The sidecar's lines, numbered, each with whether it ended with a newline."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise NfsViewError(f"{path}: cannot read it: {exc.strerror}") from None
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NfsViewError(f"{path}: not a regular file")
        n = 0
        while line := f.readline(MAX_LINE + 1):
            n += 1
            if len(line) > MAX_LINE:
                raise _bad(path, n, f"over {MAX_LINE:,} bytes")
            yield n, line, line.endswith(b"\n")


def _json(path: str, n: int, line: bytes) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except ValueError as exc:
        raise _bad(path, n, f"not JSON: {exc}") from None
    if not isinstance(row, dict):
        raise _bad(path, n, "not an object")
    return row


def read_samples(path: str) -> tuple[dict[str, Any], list[tuple[int, dict[str, list[int]] | None]], int]:
    """The sidecar's header, its rows as (t_ns, RPCs; None for a restart), and whether its
    last line was torn (1) or not (0)."""
    head: dict[str, Any] | None = None
    rows: list[tuple[int, dict[str, list[int]] | None]] = []
    torn = 0
    for n, line, whole in _lines(path):
        if not whole:  # only the last line can lack its newline: written by a server killed mid-write
            torn = 1
            break
        row = _json(path, n, line)
        if head is None:
            if not _count(row.get("start_ns")) or not isinstance(row.get("interval_s"), int | float):
                raise _bad(path, n, "the header needs start_ns and interval_s")
            if not 0 < row["interval_s"] <= 86400:
                raise _bad(path, n, f"interval_s {row['interval_s']!r} is not in (0, 86400]")
            head = row
            continue
        if not _count(row.get("t_ns")):
            raise _bad(path, n, "no t_ns")
        if row.get("restart") is True:
            rows.append((row["t_ns"], None))
            continue
        rpcs = row.get("rpcs")
        if not isinstance(rpcs, dict):
            raise _bad(path, n, "no rpcs")
        for name, values in rpcs.items():
            if not 0 < len(name) <= MAX_RPC_NAME or not name.isidentifier():
                raise _bad(path, n, f"RPC name {printable(name[:MAX_RPC_NAME])!r}")
            if not isinstance(values, list) or len(values) != FIELDS or not all(map(_count, values)):
                raise _bad(path, n, f"{name}: not {FIELDS} counters")
        rows.append((row["t_ns"], rpcs))
    if head is None:
        raise NfsViewError(f"{path}: empty; the sidecar is damaged")
    return head, rows, torn


def view(trace: Trace, interval_s: float | None) -> NfsView:
    """The NFS view of one trace: from its samples when it has them, else from its model's
    `nfs` column; NfsViewError (one line, exit 2) when it has neither."""
    if trace.fleet:
        raise NfsViewError("--nfs: reads one trace at a time, not several")
    path = os.path.join(trace.directory, SIDECAR)
    if os.path.lexists(path):
        head, rows, torn = read_samples(path)
        width = int((interval_s or head["interval_s"]) * 1e9)
        return _from_samples(trace, head, rows, torn, width)
    if "nfs" in trace.columns and trace.one("select count(nfs) from all_records")[0]:
        return _from_model(trace, int((interval_s or 1.0) * 1e9))
    why = (trace.metadata.get("nfs") or {}).get("error") if isinstance(trace.metadata.get("nfs"), dict) else None
    raise NfsViewError(
        f"{trace.directory}: --nfs: no NFS samples (the source was not on NFS"
        + (f"; the mount said: {why}" if why else "")
        + ") and no model's nfs column (not taken on an emulated mount)"
    )


def _fuse(trace: Trace, bucket_sql: str, params: dict[str, int]) -> dict[int, tuple[int, int, dict[str, int]]]:
    """Per bucket, the FUSE operations the report's filters keep: count, data bytes, by name."""
    out: dict[int, tuple[int, int, dict[str, int]]] = {}
    for b, op, n, data in trace.rows(
        f"select {bucket_sql} as b, op, count(*), coalesce(sum(result) filter (where op in ('read', 'write')), 0) "
        "from trace group by b, op",
        params,
    ):
        ops, nbytes, by = out.get(b, (0, 0, {}))
        by[op] = n
        out[b] = (ops + n, nbytes + int(data), by)
    return out


def _from_samples(
    trace: Trace, head: dict[str, Any], rows: list[tuple[int, dict[str, list[int]] | None]], torn: int, width: int
) -> NfsView:
    origin = head["start_ns"]
    sums: dict[int, _Sums] = defaultdict(_Sums)
    for t_ns, rpcs in rows:
        b = max(round((t_ns - origin) / width) - 1, 0)  # a sample closes the interval it ends
        for name, values in (rpcs or {}).items():
            sums[b].add(name, values)
    # an operation at x is in the interval (origin + b*width, origin + (b+1)*width]
    fuse = _fuse(trace, "floor((start_ns - $o - 1) / $w)::bigint", {"o": origin, "w": width})
    return _assemble("samples", head, origin, width, fuse, sums, torn, model=False)


def _from_model(trace: Trace, width: int) -> NfsView:
    origin = trace.origin_ns
    sums: dict[int, _Sums] = defaultdict(_Sums)
    params = {"o": origin, "w": width}
    for b, nfs, n, data, model_ns in trace.rows(
        """select (start_ns - $o) // $w as b, nfs, count(*),
                  coalesce(sum(result) filter (where op in ('read', 'write')), 0),
                  sum(latency_ns + transfer_ns)
           from trace where nfs is not null and nfs <> '' group by b, nfs""",
        params,
    ):
        data_rpc = True
        for part in nfs.split(","):
            name, _, times = part.partition(" x")
            k = n * (int(times) if times.isdigit() else 1)
            into = sums[b]
            # the operation's data goes to its first READ or WRITE; its modelled time to each RPC it sent
            carries = data_rpc and name.startswith(("READ", "WRITE"))
            into.add(name, [k, k, 0, int(data) if carries else 0, 0, 0, 0, 0, 0])
            into.model_ns[name] += int(model_ns) * k // n
            data_rpc = data_rpc and not carries
    fuse = _fuse(trace, "(start_ns - $o) // $w", params)
    return _assemble("model", None, origin, width, fuse, sums, 0, model=True)


def _assemble(
    source: str,
    head: dict[str, Any] | None,
    origin: int,
    width: int,
    fuse: dict[int, tuple[int, int, dict[str, int]]],
    sums: dict[int, _Sums],
    torn: int,
    model: bool,
) -> NfsView:
    intervals: list[Interval] = []
    total = _Sums()
    all_fuse: Counter[str] = Counter()
    fuse_bytes = 0
    for b in sorted(set(fuse) | set(sums)):
        ops, nbytes, by = fuse.get(b, (0, 0, {}))
        s = sums.get(b, _Sums())
        for name, v in s.rpcs.items():
            total.add(name, v)
            total.model_ns[name] += s.model_ns[name]
        all_fuse.update(by)
        fuse_bytes += nbytes
        intervals.append(
            {"t_s": b * width / 1e9, "fuse_ops": ops, "fuse_mb": nbytes / 1e6, "fuse": by, "rpcs": s.listing(model)}
        )
    span = (max(fuse.keys() | sums.keys()) - min(fuse.keys() | sums.keys()) + 1) if intervals else 0
    whole: Interval = {
        "t_s": 0.0,
        "fuse_ops": sum(all_fuse.values()),
        "fuse_mb": fuse_bytes / 1e6,
        "fuse": dict(all_fuse),
        "rpcs": total.listing(model),
    }
    h = head or {}
    return {
        "source": source,
        "device": h.get("device") if isinstance(h.get("device"), str) else None,
        "mountpoint": h.get("mountpoint") if isinstance(h.get("mountpoint"), str) else None,
        "fstype": h.get("fstype") if isinstance(h.get("fstype"), str) else None,
        "origin_ns": origin,
        "interval_s": width / 1e9,
        "intervals": intervals,
        "quiet": span - len(intervals),
        "total": whole,
        "torn_lines": torn,
    }


def _busiest(by: dict[str, int]) -> str:
    top = sorted(by.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    return ", ".join(f"{op} {n:,}" for op, n in top) + (", ..." if len(by) > 3 else "")


def _ms(x: float | None) -> str:
    return num_text(x)


def render(v: NfsView) -> str:
    """The view as text: one block of rows per interval, its RPCs one a row."""
    if v["source"] == "samples":
        title = (
            f"NFS view: RPCs the source's NFS client sent ({printable(v['device'] or '?')} on "
            f"{printable(v['mountpoint'] or '?')}, {printable(v['fstype'] or '?')}),\nfrom /proc/self/mountstats "
            f"sampled every second, beside the FUSE operations; intervals of {v['interval_s']:g} s "
            "from the first sample"
        )
        rtt = ["RTT ms", "exec ms"]
    else:
        title = (
            "NFS view: RPCs the MODEL's emulated NFS client sent (the trace's nfs column), beside the FUSE "
            f"operations;\nintervals of {v['interval_s']:g} s from the first record; "
            "model ms: the modelled time of the operations that sent the RPC"
        )
        rtt = ["model ms"]
    head = ["t_s", "FUSE ops", "FUSE MB", "busiest FUSE ops", "RPC", "count", "MB", *rtt]
    rows: list[list[str]] = []
    for iv in [*v["intervals"], v["total"]]:
        label = "total" if iv is v["total"] else f"{iv['t_s']:g}"
        left = [label, int_text(iv["fuse_ops"]), num_text(iv["fuse_mb"]), _busiest(iv["fuse"])]
        if not iv["rpcs"]:
            rows.append([*left, "-", "0", "0", *["-"] * len(rtt)])
        for i, r in enumerate(iv["rpcs"]):
            times = [_ms(r["rtt_ms"])] + ([] if v["source"] == "model" else [_ms(r["exec_ms"])])
            rows.append([*(left if i == 0 else [""] * 4), r["rpc"], int_text(r["count"]), num_text(r["mb"]), *times])
    notes = []
    if v["quiet"]:
        notes.append(f"{count(v['quiet'], 'quiet interval')} (nothing counted) left out")
    if v["torn_lines"]:
        notes.append("the sidecar's last line was torn (the server was killed while writing it) and is left out")
    return "\n".join([title, "", table(head, rows, "rrrllrr" + "r" * len(rtt)), *notes])
