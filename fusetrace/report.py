"""`fusetrace report DIR`: who did what on a trace and how long it took, per operation,
process or directory; how much of the records' span the operations account for; what to
change (hints); operations and bytes over time (`--timeline`, `--plot`); and for an
emulated trace where the modelled time went (the gates that held each operation, and
wait / latency / transfer), the profile, and whether the host kept up.  Several trace
directories (a fleet's, one per host: `fusetrace report 'traces/*'`) give one report of
all their records, with a line per host.

Every pass over the records is DuckDB SQL on the Parquet parts, filters pushed into the
scan; Python only formats the few result rows.  `Trace(dir, filters).summary()` gives
the same data as `--json`.
"""

import errno as errnos
import json
import math
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, time, timedelta

import duckdb

from .errors import UserError
from .globs import glob_regex
from .hostload import load_words
from .texttable import count, printable, table
from .trace import metadata as meta
from .trace import reader
from .trace.names import readable

QUANTILES = {"p50_ns": 0.5, "p90_ns": 0.9, "p99_ns": 0.99, "p999_ns": 0.999}
TOP_GROUPS = 20  # groups the text report shows with --by unless --top says; --json has them all
# Every FUSE operation a trace can hold (fusetrace/server/handlers.py; forget has no reply)
OPERATIONS = ("lookup", "getattr", "setattr", "readlink", "mknod", "mkdir", "symlink", "unlink", "rmdir", "rename",
              "link", "open", "create", "read", "write", "flush", "release", "fsync", "opendir", "readdir",
              "releasedir", "fsyncdir", "statfs", "access", "setxattr", "getxattr", "listxattr", "removexattr")
# Operations on a directory itself (not an entry in it): --by dir files them under their own path
ON_DIRECTORY = ("opendir", "readdir", "releasedir", "fsyncdir")
COMM_BYTES = 15  # the kernel keeps a process name's first 15 bytes (TASK_COMM_LEN, 16 with its NUL)
TIMELINE_ROWS = 60  # at most this many buckets; their width is the first of WIDTHS_NS that fits
WIDTHS_NS = tuple(int(m * 10**e) for e in range(6, 9) for m in (1, 2, 5)) + tuple(
    s * 10**9 for s in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400))
# Hints: each fires only when its share or count is reached (tests/report/test_report.py runs both sides)
HINT_SHARE = 0.2  # of the records: xattr misses, failed lookups, getattrs on a mount with --attr-timeout 0
FSYNC_HINT_COUNT = 20  # at least this many fsync/fsyncdir calls ...
FSYNC_HINT_WRITES = 4  # ... and at most this many writes for each to the files they synced (pages: PAGE)
PAGE = 4096  # a write-back cache's write counts its pages

NoTrace = reader.NoTrace  # raised for a missing or empty trace directory (scenarios/plots.py catches it)


@dataclass(frozen=True)
class Filters:
    """Which records a report is about (`--op --pid --comm --path --since --until`);
    the defaults keep every record.  `since`/`until` are as the user wrote them: the
    trace resolves them (seconds since its first record, or a wall-clock time)."""

    ops: tuple[str, ...] = ()
    pids: tuple[int, ...] = ()
    comms: tuple[str, ...] = ()
    path: str | None = None
    since: str | None = None
    until: str | None = None

    def __post_init__(self) -> None:
        unknown = [op for op in self.ops if op not in OPERATIONS]
        if unknown:
            raise UserError(f"--op {unknown[0]}: not a FUSE operation (one of: {', '.join(OPERATIONS)})")
        # matched against the trace's text, where bytes that are not UTF-8 are U+FFFD
        # (fusetrace/trace/names.py): a name given with such bytes is made that text too
        object.__setattr__(self, "comms", tuple(os.fsencode(c)[:COMM_BYTES].decode("utf-8", "replace")
                                                for c in self.comms))
        if self.path is not None:
            object.__setattr__(self, "path", readable(self.path))
            glob_regex(self.path)  # refused here, before the trace is read

    @classmethod
    def from_args(cls, args) -> "Filters":
        ops = [op.strip() for given in args.op or () for op in given.split(",") if op.strip()]
        return cls(ops=tuple(dict.fromkeys(ops)), pids=tuple(args.pid or ()), comms=tuple(args.comm or ()),
                   path=args.path, since=args.since, until=args.until)

    def options(self) -> list[str]:
        """The filters as the command line gives them."""
        out = [f"--op {','.join(self.ops)}"] if self.ops else []
        out += [f"--pid {p}" for p in self.pids] + [f"--comm {c}" for c in self.comms]
        out += [f"--{k} {v}" for k, v in (("path", self.path), ("since", self.since), ("until", self.until)) if v]
        return out


