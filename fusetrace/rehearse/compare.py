"""`fusetrace compare A B`: two traces side by side, per operation, with a verdict.

Per op (and per kind of request, for format 3 traces): count, mean, p50, p90 and p99 of
each, B's over A's, and a verdict: `pass` when B's p50 is within --tolerance % of A's and
its p99 within --tail-tolerance %; `fail` otherwise; `too few` under MIN_RECORDS records on
either side; `only in A` / `only in B`.  A difference smaller than FUSE's own round trip
(the larger of the two traces' `fuse_round_trip_ns`) passes too, marked so: a ratio of
microsecond operations measures the host, not the file system.  Exit status 0 when every
judged op passes, 1 when one fails, 2 for bad input.  With --out DIR, latency CDFs of A
and B per op (one PNG) and a self-contained index.html.

Either side may be several traces read as one (a fleet's, one per host: reader.TraceSet).
"""

import argparse
import base64
import html
import io
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NotRequired, TypedDict

import duckdb

from ..errors import UserError
from ..report.query import expand_traces
from ..texttable import int_text, ns_text, printable, table
from ..trace import partial, reader
from ..trace.metadata import trace_kind

MIN_RECORDS = 20
CDF_POINTS = 200
HOST = "pass (within FUSE's round trip)"


class LatencyStats(TypedDict):
    """One op's (or kind's) latency figures on one side."""

    count: int  # operations: the records weighed by their sample (--trace-sample kept 1 in N)
    records: int  # the records kept, which the percentiles are of (a uniform sample's stand for all)
    mean_ns: float
    p50_ns: float
    p90_ns: float
    p99_ns: float


class Judgement(TypedDict):
    """judge()'s row: both sides' figures, B/A of p50 and p99, and the verdict."""

    a: LatencyStats | None
    b: LatencyStats | None
    p50_ratio: float | None
    p99_ratio: float | None
    verdict: str


class OpRow(Judgement):
    """A row of the table by operation."""

    op: str


class KindRow(Judgement):
    """A row of the table by kind of request (format 3 traces on)."""

    kind: str


class SideInfo(TypedDict):
    """One side as Side.describe() gives it."""

    directory: str | None
    directories: list[str]
    hosts: list[str]
    records: int
    span_ns: int
    profile: str | None
    fuse_round_trip_ns: float | None
    writeback_cache: bool | None
    kind: str | None  # what its records are: "fuse", "syscalls" (metadata.trace_kind), "mixed", None unknown


class OutFiles(TypedDict):
    """What --out wrote."""

    png: str
    html: str


class Comparison(TypedDict):
    """compare()'s result, what --json prints; `out` with --out."""

    a: SideInfo
    b: SideInfo
    tolerance: float
    tail_tolerance: float
    min_records: int
    host_slack_ns: float
    caution: str | None
    ops: list[OpRow]
    classes: list[KindRow]
    judged: int
    failed: int
    out: NotRequired[OutFiles]


class CompareError(UserError):
    exit_code = 2


