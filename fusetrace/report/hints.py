"""The report's hints: what to change, where the records show a common cause of lost time.

One small function per hint, registered with `@rule(name, *thresholds)`: RULES, in the order
the report prints them, is the one place a hint is added (docs/ARCHITECTURE.md, "Report:
query, hints, rendering, plots").  Each threshold is a constant of this module, named in its
rule's registration; tests/report/test_report_hints.py checks that every rule has its thresholds, a
row in docs/REPORT.md and a trace that fires it and one just short of it.
"""

import errno as errnos
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..texttable import count, int_text, pct_text
from ..trace.metadata import capture_lost

if TYPE_CHECKING:
    from .query import Trace

XATTR_MISS_SHARE = 0.2  # of the records: getxattr answering ENODATA
FAILED_LOOKUP_SHARE = 0.2  # of the records: lookup answering ENOENT
# together, where neither alone reaches its share: extended-attribute misses and failed lookups
WASTE_SHARE = 0.2  # ... of the records
WASTE_TIME_SHARE = 0.2  # ... or of the time, FUSE's round trip (measured at mount) added to each
ATTR_TIMEOUT_0_SHARE = 0.2  # of the records: getattr, on a mount made with --attr-timeout 0
FSYNC_HINT_COUNT = 20  # at least this many fsync/fsyncdir calls ...
FSYNC_HINT_WRITES = 4  # ... and at most this many writes for each to the files they synced (pages: PAGE)
PAGE = 4096  # a write-back cache's write counts its pages
REMOVED_WHILE_OPEN_COUNT = 1  # unlinks or renames of a file still open
MISSING_RECORDS_COUNT = 1  # records dropped or lost, as the metadata counts them


@dataclass(frozen=True)
class Facts:
    """What the rules read: the trace (for a rule's own query) and its records per op
    ({op: {count, total_ns, errnos}})."""

    trace: "Trace"
    ops: dict[str, dict]

    def count(self, op: str) -> int:
        return self.ops[op]["count"] if op in self.ops else 0

    def errors(self, op: str, name: str) -> int:
        """How many of `op`'s records answered errno `name` (ENOENT...)."""
        return self.ops[op]["errnos"].get(name, 0) if op in self.ops else 0

    def share(self, n: int, least: float) -> float | None:
        """n's share of the records the filters keep when it is at least `least`, else None."""
        total = self.trace.matched
        return n / total if total and n >= least * total else None


Hint = dict  # a `hint` name, one line of `text` with its remedy, and the figures behind it (--json)


@dataclass(frozen=True)
class Rule:
    name: str  # the hint's name in --json, and in the table of docs/REPORT.md
    thresholds: tuple[str, ...]  # the names of this module's constants that decide when it fires
    check: Callable[[Facts], Hint | None]
    fuse: bool  # its cause or remedy is the FUSE mount's: silent on a capture's trace (no server in the path)


RULES: list[Rule] = []


def rule(
    name: str, *thresholds: str, fuse: bool = False
) -> Callable[[Callable[[Facts], Hint | None]], Callable[[Facts], Hint | None]]:
    """Register a hint's rule (at the end of RULES: the report prints them in this order);
    `fuse`: one that only a trace of a FUSE mount can show."""

    def register(check: Callable[[Facts], Hint | None]) -> Callable[[Facts], Hint | None]:
        RULES.append(Rule(name, thresholds, check, fuse))
        return check

    return register


def find(trace: "Trace", per_op: dict[str, dict]) -> list[Hint]:
    """The hints of the records the trace's filters keep, `per_op` their figures by op; on
    system calls captured with no server in the path, none of the FUSE mount's."""
    facts = Facts(trace, per_op)
    syscalls = trace.kind == "syscalls"
    return [hint for r in RULES if not (r.fuse and syscalls) and (hint := r.check(facts)) is not None]


@rule("xattr-misses", "XATTR_MISS_SHARE", fuse=True)  # the kernel asks FUSE; --no-xattrs
def xattr_misses(f: Facts) -> Hint | None:
    misses = f.errors("getxattr", "ENODATA")  # with --no-xattrs the mount answers ENOSYS, once
    share = f.share(misses, XATTR_MISS_SHARE)
    if share is None:
        return None
    return {
        "hint": "xattr-misses",
        "records": misses,
        "share": share,
        "text": f"getxattr: {pct_text(share)} of the records are look-ups of extended attributes the file "
        f"does not have ({_xattr_names(f, misses)}): {XATTR_REMEDY}",
    }


XATTR_REMEDY = (
    "mount with --no-xattrs and the kernel stops asking (automatic over a source without xattrs, such as EFS)"
)


def _xattr_names(f: Facts, misses: int) -> str:
    """The two names getxattr missed most, and how many others."""
    named = f.trace.rows(
        """
        select path2, count(*) as k, count(*) over () as names from trace
        where op = 'getxattr' and errno = ? group by all order by k desc, path2 limit 2""",
        [errnos.ENODATA],
    )
    names = ", ".join(f"{name} {int_text(k)}" for name, k, _ in named)
    others = named[0][2] - len(named) if named else 0
    if others:
        left = misses - sum(k for _, k, _ in named)
        names += f", {count(others, 'other name')} {int_text(left)}"
    return names


