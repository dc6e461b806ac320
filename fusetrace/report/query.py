"""The report's queries: every figure of the records a report is about (`Trace`), each a
DuckDB query on the trace's Parquet parts with the filters (filters.py) pushed into the
scan; Python only shapes the few result rows.  `Trace(dir, filters).summary()` is the data
`fusetrace report --json` prints.  Several trace directories (a fleet's, one per host) are
read as one.

Values reach DuckDB as parameters or bound constants, never quoted into the SQL text: a
trace's paths and names are whatever bytes their makers chose.
"""

import errno as errnos
import math
import os
import sys
from collections.abc import Sequence
from typing import Any

import duckdb

from ..errors import BadValue
from ..processes import is_fusetrace
from ..texttable import int_text
from ..trace import metadata as meta
from ..trace import partial, reader
from . import hints
from .credits import credits
from .filters import NO_FILTERS, Filters, Selection
from .shapes import Coverage, Summary, Timeline, TimelineBucket

QUANTILES = {"p50_ns": 0.5, "p90_ns": 0.9, "p99_ns": 0.99, "p999_ns": 0.999}
# --by dir: a record's directory, where operations on a directory itself (not an entry in
# it) are filed under their own path
DIR_KEY = (
    "case when op in ('opendir', 'readdir', 'releasedir', 'fsyncdir') then path "
    "else coalesce(nullif(parse_dirpath(path, 'forward_slash'), ''), '/') end"
)
TIMELINE_ROWS = 60  # at most this many buckets; their width is the first of WIDTHS_NS that fits
WIDTHS_NS = tuple(int(m * 10**e) for e in range(6, 9) for m in (1, 2, 5)) + tuple(
    s * 10**9 for s in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
)

# Counts, bytes and summed times weigh each record by its `sample` (the operations it stands
# for: --trace-sample kept 1 in N at random); latency percentiles and means are of the kept
# records, which for a uniform random sample estimate the whole's without weighting.
WEIGHTED_NS = "sum(dur_ns::hugeint * sample)"

NoTrace = reader.NoTrace  # raised for a missing or empty trace directory (scenarios/plots.py catches it)
Params = dict[str, Any] | list[Any] | None  # a query's values: $name or ? parameters


