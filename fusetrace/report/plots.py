"""The report's plot: its timeline (--timeline --plot FILE.png) drawn as a PNG, with the
stretches an emulated file system's burst credits were spent shaded."""

from .render import bucket_width
from .shapes import Summary


def plot_timeline(path: str, s: Summary) -> None:
    """The timeline as a PNG: operations per second above, MB/s read and written below."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    t = s.get("timeline")
    assert t is not None, "drawn only for a report with a timeline"
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
    for k, (a, b) in enumerate(spent(s)):
        for ax in (top, bottom):
            label = "burst credits spent: the baseline" if ax is bottom and not k else None
            ax.axvspan(a, b, color="#d62728", alpha=0.12, linewidth=0, zorder=0, label=label)
    bottom.legend(loc="upper right", fontsize=8)
    what = "  ".join(s["filters"]["options"]) if s["filters"] else "all records"
    where = s["directory"] or ", ".join(s["directories"])
    top.set_title(f"{where}: {what}, per {bucket_width(t['width_ns'])}", fontsize=9, parse_math=False)
    fig.savefig(path, format="png")


def spent(s: Summary) -> list[tuple[float, float]]:
    """When the burst credits were spent (credits.credits()), in seconds since the trace's
    first record, each from its start to its end (or the records' last reply): where the
    baseline held the workload, as a band, not a slope between two samples."""
    c = s["credits"]
    if not c or s["origin_ns"] is None:
        return []
    origin, last = s["origin_ns"], s["last_ns"] or 0
    return [
        ((x["from_ns"] - origin) / 1e9, ((last if x["to_ns"] is None else x["to_ns"]) - origin) / 1e9)
        for x in c["stretches"]
    ]