@rule("failed-lookups", "FAILED_LOOKUP_SHARE", fuse=True)  # a capture has no lookup: fit infers them
def failed_lookups(f: Facts) -> Hint | None:
    misses = f.errors("lookup", "ENOENT")
    share = f.share(misses, FAILED_LOOKUP_SHARE)
    if share is None:
        return None
    return {
        "hint": "failed-lookups",
        "records": misses,
        "share": share,
        "text": f"lookup: {pct_text(share)} of the records look up names that do not exist (most in "
        f"{_most_missed(f)}): a program searching a list of directories (PATH, PYTHONPATH, "
        f"LD_LIBRARY_PATH, -I) one after another; shorten the list or put the usual hit first{_cached(f)}",
    }


def _most_missed(f: Facts) -> str:
    """The directory with most failed lookups, and how many."""
    [(where, k)] = f.trace.rows(
        f"""
        select {f.trace.group_key("dir")} as d, count(*) as k from trace
        where op = 'lookup' and errno = ? group by all order by k desc, d limit 1""",
        [errnos.ENOENT],
    )
    return f"{where}: {int_text(k)}"


def _cached(f: Facts) -> str:
    """On a trace-only mount without --negative-timeout: that EFS would see fewer of them."""
    m = f.trace.metadata
    if "emulation" in m or (m.get("options") or {}).get("negative_timeout"):
        return ""
    return (
        "; this mount caches no absent names and an NFS client does (for acdirmin, 30 s), so EFS "
        "sees fewer of them: mount with --negative-timeout 30 to trace what it would"
    )


XATTR_WASTE = "op in ('getxattr', 'listxattr') and errno in ($enodata, $enotsup)"  # EOPNOTSUPP is ENOTSUP


@rule("wasted-round-trips", "WASTE_SHARE", "WASTE_TIME_SHARE", "XATTR_MISS_SHARE", "FAILED_LOOKUP_SHARE", fuse=True)
def wasted_round_trips(f: Facts) -> Hint | None:
    """Extended-attribute misses and failed lookups together, each under its own rule's
    share: by records, or by time with FUSE's round trip added to each (what a small
    answer costs is mostly the trip).  A part at its own share has its own hint, which
    says more of it; this one is then silent, so that nothing is said twice."""
    total = f.trace.matched
    if not total or f.share(f.errors("getxattr", "ENODATA"), XATTR_MISS_SHARE) is not None:
        return None
    if f.share(f.errors("lookup", "ENOENT"), FAILED_LOOKUP_SHARE) is not None:
        return None
    rt = f.trace.metadata.get("fuse_round_trip_ns")
    rt = rt if isinstance(rt, int | float) and rt > 0 else 0
    xattrs, xattr_ns, lookups, lookup_ns = f.trace.one(
        f"""
        select count(*) filter (where {XATTR_WASTE}), coalesce(sum(dur_ns) filter (where {XATTR_WASTE}), 0),
               count(*) filter (where op = 'lookup' and errno = $enoent),
               coalesce(sum(dur_ns) filter (where op = 'lookup' and errno = $enoent), 0)
        from trace""",
        {"enodata": errnos.ENODATA, "enotsup": errnos.ENOTSUP, "enoent": errnos.ENOENT},
    )
    whole_ns = f.trace.total_ns + rt * total
    time_share = (xattr_ns + lookup_ns + rt * (xattrs + lookups)) / whole_ns if whole_ns else 0.0
    share = (xattrs + lookups) / total
    if share < WASTE_SHARE and time_share < WASTE_TIME_SHARE:
        return None
    parts = []
    if xattrs:
        parts.append(
            f"extended-attribute misses {pct_text(xattrs / total)} (getxattr, listxattr answering ENODATA or "
            f"ENOTSUP): {XATTR_REMEDY}"
        )
    if lookups:
        parts.append(
            f"failed lookups {pct_text(lookups / total)} (most in {_most_missed(f)}): names probed that do not "
            f"exist; a search path (PATH, PYTHONPATH, LD_LIBRARY_PATH, -I) is shorter with the usual hit first"
            f"{_cached(f)}"
        )
    trip = " (FUSE's round trip included)" if rt else ""
    return {
        "hint": "wasted-round-trips",
        "records": xattrs + lookups,
        "share": share,
        "time_share": time_share,
        "xattr_misses": xattrs,
        "failed_lookups": lookups,
        "text": f"wasted round trips: {pct_text(share)} of the records and {pct_text(time_share)} of the "
        f"operations' time{trip} are answers the application could do without: {'; '.join(parts)}",
    }


