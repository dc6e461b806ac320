"""Every mount's per-operation figures for Prometheus: requests, errors by errno, bytes read
and written, and latency histograms (docs/METRICS.md lists them).

Counted on the trio loop in plain lists, one per operation (`OpCounts.add`, which
`Pipeline.call` calls beside the trace record), and made into metric families only when
Prometheus scrapes (`OpCollector`).  A prometheus_client `Histogram.observe` per request
costs four times a list's increments and a `bisect` (docs/BENCHMARKS.md, "Metrics on a
traced mount"), and `.labels(op)` four times more again.

The scrape reads the lists from the HTTP server's thread without asking the loop: each
list is copied whole (one step under the GIL), so a scrape never waits for a busy loop
nor wakes an idle one.  An operation's count is the sum of its buckets, so the count,
`_count` and the `+Inf` bucket always agree; its latency sum may lag by the one request
being counted at that instant.
"""

import errno as E
from bisect import bisect_left
from collections.abc import Iterator
from time import monotonic_ns
from typing import Any, TypedDict

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from ..request import FUSE_OPERATIONS

# Latency bucket bounds: 1, 2 and 5 a decade from 10 us to 50 s, and 60 s, the timeout
# (timeo=600) after which an NFS client over TCP, EFS's recommended mount, retransmits.
BOUNDS_S: tuple[float, ...] = (
    *(round(m * 10.0**exp, 9) for exp in range(-5, 2) for m in (1, 2, 5)),
    60.0,
)
_BOUNDS_NS = [round(b * 1e9) for b in BOUNDS_S]
_SUM, _BYTES, _BUCKETS = 0, 1, 2  # a row: latency sum (ns), bytes, then one count a bucket and +Inf
_LE = (*map(floatToGoString, BOUNDS_S), "+Inf")  # the `le` labels, as prometheus_client writes them
_DATA = frozenset(("read", "write"))  # the operations whose bytes are counted


class OpCounts:
    """The per-operation counters of one mount, added to on the trio loop only."""

    def __init__(self) -> None:
        # every operation's row made now: a scrape iterates this dict from another thread,
        # which a row added later would break
        self.rows: dict[str, list[int]] = {op: [0] * (_BUCKETS + len(_BOUNDS_NS) + 1) for op in FUSE_OPERATIONS}
        self.errors: dict[tuple[str, int], int] = {}  # (op, errno): requests answered with it

    def add(self, op: str, start: int, out: Any, err: int) -> None:
        """One request of `op`, begun at `start` (monotonic ns), answered now with `out`
        (read: the bytes; write: the count written) or the errno `err`."""
        ns = monotonic_ns() - start
        row = self.rows[op]
        row[_BUCKETS + bisect_left(_BOUNDS_NS, ns)] += 1
        row[_SUM] += ns
        if err:
            key = (op, err)
            self.errors[key] = self.errors.get(key, 0) + 1
        elif op in _DATA:
            row[_BYTES] += out if type(out) is int else len(out)


class OpFigures(TypedDict):
    """One operation's figures for `fusetrace stats`: the quantiles are the upper bounds of
    the buckets they fall in (seconds; None: past 60 s)."""

    count: int
    errors: dict[str, int]
    bytes: int
    mean_s: float
    p50_le_s: float | None
    p99_le_s: float | None


def figures(counts: OpCounts) -> dict[str, OpFigures]:
    """Every operation with a request, on the loop (the control socket's handler)."""
    out: dict[str, OpFigures] = {}
    for op, row in counts.rows.items():
        buckets = row[_BUCKETS:]
        n = sum(buckets)
        if n:
            errors = {errno_name(err): k for (o, err), k in sorted(counts.errors.items()) if o == op}
            out[op] = OpFigures(
                count=n,
                errors=errors,
                bytes=row[_BYTES],
                mean_s=row[_SUM] / n / 1e9,
                p50_le_s=_quantile_bound(buckets, 0.5 * n),
                p99_le_s=_quantile_bound(buckets, 0.99 * n),
            )
    return out


def _quantile_bound(buckets: list[int], rank: float) -> float | None:
    seen = 0
    for bound, count in zip(BOUNDS_S, buckets, strict=False):  # the last bucket, +Inf, has no bound
        seen += count
        if seen >= rank:
            return bound
    return None


def errno_name(err: int) -> str:
    """ENOENT for 2; an errno the C library has no name for as its number."""
    return E.errorcode.get(err, str(err))


class OpCollector:
    """OpCounts as Prometheus metric families, built at each scrape.  Operations with no
    request yet are left out, as a labelled prometheus_client metric leaves out labels
    never used."""

    def __init__(self, counts: OpCounts) -> None:
        self._counts = counts

    def collect(self) -> Iterator[Metric]:
        rows = {op: row[:] for op, row in self._counts.rows.items()}  # each copy whole (the module's docstring)
        errors = self._counts.errors.copy()
        total = CounterMetricFamily("fusetrace_operations", "Requests answered, by operation.", labels=["op"])
        failed = CounterMetricFamily(
            "fusetrace_operation_errors",
            "Requests answered with an error, by operation and errno (its name, as ENOENT).",
            labels=["op", "errno"],
        )
        moved = CounterMetricFamily(
            "fusetrace_bytes", "Data bytes read and written through the mount, by operation.", labels=["op"]
        )
        latency = HistogramMetricFamily(
            "fusetrace_operation_seconds",
            "Time from a request's arrival at the server to its answer, by operation.",
            labels=["op"],
        )
        for op, row in rows.items():
            counts = row[_BUCKETS:]
            n = sum(counts)
            if not n:
                continue
            total.add_metric([op], n)
            if op in _DATA:
                moved.add_metric([op], row[_BYTES])
            cumulative, buckets = 0, []
            for bound, count in zip(_LE, counts, strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            latency.add_metric([op], buckets, row[_SUM] / 1e9)
        for (op, err), n in sorted(errors.items()):
            failed.add_metric([op, errno_name(err)], n)
        yield from (total, failed, moved, latency)
