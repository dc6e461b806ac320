"""`fusetrace report DIR`: per-operation counts, throughput and latency of a trace, and
for an emulated one where the modelled time went (the gates that held each operation,
and wait / latency / transfer), the profile, and whether the host kept up.

Every pass over the records is DuckDB SQL on the Parquet parts; Python only formats
the few result rows.  `Trace(dir).summary()` gives the same data as `--json`.
"""

import glob
import json
import os
import sys
from datetime import datetime

import duckdb

from .errors import UserError
from .texttable import table
from .trace import metadata as meta

QUANTILES = {"p50_ns": 0.5, "p90_ns": 0.9, "p99_ns": 0.99, "p999_ns": 0.999}
TOP_GROUPS = 20  # pids or paths the text report shows with --by; --json has them all


class NoTrace(UserError):
    exit_code = 2


class Trace:
    """A trace directory opened for queries.  Only the parts present when it was
    opened are read, so a trace still being written reports consistently."""

    def __init__(self, directory: str):
        self.directory = os.path.abspath(directory)
        if not os.path.isdir(self.directory):
            raise NoTrace(f"{directory}: no such trace directory")
        self.files = sorted(glob.glob(os.path.join(glob.escape(self.directory), "*.parquet")))
        if not self.files:
            raise NoTrace(f"{directory}: no trace files (*.parquet) in it")
        self.metadata_error = None
        try:
            self.metadata = meta.read(self.directory)
        except ValueError as exc:
            self.metadata, self.metadata_error = {}, f"{meta.NAME} unreadable: {exc}"
        else:
            if not self.metadata:
                self.metadata_error = f"no {meta.NAME}: source, start time and drops unknown"
        self._db = duckdb.connect()
        self._db.read_parquet(self.files).create_view("trace")
        self.columns = {row[0] for row in self._db.execute("describe trace").fetchall()}
        summary = self._db.execute(
            "select count(*), min(start_ns), max(start_ns + dur_ns), coalesce(sum(dur_ns), 0) "
            "from trace").fetchone()
        assert summary is not None  # an aggregate always has its one row
        self.records, self.first_ns, self.last_ns, self.total_ns = summary
        self.span_ns = self.last_ns - self.first_ns if self.records else 0

    def ops(self, by: str | None = None, top: int | None = None) -> tuple[list[dict], int]:
        """One row per op (or per (pid, op) / (path, op)), biggest total time first,
        and the number of groups; `top` keeps only the groups with most total time."""
        if by not in (None, "pid", "path"):
            raise ValueError(f"by must be 'pid' or 'path', not {by!r}")
        cols = f"{by}, op" if by else "op"
        stats = f"""
            select {cols}, count(*) as count, count(*) filter (where errno <> 0) as errors,
                   coalesce(sum(result) filter (where op in ('read', 'write')), 0) as bytes,
                   sum(dur_ns) as total_ns, avg(dur_ns) as mean_ns,
                   quantile_cont(dur_ns, {list(QUANTILES.values())}) as q, max(dur_ns) as max_ns
            from trace group by {cols}"""
        if by:
            limit = f"limit {int(top)}" if top else ""
            sql = f"""
                with s as ({stats}),
                k as (select {by}, sum(total_ns) as group_ns, count(*) over () as groups
                      from s group by {by} order by group_ns desc, {by} {limit})
                select s.*, k.groups from s join k using ({by})
                order by k.group_ns desc, {by}, total_ns desc, op"""
        else:
            sql = f"select *, 1 as groups from ({stats}) order by total_ns desc, op"
        cursor = self._db.execute(sql)
        names = [d[0] for d in cursor.description]
        rows = [dict(zip(names, r)) for r in cursor.fetchall()]
        span_s = self.span_ns / 1e9
        groups = rows[0]["groups"] if rows else 0
        for r in rows:
            del r["groups"]
            r.update(zip(QUANTILES, r.pop("q")))
            r["ops_per_s"] = r["count"] / span_s if span_s else None
            r["bytes_per_s"] = r["bytes"] / span_s if span_s else None
        return rows, groups

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

    def summary(self, by: str | None = None, histogram: bool = False, top: int | None = None) -> dict:
        """Everything the report shows, as plain data (what --json prints)."""
        ops, groups = self.ops(by, top)
        m = self.metadata
        out = {
            "directory": self.directory,
            "files": len(self.files),
            "records": self.records,
            "first_ns": self.first_ns,
            "last_ns": self.last_ns,
            "span_ns": self.span_ns,
            "total_ns": self.total_ns,
            "metadata": m,
            "metadata_error": self.metadata_error,
            "closed": "end_wall_ns" in m,
            "by": by,
            "groups": groups,
            "ops": ops,
            "shaping": self.shaping(),
        }
        if histogram:
            out["histograms"] = self.histograms()
        return out