@rule("fsync-per-write", "FSYNC_HINT_COUNT", "FSYNC_HINT_WRITES", "PAGE")
def fsync_per_write(f: Facts) -> Hint | None:
    filters = f.trace.filters
    writes_seen = not filters.ops or "write" in filters.ops  # --op fsync: writes unknown
    if f.count("fsync") + f.count("fsyncdir") < FSYNC_HINT_COUNT or not writes_seen:
        return None
    # with FUSE's write-back cache a write record is the kernel's write-back of many
    # write(2) calls: its pages are counted instead
    pages = bool((f.trace.metadata.get("options") or {}).get("writeback_cache"))
    counted = "sum(greatest(1, (size + $page - 1) // $page))" if pages else "count(*)"
    # per process: one writing in bulk and syncing once (fio) hides none that syncs every
    # few writes (sqlite); each judged by its writes to the files it synced
    synced, flagged, writes, flagged_ns = f.trace.one(
        f"""
        with synced as (select distinct pid, path from trace where op in ('fsync', 'fsyncdir')),
        per as (
            select pid, count(*) filter (where op <> 'write') as s,
                   coalesce({counted} filter (where op = 'write'
                                              and (pid, path) in (select * from synced)), 0) as w,
                   coalesce(sum(dur_ns) filter (where op <> 'write'), 0) as ns
            from trace where op in ('fsync', 'fsyncdir', 'write') group by pid),
        flagged as (select * from per where s > 0 and w <= $most * s)
        select (select count(distinct path) from synced where pid in (select pid from flagged)),
               coalesce(sum(s), 0), coalesce(sum(w), 0), coalesce(sum(ns), 0)
        from flagged""",
        {"most": FSYNC_HINT_WRITES, **({"page": PAGE} if pages else {})},
    )
    if flagged < FSYNC_HINT_COUNT:
        return None
    total = f.trace.total_ns
    share = flagged_ns / total if total else 0
    return {
        "hint": "fsync-per-write",
        "syncs": flagged,
        "writes": writes,
        "synced": synced,
        "summed_share": share,
        "text": f"fsync: {int_text(flagged)} calls (fsyncdir included) on {int_text(synced)} "
        f"{'file or directory' if synced == 1 else 'files and directories'}, one for every "
        f"{writes / flagged:.1f} {'pages written' if pages else 'writes'} to them, {pct_text(share)} of "
        f"the summed operation time: each waits until the data is on stable storage (on EFS a round "
        f"trip to the server); make fewer, larger transactions (sqlite: PRAGMA journal_mode=WAL with "
        f"synchronous=NORMAL syncs at checkpoints only)",
    }


@rule("removed-while-open", "REMOVED_WHILE_OPEN_COUNT")
def removed_while_open(f: Facts) -> Hint | None:
    if "entry" not in f.trace.columns:  # an unlink's or rename's open file (format 2 on; 0 before fusetrace named it)
        return None
    [hidden] = f.trace.one("select count(*) from trace where op in ('unlink', 'rename') and entry <> 0 and errno = 0")
    if hidden < REMOVED_WHILE_OPEN_COUNT:
        return None
    return {
        "hint": "removed-while-open",
        "records": hidden,
        "text": f"unlink, rename: {count(hidden, 'name')} of files still open removed or replaced: an NFS "
        f"client renames each file to a hidden .nfsXXXX (a LOOKUP and a RENAME the caller waits for) and "
        f"removes it at its last close; until then rm -rf of its directory fails (EBUSY, ENOTEMPTY). "
        f"Close files before removing them",
    }


@rule("attr-timeout-0", "ATTR_TIMEOUT_0_SHARE", fuse=True)  # a mount option
def attr_timeout_0(f: Facts) -> Hint | None:
    getattrs = f.count("getattr")
    share = f.share(getattrs, ATTR_TIMEOUT_0_SHARE)
    if share is None or (f.trace.metadata.get("options") or {}).get("attr_timeout") != 0:
        return None
    return {
        "hint": "attr-timeout-0",
        "records": getattrs,
        "share": share,
        "text": f"getattr: {pct_text(share)} of the records: this mount had --attr-timeout 0, so every stat "
        f"reached it; the default 1 s (an NFS client caches attributes 3-60 s) answers most from the "
        f"kernel's cache",
    }


@rule("missing-records", "MISSING_RECORDS_COUNT")
def missing_records(f: Facts) -> Hint | None:
    m = f.trace.metadata
    missing = (m.get("dropped") or 0) + (m.get("lost") or 0) + sum(capture_lost(m).values())
    if missing < MISSING_RECORDS_COUNT:
        return None
    written = (m.get("dropped") or 0) + (m.get("lost") or 0)  # the writer's: the trace's disk kept up or not
    advice = [
        "trace to a local disk that keeps up, not to the traced file system or a network one" if written else "",
        "a capture loses what its probes counted past what bpftrace delivers (docs/BENCHMARKS.md, "
        "'Capture (eBPF)'): capture fewer processes or a quieter time"
        if capture_lost(m)
        else "",
    ]
    return {
        "hint": "missing-records",
        "records": missing,
        "text": f"the trace is missing {int_text(missing)} records (dropped or lost, see above): every count "
        f"here is short; " + "; ".join(a for a in advice if a),
    }
