"""`fusetrace fit DIR -o PROFILE.toml`: a profile fitted to what a trace saw.

Only operations that reached the server say anything about it, and only what one RPC
cost says what to set each RPC's latency to (fit_rpcs.py: which records, and how the
compounds, write-back and commits are read):

- An emulated trace names the NFS requests behind each operation (`nfs`) and carries the
  model's own account of it: the latency it sampled (`latency_ns`) and the time its bytes
  took (`transfer_ns`).  The fit reads those.  Their `dur_ns` also holds the host's
  delays, which a rehearsal on the same host adds again: fitted from it, the rehearsal
  would count them twice.
- A trace taken over a real NFS mount (trace mode) has neither: fit_infer.py replays it
  through the model's NFS client to name each record's RPCs.  An operation counts as
  having reached the server when the client sent one RPC for it and it took over three
  FUSE round trips (`fuse_round_trip_ns`; 150 µs without it): faster ones the real
  client answered from its caches.  Its latency is its `dur_ns` plus one FUSE round trip
  (what the caller saw; the emulator replies that much early).  Data reads and writes:
  latency against size, a per-request cost plus a bandwidth (least squares over the
  medians of each size seen).
- A syscall trace (`fusetrace capture`, trace_kind "syscalls") holds the system calls,
  before any cache, and no lookups: syscalls.py replays them through the kernel's caches
  (path walks, page cache, close-to-open) into the model's NFS client.  Its calls take no
  FUSE round trip: the latency is `dur_ns`, and the server-bound floor SYSCALL_FLOOR_NS.

The base (`--base`) is the trace's own profile when its metadata names one that loads,
else efs-bursting.  Per latency class the median and the 99th percentile, per RPC with a
key of its own its median; the rate of one request's bytes (`stream_mibps` from READs,
`stripe_write_mibps` from stable WRITEs where stripes are modelled); the throughput and
operations per second the trace reached, in 1-second windows, which are limits only
where the trace shows it was held by them (an emulated trace's `iops` and `throughput`
gates) and are otherwise lower bounds, written as comments; the most writes in service
at once on one file and namespace changes in one directory, which raise the base's slots
where they are above them.  Everything else comes from the base.  Each key's comment
says how it was derived and from how many records.
"""

import json
import os

import duckdb

from ..emulator.params import MiB, Params, ProfileError
from ..emulator.profiles import load_profile
from ..errors import UserError
from ..texttable import count, int_text, printable
from ..trace import partial, reader
from ..trace.metadata import atomic_write, trace_kind
from . import fit_infer, fit_rpcs, syscalls
from .fit_infer import Inference
from .fit_rpcs import MIN_RECORDS, Key, Row
from .rows import records
from .syscalls import Syscalls

GATED_SHARE = 0.05  # a limit held this share of a kind's operations: it was pushed
NO_ROUND_TRIP_NS = 150_000  # the server-bound threshold of a trace-mode trace with no measured round trip
# The server-bound threshold of a syscall trace (no FUSE round trip in it): 100 µs under the
# fastest RPC EFS publishes ("as low as 250 µs" reads, docs.aws.amazon.com/efs/latest/ug/
# performance.html), so that no reply of the server is cut, and over what a system call
# the client's caches answer takes: a stat 1 µs, a 1 MiB read of cached pages 48 µs (p99
# 90 µs; docs/REHEARSAL.md, "Fitting a syscall trace")
SYSCALL_FLOOR_NS = 150_000
DEFAULT_BASE = "efs-bursting"  # the base of a trace that names no profile of its own
_NAMESPACE = ("create", "mknod", "mkdir", "symlink", "link", "unlink", "rmdir", "rename")
_ROW = ["start_ns", "dur_ns", "op", "inode", "path", "nfs", "latency_ns", "wait_ns", "transfer_ns", "size", "kind"]


class FitError(UserError):
    exit_code = 2


def run(args) -> int:
    base_name, why = choose_base(args.trace_dir, args.base)
    try:
        base = load_profile(base_name)
    except ProfileError as exc:
        raise FitError(f"--base {args.base}: {exc}") from None
    print(f"base: {base_name} ({why})")
    left = partial.described(reader.metadata(args.trace_dir))
    if left is not None:  # latencies of a uniform sample stand for all; the ceilings are weighed by sample
        print(
            f"note: {printable(args.trace_dir)} left out {left}: ceilings are weighed by each record's "
            f"sample; an operation filtered out keeps the base's values"
        )
    fitted = Fitter(args.trace_dir, base).fit()
    text = render(args.trace_dir, base_name, fitted)
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
        f"fitted {len(keys)} keys from {args.trace_dir} into {args.output} (the rest from {base_name}); "
        f"use it with --emulate {args.output}"
    )
    return 0