class Side:
    """One trace, or several read as one, opened for per-op percentiles."""

    def __init__(self, directories: Sequence[str]):
        self.traces = reader.TraceSet(directories)
        self.directories = [m.directory for m in self.traces.members]
        self.db = duckdb.connect()
        self.columns = self.traces.create_view(self.db, "trace")
        row = self.db.execute(
            "select count(*), coalesce(max(start_ns + dur_ns) - min(start_ns), 0) from trace"
        ).fetchone()
        assert row is not None
        self.records, self.span_ns = row

    def stats(self, key: str) -> dict[str, LatencyStats]:
        """{op or kind: {count, records, mean_ns, p50_ns, p90_ns, p99_ns}}."""
        rows = self.db.execute(f"""
            select {key}, sum(sample)::bigint, count(*), avg(dur_ns), quantile_cont(dur_ns, [0.5, 0.9, 0.99])
            from trace where {key} is not null group by {key}""").fetchall()
        return {
            str(k): LatencyStats(count=n, records=kept, mean_ns=mean, p50_ns=q[0], p90_ns=q[1], p99_ns=q[2])
            for k, n, kept, mean, q in rows
        }

    def cdf(self, op: str) -> list[float]:
        """CDF_POINTS quantiles of op's latency, in ns."""
        qs = [i / (CDF_POINTS - 1) for i in range(CDF_POINTS)]
        row = self.db.execute("select quantile_cont(dur_ns, ?) from trace where op = ?", [qs, op]).fetchone()
        return list(row[0]) if row and row[0] else []

    def round_trip_ns(self) -> float:
        """FUSE's round trip as its traces measured it at mount (the largest; 0 if none did)."""
        return max((m.metadata.get("fuse_round_trip_ns") or 0 for m in self.traces.members), default=0)

    def describe(self) -> SideInfo:
        """Its directory (None for several), directories, hosts, records, span, the profiles
        emulated (None when none), the round trip, and whether a mount had FUSE's
        write-back cache."""
        profiles = sorted(
            {
                str((m.metadata.get("emulation") or {}).get("profile"))
                for m in self.traces.members
                if m.metadata.get("emulation")
            }
        )
        return {
            "directory": self.directories[0] if len(self.directories) == 1 else None,
            "directories": self.directories,
            "hosts": sorted({m.host for m in self.traces.members}),
            "records": self.records,
            "span_ns": self.span_ns,
            "profile": ", ".join(profiles) or None,
            "fuse_round_trip_ns": self.round_trip_ns() or None,
            "writeback_cache": self._writeback_cache(),
            "kind": self._kind(),
        }

    def _kind(self) -> str | None:
        """What its traces recorded: FUSE requests, system calls, both ("mixed"), or None unknown."""
        kinds = {trace_kind(m.metadata) for m in self.traces.members if m.metadata}
        return kinds.pop() if len(kinds) == 1 else "mixed" if kinds else None

    def _writeback_cache(self) -> bool | None:
        """Whether its mounts had FUSE's write-back cache: all, none, or None for some."""
        had = {bool((m.metadata.get("options") or {}).get("writeback_cache")) for m in self.traces.members}
        return had.pop() if len(had) == 1 else None


def judge(a: LatencyStats | None, b: LatencyStats | None, tolerance: float, tail: float, slack_ns: float) -> Judgement:
    """One row: A's and B's figures, B/A of p50 and p99, and the verdict."""
    row = Judgement(a=a, b=b, p50_ratio=None, p99_ratio=None, verdict="")
    if a is None or b is None:
        row["verdict"] = "only in B" if a is None else "only in A"
        return row
    row["p50_ratio"] = b["p50_ns"] / a["p50_ns"] if a["p50_ns"] else None
    row["p99_ratio"] = b["p99_ns"] / a["p99_ns"] if a["p99_ns"] else None
    if min(a["records"], b["records"]) < MIN_RECORDS:
        row["verdict"] = "too few"
        return row
    within = [
        abs(b["p50_ns"] - a["p50_ns"]) <= tolerance / 100 * a["p50_ns"],
        abs(b["p99_ns"] - a["p99_ns"]) <= tail / 100 * a["p99_ns"],
    ]
    by_host = [abs(b[k] - a[k]) <= slack_ns for k in ("p50_ns", "p99_ns")]
    if all(within):
        row["verdict"] = "pass"
    elif all(w or h for w, h in zip(within, by_host)):
        row["verdict"] = HOST
    else:
        row["verdict"] = "fail"
    return row


