"""The compare CDF's log axis: its tick labels never overprint one another, however many
decades a panel spans (matplotlib's own minor labels did, under two)."""

import itertools

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from fusetrace.rehearse.compare import _minor_labels


def _labels(low: float, high: float) -> list:
    """The drawn tick labels (major and minor) of a panel as _cdf_png makes one, spanning low..high µs."""
    fig = Figure(figsize=(4, 3), layout="constrained")
    canvas = FigureCanvasAgg(fig)
    ax = fig.subplots()
    ax.plot([low, high], [0, 1])
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(_minor_labels(ax))
    ax.set_xlim(low, high)
    canvas.draw()
    renderer = canvas.get_renderer()
    ticks = [*ax.xaxis.get_major_ticks(), *ax.xaxis.get_minor_ticks()]
    lo, hi = sorted(ax.get_xlim())
    return [
        (t.label1.get_text(), t.label1.get_window_extent(renderer))
        for t in ticks
        if t.label1.get_visible() and t.label1.get_text() and lo <= t.get_loc() <= hi
    ]


@pytest.mark.parametrize("low, high", [(30, 60), (15, 95), (20, 180), (12, 300), (11, 990), (10, 20_000), (3, 9e6)])
def test_tick_labels_do_not_overprint(low, high):
    labels = _labels(low, high)
    assert len(labels) >= 2, labels  # enough to read the axis by
    boxes = sorted((box.x0, box.x1, text) for text, box in labels)
    for (_, right, text), (left, _, following) in itertools.pairwise(boxes):
        assert right < left, f"{text!r} and {following!r} overlap ({low} to {high} µs)"


def test_minor_labels_are_left_to_the_majors_over_a_decade():
    texts = [text for text, _ in _labels(10, 20_000)]
    assert all("10" in t for t in texts), texts  # 10^1 ... 10^4: the majors alone