def choose_base(trace_dir: str, given: str | None) -> tuple[str, str]:
    """The base profile's name, and why it: `given`, else the profile the trace was
    emulated on when that still loads (a shipped name, or a path from where the mount
    ran: tried as given, then beside the trace directory), else DEFAULT_BASE."""
    if given:
        return given, "--base"
    emulation = reader.metadata(trace_dir).get("emulation")
    named = emulation.get("profile") if isinstance(emulation, dict) else None
    if not isinstance(named, str) or not named:
        return DEFAULT_BASE, "the trace names no profile of its own"
    for candidate in (named, os.path.join(os.path.dirname(os.path.abspath(trace_dir)), named)):
        try:
            load_profile(candidate)
        except ProfileError:
            continue
        return candidate, "the trace's own profile, from its metadata"
    return DEFAULT_BASE, f"the trace's own profile {printable(named)} no longer loads"


def render(trace_dir: str, base: str, fitted: list[Key]) -> str:
    # The trace's name as TOML takes it: printable (any bytes, a newline even, may be in a
    # directory's name), and quoted as JSON, whose escapes TOML's basic strings share.
    shown = printable(os.path.abspath(trace_dir))
    lines = [
        f"# Fitted by `fusetrace fit` to the trace {shown}.",
        "# Each key says how it was derived; keys not here come from the base profile.",
        f"base = {json.dumps(base)}",
        f"description = {json.dumps('fitted to the trace ' + os.path.basename(shown))}",
    ]
    for k in fitted:
        lines.append(k.how if k.key.startswith("#") else k.line())
    return "\n".join(lines) + "\n"