class Trace:
    """A trace directory, or several read as one (a fleet's: reader.TraceSet), opened for
    queries through `filters`.  Only the parts present when it was opened are read, so a
    trace still being written reports consistently.

    `records`, `origin_ns` (the first record's start_ns: a trace's time 0) are of the
    whole trace; `matched`, `first_ns`, `last_ns`, `span_ns`, `total_ns` of the records
    the filters keep, which every other figure is about.  Over several traces, times are
    on the clock of the one that started first, and `metadata` is what they share
    (fleet_metadata)."""

    def __init__(self, directories: str | os.PathLike | Sequence[str | os.PathLike], filters: Filters = NO_FILTERS):
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
        # what the records are: "fuse" (requests a mount served), "syscalls" (a capture's), both
        # ("mixed": a fleet of both kinds), or None when no metadata says
        kinds = {meta.trace_kind(m.metadata) for m in members if m.metadata}
        self.kind = kinds.pop() if len(kinds) == 1 else "mixed" if kinds else None
        totals = f"count(*), min(start_ns), max(start_ns + dur_ns), coalesce({WEIGHTED_NS}, 0)"
        whole = self.one(f"select {totals} from all_records")
        self.records, self.origin_ns = whole[:2]
        self.filters = filters
        self.selection = Selection(filters, self.metadata, self.metadata_error, self.origin_ns)
        if filters.comms:
            self._need_comm("--comm")
        kept = self.selection.expression()
        if kept is None:
            self._db.execute("create view trace as select * from all_records")
        else:  # the filters' values are bound as constants, never written into the SQL
            self._db.view("all_records").filter(kept).create_view("trace")
        self.matched, self.first_ns, self.last_ns, self.total_ns = (
            self.one(f"select {totals} from trace") if kept is not None else whole
        )
        self.span_ns = self.last_ns - self.first_ns if self.matched else 0

    def one(self, sql: str, params: Params = None) -> tuple:
        """The one row of an aggregate over the records (values in `params`, never in `sql`)."""
        [row] = self.rows(sql, params)  # fetched to the end: a result left open refuses the next query
        return row

    def rows(self, sql: str, params: Params = None) -> list[tuple]:
        """The rows of a query over the records (values in `params`, never in `sql`)."""
        return self._db.execute(sql, params).fetchall()

    def _need_comm(self, what: str) -> None:
        if "comm" not in self.columns:
            raise BadValue(
                f"{self.label}: {what}: {'these traces name' if self.fleet else 'this trace names'} "
                f"no processes (format "
                f"{self.format_version}, recorded before format 3 added comm); --pid and --by pid "
                f"work on it"
            )

    def group_key(self, by: str) -> str:
        """The SQL expression of a --by key (`by` is one of ops()'s names, not the user's text)."""
        if by == "dir":
            return DIR_KEY
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
        rows = self.rows(f"""
            select host, sum(sample), sum(sample) filter (where errno <> 0), {WEIGHTED_NS},
                   max(start_ns + dur_ns) - min(start_ns)
            from trace group by host order by sum(dur_ns) desc, host""")
        total = self.total_ns or 1
        return [
            {
                "host": host,
                "traces": traces.get(host, 0),
                "count": n,
                "errors": errors,
                "total_ns": int(summed),
                "share": summed / total,
                "span_ns": span,
                "ops_per_s": n / (self.span_ns / 1e9) if self.span_ns else None,
            }
            for host, n, errors, summed, span in rows
        ]

    def ops(self, by: str | None = None, top: int | None = None) -> tuple[list[dict], int]:
        """One row per op (or per (group, op), `by` comm, pid, path or dir), biggest total
        time first, and the number of groups; `top` keeps only the groups with most total
        time.  Each row has its errors by name (`errnos`, most first); by pid, the names the
        process ran under (`comms`, most records first).  Its rates (`ops_per_s`,
        `bytes_per_s`) are over `span_ns`: with `by`, its group's own span (the group's first
        start to its last end), so a process that ran for a second of an hour's trace shows
        its rate in that second; else the records' span."""
        if by not in (None, "comm", "pid", "path", "dir", "host"):
            raise ValueError(f"by must be comm, pid, path, dir or host, not {by!r}")
        key = f'{self.group_key(by)} as "{by}"' if by else None
        spans = ", min(start_ns) as first_ns, max(start_ns + dur_ns) as end_ns" if by else ""
        stats = f"""
            select {key + ", " if key else ""}op, sum(sample) as count,
                   coalesce(sum(sample) filter (where errno <> 0), 0) as errors,
                   coalesce(sum(result::hugeint * sample) filter (where op in ('read', 'write')), 0) as bytes,
                   {WEIGHTED_NS} as total_ns, avg(dur_ns) as mean_ns,
                   quantile_cont(dur_ns, $quantiles) as q, max(dur_ns) as max_ns{spans}
            from trace group by all"""
        if by:
            limit = "limit $top" if top else ""
            sql = f"""
                with s as ({stats}),
                k as (select "{by}", sum(total_ns) as group_ns, count(*) over () as groups,
                             max(end_ns) - min(first_ns) as span_ns
                      from s group by "{by}" order by group_ns desc, "{by}" {limit})
                select s.* exclude (first_ns, end_ns), k.groups, k.span_ns from s join k using ("{by}")
                order by k.group_ns desc, "{by}", total_ns desc, op"""
        else:
            sql = f"select *, 1 as groups, $span as span_ns from ({stats}) order by total_ns desc, op"
        params = {
            "quantiles": list(QUANTILES.values()),
            **({"top": int(top)} if by and top else {}),
            **({} if by else {"span": self.span_ns}),
        }
        cursor = self._db.execute(sql, params)
        names = [d[0] for d in cursor.description]
        rows = [dict(zip(names, r)) for r in cursor.fetchall()]
        errors = self._errors(key)
        comms: dict[int, list[str]] = {}
        if by == "pid" and "comm" in self.columns:
            for pid, comm, _ in self.rows("""
                    select pid, comm, count(*) as n from trace where comm <> '' group by all
                    order by pid, n desc, comm"""):
                comms.setdefault(pid, []).append(comm)
        groups = rows[0]["groups"] if rows else 0
        for r in rows:
            del r["groups"]
            r.update(zip(QUANTILES, r.pop("q")))
            span_s = r["span_ns"] / 1e9
            r["ops_per_s"] = r["count"] / span_s if span_s else None
            r["bytes_per_s"] = r["bytes"] / span_s if span_s else None
            r["errnos"] = errors.get((r[by], r["op"]) if by else (r["op"],), {})
            if by == "pid":
                r["comms"] = comms.get(r["pid"], [])
        return rows, groups

    def _errors(self, key: str | None) -> dict[tuple, dict[str, int]]:
        """{(group, op) or (op,): {errno name: count, most first}} of the failed records."""
        errors: dict[tuple, dict[str, int]] = {}
        for *k, code, n in self.rows(f"""
                select {key + ", " if key else ""}op, errno, sum(sample) as n from trace where errno <> 0
                group by all order by n desc, errno"""):
            errors.setdefault(tuple(k), {})[errnos.errorcode.get(code, f"errno {code}")] = n
        return errors

    def faults(self) -> list[dict]:
        """Per fault rule (docs/FAULTS.md): the records it acted on, and per op and errno
        how many (errno 0: held by a stall, cut short, or a write whose write-back failed)."""
        if "fault" not in self.columns:
            return []
        out: dict[str, dict] = {}
        for rule, op, code, n in self.rows("""
                select fault, op, errno, count(*) as n from trace where fault is not null
                group by all order by fault, n desc, op"""):
            entry = out.setdefault(rule, {"rule": rule, "records": 0, "ops": []})
            entry["records"] += n
            entry["ops"].append(
                {"op": op, "errno": errnos.errorcode.get(code, str(code)) if code else None, "count": n}
            )
        return list(out.values())

    def per_op(self) -> dict[str, dict]:
        """{op: {count, total_ns, errnos}}: what the hints go by, without ops()'s percentiles."""
        errors = self._errors(None)
        return {
            op: {"count": n, "total_ns": total, "errnos": errors.get((op,), {})}
            for op, n, total in self.rows(f"select op, sum(sample), {WEIGHTED_NS} from trace group by op")
        }

    def shaping(self) -> list[dict] | None:
        """Per op, where the modelled time of its shaped operations went: how many
        (`count`), their modelled time (`modelled_ns`) split into `wait_ns`, `latency_ns`
        and `transfer_ns`, and the gates that set it with their counts, most first
        (`gates`); most modelled time first.  [] when nothing was shaped (a trace-only
        mount); None for a format 1 trace, which has no such columns."""
        if "gate" not in self.columns:
            return None
        rows = self.rows("""
            select op, gate, count(*), sum(wait_ns), sum(latency_ns), sum(transfer_ns)
            from trace where gate is not null group by op, gate order by count(*) desc, gate""")
        out: dict[str, dict] = {}
        for op, gate, n, wait, latency, transfer in rows:
            r = out.setdefault(
                op,
                {"op": op, "count": 0, "modelled_ns": 0, "wait_ns": 0, "latency_ns": 0, "transfer_ns": 0, "gates": {}},
            )
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
        rows = self.rows("""
            select op, case when dur_ns < 2 then 0 else floor(log2(dur_ns))::integer end as b,
                   count(*) as n, sum(sum(dur_ns)) over (partition by op) as op_ns
            from trace group by op, b order by op_ns desc, op, b""")
        out: dict[str, dict[int, int]] = {}
        for op, b, n, _ in rows:
            out.setdefault(op, {})[b] = n
        return {
            op: [
                {"bucket": b, "low_ns": 2**b, "high_ns": 2 ** (b + 1), "count": counts.get(b, 0)}
                for b in range(min(counts), max(counts) + 1)
            ]
            for op, counts in out.items()
        }

    def coverage(self) -> Coverage | None:
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
        busy, widened = self.one(
            """
            select coalesce(sum(greatest(e - greatest(s, coalesce(m, s)), 0)), 0),
                   coalesce(sum(greatest(e - greatest(s - $rt, coalesce(m, s - $rt)), 0)), 0)
            from (select start_ns as s, start_ns + dur_ns as e,
                         max(start_ns + dur_ns) over (order by start_ns rows between unbounded preceding
                                                      and 1 preceding) as m
                  from trace)""",
            {"rt": rt or 0},
        )
        span = self.span_ns
        out: Coverage = {
            "span_ns": span,
            "busy_ns": int(busy),
            "busy_share": busy / span if span else None,
            "summed_ns": self.total_ns,
            "round_trip_ns": rt,
            "round_trips_ns": None,
            "busy_with_round_trip_ns": None,
            "busy_with_round_trip_share": None,
            "rest_share": None,
        }
        if rt is not None:
            out["round_trips_ns"] = rt * self.matched
            out["busy_with_round_trip_ns"] = int(widened) - rt
            out["busy_with_round_trip_share"] = (int(widened) - rt) / span if span else None
        busy_share = out["busy_with_round_trip_share"] if rt is not None else out["busy_share"]
        out["rest_share"] = None if busy_share is None else 1 - busy_share
        return out

    def hints(self, per_op: dict[str, dict] | None = None) -> list[dict]:
        """What to change, where the records show a common cause of lost time (hints.py's
        rules, in order).  `per_op`: ops()'s ungrouped rows by op, when the caller has them."""
        return hints.find(self, self.per_op() if per_op is None else per_op)

    def timeline(self) -> Timeline | None:
        """Operations and bytes over time: buckets of `width_ns` aligned on the trace's
        first record (time 0), from the first matched record's to the last's; per bucket
        the operations that started in it, their errors, and the bytes read and written
        by them.  At most TIMELINE_ROWS buckets.  None when no record matched."""
        if not self.matched:
            return None
        origin = self.origin_ns
        low, high = self.one("select min(start_ns), max(start_ns) from trace")
        width = next(
            (w for w in WIDTHS_NS if (high - origin) // w - (low - origin) // w < TIMELINE_ROWS),
            math.ceil((high - low) / (TIMELINE_ROWS - 1) / 86400e9) * 86400 * 10**9,
        )
        rows = {
            b: r
            for b, *r in self.rows(
                """
            select (start_ns - $origin) // $width as b, sum(sample), coalesce(sum(sample) filter (where errno <> 0), 0),
                   coalesce(sum(result::hugeint * sample) filter (where op = 'read'), 0),
                   coalesce(sum(result::hugeint * sample) filter (where op = 'write'), 0)
            from trace group by b""",
                {"origin": origin, "width": width},
            )
        }
        first, last = (low - origin) // width, (high - origin) // width
        wall = "start_wall_ns" in self.metadata and "start_monotonic_ns" in self.metadata
        buckets: list[TimelineBucket] = []
        for b in range(first, last + 1):
            n, errors, read, written = rows.get(b, (0, 0, 0, 0))
            start = origin + b * width
            buckets.append(
                {
                    "t_s": b * width / 1e9,
                    "start_ns": start,
                    "wall_ns": meta.to_wall_ns(self.metadata, start) if wall else None,
                    "ops": n,
                    "errors": errors,
                    "read_bytes": int(read),
                    "write_bytes": int(written),
                    "ops_per_s": n / (width / 1e9),
                    "read_mb_per_s": read / 1e6 / (width / 1e9),
                    "write_mb_per_s": written / 1e6 / (width / 1e9),
                }
            )
        return {"origin_ns": origin, "width_ns": width, "buckets": buckets}

    def summary(
        self, by: str | None = None, histogram: bool = False, top: int | None = None, timeline: bool = False
    ) -> Summary:
        """Everything the report shows, as plain data (what --json prints)."""
        ops, groups = self.ops(by, top)
        m = self.metadata
        out: Summary = {
            "directory": None if self.fleet else self.directory,
            "directories": self.directories,
            "traces": self.traces(),
            "hosts": self.hosts(),
            "unaligned": self.set.unaligned,
            "files": len(self.files),
            "records": self.records,
            "format_version": self.format_version,
            "kind": self.kind,
            "filters": self.selection.shown(),
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
            "credits": credits(self),
            "faults": self.faults(),
            "hints": self.hints(None if by else {r["op"]: r for r in ops}),
            "left_out": self.left_out(),
        }
        if histogram:
            out["histograms"] = self.histograms()
        if timeline:
            out["timeline"] = self.timeline()
        return out

    def left_out(self) -> list[dict]:
        """Per trace that did not record every operation (--trace-only, --trace-sample):
        its directory, what it left out per reason and operation, and that in one line."""
        out = []
        for t in self.set.members:
            text = partial.described(t.metadata)
            if text is not None:
                out.append({"directory": t.directory, **partial.left_out(t.metadata), "text": text})
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
            out.append(
                {
                    "directory": t.directory,
                    "host": t.host,
                    "records": self.one(f"select count(*) from all_records_{i}")[0],
                    "files": len(t.files),
                    "format_version": t.format_version,
                    "kind": meta.trace_kind(m) if m else None,
                    "warning": warning,
                    "profile": (m.get("emulation") or {}).get("profile") if "emulation" in m else None,
                    "host_bound": load.get("host_bound") if "emulation" in m else None,
                }
            )
        return out


_ABSENT = object()


def fleet_metadata(traces: reader.TraceSet) -> dict[str, Any]:
    """What a report over several traces says of them together, in a trace's metadata's
    keys: those every trace has with the same value (`options` key by key), the counters
    added up, the clock of the trace that started first (the records' clock), the mean of
    their FUSE round trips when each has one, the profiles emulated, every warning once.
    What belongs to one run alone (its end, pid, host_load, metrics) is left out.  A dict:
    metadata's keys are open (whatever the traces' writers put)."""
    each = [m.metadata for m in traces.members]
    first, rest = each[0], each[1:]
    out = {k: v for k, v in first.items() if all(o.get(k, _ABSENT) == v for o in rest)}
    for key in (
        "end_wall_ns",
        "end_monotonic_ns",
        "start_wall_ns",
        "start_monotonic_ns",
        "pid",
        "host_load",
        "metrics_per_minute",
        "credits_at_zero",
        "last_error",
        "fuse_round_trip_ns",
        "emulation",
        "warnings",
    ):
        out.pop(key, None)
    out.update({k: traces.base[k] for k in ("start_wall_ns", "start_monotonic_ns") if k in traces.base})
    for key in ("records", "files", "dropped", "lost", "write_errors", "rotated", "stopped"):
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


def expand_traces(*sides: Sequence[str]) -> list[list[str]]:
    """reader.expand for a command, per side of its arguments: the trace directories they
    name, a glob's matches whose mount recorded nothing (a fleet's idle host) left out,
    with a warning once each."""
    idle: list[str] = []
    directories = [reader.expand(side, idle) for side in sides]
    for directory in idle:
        print(f"fusetrace: warning: {directory}: the mount recorded no operation; left out", file=sys.stderr)
    return directories


def _not_closed(m: dict) -> str:
    """Why a trace has no end time, as far as this host can tell: its server is still
    running, or it stopped without writing its final metadata (killed, or the write
    failed: with write errors already counted, a full disk is the likely cause)."""
    counts = "the counts above are from its last metadata write"
    pid = m.get("pid")
    if pid and m.get("hostname", m.get("host")) in (None, os.uname().nodename) and is_fusetrace(pid):
        return f"trace still being written (its server, pid {pid}, is running): {counts}"
    if m.get("write_errors"):
        return (
            f"trace not closed: its final {meta.NAME} could not be written, like the "
            f"{int_text(m['write_errors'])} failed writes above (last: {m.get('last_error')}; a full "
            f"disk?) - or the server was killed: {counts}, more records may be lost"
        )
    return (
        f"trace not closed: its server stopped without writing its final {meta.NAME} "
        f"(killed, or that write failed): the last second may be missing and {counts}"
    )