def compare(
    dirs_a: Sequence[str], dirs_b: Sequence[str], tolerance: float, tail: float
) -> tuple[Comparison, tuple[Side, Side]]:
    """A's traces (read as one) against B's, and the two sides (for --out's plots); see the
    module's docstring."""
    a, b = Side(dirs_a), Side(dirs_b)
    slack = max(a.round_trip_ns(), b.round_trip_ns())
    described = a.describe(), b.describe()
    caution = _partial(a, b)
    had = (described[0]["writeback_cache"], described[1]["writeback_cache"])
    if had[0] != had[1] or None in had:
        which = (
            " and ".join(f"some of {s}'s" for s, h in zip("AB", had) if h is None) or f"only {'A' if had[0] else 'B'}'s"
        )
        caution = (caution + "; " if caution else "") + (
            f"{which} mounts had FUSE's write-back cache: their writes are the kernel's "
            f"write-back of many write(2) calls, and reads of data written through them are missing; "
            f"mount the others so too (or an emulated mount with --no-writeback-cache) to compare them"
        )
    kinds = (described[0]["kind"], described[1]["kind"])
    if "syscalls" in kinds and kinds[0] != kinds[1]:
        caution = (caution + "; " if caution else "") + (
            "one side's records are system calls (a capture), the other's are not all: a system call's "
            "latency includes what the kernel answered from its caches, a FUSE request's only what "
            "reached the mount, and a FUSE trace has lookups and releases a capture does not; compare "
            "captures with captures"
        )
    ops: list[OpRow] = [{"op": k, **row} for k, row in _judged(a, b, "op", tolerance, tail, slack)]
    classes: list[KindRow] = (
        [{"kind": k, **row} for k, row in _judged(a, b, "kind", tolerance, tail, slack)]
        if "kind" in a.columns and "kind" in b.columns
        else []
    )
    out: Comparison = {
        "a": described[0],
        "b": described[1],
        "tolerance": tolerance,
        "tail_tolerance": tail,
        "min_records": MIN_RECORDS,
        "host_slack_ns": slack,
        "caution": caution,
        "ops": ops,
        "classes": classes,
        "judged": sum(r["verdict"] in ("pass", "fail", HOST) for r in ops),
        "failed": sum(r["verdict"] == "fail" for r in ops),
    }
    return out, (a, b)


def _partial(a: Side, b: Side) -> str | None:
    """What either side's traces did not record (--trace-only, --trace-sample), or None.
    Counts are weighed by sample; an operation one side filtered out shows as only in the other."""
    said = [
        f"{side}: {printable(m.directory)} left out {text}"
        for side, s in (("A", a), ("B", b))
        for m in s.traces.members
        if (text := partial.described(m.metadata)) is not None
    ]
    return "; ".join(said) or None


def _judged(a: Side, b: Side, key: str, tolerance: float, tail: float, slack: float) -> list[tuple[str, Judgement]]:
    """Each op (or kind) of either side, the most frequent first (ties by name, so a run's
    output does not depend on the set's order), with its judgement."""
    sa, sb = a.stats(key), b.stats(key)

    def order(k: str) -> tuple[int, str]:
        return -max(s[k]["count"] if k in s else 0 for s in (sa, sb)), k

    return [(k, judge(sa.get(k), sb.get(k), tolerance, tail, slack)) for k in sorted(set(sa) | set(sb), key=order)]


def run(args: argparse.Namespace) -> int:
    for flag, value in (("--tolerance", args.tolerance), ("--tail-tolerance", args.tail_tolerance)):
        if value >= 1000:
            raise CompareError(f"{flag} {value:g}: a percentage under 1000")
    if args.against is None and len(args.traces) != 2:
        raise CompareError(
            f"give two traces, A B (each a directory or a glob in quotes), or several: "
            f"A... --against B... (got {len(args.traces)} before any --against)"
        )
    sides = (args.traces, args.against) if args.against is not None else ([args.traces[0]], [args.traces[1]])
    dirs_a, dirs_b = expand_traces(*sides)
    try:
        result, opened = compare(dirs_a, dirs_b, args.tolerance, args.tail_tolerance)
    except duckdb.Error as exc:
        raise CompareError(f"cannot read the traces: {str(exc).splitlines()[0]}") from None
    if args.out:
        result["out"] = write_out(args.out, result, opened)
    print(json.dumps(result, indent=2) if args.json else render(result), flush=True)
    return 1 if result["failed"] else 0