def run(args) -> int:
    """The `fusetrace report` command; args has trace_dir, histogram, by and json."""
    try:
        trace = Trace(args.trace_dir)
        if args.json:
            text = json.dumps(trace.summary(args.by, args.histogram), indent=2)
        else:
            text = render(trace.summary(args.by, args.histogram, top=TOP_GROUPS))
    except duckdb.Error as exc:
        raise UserError(f"{args.trace_dir}: cannot read the trace: {str(exc).splitlines()[0]}") from None
    try:
        print(text, flush=True)
    except BrokenPipeError:  # `fusetrace report | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


# ---- text ----------------------------------------------------------------------------

def render(s: dict) -> str:
    parts = ["\n".join(_header(s)), _ops_table(s)]
    shaping = _shaping(s)
    if shaping:
        parts.append(shaping)
    if s.get("histograms"):
        parts.append(_histograms(s["histograms"]))
    return "\n\n".join(parts)


def _header(s: dict) -> list[str]:
    m = s["metadata"]
    lines = [f"trace       {s['directory']}  ({_int(s['records'])} records in {_int(s['files'])} files)"]
    if "source" in m:
        host = f" on {m['host']}" if m.get("host") else ""
        lines.append(f"source      {m['source']}{host}, mounted at {m.get('mountpoint', '?')}")
    if "start_wall_ns" in m:
        lines.append(f"started     {_wall(m['start_wall_ns'])}, records span {s['span_ns'] / 1e9:.3f} s")
    if m.get("dropped"):
        limit = f"max_pending {m['max_pending']}" if m.get("max_pending") is not None else \
            f"{m['max_pending_bytes'] / 2**20:g} MiB" if m.get("max_pending_bytes") else "max_pending ?"
        lines.append(f"dropped     {_int(m['dropped'])} records: the writer's queue was full ({limit})")
    if m.get("write_errors"):
        lines.append(f"lost        {_int(m.get('lost', 0))} records in {_int(m['write_errors'])} failed "
                     f"writes; last: {m.get('last_error')}")
    lines += _emulation(m)
    if s["metadata_error"]:
        lines.append(f"warning     {s['metadata_error']}")
    elif not s["closed"]:
        lines.append(f"warning     {_not_closed(m)}")
    return lines


def _not_closed(m: dict) -> str:
    """Why a trace has no end time, as far as this host can tell: its server is still
    running, or it stopped without writing its final metadata (killed, or the write
    failed: with write errors already counted, a full disk is the likely cause)."""
    counts = "the counts above are from its last metadata write"
    pid = m.get("pid")
    if pid and m.get("host") in (None, os.uname().nodename) and _is_fusetrace(pid):
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


def _ops_table(s: dict) -> str:
    if not s["ops"]:
        return "no records"
    key = s["by"]
    head = ([key] if key else []) + ["op", "count", "errors", "ops/s", "MB/s",
                                     "mean", "p50", "p90", "p99", "p99.9", "max", "time%"]
    total = s["total_ns"] or 1
    rows, last = [], None
    for r in s["ops"]:
        row = [] if not key else [_short(r[key]) if r[key] != last else ""]
        last = r[key] if key else None
        io = r["op"] in ("read", "write")
        row += [r["op"], _int(r["count"]), _int(r["errors"]), _num(r["ops_per_s"]),
                _num(r["bytes_per_s"] / 1e6) if io and r["bytes_per_s"] is not None else "-",
                *(_ns(r[c]) for c in ("mean_ns", *QUANTILES, "max_ns")),
                f"{100 * r['total_ns'] / total:.1f}"]
        rows.append(row)
    left = 2 if key else 1
    text = table(head, rows, "l" * left + "r" * (len(head) - left))
    note = "latency is dur_ns (admission to reply); MB = 10^6 bytes; sorted by total time"
    if key and s["groups"] > TOP_GROUPS:
        note += f"; top {TOP_GROUPS} of {_int(s['groups'])} {key}s (--json has all)"
    return f"{text}\n({note})"


def _emulation(m: dict) -> list[str]:
    """The header's lines on an emulated trace: the profile, whether the host kept up
    with the model, and what the run must be warned of (its metadata's `warnings`)."""
    if "emulation" not in m:
        return []
    lines = [f"emulated    {m['emulation'].get('profile', '?')}"]
    host = m.get("host_load")
    if host is None:
        lines[0] += "; whether the host kept up is unknown (no final metadata)"
    else:
        verdict = "HOST-BOUND: the host, not the model, set the pace" if host["host_bound"] else \
            "the host kept up with the model"
        lines[0] += (f"; {verdict} (replies {100 * host['added_share']:.1f} % later than modelled in all, "
                     f"loop busy {100 * host['loop_busy']:.0f} % of the time)")
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


def _short(value, width: int = 48) -> str:
    text = str(value)
    return text if len(text) <= width else "…" + text[-(width - 1):]


def _wall(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9).astimezone().isoformat(sep=" ", timespec="milliseconds")
