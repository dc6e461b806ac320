"""`fusetrace fit DIR -o PROFILE.toml`: a profile fitted to what a trace saw.

Only operations that reached the server say anything about it, and only those that sent
it one request say what one request costs:

- An emulated trace names the NFS requests behind each operation (`nfs`) and carries the
  model's own account of it: the latency it sampled (`latency_ns`) and the time its bytes
  took (`transfer_ns`).  The fit reads those, from the operations that sent exactly one
  request.  Their `dur_ns` also holds the host's delays, which a rehearsal on the same
  host adds again: fitted from it, the rehearsal would count them twice.
- A trace taken over a real NFS mount (trace mode) has neither.  What the client answered
  from its caches took microseconds, a round trip to EFS hundreds: an operation of one of
  the kinds that send a single request counts as having reached the server when it took
  over three FUSE round trips (`fuse_round_trip_ns`; 150 µs without it), and its latency
  is its `dur_ns` plus one FUSE round trip (what the caller saw; the emulator replies that
  much early).  Data reads and writes: latency against size, a per-request cost plus a
  bandwidth (least squares over the medians of each size seen).

Per latency class the median and the 99th percentile; the throughput and operations per
second the trace reached, in 1-second windows, which are limits only where the trace
shows it was held by them (an emulated trace's `iops` and `throughput` gates) and are
otherwise lower bounds, written as comments; the most writes in service at once on one
file and namespace changes in one directory, which raise the base's slots where they are
above them.  Everything else comes from `--base`.  Each key's comment says how it was
derived and from how many records.
"""

import json
import os
import statistics
from dataclasses import dataclass

import duckdb

from ..emulator.params import LATENCY_CLASSES, MiB, Params, ProfileError
from ..emulator.profiles import load_profile
from ..errors import UserError
from ..texttable import count, int_text, printable
from ..trace import reader
from ..trace.metadata import atomic_write

MIN_RECORDS = 20  # fewer records of a class say nothing reliable about its percentiles
GATED_SHARE = 0.05  # a limit held this share of a kind's operations: it was pushed
NO_ROUND_TRIP_NS = 150_000  # the server-bound threshold of a trace-mode trace with no measured round trip

# The NFS requests of the emulated client (emulator/nfsclient.py) by the model's latency class.
_RPC_CLASS = {
    "GETATTR": "meta_read",
    "LOOKUP": "meta_read",
    "OPEN": "meta_read",
    "CLOSE": "meta_read",
    "READDIRPLUS": "meta_read",
    "STATFS": "meta_read",
    "ACCESS": "meta_read",
    "READLINK": "meta_read",
    "SETATTR": "meta_write",
    "OPEN(create)": "meta_write",
    "CREATE": "meta_write",
    "LINK": "meta_write",
    "REMOVE": "meta_write",
    "RENAME": "meta_write",
    "READ": "read",
    "WRITE": "write",
    "WRITE(FILE_SYNC)": "write",
    "COMMIT": "commit",
}
# Operations that send one request when they reach the server (a trace without `nfs`).
_OP_CLASS = {
    "getattr": "meta_read",
    "lookup": "meta_read",
    "open": "meta_read",
    "statfs": "meta_read",
    "access": "meta_read",
    "readlink": "meta_read",
    "setattr": "meta_write",
    "create": "meta_write",
    "mknod": "meta_write",
    "mkdir": "meta_write",
    "symlink": "meta_write",
    "link": "meta_write",
    "unlink": "meta_write",
    "rmdir": "meta_write",
    "rename": "meta_write",
    "read": "read",
    "fsync": "commit",
    "fsyncdir": "commit",
}
_MAKES = ("create", "mknod", "mkdir", "symlink")
_NAMESPACE = ("create", "mknod", "mkdir", "symlink", "link", "unlink", "rmdir", "rename")


@dataclass
class Key:
    """One line of the fitted profile: `key = value  # how`."""

    key: str
    value: float | int | str
    how: str

    def line(self) -> str:
        value = f'"{self.value}"' if isinstance(self.value, str) else _number(self.value)
        return f"{self.key} = {value}  # {self.how}"


class FitError(UserError):
    exit_code = 2