class Trace:
    """A trace directory, or several read as one (a fleet's: reader.TraceSet), opened for
    queries through `filters`.  Only the parts present when it was opened are read, so a
    trace still being written reports consistently.

    `records`, `origin_ns` (the first record's start_ns: a trace's time 0) are of the
    whole trace; `matched`, `first_ns`, `last_ns`, `span_ns`, `total_ns` of the records
    the filters keep, which every other figure is about.  Over several traces, times are
    on the clock of the one that started first, and `metadata` is what they share
    (fleet_metadata)."""

    def __init__(self, directories: str | os.PathLike | Sequence[str | os.PathLike], filters: Filters = Filters()):
        given = [directories] if isinstance(directories, str | os.PathLike) else list(directories)
        self.set = reader.TraceSet([os.fspath(d) for d in given])
        members = self.set.members
        self.directories = [m.directory for m in members]
        self.directory = self.directories[0]
        self.fleet = len(members) > 1
        self.label = f"{len(members)} traces" if self.fleet else self.directory
        self.files = self.set.files
        self._db = duckdb.connect()
        self.columns = self.set.create_view(self._db, "all_records")
        if self.fleet:
            self.metadata, self.metadata_error = fleet_metadata(self.set), None
        else:
            self.metadata, self.metadata_error = members[0].metadata, members[0].metadata_error
        self.format_version = min(m.format_version for m in members)
        totals = "count(*), min(start_ns), max(start_ns + dur_ns), coalesce(sum(dur_ns), 0)"
        whole = self._one(f"select {totals} from all_records")
        self.records, self.origin_ns = whole[:2]
        self.filters = filters
        self.since_ns = self._instant("since", filters.since)
        self.until_ns = self._instant("until", filters.until)
        if self.since_ns is not None and self.until_ns is not None and self.since_ns >= self.until_ns:
            raise UserError(f"--since {filters.since} is not before --until {filters.until}")
        where = self._condition()
        self._db.execute(f"create view trace as select * from all_records {'where ' + where if where else ''}")
        self.matched, self.first_ns, self.last_ns, self.total_ns = self._one(
            f"select {totals} from trace") if where else whole
        self.span_ns = self.last_ns - self.first_ns if self.matched else 0

    def _one(self, sql: str) -> tuple:
        row = self._db.execute(sql).fetchone()
        assert row is not None  # an aggregate always has its one row
        return row

    def _need_comm(self, what: str) -> None:
        if "comm" not in self.columns:
            raise UserError(f"{self.label}: {what}: {'these traces name' if self.fleet else 'this trace names'} "
                            f"no processes (format "
                            f"{self.format_version}, recorded before format 3 added comm); --pid and --by pid "
                            f"work on it")

    def _condition(self) -> str:
        """The filters as one DuckDB condition ("" for none)."""
        f = self.filters
        terms = []
        if f.ops:
            terms.append(f"op in ({', '.join(map(_literal, f.ops))})")
        if f.pids:
            terms.append(f"pid in ({', '.join(str(int(p)) for p in f.pids)})")
        if f.comms:
            self._need_comm("--comm")
            terms.append(f"comm in ({', '.join(map(_literal, f.comms))})")
        if f.path is not None:
            terms.append(f"regexp_full_match(path, {_literal(glob_regex(self._below_mount(f.path)))})")
        if self.since_ns is not None:
            terms.append(f"start_ns >= {self.since_ns}")
        if self.until_ns is not None:
            terms.append(f"start_ns < {self.until_ns}")
        return " and ".join(terms)

    def _below_mount(self, pattern: str) -> str:
        """A glob written with the mountpoint (or source) in front, as the trace's paths are not."""
        for root in (self.metadata.get("mountpoint"), self.metadata.get("source")):
            root = readable(root).rstrip("/") if isinstance(root, str) else ""  # as the glob was made (Filters)
            if root and pattern.startswith(root + "/"):
                return pattern[len(root):]
        return pattern

    def _instant(self, option: str, text: str | None) -> int | None:
        """--since/--until T as a trace time (CLOCK_MONOTONIC ns): seconds since the first
        record, a time of day (its occurrence within 12 hours of the first record, local
        time) or an ISO date and time (local time unless it gives its zone)."""
        if text is None:
            return None
        origin = self.origin_ns or 0
        try:
            seconds = float(text)
        except ValueError:
            pass
        else:
            if not math.isfinite(seconds) or seconds < 0:
                raise UserError(f"--{option} {text}: seconds since the trace's first record must be 0 or more")
            return origin + round(seconds * 1e9)
        wall: datetime | None = None
        try:
            if re.fullmatch(r"\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?", text):
                of_day = time.fromisoformat(text if len(text.split(":")[0]) == 2 else "0" + text)
            else:
                wall = datetime.fromisoformat(text).astimezone()
        except ValueError:
            raise UserError(f"--{option} {text}: not seconds since the trace's first record (12.5), a time of day "
                            f"(14:03:07) or a date and time (2026-11-23T14:03:07)") from None
        if "start_wall_ns" not in self.metadata or "start_monotonic_ns" not in self.metadata:
            why = self.metadata_error or f"no start_wall_ns in its {meta.NAME}"
            raise UserError(f"--{option} {text}: this trace has no clock mapping ({why}); give seconds since "
                            f"its first record")
        if wall is None:
            first = datetime.fromtimestamp(meta.to_wall_ns(self.metadata, origin) / 1e9).astimezone()
            wall = datetime.combine(first.date(), of_day, tzinfo=first.tzinfo)
            wall += timedelta(days=round((first - wall) / timedelta(days=1)))  # the nearest occurrence
        wall_ns = round(wall.timestamp() * 1e6) * 1000
        return self.metadata["start_monotonic_ns"] + (wall_ns - self.metadata["start_wall_ns"])

    def _group(self, by: str) -> str:
        """The SQL expression of a --by key."""
        if by == "dir":
            return (f"case when op in ({', '.join(map(_literal, ON_DIRECTORY))}) then path "
                    f"else coalesce(nullif(parse_dirpath(path, 'forward_slash'), ''), '/') end")
        if by == "comm":
            self._need_comm("--by comm")
        return by

    def hosts(self) -> list[dict]:
        """Per host, of the records the filters keep: the traces taken there, operations,
        errors, operations per second over the whole span (so that hosts compare, and add up
        to the report's), their summed latency (`total_ns`, and its share of all hosts'),
        and the host's own span, from its first operation to its last reply; most total
        time first."""
        traces: dict[str, int] = {}
        for m in self.set.members:
            traces[m.host] = traces.get(m.host, 0) + 1
        rows = self._db.execute("""
            select host, count(*), count(*) filter (where errno <> 0), sum(dur_ns),
                   max(start_ns + dur_ns) - min(start_ns)
            from trace group by host order by sum(dur_ns) desc, host""").fetchall()
        total = self.total_ns or 1
        return [{"host": host, "traces": traces.get(host, 0), "count": n, "errors": errors, "total_ns": int(summed),
                 "share": summed / total, "span_ns": span,
                 "ops_per_s": n / (self.span_ns / 1e9) if self.span_ns else None}
                for host, n, errors, summed, span in rows]

    def ops(self, by: str | None = None, top: int | None = None) -> tuple[list[dict], int]:
        """One row per op (or per (group, op), `by` comm, pid, path or dir), biggest total
        time first, and the number of groups; `top` keeps only the groups with most total
        time.  Each row has its errors by name (`errnos`, most first); by pid, the names the
        process ran under (`comms`, most records first)."""
        if by not in (None, "comm", "pid", "path", "dir", "host"):
            raise ValueError(f"by must be comm, pid, path, dir or host, not {by!r}")
        key = f'{self._group(by)} as "{by}"' if by else None
        stats = f"""
            select {key + ', ' if key else ''}op, count(*) as count, count(*) filter (where errno <> 0) as errors,
                   coalesce(sum(result) filter (where op in ('read', 'write')), 0) as bytes,
                   sum(dur_ns) as total_ns, avg(dur_ns) as mean_ns,
                   quantile_cont(dur_ns, {list(QUANTILES.values())}) as q, max(dur_ns) as max_ns
            from trace group by all"""
        if by:
            limit = f"limit {int(top)}" if top else ""
            sql = f"""
                with s as ({stats}),
                k as (select "{by}", sum(total_ns) as group_ns, count(*) over () as groups
                      from s group by "{by}" order by group_ns desc, "{by}" {limit})
                select s.*, k.groups from s join k using ("{by}")
                order by k.group_ns desc, "{by}", total_ns desc, op"""
        else:
            sql = f"select *, 1 as groups from ({stats}) order by total_ns desc, op"
        cursor = self._db.execute(sql)
        names = [d[0] for d in cursor.description]
        rows = [dict(zip(names, r)) for r in cursor.fetchall()]
        errors = self._errors(key)
        comms: dict[int, list[str]] = {}
        if by == "pid" and "comm" in self.columns:
            for pid, comm, _ in self._db.execute("""
                    select pid, comm, count(*) as n from trace where comm <> '' group by all
                    order by pid, n desc, comm""").fetchall():
                comms.setdefault(pid, []).append(comm)
        span_s = self.span_ns / 1e9
        groups = rows[0]["groups"] if rows else 0
        for r in rows:
            del r["groups"]
            r.update(zip(QUANTILES, r.pop("q")))
            r["ops_per_s"] = r["count"] / span_s if span_s else None
            r["bytes_per_s"] = r["bytes"] / span_s if span_s else None
            r["errnos"] = errors.get((r[by], r["op"]) if by else (r["op"],), {})
            if by == "pid":
                r["comms"] = comms.get(r["pid"], [])
        return rows, groups

    def _errors(self, key: str | None) -> dict[tuple, dict[str, int]]:
        """{(group, op) or (op,): {errno name: count, most first}} of the failed records."""
        errors: dict[tuple, dict[str, int]] = {}
        for *k, code, n in self._db.execute(f"""
                select {key + ', ' if key else ''}op, errno, count(*) as n from trace where errno <> 0
                group by all order by n desc, errno""").fetchall():
            errors.setdefault(tuple(k), {})[errnos.errorcode.get(code, f"errno {code}")] = n
        return errors

    def faults(self) -> list[dict]:
        """Per fault rule (docs/FAULTS.md): the records it acted on, and per op and errno
        how many (errno 0: held by a stall, cut short, or a write whose write-back failed)."""
        if "fault" not in self.columns:
            return []
        out: dict[str, dict] = {}
        for rule, op, code, n in self._db.execute("""
                select fault, op, errno, count(*) as n from trace where fault is not null
                group by all order by fault, n desc, op""").fetchall():
            entry = out.setdefault(rule, {"rule": rule, "records": 0, "ops": []})
            entry["records"] += n
            entry["ops"].append({"op": op, "errno": errnos.errorcode.get(code, str(code)) if code else None,
                                 "count": n})
        return list(out.values())

    def _per_op(self) -> dict[str, dict]:
        """{op: {count, total_ns, errnos}}: what the hints go by, without ops()'s percentiles."""
        errors = self._errors(None)
        return {op: {"count": n, "total_ns": total, "errnos": errors.get((op,), {})} for op, n, total in
                self._db.execute("select op, count(*), sum(dur_ns) from trace group by op").fetchall()}

    def shaping(self) -> list[dict] | None:
        """Per op, where the modelled time of its shaped operations went: how many
        (`count`), their modelled time (`modelled_ns`) split into `wait_ns`, `latency_ns`
        and `transfer_ns`, and the gates that set it with their counts, most first
        (`gates`); most modelled time first.  [] when nothing was shaped (a trace-only
        mount); None for a format 1 trace, which has no such columns."""
        if "gate" not in self.columns:
            return None
        rows = self._db.execute("""
            select op, gate, count(*), sum(wait_ns), sum(latency_ns), sum(transfer_ns)
            from trace where gate is not null group by op, gate order by count(*) desc, gate""").fetchall()
        out: dict[str, dict] = {}
        for op, gate, n, wait, latency, transfer in rows:
            r = out.setdefault(op, {"op": op, "count": 0, "modelled_ns": 0, "wait_ns": 0, "latency_ns": 0,
                                    "transfer_ns": 0, "gates": {}})
            r["count"] += n
            r["modelled_ns"] += wait + latency + transfer
            r["wait_ns"] += wait
            r["latency_ns"] += latency
            r["transfer_ns"] += transfer
            r["gates"][gate] = n
        return sorted(out.values(), key=lambda r: (-r["modelled_ns"], r["op"]))

    def histograms(self) -> dict[str, list[dict]]:
        """Per op, log2 buckets of dur_ns: bucket b holds [2**b, 2**(b+1)) ns (0 ns
        counts in bucket 0); empty buckets between the first and last are included."""
        rows = self._db.execute("""
            select op, case when dur_ns < 2 then 0 else floor(log2(dur_ns))::integer end as b,
                   count(*) as n, sum(sum(dur_ns)) over (partition by op) as op_ns
            from trace group by op, b order by op_ns desc, op, b""").fetchall()
        out: dict[str, dict[int, int]] = {}
        for op, b, n, _ in rows:
            out.setdefault(op, {})[b] = n
        return {op: [{"bucket": b, "low_ns": 2 ** b, "high_ns": 2 ** (b + 1), "count": counts.get(b, 0)}
                     for b in range(min(counts), max(counts) + 1)]
                for op, counts in out.items()}

    def coverage(self) -> dict | None:
        """How much of the records' span [first start, last reply) had at least one
        operation in flight (`busy_ns`: the union of their [start_ns, start_ns + dur_ns)),
        and with each operation widened by FUSE's round trip measured at mount
        (`busy_with_round_trip_ns`, None on a trace that has no such figure); the rest of
        the span is the application's own time.  None when no record matched.

        Sorted by start, an operation adds to the union what it reaches past the latest
        end of those before it: one window pass in DuckDB.  Widening every interval by
        the same round trip r adds r to the union's start (cut off again: the span is
        the records'), whichever side of the handler it is put."""
        if not self.matched:
            return None
        rt = self.metadata.get("fuse_round_trip_ns")
        rt = int(rt) if isinstance(rt, int | float) and rt > 0 else None
        busy, widened = self._one(f"""
            select coalesce(sum(greatest(e - greatest(s, coalesce(m, s)), 0)), 0),
                   coalesce(sum(greatest(e - greatest(s - {rt or 0}, coalesce(m, s - {rt or 0})), 0)), 0)
            from (select start_ns as s, start_ns + dur_ns as e,
                         max(start_ns + dur_ns) over (order by start_ns rows between unbounded preceding
                                                      and 1 preceding) as m
                  from trace)""")
        span = self.span_ns
        out = {"span_ns": span, "busy_ns": int(busy), "busy_share": busy / span if span else None,
               "summed_ns": self.total_ns, "round_trip_ns": rt, "round_trips_ns": None,
               "busy_with_round_trip_ns": None, "busy_with_round_trip_share": None}
        if rt is not None:
            out.update(round_trips_ns=rt * self.matched, busy_with_round_trip_ns=int(widened) - rt,
                       busy_with_round_trip_share=(int(widened) - rt) / span if span else None)
        busy_share = out["busy_with_round_trip_share"] if rt is not None else out["busy_share"]
        out["rest_share"] = None if busy_share is None else 1 - busy_share
        return out

    def hints(self, per_op: dict[str, dict] | None = None) -> list[dict]:
        """What to change, where the records show a common cause of lost time: each a
        `hint` name, one line of `text` with its remedy, and the figures behind it.
        `per_op`: ops()'s ungrouped rows by op, when the caller has them."""
        out = []
        n = self.matched
        m = self.metadata
        options = m.get("options") or {}
        if n:
            ops = self._per_op() if per_op is None else per_op
            none: dict = {"count": 0, "total_ns": 0, "errnos": {}}
            xattr_misses = ops.get("getxattr", none)["errnos"].get("ENODATA", 0)
            lookup_misses = ops.get("lookup", none)["errnos"].get("ENOENT", 0)
            syncs = sum(ops.get(op, none)["count"] for op in ("fsync", "fsyncdir"))
            getattrs = ops.get("getattr", none)["count"]
            if xattr_misses >= HINT_SHARE * n:  # with --no-xattrs the mount answers ENOSYS, once
                named = self._db.execute(f"""
                    select path2, count(*) as k, count(*) over () as names from trace
                    where op = 'getxattr' and errno = {errnos.ENODATA}
                    group by all order by k desc, path2 limit 2""").fetchall()
                names = ", ".join(f"{name} {_int(k)}" for name, k, _ in named)
                others = named[0][2] - len(named) if named else 0
                if others:
                    left = xattr_misses - sum(k for _, k, _ in named)
                    names += f", {count(others, 'other name')} {_int(left)}"
                out.append({"hint": "xattr-misses", "records": xattr_misses, "share": xattr_misses / n,
                            "text": f"getxattr: {_pct(xattr_misses / n)} of the records are look-ups of extended "
                                    f"attributes the file does not have ({names}): mount with --no-xattrs and the "
                                    f"kernel stops asking (automatic over a source without xattrs, such as EFS)"})
            if lookup_misses >= HINT_SHARE * n:
                [(where, k)] = self._db.execute(f"""
                    select {self._group('dir')} as d, count(*) as k from trace
                    where op = 'lookup' and errno = {errnos.ENOENT}
                    group by all order by k desc, d limit 1""").fetchall()
                cached = "" if "emulation" in m or (m.get("options") or {}).get("negative_timeout") else (
                    "; this mount caches no absent names and an NFS client does (for acdirmin, 30 s), so EFS "
                    "sees fewer of them: mount with --negative-timeout 30 to trace what it would")
                out.append({"hint": "failed-lookups", "records": lookup_misses, "share": lookup_misses / n,
                            "text": f"lookup: {_pct(lookup_misses / n)} of the records look up names that do not "
                                    f"exist (most in {where}: {_int(k)}): a program searching a list of directories "
                                    f"(PATH, PYTHONPATH, LD_LIBRARY_PATH, -I) one after another; shorten the list or "
                                    f"put the usual hit first{cached}"})
            writes_seen = not self.filters.ops or "write" in self.filters.ops  # --op fsync: writes unknown
            if syncs >= FSYNC_HINT_COUNT and writes_seen:
                # with FUSE's write-back cache a write record is the kernel's write-back of many
                # write(2) calls: its pages are counted instead
                pages = bool(options.get("writeback_cache"))
                counted = f"sum(greatest(1, (size + {PAGE - 1}) // {PAGE}))" if pages else "count(*)"
                # per process: one writing in bulk and syncing once (fio) hides none that syncs every
                # few writes (sqlite); each judged by its writes to the files it synced
                synced, flagged, writes, flagged_ns = self._one(f"""
                    with synced as (select distinct pid, path from trace where op in ('fsync', 'fsyncdir')),
                    per as (
                        select pid, count(*) filter (where op <> 'write') as s,
                               coalesce({counted} filter (where op = 'write'
                                                          and (pid, path) in (select * from synced)), 0) as w,
                               coalesce(sum(dur_ns) filter (where op <> 'write'), 0) as ns
                        from trace where op in ('fsync', 'fsyncdir', 'write') group by pid),
                    flagged as (select * from per where s > 0 and w <= {FSYNC_HINT_WRITES} * s)
                    select (select count(distinct path) from synced where pid in (select pid from flagged)),
                           coalesce(sum(s), 0), coalesce(sum(w), 0), coalesce(sum(ns), 0)
                    from flagged""")
                if flagged >= FSYNC_HINT_COUNT:
                    share = flagged_ns / self.total_ns if self.total_ns else 0
                    out.append({"hint": "fsync-per-write", "syncs": flagged, "writes": writes, "synced": synced,
                                "summed_share": share,
                                "text": f"fsync: {_int(flagged)} calls (fsyncdir included) on {_int(synced)} "
                                        f"{'file or directory' if synced == 1 else 'files and directories'}, "
                                        f"one for every {writes / flagged:.1f} "
                                        f"{'pages written' if pages else 'writes'} to them, "
                                        f"{_pct(share)} of the summed operation time: each waits until the data is on "
                                        f"stable storage (on EFS a round trip to the server); make fewer, larger "
                                        f"transactions (sqlite: PRAGMA journal_mode=WAL with synchronous=NORMAL syncs "
                                        f"at checkpoints only)"})
            if "entry" in self.columns:  # an unlink's or rename's open file (format 2 on; 0 before fusetrace named it)
                [hidden] = self._one("select count(*) from trace where op in ('unlink', 'rename') and entry <> 0 "
                                     "and errno = 0")
                if hidden:
                    out.append({"hint": "removed-while-open", "records": hidden,
                                "text": f"unlink, rename: {count(hidden, 'name')} of files still open removed or "
                                        f"replaced: an NFS client renames each file to a hidden .nfsXXXX (a LOOKUP and "
                                        f"a RENAME the caller waits for) and removes it at its last close; until then "
                                        f"rm -rf of its directory fails (EBUSY, ENOTEMPTY). Close files before "
                                        f"removing them"})
            if getattrs >= HINT_SHARE * n and options.get("attr_timeout") == 0:
                out.append({"hint": "attr-timeout-0", "records": getattrs, "share": getattrs / n,
                            "text": f"getattr: {_pct(getattrs / n)} of the records: this mount had --attr-timeout 0, "
                                    f"so every stat reached it; the default 1 s (an NFS client caches attributes "
                                    f"3-60 s) answers most from the kernel's cache"})
        missing = (m.get("dropped") or 0) + (m.get("lost") or 0)
        if missing:
            out.append({"hint": "missing-records", "records": missing,
                        "text": f"the trace is missing {_int(missing)} records (dropped or lost, see above): every "
                                f"count here is short; trace to a local disk that keeps up, not to the traced file "
                                f"system or a network one"})
        return out

    def timeline(self) -> dict | None:
        """Operations and bytes over time: buckets of `width_ns` aligned on the trace's
        first record (time 0), from the first matched record's to the last's; per bucket
        the operations that started in it, their errors, and the bytes read and written
        by them.  At most TIMELINE_ROWS buckets.  None when no record matched."""
        if not self.matched:
            return None
        origin = self.origin_ns
        low, high = self._one("select min(start_ns), max(start_ns) from trace")
        width = next((w for w in WIDTHS_NS if (high - origin) // w - (low - origin) // w < TIMELINE_ROWS),
                     math.ceil((high - low) / (TIMELINE_ROWS - 1) / 86400e9) * 86400 * 10**9)
        rows = {b: r for b, *r in self._db.execute(f"""
            select (start_ns - {origin}) // {width} as b, count(*), count(*) filter (where errno <> 0),
                   coalesce(sum(result) filter (where op = 'read'), 0),
                   coalesce(sum(result) filter (where op = 'write'), 0)
            from trace group by b""").fetchall()}
        first, last = (low - origin) // width, (high - origin) // width
        wall = "start_wall_ns" in self.metadata and "start_monotonic_ns" in self.metadata
        buckets = []
        for b in range(first, last + 1):
            n, errors, read, written = rows.get(b, (0, 0, 0, 0))
            start = origin + b * width
            buckets.append({"t_s": b * width / 1e9, "start_ns": start,
                            "wall_ns": meta.to_wall_ns(self.metadata, start) if wall else None,
                            "ops": n, "errors": errors, "read_bytes": int(read), "write_bytes": int(written),
                            "ops_per_s": n / (width / 1e9), "read_mb_per_s": read / 1e6 / (width / 1e9),
                            "write_mb_per_s": written / 1e6 / (width / 1e9)})
        return {"origin_ns": origin, "width_ns": width, "buckets": buckets}

    def summary(self, by: str | None = None, histogram: bool = False, top: int | None = None,
                timeline: bool = False) -> dict:
        """Everything the report shows, as plain data (what --json prints)."""
        ops, groups = self.ops(by, top)
        m = self.metadata
        out = {
            "directory": None if self.fleet else self.directory,
            "directories": self.directories,
            "traces": self.traces(),
            "hosts": self.hosts(),
            "unaligned": self.set.unaligned,
            "files": len(self.files),
            "records": self.records,
            "format_version": self.format_version,
            "filters": self._filters(),
            "matched": self.matched,
            "origin_ns": self.origin_ns,
            "first_ns": self.first_ns,
            "last_ns": self.last_ns,
            "span_ns": self.span_ns,
            "total_ns": self.total_ns,
            "metadata": m,
            "metadata_error": self.metadata_error,
            "closed": all("end_wall_ns" in t.metadata for t in self.set.members),
            "by": by,
            "top": top,
            "groups": groups,
            "ops": ops,
            "coverage": self.coverage(),
            "shaping": self.shaping(),
            "faults": self.faults(),
            "hints": self.hints(None if by else {r["op"]: r for r in ops}),
        }
        if histogram:
            out["histograms"] = self.histograms()
        if timeline:
            out["timeline"] = self.timeline()
        return out

    def traces(self) -> list[dict]:
        """Per trace directory read: its host, records, parts, format, and what its reader
        must be warned of (`warning`: no metadata, or not closed; else None); on an
        emulated one, its `profile` and whether the host set the pace (`host_bound`, None
        when unknown)."""
        out = []
        for i, t in enumerate(self.set.members):
            m = t.metadata
            warning = t.metadata_error or (None if "end_wall_ns" in m else _not_closed(m))
            load = m.get("host_load")
            load = load if isinstance(load, dict) else {}
            out.append({"directory": t.directory, "host": t.host,
                        "records": self._one(f"select count(*) from all_records_{i}")[0],
                        "files": len(t.files), "format_version": t.format_version, "warning": warning,
                        "profile": (m.get("emulation") or {}).get("profile") if "emulation" in m else None,
                        "host_bound": load.get("host_bound") if "emulation" in m else None})
        return out

    def _filters(self) -> dict | None:
        f = self.filters
        if f == Filters():
            return None
        return {"op": list(f.ops), "pid": list(f.pids), "comm": list(f.comms), "path": f.path,
                "path_regex": None if f.path is None else glob_regex(self._below_mount(f.path)),
                "since": f.since, "since_ns": self.since_ns, "until": f.until, "until_ns": self.until_ns,
                "options": f.options()}


_ABSENT = object()


def fleet_metadata(traces: reader.TraceSet) -> dict:
    """What a report over several traces says of them together, in a trace's metadata's
    keys: those every trace has with the same value (`options` key by key), the counters
    added up, the clock of the trace that started first (the records' clock), the mean of
    their FUSE round trips when each has one, the profiles emulated, every warning once.
    What belongs to one run alone (its end, pid, host_load, metrics) is left out."""
    each = [m.metadata for m in traces.members]
    first, rest = each[0], each[1:]
    out = {k: v for k, v in first.items() if all(o.get(k, _ABSENT) == v for o in rest)}
    for key in ("end_wall_ns", "end_monotonic_ns", "start_wall_ns", "start_monotonic_ns", "pid", "host_load",
                "metrics_per_minute", "last_error", "fuse_round_trip_ns", "emulation", "warnings"):
        out.pop(key, None)
    out.update({k: traces.base[k] for k in ("start_wall_ns", "start_monotonic_ns") if k in traces.base})
    for key in ("records", "files", "dropped", "lost", "write_errors"):
        if any(key in o for o in each):
            out[key] = sum(o.get(key) or 0 for o in each)
    options: list[dict] = [o["options"] if isinstance(o.get("options"), dict) else {} for o in each]
    out["options"] = {k: v for k, v in options[0].items() if all(o.get(k, _ABSENT) == v for o in options[1:])}
    errors = [o["last_error"] for o in each if o.get("last_error")]
    if errors:
        out["last_error"] = errors[-1]
    trips = [t for o in each if isinstance(t := o.get("fuse_round_trip_ns"), int | float) and t > 0]
    if len(trips) == len(each):
        out["fuse_round_trip_ns"] = round(sum(trips) / len(trips))
    profiles = sorted({str((o["emulation"] or {}).get("profile")) for o in each if "emulation" in o})
    if profiles:
        out["emulation"] = {"profile": ", ".join(profiles)}
    warnings = list(dict.fromkeys(w for o in each for w in o.get("warnings") or ()))
    if warnings:
        out["warnings"] = warnings
    return out


def run(args) -> int:
    """The `fusetrace report` command (its arguments: cli.py's _report_parser)."""
    if args.plot is not None:
        if not args.timeline:
            raise UserError(f"--plot {args.plot}: draws the timeline; give --timeline with it")
        if not args.plot.lower().endswith(".png"):
            raise UserError(f"--plot {args.plot}: the plot is a PNG; name the file .png")
        folder = os.path.dirname(os.path.abspath(args.plot))
        if not os.path.isdir(folder):
            raise UserError(f"--plot {args.plot}: no such directory {folder}")
    filters = Filters.from_args(args)
    (directories,) = expand_traces(args.trace_dir)
    try:
        trace = Trace(directories, filters)
        s = trace.summary(args.by, args.histogram, None if args.json else args.top, args.timeline)
    except duckdb.Error as exc:
        what = directories[0] if len(directories) == 1 else " ".join(args.trace_dir)
        raise UserError(f"{what}: cannot read the trace: {str(exc).splitlines()[0]}") from None
    if args.plot is not None and s["timeline"] is not None:
        try:
            plot_timeline(args.plot, s)
        except OSError as exc:
            raise UserError(f"--plot {args.plot}: cannot write it: {exc.strerror or exc}") from None
        s["timeline"]["plot"] = os.path.abspath(args.plot)
    print(json.dumps(s, indent=2) if args.json else render(s))
    return 0


def expand_traces(*sides: Sequence[str]) -> list[list[str]]:
    """reader.expand for a command, per side of its arguments: the trace directories they
    name, a glob's matches whose mount recorded nothing (a fleet's idle host) left out,
    with a warning once each."""
    idle: list[str] = []
    directories = [reader.expand(side, idle) for side in sides]
    for directory in idle:
        print(f"fusetrace: warning: {directory}: the mount recorded no operation; left out", file=sys.stderr)
    return directories


# ---- text ----------------------------------------------------------------------------

def render(s: dict) -> str:
    parts = ["\n".join(printable(line) for line in _header(s))]  # names a trace's makers chose
    if len(s["hosts"]) > 1:
        parts.append(_hosts_table(s))
    parts.append(_ops_table(s))
    shaping = _shaping(s)
    if shaping:
        parts.append(shaping)
    if s.get("histograms"):
        parts.append(_histograms(s["histograms"]))
    if s.get("timeline"):
        parts.append(_timeline(s["timeline"]))
    if s["hints"]:
        parts.append("\n".join(["hints", *(f"- {printable(h['text'])}" for h in s["hints"])]))
    return "\n\n".join(parts)


def _header(s: dict) -> list[str]:
    m = s["metadata"]
    counts = f"({_int(s['records'])} records in {_int(s['files'])} file{'' if s['files'] == 1 else 's'})"
    if s["directory"] is not None:
        lines = [f"trace       {s['directory']}  {counts}"]
    else:
        traces = s["traces"]
        hosts = len({t["host"] for t in traces})
        lines = [f"traces      {len(traces)} traces from {hosts} host{'s' if hosts > 1 else ''}  {counts}"]
        lines += [f"            {t['host'] or '(no host)'}  {t['directory']}" for t in traces[:TOP_GROUPS]]
        if len(traces) > TOP_GROUPS:
            lines.append(f"            and {_int(len(traces) - TOP_GROUPS)} more (--json lists them all)")
    if "source" in m:
        host = f" on {m['host']}" if m.get("host") else ""
        lines.append(f"source      {m['source']}{host}, mounted at {m.get('mountpoint', '?')}")
    if "start_wall_ns" in m:
        lines.append(f"started     {_wall(m['start_wall_ns'])}, records span {s['span_ns'] / 1e9:.3f} s")
    if s["filters"]:
        f = s["filters"]
        times = [f"{k} {_at(s, f[k + '_ns'])}" for k in ("since", "until") if f[k] is not None]
        lines.append(f"filters     {'  '.join(f['options'])}{' (' + '; '.join(times) + ')' if times else ''}: "
                     f"{_int(s['matched'])} of {_int(s['records'])} records")
    lines += _coverage(s)
    if m.get("dropped"):
        limit = f"max_pending {m['max_pending']}" if m.get("max_pending") is not None else \
            f"{m['max_pending_bytes'] / 2**20:g} MiB" if m.get("max_pending_bytes") else "max_pending ?"
        lines.append(f"dropped     {_int(m['dropped'])} records: the writer's queue was full ({limit}), "
                     f"or a field was bad (the server's log says which)")
    if m.get("write_errors"):
        lines.append(f"lost        {_int(m.get('lost', 0))} records in {_int(m['write_errors'])} failed "
                     f"writes; last: {m.get('last_error')}")
    lines += _emulation(m, s["traces"])
    for f in s.get("faults", []):
        said = ", ".join(f"{o['op']} {o['errno'] or '(no error)'} {_int(o['count'])}" for o in f["ops"])
        lines.append(f"fault       rule {f['rule']} acted on {_int(f['records'])} records: {said}")
    if s["directory"] is not None:
        warning = s["traces"][0]["warning"]
        lines += [f"warning     {warning}"] if warning else []
    else:
        lines += [f"warning     {t['directory']}: {t['warning']}" for t in s["traces"] if t["warning"]]
        lines += [f"warning     {d}: no clock mapping (start_wall_ns) in its {meta.NAME}: its times are its "
                  f"own, not aligned with the other traces'" for d in s["unaligned"]]
    return lines


def _hosts_table(s: dict) -> str:
    """One line per host of a report over several traces."""
    head = ["host", "traces", "ops", "errors", "ops/s", "total", "%total", "span"]
    rows = [[h["host"] or "(no host)", _int(h["traces"]), _int(h["count"]), _int(h["errors"]), _num(h["ops_per_s"]),
             _ns(h["total_ns"]), f"{100 * h['share']:.1f}", f"{h['span_ns'] / 1e9:.3f} s"] for h in s["hosts"]]
    return (f"per host\n{table(head, rows, 'l' + 'r' * 7)}\n(ops: the records kept on each host, ops/s over all "
            f"hosts' span, not the host's own, so that the hosts' rates add up to the fleet's; total: their "
            f"latencies added up, %total its share of all hosts'; span: from the "
            f"host's first operation to its last reply)")


def _at(s: dict, ns: int) -> str:
    """A trace time as seconds since the first record, and its time of day when known."""
    m = s["metadata"]
    seconds = f"{(ns - (s['origin_ns'] or 0)) / 1e9:+.3f} s"
    if "start_wall_ns" not in m or "start_monotonic_ns" not in m:
        return seconds
    return f"{seconds}, {_clock(meta.to_wall_ns(m, ns), 3)}"


def _coverage(s: dict) -> list[str]:
    """The header's lines on how much of the span the operations account for."""
    c = s["coverage"]
    if c is None or not c["span_ns"]:
        return []
    lines = [f"in flight   {c['busy_ns'] / 1e9:.3f} s of the records' {c['span_ns'] / 1e9:.3f} s span "
             f"({_pct(c['busy_share'])}) had an operation in flight; their latencies sum to "
             f"{c['summed_ns'] / 1e9:.3f} s"]
    if c["round_trip_ns"] is None:
        why = "a trace from before format 3" if s["format_version"] < 3 else f"not in its {meta.NAME}"
        lines.append(f"round trip  FUSE's own, before and after each operation: not measured ({why})")
    else:
        lines.append(f"round trip  with FUSE's ({_ns(c['round_trip_ns'])} each, measured at mount) added to each "
                     f"operation: {c['busy_with_round_trip_ns'] / 1e9:.3f} s ({_pct(c['busy_with_round_trip_share'])})")
    lines.append(f"the rest    {_pct(c['rest_share'])} of the span: the application's own time (CPU, other I/O, "
                 f"waiting) and what the kernel answered from its caches")
    return lines


def _not_closed(m: dict) -> str:
    """Why a trace has no end time, as far as this host can tell: its server is still
    running, or it stopped without writing its final metadata (killed, or the write
    failed: with write errors already counted, a full disk is the likely cause)."""
    counts = "the counts above are from its last metadata write"
    pid = m.get("pid")
    if pid and m.get("hostname", m.get("host")) in (None, os.uname().nodename) and _is_fusetrace(pid):
        return f"trace still being written (its server, pid {pid}, is running): {counts}"
    if m.get("write_errors"):
        return (f"trace not closed: its final {meta.NAME} could not be written, like the "
                f"{_int(m['write_errors'])} failed writes above (last: {m.get('last_error')}; a full "
                f"disk?) - or the server was killed: {counts}, more records may be lost")
    return (f"trace not closed: its server stopped without writing its final {meta.NAME} "
            f"(killed, or that write failed): the last second may be missing and {counts}")


def _is_fusetrace(pid: int) -> bool:
    """Whether process `pid` is a fusetrace server (not another that reused its pid)."""
    try:
        with open(f"/proc/{int(pid)}/cmdline", "rb") as f:
            return b"fusetrace" in f.read()
    except (OSError, ValueError):
        return False


def _label(key: str, r: dict) -> str:
    """A --by group as the text table names it."""
    if key == "pid":
        return " ".join([str(r["pid"]), ",".join(r["comms"][:3]) + ("…" if len(r["comms"]) > 3 else "")]).rstrip()
    if key == "comm" and not r["comm"]:
        return "(unknown)"
    return _short(r[key])


def _ops_table(s: dict) -> str:
    if not s["ops"]:
        return "no records match the filters" if s["filters"] else "no records"
    key = s["by"]
    head = ([key] if key else []) + ["op", "count", "errors", "ops/s", "MB/s", "mean", "p50", "p90", "p99",
                                     "p99.9", "max", "total", "%total", "errno"]
    total = s["total_ns"] or 1
    rows, last = [], None
    for r in s["ops"]:
        row = [] if not key else [_label(key, r) if r[key] != last else ""]
        last = r[key] if key else None
        io = r["op"] in ("read", "write")
        row += [r["op"], _int(r["count"]), _int(r["errors"]), _num(r["ops_per_s"]),
                _num(r["bytes_per_s"] / 1e6) if io and r["bytes_per_s"] is not None else "-",
                *(_ns(r[c]) for c in ("mean_ns", *QUANTILES, "max_ns", "total_ns")),
                f"{100 * r['total_ns'] / total:.1f}",
                ", ".join(f"{name} {_int(n)}" for name, n in r["errnos"].items())]
        rows.append(row)
    left = 2 if key else 1
    text = table(head, rows, "l" * left + "r" * (len(head) - left - 1) + "l")
    note = ("latency is dur_ns (admission to reply); total: the latencies added up, %total: its share of all rows' "
            "total, not of wall time (operations overlap: see 'in flight'); MB = 10^6 bytes; sorted by total")
    if key and s["top"] and s["groups"] > s["top"]:
        note += f"; top {s['top']} of {_int(s['groups'])} {key}s (--top N shows more, --json has all)"
    return f"{text}\n({note})"


def _emulation(m: dict, traces: list[dict]) -> list[str]:
    """The header's lines on an emulated trace: the profile, whether the host kept up
    with the model, whether the mount had FUSE's write-back cache, and what the run must
    be warned of (its metadata's `warnings`); over several traces, the hosts that did not
    keep up."""
    if "emulation" not in m:
        return []
    lines = [f"emulated    {m['emulation'].get('profile', '?')}"]
    host = m.get("host_load")
    if len(traces) > 1:
        bound = [t["host"] or t["directory"] for t in traces if t["host_bound"]]
        unknown = [t["host"] or t["directory"] for t in traces if t["profile"] and t["host_bound"] is None]
        lines[0] += (f"; HOST-BOUND on {', '.join(bound)}: there the host, not the model, set the pace" if bound
                     else "; every host kept up with the model" if not unknown else "")
        if unknown:
            lines[0] += f"; whether the host kept up is unknown on {', '.join(unknown)}"
    elif host is None:
        lines[0] += "; whether the host kept up is unknown (no final metadata)"
    else:
        verdict = "HOST-BOUND: the host, not the model, set the pace" if host["host_bound"] else \
            "the host kept up with the model"
        lines[0] += f"; {verdict} ({load_words(host)})"
    if (m.get("options") or {}).get("writeback_cache"):
        lines.append("write-back  FUSE's write-back cache: its writes are the kernel's write-back of many write(2) "
                     "calls, reads of data written through the mount are not here, and gate kernel marks the "
                     "kernel's own requests, which cost nothing")
    lines += [f"warning     {w}" for w in m.get("warnings", [])]
    return lines


def _shaping(s: dict) -> str:
    """Where the modelled time went, per op; "" when nothing was shaped."""
    rows = s["shaping"]
    if rows is None:
        if "emulation" not in s["metadata"]:
            return ""
        return ("where the modelled time went: not recorded (a format 1 trace, from before fusetrace "
                "recorded each operation's gate and wait / latency / transfer)")
    if not rows:
        return ""
    head = ["op", "shaped", "modelled", "mean", "wait%", "latency%", "transfer%", "gates (operations)"]
    body = []
    for r in rows:
        total = r["modelled_ns"] or 1
        body.append([r["op"], _int(r["count"]), _ns(r["modelled_ns"]), _ns(r["modelled_ns"] / r["count"]),
                     *(f"{100 * r[k] / total:.1f}" for k in ("wait_ns", "latency_ns", "transfer_ns")),
                     ", ".join(f"{gate} {_int(n)}" for gate, n in r["gates"].items())])
    text = table(head, body, "l" + "r" * 6 + "l")
    return (f"where the modelled time went\n{text}\n(modelled = wait + latency + transfer, the model's time for "
            f"the operation; gates: what set it, with how many operations each)")


def _histograms(hists: dict[str, list[dict]]) -> str:
    blocks = []
    for op, buckets in hists.items():
        total = sum(b["count"] for b in buckets)
        peak = max(b["count"] for b in buckets)
        lines = [f"{op}  ({_int(total)} ops)"]
        for b in buckets:
            low = "0" if b["bucket"] == 0 else _ns(b["low_ns"])
            lines.append(f"  {low:>7} - {_ns(b['high_ns']):<7} {_bar(b['count'] / peak):<40} "
                         f"{_int(b['count']):>11} {100 * b['count'] / total:5.1f}%")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _timeline(t: dict) -> str:
    buckets = t["buckets"]
    wall = buckets[0]["wall_ns"] is not None
    peak = max(b["ops_per_s"] for b in buckets) or 1
    head = ["t (s)", *(["time"] if wall else []), "ops", "ops/s", "", "read MB/s", "write MB/s", "errors"]
    digits = max(0, -math.floor(math.log10(t["width_ns"] / 1e9)))
    rows = [[f"{b['t_s']:.{digits}f}", *([_clock(b["wall_ns"], digits)] if wall else []), _int(b["ops"]),
             _rate(b["ops_per_s"]), _bar(b["ops_per_s"] / peak, 20), _rate(b["read_mb_per_s"]),
             _rate(b["write_mb_per_s"]), _int(b["errors"])] for b in buckets]
    text = table(head, rows, "r" * (len(head) - 4) + "lrrr")
    note = (f"operations that started in each {_width(t['width_ns'])}, and the bytes they read and wrote, per "
            f"second; t: seconds since the trace's first record; MB = 10^6 bytes")
    if t.get("plot"):
        note += f"; drawn into {t['plot']}"
    return f"timeline\n{text}\n({note})"


def plot_timeline(path: str, s: dict) -> None:
    """The timeline as a PNG: operations per second above, MB/s read and written below."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    t = s["timeline"]
    buckets = t["buckets"]
    width = t["width_ns"] / 1e9
    edges = np.array([b["t_s"] for b in buckets] + [buckets[-1]["t_s"] + width])
    fig = Figure(figsize=(9, 5.0), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True)
    top.stairs([b["ops_per_s"] for b in buckets], edges, color="0.25", linewidth=1.2)
    top.set(ylabel="operations/s", ylim=(0, None))
    bottom.stairs([b["read_mb_per_s"] for b in buckets], edges, label="read", color="#1f77b4", linewidth=1.2)
    bottom.stairs([b["write_mb_per_s"] for b in buckets], edges, label="write", color="#ff7f0e", linewidth=1.2)
    bottom.set(ylabel="MB/s", ylim=(0, None), xlabel="seconds since the trace's first record")
    bottom.legend(loc="upper right", fontsize=8)
    what = "  ".join(s["filters"]["options"]) if s["filters"] else "all records"
    where = s["directory"] or ", ".join(s["directories"])
    top.set_title(f"{where}: {what}, per {_width(t['width_ns'])}", fontsize=9, parse_math=False)
    fig.savefig(path, format="png")


def _bar(fraction: float, width: int = 40) -> str:
    eighths = round(fraction * width * 8)
    return "█" * (eighths // 8) + ("", "▏", "▎", "▍", "▌", "▋", "▊", "▉")[eighths % 8]


def _ns(ns: float) -> str:
    """A duration with three significant digits and a unit: 850ns, 12.3µs, 4.56ms, 1.20s."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return _num(ns / scale) + unit
    return f"{ns:.0f}ns"


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    if x >= 100:
        return f"{x:,.0f}"
    return f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def _int(n: int) -> str:
    return f"{n:,}"


def _rate(x: float) -> str:
    return _num(x) if x else "0"


def _width(ns: int) -> str:
    """A timeline bucket's width: 0.02 s, 1 s, 300 s."""
    return f"{ns / 1e9:g} s"


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.1f} %"


def _literal(text: str) -> str:
    """A DuckDB string literal (no backslash escapes in DuckDB's: only ' is doubled)."""
    return "'" + text.replace("'", "''") + "'"


def _short(value, width: int = 48) -> str:
    text = str(value)
    return text if len(text) <= width else "…" + text[-(width - 1):]


def _wall(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9).astimezone().isoformat(sep=" ", timespec="milliseconds")


def _clock(ns: int, digits: int) -> str:
    """Local time of day, to `digits` decimals of a second (at most 3)."""
    text = datetime.fromtimestamp(ns / 1e9).astimezone().strftime("%H:%M:%S.%f")
    return text[:9 + min(digits, 3)] if digits else text[:8]
