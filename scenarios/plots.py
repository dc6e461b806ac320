"""The PNG plots of one scenario run: throughput and latency from its trace, burst credits
and per-iteration figures from its result.json.

Trace columns are read with pyarrow and reduced with numpy, never record by record: a
run's trace can hold millions of records.  Times are seconds since the run's t=0
(result["start_monotonic_ns"], the same CLOCK_MONOTONIC as the trace's start_ns).  A plot
with nothing to show is not drawn; its Plot says why, and the HTML page says it instead.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Annotation
from matplotlib.ticker import MaxNLocator

from fusetrace.report.query import NoTrace, Trace

THROUGHPUT, LATENCY, CREDITS, ITERATIONS = "throughput.png", "latency-cdf.png", "credits.png", "iterations.png"
CDF_POINTS = 1000  # points per latency curve, whatever the number of records
MiB, GiB = 2**20, 2**30

# One colour and dash per FUSE operation, the same in every plot of every run (a palette
# cycled per plot repeats after ten: the touch scenario shows 14 operations).  The ten most
# common operations take tab10's colours, solid; the next ten Dark2's eight, black and navy,
# dashed; the rarest Set1's (but its yellow) and a dark indigo, dotted.
_OPERATIONS = (
    "read",
    "write",
    "getattr",
    "lookup",
    "create",
    "flush",
    "release",
    "open",
    "setattr",
    "unlink",
    "readdir",
    "statfs",
    "opendir",
    "releasedir",
    "mkdir",
    "rmdir",
    "rename",
    "fsync",
    "access",
    "getxattr",
    "forget",
    "readlink",
    "symlink",
    "link",
    "mknod",
    "fsyncdir",
    "setxattr",
    "listxattr",
    "removexattr",
)
_PALETTE = (
    [
        (c, "-")
        for c in (
            "#1f77b4",
            "#ff7f0e",
            "#2ca02c",
            "#d62728",
            "#9467bd",
            "#8c564b",
            "#e377c2",
            "#7f7f7f",
            "#bcbd22",
            "#17becf",
        )
    ]
    + [
        (c, "--")
        for c in (
            "#000000",
            "#1b9e77",
            "#e7298a",
            "#e6ab02",
            "#000080",
            "#66a61e",
            "#7570b3",
            "#d95f02",
            "#a6761d",
            "#666666",
        )
    ]
    + [
        (c, ":")
        for c in ("#e41a1c", "#377eb8", "#4daf4a", "#984ea3", "#ff7f00", "#a65628", "#f781bf", "#999999", "#393b79")
    ]
)
OP_STYLE: dict[str, tuple[str, str]] = dict(zip(_OPERATIONS, _PALETTE, strict=True))
UNKNOWN_OP_STYLE = ("#808080", "-.")  # an operation this table does not know yet


@dataclass(frozen=True)
class Plot:
    file: str  # name in the run directory
    title: str
    drawn: bool
    note: str  # a caption when drawn, else why not


@dataclass(frozen=True)
class Records:
    """The trace columns the plots use, one numpy array each."""

    start_s: np.ndarray  # float64, seconds since the run's t=0
    dur_ns: np.ndarray  # int64
    op: np.ndarray  # integer codes into `ops`
    ops: list[str]
    result: np.ndarray  # int64: bytes for read and write
    missing: int  # records the trace writer dropped or lost (metadata counters)

    def is_op(self, name: str) -> np.ndarray:
        return self.op == (self.ops.index(name) if name in self.ops else -1)


def write_all(run_dir: Path, result: dict) -> list[Plot]:
    """Draw every plot the run has data for into run_dir (removing those of an earlier run
    in the same directory); one Plot per plot the page shows, in page order."""
    run_dir = Path(run_dir)
    for name in (THROUGHPUT, LATENCY, CREDITS, ITERATIONS):
        (run_dir / name).unlink(missing_ok=True)
    records = read_records(run_dir / "trace", result["start_monotonic_ns"])
    plots = [
        plot_throughput(run_dir / THROUGHPUT, records, result["steps"]),
        plot_latency_cdf(run_dir / LATENCY, records),
    ]
    if result["credits"]:
        plots.append(plot_credits(run_dir / CREDITS, result))
    if any(step["series"] for step in result["steps"]):
        plots.append(plot_iterations(run_dir / ITERATIONS, result["steps"]))
    return plots


def read_records(trace_dir: Path, t0_ns: int) -> Records:
    """The trace's records (none if it has no parts: nothing reached the mount)."""
    try:
        trace = Trace(str(trace_dir))
    except NoTrace:
        return Records(np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int8), [], np.zeros(0, np.int64), 0)
    table = pq.read_table(trace.files, columns=["start_ns", "dur_ns", "op", "result"])
    op = table.column("op").unify_dictionaries().combine_chunks()  # one dictionary for all parts
    missing = trace.metadata.get("dropped", 0) + trace.metadata.get("lost", 0)
    return Records(
        start_s=(table.column("start_ns").to_numpy() - t0_ns) / 1e9,
        dur_ns=table.column("dur_ns").to_numpy(),
        op=op.indices.to_numpy(zero_copy_only=False),
        ops=op.dictionary.to_pylist(),
        result=table.column("result").to_numpy(),
        missing=missing,
    )