def run(args) -> int:
    try:
        base = load_profile(args.base)
    except ProfileError as exc:
        raise FitError(f"--base {args.base}: {exc}") from None
    fitted = Fitter(args.trace_dir, base).fit()
    text = render(args.trace_dir, args.base, fitted)
    output = os.path.abspath(args.output)
    if os.path.isdir(output):
        raise FitError(f"-o {args.output}: a directory, not a profile file")
    if not os.path.isdir(os.path.dirname(output)):
        raise FitError(f"-o {args.output}: no such directory {os.path.dirname(output)}")
    try:
        atomic_write(output, lambda f: f.write(text.encode()))
    except OSError as exc:
        raise FitError(f"-o {args.output}: cannot write: {exc.strerror or exc}") from None
    try:
        load_profile(output)  # what --emulate will read
    except ProfileError as exc:  # a fit the model refuses is a bug here, said plainly
        raise FitError(f"{args.output}: the fitted profile does not load: {exc}") from None
    keys = [k for k in fitted if not k.key.startswith("#")]
    print(
        f"fitted {len(keys)} keys from {args.trace_dir} into {args.output} (the rest from {args.base}); "
        f"use it with --emulate {args.output}"
    )
    return 0


def render(trace_dir: str, base: str, fitted: list[Key]) -> str:
    # The trace's name as TOML takes it: printable (any bytes, a newline even, may be in a
    # directory's name), and quoted as JSON, whose escapes TOML's basic strings share.
    shown = printable(os.path.abspath(trace_dir))
    lines = [
        f"# Fitted by `fusetrace fit` to the trace {shown}.",
        "# Each key says how it was derived; keys not here come from the base profile.",
        f'base = "{base}"',
        f"description = {json.dumps('fitted to the trace ' + os.path.basename(shown))}",
    ]
    for k in fitted:
        lines.append(k.how if k.key.startswith("#") else k.line())
    return "\n".join(lines) + "\n"