class Fitter:
    def __init__(self, trace_dir: str, base: Params):
        self.trace_dir = trace_dir
        self.base = base
        files = reader.checked_parts(trace_dir)
        self.meta = reader.metadata(trace_dir)
        self.db = duckdb.connect()
        self.db.read_parquet(files, union_by_name=True).create_view("records")
        self.columns = {row[0] for row in self.db.execute("describe records").fetchall()}
        # what injected faults did (docs/FAULTS.md) is not the file system's behaviour to learn
        unfaulted = " where fault is null" if "fault" in self.columns else ""
        # a record stands for `sample` operations (format 7; 1 before): the ceilings weigh it so
        sample = "" if "sample" in self.columns else ", 1::uinteger as sample"
        self.db.execute(f"create view trace as select *{sample} from records{unfaulted}")
        self.syscalls = trace_kind(self.meta) == "syscalls"
        # a system call's dur_ns is what its caller saw: no FUSE round trip to add
        self.rt_ns = 0 if self.syscalls else int(self.meta.get("fuse_round_trip_ns") or 0)
        self.modelled = "nfs" in self.columns and self._one("select count(*) from trace where nfs is not null") > 0
        if self.syscalls:
            self.floor_ns = SYSCALL_FLOOR_NS
        else:
            self.floor_ns = 3 * self.rt_ns if self.rt_ns else NO_ROUND_TRIP_NS
        self.slopes: dict[str, float] = {}  # a trace-mode READ's and WRITE's ms per byte
        self.replay: Syscalls | None = None  # a syscall trace's replay, once its records are read
        self.inferred = [0, 0, 0]  # records replayed; of them, sent RPCs; and of those, took over the floor
        self.samples = fit_rpcs.collect(self._rows(), self.modelled, self._write_rate())
        if not self.modelled:
            self._less_transfer()
        fit_rpcs.separate(self.samples)

    def _write_rate(self) -> float:
        """Bytes a second of a WRITE's data: the trace's own profile's when its metadata
        has them, else the base's."""
        recorded = (self.meta.get("emulation") or {}).get("params") or {}
        p = {
            k: recorded.get(k, getattr(self.base, k))
            for k in ("file_stripe_size", "stripe_write_mibps", "stream_mibps")
        }
        mibps = (p["file_stripe_size"] and p["stripe_write_mibps"]) or p["stream_mibps"]
        return float(mibps or 1e7) * MiB

    def _one(self, sql: str):
        row = self.db.execute(sql).fetchone()
        return row[0] if row else None

    def _rows(self):
        """The records as fit_rpcs reads them, in start order: an emulated trace's with the
        model's account; a trace-mode trace's with the RPCs inferred (fit_infer.py; a
        syscall trace's: syscalls.py), its latency dur_ns plus a round trip (none for a
        system call), and those under the server-bound floor dropped."""
        inference: Inference | Syscalls | None = None
        wanted = fit_infer.COLUMNS
        if not self.modelled:
            origin = self._one("select min(start_ns) from trace") or 0
            if self.syscalls:
                inference = self.replay = Syscalls(self.base, origin)
                wanted = syscalls.COLUMNS
            else:
                inference = Inference(self.base, origin)
        columns = list(dict.fromkeys([*_ROW, "fault", "uid", *wanted]))
        at = [columns.index(c) for c in wanted]
        for rec in records(self.trace_dir, columns):
            start, dur, op, inode, path, nfs, latency, wait, transfer, size, kind, fault, uid = rec[:13]
            if inference is not None:
                # every record, so that the client's caches follow them all
                nfs, latency, wait = inference.rpcs(start, uid, tuple(rec[i] for i in at))
                self.inferred[0] += 1
                self.inferred[1] += bool(nfs)
                if dur <= self.floor_ns:
                    continue
                self.inferred[2] += bool(nfs)
            if fault is not None:
                continue
            ms = (latency if inference is None else dur + self.rt_ns) / 1e6
            yield Row(start, start + dur, op, inode, path, nfs, latency, wait, transfer, size, kind, ms)

    def source(self) -> str:
        if self.modelled:
            return "the model's account of each record (latency_ns; wait_ns where said)"
        if self.syscalls:
            return (
                f"dur_ns of system calls over {self.floor_ns / 1e3:.0f} µs for which the model's NFS client, "
                f"replaying the trace's path walks, page cache and closes on the base, sends that one RPC "
                f"(the others it answered from its caches)"
            )
        return (
            f"dur_ns plus one FUSE round trip ({self.rt_ns / 1e3:.0f} µs) of records over {self.floor_ns / 1e3:.0f} µs "
            f"for which the model's NFS client, replaying the trace on the base, sends that one RPC "
            f"(faster ones the NFS client answered from its caches)"
        )

    def fit(self) -> list[Key]:
        out: list[Key] = []
        out += fit_rpcs.latency_keys(self.samples, self.base, self.source())
        records, sent, over = self.inferred
        if records:  # what the inference kept: a trace of a fast file system keeps nothing, and says so
            out.append(
                Key(
                    "#",
                    "",
                    f"# of {count(records, 'record')}, {int_text(sent)} sent RPCs as the model's NFS client replays "
                    f"them, and {int_text(over)} of those took over {self.floor_ns / 1e3:.0f} µs: only those "
                    f"say what the server took",
                )
            )
        if self.replay is not None and self.replay.unknown:
            out.append(
                Key(
                    "#",
                    "",
                    f"# {count(self.replay.unknown, 'record')} of operations no system call makes (lookup, "
                    f"release...) in this syscall trace: not replayed",
                )
            )
        if self.samples.write_back:
            out.append(
                Key(
                    "#",
                    "",
                    f"# {int_text(self.samples.write_back)} buffered writes (WRITE(write-back)) say nothing of a "
                    f"WRITE's latency themselves: the model wrote them back in the background; write is fitted "
                    f"from stable WRITEs (O_DIRECT, a flush's one WRITE FILE_SYNC) and from flushes that waited "
                    f"for a small write's one WRITE",
                )
            )
        out += self._stream()
        out += self._stripes()
        out += self._ceilings()
        out += self._slots()
        return out

    # ---- latency ----------------------------------------------------------------------

    def _less_transfer(self) -> None:
        """A trace-mode READ's or WRITE's latency holds its bytes' time: less them, at the
        rate the sizes show (the slope of latency against size, kept for stream_mibps)."""
        for rpc in ("READ", "WRITE"):
            ms, sizes = self.samples.ms.get(rpc, []), self.samples.sizes.get(rpc, [])
            slope = fit_rpcs.slope_ms_per_byte(ms, sizes) if len(ms) >= MIN_RECORDS else 0.0
            if slope:
                self.samples.ms[rpc] = [m - slope * s for m, s in zip(ms, sizes)]
                self.slopes[rpc] = slope

    def _stream(self) -> list[Key]:
        """stream_mibps: the rate of one request's bytes."""
        reads = self.samples
        if self.modelled:
            pairs = [(s, t) for s, t in zip(reads.sizes["READ"], reads.transfer["READ"]) if s > 0 and t > 0]
            if len(pairs) < MIN_RECORDS:
                return []
            mibps = sum(s for s, _ in pairs) / MiB / (sum(t for _, t in pairs) / 1e9)
            return [
                Key(
                    "stream_mibps",
                    round(mibps, 2),
                    f"bytes over transfer time (transfer_ns) of {int_text(len(pairs))} operations that sent one READ",
                )
            ]
        slope = self.slopes.get("READ", 0.0)
        if not slope:
            return [
                Key(
                    "#",
                    "",
                    "# stream_mibps: the trace's reads are too few or all of one size to tell "
                    "bandwidth from latency: the base's stands",
                )
            ]
        n = int_text(len(reads.ms["READ"]))
        return [
            Key(
                "stream_mibps",
                round(1e3 / slope / MiB, 2),
                f"1 / slope of read latency against size (medians per size of {n} reads); read_latency_ms is "
                f"their latency less their bytes at this rate",
            )
        ]

    def _stripes(self) -> list[Key]:
        """stripe_write_mibps: the rate at which a stripe took a stable WRITE's bytes, where
        the base or the trace's own profile models stripes (its size stays the base's)."""
        params = (self.meta.get("emulation") or {}).get("params") or {}
        if not (self.base.file_stripe_size or params.get("file_stripe_size")):
            return []
        s = self.samples
        pairs = [(n, t) for n, t in zip(s.sizes.get("WRITE", []), s.transfer.get("WRITE", [])) if n > 0 and t > 0]
        if not self.modelled or len(pairs) < MIN_RECORDS:
            return [
                Key(
                    "#",
                    "",
                    f"# stripe_write_mibps: {count(len(pairs), 'stable WRITE')} with a modelled transfer time, "
                    f"under {MIN_RECORDS} or none (a trace-mode trace): the base's stands",
                )
            ]
        mibps = sum(n for n, _ in pairs) / MiB / (sum(t for _, t in pairs) / 1e9)
        return [
            Key(
                "stripe_write_mibps",
                round(mibps, 2),
                f"bytes over transfer time (transfer_ns) of {int_text(len(pairs))} stable WRITEs "
                f"(O_DIRECT, a flush's one WRITE FILE_SYNC); file_stripe_size stays the base's",
            )
        ]

    # ---- ceilings -----------------------------------------------------------------------

    def _ceilings(self) -> list[Key]:
        row = self.db.execute("""
            with w as (select (start_ns - (select min(start_ns) from trace)) // 1000000000 as s,
                              coalesce(sum(sample) filter (where op in ('read', 'lookup', 'getattr', 'open',
                                  'opendir', 'readdir', 'readlink', 'access', 'statfs', 'getxattr', 'listxattr')),
                                  0) as r_ops,
                              sum(sample) - r_ops as w_ops,
                              coalesce(sum(result::hugeint * sample) filter (where op = 'read'), 0) as r_bytes,
                              coalesce(sum(result::hugeint * sample) filter (where op = 'write'), 0) as w_bytes
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
        # a syscall trace's calls include those its client's caches answered: more than reached the server
        calls = "system calls" if self.syscalls else "operations"
        said = (
            f"# reached in a 1-second window (of {seconds}; successful operations only): "
            f"{int_text(r_ops or 0)} read-class {calls} (read, lookup, getattr, open, readdir ...) and "
            f"{int_text(w_ops or 0)} others, {(r_bytes or 0) / 1e6:.1f} MB/s read, "
            f"{(w_bytes or 0) / 1e6:.1f} MB/s written"
        )
        if self.syscalls:
            said += " (system calls, those the client's caches answered included)"
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
            # a syscall trace names a namespace change's directory by its path alone (inode 0)
            group = "regexp_replace(path, '/[^/]*$', '')" if self.syscalls and key == "dir_write_slots" else "inode"
            most, n = self._most_overlapping(where, params, group)
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

    def _most_overlapping(self, where: str, params: dict[str, list[str]], group: str) -> tuple[int, int]:
        """The most records matching `where` (its values in `params`) in flight at once on one
        `group` (inode, or a directory's path), and how many there were."""
        row = self.db.execute(
            f"""
            with e as (select {group} as g, start_ns as t, 1 as d from trace where {where} and errno = 0
                       union all
                       select {group}, start_ns + dur_ns, -1 from trace where {where} and errno = 0),
            r as (select sum(d) over (partition by g order by t, d rows unbounded preceding) as running from e)
            select coalesce(max(running), 0), (select count(*) from trace where {where} and errno = 0) from r
        """,
            params,
        ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])