def render(r: Comparison) -> str:
    lines = []
    for side in ("a", "b"):
        d = r[side]
        emulated = f", emulating {d['profile']}" if d["profile"] else ""
        lines.append(
            f"{side.upper()}  {_names(d)}  ({int_text(d['records'])} records over {d['span_ns'] / 1e9:.3f} s{emulated})"
        )
    if r["caution"]:
        lines.append(f"caution: {r['caution']}")
    blocks = ["\n".join(lines), _table(r["ops"], "op")]
    if r["classes"]:
        blocks.append(_table(r["classes"], "kind"))
    slack = f"; or apart by less than FUSE's round trip ({ns_text(r['host_slack_ns'])})" if r["host_slack_ns"] else ""
    blocks.append(
        f"(pass: B's p50 within {r['tolerance']:g} % of A's and its p99 within {r['tail_tolerance']:g} %"
        f"{slack}; too few: under {r['min_records']} records on a side)\n"
        f"{r['judged'] - r['failed']} of {r['judged']} judged operations pass"
        + (f"; see {r['out']['html']}" if r.get("out") else "")
    )
    return "\n\n".join(blocks)


def _names(d: SideInfo) -> str:
    """A side as the text names it: its directory, or its traces' count, hosts and directories."""
    if d["directory"] is not None:
        return d["directory"]
    hosts = ", ".join(h or "(no host)" for h in d["hosts"])
    return f"{len(d['directories'])} traces (hosts {hosts}): {' '.join(d['directories'])}"


def _table(rows: Sequence[Mapping[str, Any]], key: str) -> str:
    head = [key, "A n", "B n", "A p50", "B p50", "p50 B/A", "A p99", "B p99", "p99 B/A", "verdict"]
    body = []
    for r in rows:
        a, b = r["a"] or {}, r["b"] or {}
        body.append(
            [
                r[key],
                int_text(a.get("count", 0)),
                int_text(b.get("count", 0)),
                *(ns_text(x[k]) if k in x else "-" for x, k in ((a, "p50_ns"), (b, "p50_ns"))),
                _ratio(r["p50_ratio"]),
                *(ns_text(x[k]) if k in x else "-" for x, k in ((a, "p99_ns"), (b, "p99_ns"))),
                _ratio(r["p99_ratio"]),
                r["verdict"],
            ]
        )
    return table(head, body, "l" + "r" * 8 + "l")


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


# ---- --out: CDF plots and a page -----------------------------------------------------------


def write_out(directory: str, r: Comparison, sides: tuple[Side, Side]) -> OutFiles:
    if os.path.islink(directory) or (os.path.exists(directory) and not os.path.isdir(directory)):
        raise CompareError(f"--out {directory}: not a directory")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise CompareError(f"--out {directory}: cannot make it: {exc.strerror or exc}") from None
    png = _cdf_png(r, sides)
    png_path = os.path.join(directory, "latency-cdf.png")
    html_path = os.path.join(directory, "index.html")
    _write(png_path, png)
    _write(html_path, _page(r, png).encode())
    return {"png": png_path, "html": html_path}


def _write(path: str, data: bytes) -> None:
    from ..trace.metadata import atomic_write

    try:
        atomic_write(path, lambda f: f.write(data))
    except OSError as exc:
        raise CompareError(f"{path}: cannot write: {exc.strerror or exc}") from None


