"""`fusetrace simulate --plot`: the simulation's credits, permitted throughput and waits
over virtual time, drawn into a PNG."""

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .simulate import Simulation

DAY = 86400.0


def plot(path: str, s: "Simulation") -> None:
    """Credits, permitted throughput and the operations' waits over virtual time, the
    extrapolated stretches shaded, the moment credits run out marked."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    samples = s["samples"]
    duration = s["duration_s"]
    unit, scale = next(
        ((u, k) for u, k in (("days", DAY), ("hours", 3600.0), ("minutes", 60.0)) if duration >= 2 * k),
        ("seconds", 1.0),
    )
    t = np.array([x["t_s"] for x in samples]) / scale
    balance = np.array([x["balance_bytes"] for x in samples])
    b_unit, b_scale = next(
        ((u, k) for u, k in (("TiB", 2.0**40), ("GiB", 2.0**30)) if balance.max() >= k), ("MiB", 2.0**20)
    )
    ops = np.array([x["ops"] for x in samples])
    mean_wait = np.divide([x["waited_s"] for x in samples], ops, out=np.zeros(len(samples)), where=ops > 0)
    fig = Figure(figsize=(9, 7), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    credits, permitted, waits = fig.subplots(3, 1, sharex=True)
    credits.plot(t, balance / b_scale, color="#1f77b4", linewidth=1.4)
    credits.set(ylabel=f"BurstCreditBalance ({b_unit})", ylim=(0, None))
    rates = np.array([x["permitted_bytes_per_s"] for x in samples]) / 2**20
    permitted.step(t, rates, where="post", color="#2ca02c", linewidth=1.4)
    permitted.set(ylabel="PermittedThroughput (MiB/s)")
    if rates.min() > 0 and rates.max() > 20 * rates.min():  # burst and baseline both readable
        permitted.set_yscale("log")
    else:
        permitted.set_ylim(0, None)
    waits.plot(t[1:], mean_wait[1:], color="#ff7f0e", linewidth=1.2, label="mean")
    waits.plot(
        t[1:], [x["max_wait_s"] for x in samples[1:]], color="#d62728", linewidth=1.0, linestyle="--", label="longest"
    )
    waits.set(ylabel="operations waited (s)", xlabel=f"{unit} since the trace's start")
    if max(x["max_wait_s"] for x in samples) > 0:
        waits.set_yscale("log")
    waits.legend(loc="upper left", fontsize=8)
    for ax in (credits, permitted, waits):
        for x in s["spans"]:
            if not x["simulated"]:
                ax.axvspan(x["start_s"] / scale, x["end_s"] / scale, color="0.9", zorder=0, linewidth=0)
    c = s["credits"]
    if c["run_out_s"] is not None:
        for ax in (credits, permitted, waits):
            ax.axvline(c["run_out_s"] / scale, color="#d62728", linewidth=0.8, linestyle=":")
        credits.annotate(
            f"credits run out at {c['run_out_at']}",
            (c["run_out_s"] / scale, 0),
            xytext=(4, 12),
            textcoords="offset points",
            fontsize=8,
            color="#d62728",
        )
    settings = ", ".join(s["overrides"])
    credits.set_title(
        f"{os.path.basename(s['trace'])} on {s['profile']}"
        + (f" ({settings})" if settings else "")
        + ("; shaded: extrapolated" if any(not x["simulated"] for x in s["spans"]) else ""),
        fontsize=9,
        parse_math=False,
    )
    fig.savefig(path, format="png")
