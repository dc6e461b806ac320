"""What an application saw during a scripted run (a scenario with events or fault rules):
per operation, its errors and its latency, the worst of it and when, from the run's trace."""

import errno as errnos
from pathlib import Path

import duckdb

# Replies that are answers rather than failures: a name that is not there, an attribute not set
# or not supported.  Left out of the errors an application saw.
ANSWERS = {
    "lookup": ("ENOENT",),
    "getxattr": ("ENODATA", "ENOSYS", "EOPNOTSUPP"),
    "listxattr": ("ENOSYS", "EOPNOTSUPP"),
}
SPIKE_FLOOR_NS = 10_000_000  # a spike is over ten times the median and over 10 ms


def seen(trace: Path, origin_ns: int) -> list[dict]:
    """Per operation of the trace, most time first: count, errors by name (not ANSWERS), p50,
    p99 and the worst latency (ms), when the worst began (s after `origin_ns`, the first
    step's start), and how many took over ten times their median and over 10 ms (the spikes:
    sub-millisecond operations vary tenfold on a busy host without the application noticing)."""
    parts = sorted(str(p) for p in trace.glob("*.parquet"))
    if not parts:
        return []
    db = duckdb.connect()
    db.read_parquet(parts).create_view("t")
    out = []
    for op, n, p50, p99, worst, worst_at, total in db.execute("""
            select op, count(*), quantile_cont(dur_ns, 0.5), quantile_cont(dur_ns, 0.99), max(dur_ns),
                   arg_max(start_ns, dur_ns), sum(dur_ns)
            from t group by op order by sum(dur_ns) desc""").fetchall():
        errors = dict(
            db.execute(
                "select errno, count(*) from t where op = ? and errno <> 0 group by errno order by count(*) desc", [op]
            ).fetchall()
        )
        spikes = db.execute(
            "select count(*) from t where op = ? and dur_ns > ?", [op, max(10 * p50, SPIKE_FLOOR_NS)]
        ).fetchone()
        named = {errnos.errorcode.get(code, str(code)): k for code, k in errors.items()}
        out.append(
            {
                "op": op,
                "count": n,
                "total_s": total / 1e9,
                "errors": {name: k for name, k in named.items() if name not in ANSWERS.get(op, ())},
                "p50_ms": p50 / 1e6,
                "p99_ms": p99 / 1e6,
                "max_ms": worst / 1e6,
                "max_at_s": (worst_at - origin_ns) / 1e9,
                "spikes": spikes[0] if spikes else 0,
            }
        )
    return out


def table(ops: list[dict]) -> list[list[str]]:
    """The rows of the text and HTML tables: op, count, errors, p50, p99, worst (at)."""
    return [
        [
            o["op"],
            f"{o['count']:,}",
            ", ".join(f"{k} {v:,}" for k, v in o["errors"].items()) or "-",
            f"{o['p50_ms']:,.2f}",
            f"{o['p99_ms']:,.2f}",
            f"{o['max_ms']:,.1f} (at {o['max_at_s']:+.1f} s)",
            f"{o['spikes']:,}",
        ]
        for o in ops
    ]


HEAD = ["op", "count", "errors", "p50 ms", "p99 ms", "worst ms (when)", "over 10x p50, 10 ms"]