def _cdf_png(r: Comparison, sides: tuple[Side, Side]) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    # the table's first 16 (REHEARSAL.md says so): more panels would be too small to read
    ops = [row["op"] for row in r["ops"] if row["a"] and row["b"]][:16] or [row["op"] for row in r["ops"]][:16]
    cols = min(4, max(1, len(ops)))
    rows = max(1, -(-len(ops) // cols))
    fig = Figure(figsize=(4 * cols, 3 * rows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    ys = [i / (CDF_POINTS - 1) for i in range(CDF_POINTS)]
    for ax, op in zip(axes, ops):
        for side, label, style in ((sides[0], "A", "-"), (sides[1], "B", "--")):
            xs = side.cdf(op)
            if xs:
                ax.plot([max(x, 1.0) / 1e3 for x in xs], ys, style, label=label)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(_minor_labels(ax))
        ax.set_title(op)
        ax.set_xlabel("latency (µs)")
        ax.set_ylabel("share of operations")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="lower right")
    for ax in axes[len(ops) :]:
        ax.set_visible(False)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    return buf.getvalue()


def _minor_labels(ax: Any) -> Callable[[float, int | None], str]:
    """The minor tick labels of a panel's log axis.  matplotlib labels 2, 3, 4 and 6 of a
    decade when an axis spans under two, and in a panel 4 inches wide they overprint one
    another and the majors'.  Where two powers of ten are in view they say enough, and minors
    get none; else plain numbers (20, 50) at 2, 3 and 5 of a decade, or every one when the
    axis spans under half a decade."""

    def label(x: float, _pos: int | None = None) -> str:
        low, high = sorted(ax.get_xlim())
        if x <= 0 or low <= 0 or math.floor(math.log10(high)) - math.ceil(math.log10(low)) >= 1:
            return ""
        coefficient = round(x / 10 ** math.floor(math.log10(x) + 1e-9))
        return f"{x:g}" if high / low < math.sqrt(10) or coefficient in (2, 3, 5) else ""

    return label


def _page(r: Comparison, png: bytes) -> str:
    esc = html.escape
    heads = ["op", "A n", "B n", "A p50", "B p50", "p50 B/A", "A p99", "B p99", "p99 B/A", "verdict"]
    body = []
    for row in r["ops"]:
        a: Mapping[str, Any] = row["a"] or {}
        b: Mapping[str, Any] = row["b"] or {}
        cells = [
            row["op"],
            int_text(a.get("count", 0)),
            int_text(b.get("count", 0)),
            ns_text(a["p50_ns"]) if a else "-",
            ns_text(b["p50_ns"]) if b else "-",
            _ratio(row["p50_ratio"]),
            ns_text(a["p99_ns"]) if a else "-",
            ns_text(b["p99_ns"]) if b else "-",
            _ratio(row["p99_ratio"]),
            row["verdict"],
        ]
        cls = "fail" if row["verdict"] == "fail" else ""
        body.append(f'<tr class="{cls}">' + "".join(f"<td>{esc(str(c))}</td>" for c in cells) + "</tr>")
    image = base64.b64encode(png).decode()
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>fusetrace compare</title>
<style>body{{font-family:sans-serif;margin:2em}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}} td:first-child{{text-align:left}}
tr.fail td{{background:#fdd}}</style></head><body>
<h1>A against B</h1>
<p>A: {esc(_names(r["a"]))} ({int_text(r["a"]["records"])} records)<br>
B: {esc(_names(r["b"]))} ({int_text(r["b"]["records"])} records)</p>
<p>pass: B's p50 within {r["tolerance"]:g} % of A's and its p99 within {r["tail_tolerance"]:g} %
(or apart by less than FUSE's round trip); too few: under {r["min_records"]} records on a side.
{r["judged"] - r["failed"]} of {r["judged"]} judged operations pass.</p>
<table><tr>{"".join(f"<th>{h}</th>" for h in heads)}</tr>
{chr(10).join(body)}</table>
<h2>Latency CDFs</h2><img alt="latency CDF of each operation, A solid, B dashed" src="data:image/png;base64,{image}">
</body></html>
"""