def throughput(records: Records, width: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(bin edges in s, read MB/s, written MB/s) per `width`-second bin aligned on t=0, MB
    being 10^6 bytes; an operation's bytes count in the bin where it completed (its reply).
    None when the trace has no reads or writes."""
    read, write = records.is_op("read"), records.is_op("write")
    io = read | write
    if not io.any():
        return None
    bins = np.floor((records.start_s[io] + records.dur_ns[io] / 1e9) / width).astype(np.int64)
    first = bins.min()
    n = int(bins.max() - first + 1)
    nbytes = records.result[io].astype(np.float64)
    read_mb = np.bincount(bins - first, weights=np.where(read[io], nbytes, 0.0), minlength=n) / (1e6 * width)
    write_mb = np.bincount(bins - first, weights=np.where(write[io], nbytes, 0.0), minlength=n) / (1e6 * width)
    return (first + np.arange(n + 1)) * width, read_mb, write_mb


def latency_cdf(records: Records, points: int = CDF_POINTS) -> dict[str, tuple[np.ndarray, np.ndarray, int]]:
    """Per op, most frequent first: (latency in ms, fraction of that op's records at or
    below it, record count), at most `points` points evenly spaced in rank."""
    order = np.lexsort((records.dur_ns, records.op))
    codes, durs = records.op[order], records.dur_ns[order]
    bounds = np.searchsorted(codes, np.arange(len(records.ops) + 1))
    curves = {}
    for code, name in enumerate(records.ops):
        d = durs[bounds[code] : bounds[code + 1]]
        if len(d):
            ranks = np.unique(np.linspace(0, len(d) - 1, min(len(d), points)).round().astype(np.int64))
            curves[name] = (d[ranks] / 1e6, (ranks + 1) / len(d), len(d))
    return dict(sorted(curves.items(), key=lambda kv: -kv[1][2]))


def plot_throughput(path: Path, records: Records, steps: list[dict]) -> Plot:
    title = "Throughput"
    bins = throughput(records)
    if bins is None:
        return Plot(path.name, title, False, _empty_reason(records, "no read or write records"))
    edges, read_mb, write_mb = bins
    fig, (ax,) = _figure(1, 3.6)
    _mark_steps(ax, steps)
    ax.stairs(read_mb, edges, label="read", color=OP_STYLE["read"][0], linewidth=1.2)
    ax.stairs(write_mb, edges, label="write", color=OP_STYLE["write"][0], linewidth=1.2)
    ax.set(xlabel="seconds since the run's t=0", ylabel="MB/s", ylim=(0, None))
    ax.legend(loc="upper right", fontsize=8)
    label_steps(fig, ax, steps)
    fig.savefig(path, format="png")
    return Plot(
        path.name,
        title,
        True,
        "Bytes read and written per 1 s bin (MB = 10^6 bytes), counted "
        "when each operation completed; shaded bands are the steps." + _missing_note(records),
    )


def plot_latency_cdf(path: Path, records: Records) -> Plot:
    title = "Latency per operation"
    curves = latency_cdf(records)
    if not curves:
        return Plot(path.name, title, False, _empty_reason(records, "no records"))
    fig, (ax,) = _figure(1, 4.2)
    for name, (ms, fraction, n) in curves.items():
        ms = np.maximum(ms, 1e-6)  # 0 ns has no place on a log axis
        colour, dash = OP_STYLE.get(name, UNKNOWN_OP_STYLE)
        ax.step(
            np.r_[ms[0], ms],
            np.r_[0, fraction],
            where="post",
            label=f"{name} ({n:,})",
            linewidth=1.1,
            color=colour,
            linestyle=dash,
        )
    ax.set_xscale("log")
    ax.set(xlabel="latency, ms (log scale)", ylabel="fraction of operations", ylim=(0, 1.01))
    ax.grid(True, which="major", linewidth=0.4, alpha=0.5)
    ax.legend(loc="lower right", fontsize=7, ncols=2)
    fig.savefig(path, format="png")
    return Plot(
        path.name,
        title,
        True,
        "Cumulative distribution of dur_ns (admission to reply, emulated "
        "delay included) per FUSE operation, record counts in brackets; an "
        "operation has the same colour and dash in every run's plot." + _missing_note(records),
    )


def plot_credits(path: Path, result: dict) -> Plot:
    """Burst credit balance above, permitted throughput below, on one time axis."""
    title = "Burst credits"
    samples = result["samples"]
    t = _sampled(samples, "t")
    balance, permitted = _sampled(samples, "BurstCreditBalance"), _sampled(samples, "PermittedThroughput")
    if np.isnan(balance).all() and np.isnan(permitted).all():
        return Plot(path.name, title, False, "the emulator reported no credit metrics during the run.")
    unit, scale = ("GiB", GiB) if np.nanmax(np.append(balance, 0)) >= GiB else ("MiB", MiB)
    fig, (top, bottom) = _figure(2, 5.0, sharex=True)
    _mark_steps(top, result["steps"])
    _mark_steps(bottom, result["steps"])
    end = result["duration_s"]
    values, edges = held(t, balance / scale, end)
    top.stairs(values, edges, color="tab:green", linewidth=1.2)
    top.set(ylabel=f"BurstCreditBalance, {unit}", ylim=(0, None))
    values, edges = held(t, permitted / MiB, end)
    bottom.stairs(values, edges, color="tab:purple", linewidth=1.2)
    bottom.set(
        ylabel="PermittedThroughput, MiB/s",
        ylim=(0, None),
        xlabel="seconds since the run's t=0",
        xlim=(0, end),
    )
    label_steps(fig, top, result["steps"])
    fig.savefig(path, format="png")
    return Plot(
        path.name,
        title,
        True,
        "The emulator's BurstCreditBalance and PermittedThroughput, "
        "sampled about every 0.5 s, each held until the next sample; shaded bands are the steps.",
    )


def held(t: np.ndarray, values: np.ndarray, end: float) -> tuple[np.ndarray, np.ndarray]:
    """(values, edges) for Axes.stairs: each sample's value held until the next sample, the
    last until `end`; samples without a value (NaN) left out.  A line from one sample to
    the next would draw a ramp where the balance was set at one instant (`fusetrace set
    burst_credit_balance=0`, a scenario's `set`), as if it had been spent over the interval."""
    kept = ~np.isnan(values)
    t, values = t[kept], values[kept]
    return values, np.append(t, max(end, t[-1]) if len(t) else end)


def plot_iterations(path: Path, steps: list[dict]) -> Plot:
    """One axis per repeated step: its rate (or seconds) per iteration, with the step's
    published figure as a dashed line when there is one."""
    repeated = [step for step in steps if step["series"]]
    fig, axes = _figure(len(repeated), 0.6 + 2.4 * len(repeated))
    for ax, step in zip(axes, repeated):
        key = _series_figure(step["series"])
        i = _sampled(step["series"], "i")
        ax.plot(i, _sampled(step["series"], key), marker="o", markersize=3, linewidth=1, label="emulated")
        if step["published"].get(key) is not None:
            ax.axhline(step["published"][key], color="tab:red", linestyle="--", linewidth=1, label="published")
        ax.set_title(step["name"], fontsize=9, parse_math=False)
        ax.set(ylabel=key, ylim=(0, ax.get_ylim()[1] * 1.1))  # room above a published line at the top
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(loc="lower right", fontsize=7)
    axes[-1].set_xlabel("iteration")
    fig.savefig(path, format="png")
    return Plot(
        path.name, "Per iteration", True, "Each iteration of the repeated steps; dashed: the step's published figure."
    )


def _series_figure(series: list[dict]) -> str:
    """The rate a series gives (MB/s, files/s ...), else its seconds."""
    rates = [k for k in series[0] if k.endswith("/s")]
    return rates[0] if rates else "seconds"


def _sampled(items: list[dict], key: str) -> np.ndarray:
    """One key of a list of samples (a few per second, not trace records) as floats, NaN where absent."""
    return np.array([item.get(key, np.nan) for item in items], dtype=np.float64)


def _empty_reason(records: Records, what: str) -> str:
    holds = what if len(records.op) else "no records"
    return f"the trace holds {holds}." + _missing_note(records)


def _missing_note(records: Records) -> str:
    if not records.missing:
        return ""
    return f" The trace writer dropped or lost {records.missing:,} records: they are not counted."


def _mark_steps(ax: Axes, steps: list[dict]) -> None:
    """Steps as alternating grey bands."""
    for k, step in enumerate(steps):
        ax.axvspan(step["t0"], step["t1"], color="0.92" if k % 2 else "0.86", linewidth=0, zorder=0)


LABEL_GAP_PX = 2.0  # between two step names moved apart


def label_steps(fig: Figure, ax: Axes, steps: list[dict]) -> list[Annotation]:
    """Name each step up the left edge of its band, once the axes are otherwise complete.
    Steps shorter than a line of text would print their names over one another, so a name
    that would touch the one before moves right just past it (and the next ones with it);
    a name pushed out of the axes is left out.  Returns the names drawn."""
    fig.draw_without_rendering()  # lay the figure out: display positions are final from here
    assert isinstance(fig.canvas, FigureCanvasAgg)  # _figure's
    renderer = fig.canvas.get_renderer()
    right_edge = ax.get_window_extent(renderer).x1
    placed: list[Annotation] = []
    after = -np.inf  # after: display x where the last name drawn ends
    for step in steps:
        label = ax.annotate(
            f" {step['name']}",
            (step["t0"], 0.97),
            xycoords=ax.get_xaxis_transform(),
            textcoords="offset points",
            xytext=(0, 0),
            rotation=90,
            ha="left",
            va="top",
            fontsize=7,
            color="0.35",
            parse_math=False,
            clip_on=True,
        )
        label.set_in_layout(False)  # names never change the layout they were placed in
        box = label.get_window_extent(renderer)
        shift = max(after + LABEL_GAP_PX - box.x0, 0.0)
        if box.x1 + shift > right_edge:
            label.remove()
            continue
        label.xyann = (shift * 72 / fig.dpi, 0)  # pixels to points
        after = box.x1 + shift
        placed.append(label)
    return placed


def _figure(rows: int, height: float, sharex: bool = False) -> tuple[Figure, list[Axes]]:
    """A figure on the Agg canvas (no display, no pyplot state) and its `rows` axes."""
    fig = Figure(figsize=(9, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, list(fig.subplots(rows, 1, sharex=sharex, squeeze=False)[:, 0])