class Fitter:
    def __init__(self, trace_dir: str, base: Params):
        self.base = base
        files = reader.checked_parts(trace_dir)
        self.meta = reader.metadata(trace_dir)
        self.db = duckdb.connect()
        self.db.read_parquet(files, union_by_name=True).create_view("records")
        self.columns = {row[0] for row in self.db.execute("describe records").fetchall()}
        # what injected faults did (docs/FAULTS.md) is not the file system's behaviour to learn
        unfaulted = " where fault is null" if "fault" in self.columns else ""
        self.db.execute(f"create view trace as select * from records{unfaulted}")
        self.rt_ns = int(self.meta.get("fuse_round_trip_ns") or 0)
        self.modelled = "nfs" in self.columns and self._one("select count(*) from trace where nfs is not null") > 0

    def _one(self, sql: str):
        row = self.db.execute(sql).fetchone()
        return row[0] if row else None

    def fit(self) -> list[Key]:
        out: list[Key] = []
        for cls in LATENCY_CLASSES:
            out += self._latency(cls)
        out += self._stream()
        out += self._ceilings()
        out += self._slots()
        return out

    # ---- latency ----------------------------------------------------------------------

    def _samples(self, cls: str) -> tuple[list[float], list[int], str]:
        """(latencies in ms, their records' sizes, how they were chosen) of class `cls`."""
        if self.modelled:
            rpcs = [r for r, c in _RPC_CLASS.items() if c == cls]
            names = ", ".join(rpcs)
            # A name made just after the kernel looked it up is charged less than its
            # request's latency (the lookup's share was spent already: nfsclient's
            # _earlier), so those operations would pull the median down.
            rows = self.db.execute(
                "select latency_ns, size from trace where list_contains($rpcs, nfs) and latency_ns > 0 "
                "and not list_contains($makes, op)",
                {"rpcs": rpcs, "makes": list(_MAKES)},
            ).fetchall()
            made = " (names made are left out: their lookup's time is taken off)" if cls == "meta_write" else ""
            return (
                [ns / 1e6 for ns, _ in rows],
                [s for _, s in rows],
                f"the model's sampled latency (latency_ns) of operations that sent one {names}{made}",
            )
        ops = [op for op, c in _OP_CLASS.items() if c == cls]
        if not ops:
            return [], [], ""
        floor = 3 * self.rt_ns if self.rt_ns else NO_ROUND_TRIP_NS
        extra = ""
        if cls == "write":  # reached the server only when not buffered
            extra = " or (op = 'write' and kind in ('direct', 'sync'))" if "kind" in self.columns else ""
        rows = self.db.execute(
            f"select dur_ns, size from trace where errno = 0 and dur_ns > $floor and (list_contains($ops, op){extra})",
            {"floor": floor, "ops": ops},
        ).fetchall()
        how = (
            f"dur_ns plus one FUSE round trip ({self.rt_ns / 1e3:.0f} µs) of {', '.join(ops)} records over "
            f"{floor / 1e3:.0f} µs (faster ones were answered by the NFS client's caches)"
        )
        return [(ns + self.rt_ns) / 1e6 for ns, _ in rows], [s for _, s in rows], how

    def _latency(self, cls: str) -> list[Key]:
        ms, sizes, how = self._samples(cls)
        if len(ms) < MIN_RECORDS:
            seen = count(len(ms), "record") if ms else "no records"
            return [Key("#", "", f"# {cls}: {seen} of one request to the server: the base's latency stands")]
        if not self.modelled and cls in ("read", "write") and self.slope_ms_per_byte(ms, sizes):
            slope = self.slope_ms_per_byte(ms, sizes)
            ms = [m - slope * s for m, s in zip(ms, sizes)]
            how += ", less their bytes at the fitted stream rate"
        median = statistics.median(ms)
        p99 = max(_quantile(ms, 0.99), median)
        n = int_text(len(ms))
        return [
            Key(f"{cls}_latency_ms", round(median, 4), f"median of {n}: {how}"),
            Key(f"{cls}_latency_p99_ms", round(min(p99, 999 * median), 4), f"99th percentile of the same {n}"),
        ]

    @staticmethod
    def slope_ms_per_byte(ms: list[float], sizes: list[int]) -> float:
        """Latency against size: the least-squares slope through the median of each size
        seen at least 5 times, when the sizes span a factor of 4; else 0."""
        by_size: dict[int, list[float]] = {}
        for m, s in zip(ms, sizes):
            by_size.setdefault(s, []).append(m)
        points = [(s, statistics.median(v)) for s, v in by_size.items() if len(v) >= 5 and s > 0]
        if len(points) < 2 or max(s for s, _ in points) < 4 * min(s for s, _ in points):
            return 0.0
        xs, ys = zip(*points)
        return max(statistics.linear_regression(xs, ys).slope, 0.0)

    def _stream(self) -> list[Key]:
        """stream_mibps: the rate of one request's bytes."""
        if self.modelled:
            rows = self.db.execute(
                "select sum(size), sum(transfer_ns), count(*) from trace "
                "where nfs = 'READ' and transfer_ns > 0 and size > 0"
            ).fetchone()
            total, ns, n = rows if rows else (0, 0, 0)
            if not n or n < MIN_RECORDS:
                return []
            mibps = total / MiB / (ns / 1e9)
            return [
                Key(
                    "stream_mibps",
                    round(mibps, 2),
                    f"bytes over transfer time (transfer_ns) of {int_text(n)} operations that sent one READ",
                )
            ]
        ms, sizes, _ = self._samples("read")
        slope = self.slope_ms_per_byte(ms, sizes) if len(ms) >= MIN_RECORDS else 0.0
        if not slope:
            return [
                Key(
                    "#",
                    "",
                    "# stream_mibps: the trace's reads are too few or all of one size to tell "
                    "bandwidth from latency: the base's stands",
                )
            ]
        return [
            Key(
                "stream_mibps",
                round(1e3 / slope / MiB, 2),
                f"1 / slope of read latency against size (medians per size of {int_text(len(ms))} reads)",
            )
        ]

    # ---- ceilings -----------------------------------------------------------------------

    def _ceilings(self) -> list[Key]:
        row = self.db.execute("""
            with w as (select (start_ns - (select min(start_ns) from trace)) // 1000000000 as s,
                              count(*) filter (where op in ('read', 'lookup', 'getattr', 'open', 'opendir',
                                  'readdir', 'readlink', 'access', 'statfs', 'getxattr', 'listxattr')) as r_ops,
                              count(*) - r_ops as w_ops,
                              coalesce(sum(result) filter (where op = 'read'), 0) as r_bytes,
                              coalesce(sum(result) filter (where op = 'write'), 0) as w_bytes
                       from trace where errno = 0 group by s)
            select max(r_ops), max(w_ops), max(r_bytes), max(w_bytes), count(*) from w""").fetchone()
        assert row is not None
        r_ops, w_ops, r_bytes, w_bytes, seconds = row
        gates = self._gated()
        out: list[Key] = []
        for key, peak, gate_share, unit in (
            ("read_iops", r_ops, gates.get("iops_read", 0.0), "operations a second"),
            ("write_iops", w_ops, gates.get("iops_write", 0.0), "operations a second"),
        ):
            if gate_share >= GATED_SHARE and peak:
                out.append(
                    Key(
                        key,
                        float(peak),
                        f"the most {unit} in a 1-second window of {seconds}, where "
                        f"{100 * gate_share:.0f} % of them waited on the IOPS limit",
                    )
                )
        said = (
            f"# reached in a 1-second window (of {seconds}; successful operations only): "
            f"{int_text(r_ops or 0)} read-class operations (read, lookup, getattr, open, readdir ...) and "
            f"{int_text(w_ops or 0)} others, {(r_bytes or 0) / 1e6:.1f} MB/s read, "
            f"{(w_bytes or 0) / 1e6:.1f} MB/s written"
        )
        if not out and gates.get("throughput", 0.0) < GATED_SHARE:
            said += ": lower bounds (nothing in the trace waited on a limit), so the base's limits stand"
        elif gates.get("throughput", 0.0) >= GATED_SHARE:
            said += (
                f"; {100 * gates['throughput']:.0f} % of operations waited on the file system's throughput: "
                f"the base's throughput mode and credits stand, check them"
            )
        out.append(Key("#", "", said))
        return out

    def _gated(self) -> dict[str, float]:
        """The share of the reads and of the other operations that waited on the IOPS
        limit, and of all that waited on throughput (an emulated trace only)."""
        if not self.modelled:
            return {}
        if "kind" not in self.columns:
            return {}
        row = self.db.execute("""
            select count(*) filter (where gate = 'iops' and kind in ('read', 'meta_read'))
                       / greatest(count(*) filter (where kind in ('read', 'meta_read')), 1),
                   count(*) filter (where gate = 'iops' and kind not in ('read', 'meta_read'))
                       / greatest(count(*) filter (where kind not in ('read', 'meta_read')), 1),
                   count(*) filter (where gate = 'throughput') / greatest(count(*), 1)
            from trace where gate is not null and gate not in ('cache', 'kernel')""").fetchone()
        assert row is not None  # an aggregate always has its one row
        return {"iops_read": row[0], "iops_write": row[1], "throughput": row[2]}

    # ---- concurrency --------------------------------------------------------------------

    def _slots(self) -> list[Key]:
        base_writes = "op = 'write' and kind in ('direct', 'sync')" if "kind" in self.columns else "op = 'write'"
        out = []
        for key, where, params, what in (
            ("file_write_slots", base_writes, {}, "writes in service at once on one file"),
            (
                "dir_write_slots",
                "list_contains($namespace, op)",
                {"namespace": list(_NAMESPACE)},
                "namespace changes in service at once in one directory",
            ),
        ):
            most, n = self._most_overlapping(where, params)
            if n < MIN_RECORDS:
                continue
            theirs = getattr(self.base, key)
            if most > theirs:
                out.append(Key(key, most, f"the most {what} ({count(n, 'record')}): a lower bound"))
            else:
                out.append(
                    Key(
                        "#",
                        "",
                        f"# {key}: the most {what} in the trace was {most} ({count(n, 'record')}), "
                        f"within the base's {theirs}, which stands",
                    )
                )
        return out

    def _most_overlapping(self, where: str, params: dict[str, list[str]]) -> tuple[int, int]:
        """The most records matching `where` (its values in `params`) in flight at once on one
        inode, and how many there were."""
        row = self.db.execute(
            f"""
            with e as (select inode as g, start_ns as t, 1 as d from trace where {where} and errno = 0
                       union all
                       select inode, start_ns + dur_ns, -1 from trace where {where} and errno = 0),
            r as (select sum(d) over (partition by g order by t, d rows unbounded preceding) as running from e)
            select coalesce(max(running), 0), (select count(*) from trace where {where} and errno = 0) from r
        """,
            params,
        ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    at = q * (len(ordered) - 1)
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def _number(value: float | int) -> str:
    if isinstance(value, int):
        return str(value)
    return f"{value:.6g}" if abs(value) < 1e6 else f"{value:.1f}"
