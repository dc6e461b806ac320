"""How the scenario plots look where it matters for reading them: one colour per FUSE
operation, the same in every plot, and step names that never print over one another.
Drawn with the Agg canvas the plots use; the figures are kept to be inspected."""

import itertools

import numpy as np
import pyfuse3
import pytest
from matplotlib.colors import to_hex

from fusetrace.scenarios import plots
from fusetrace.server.handlers import Operations

# the 13 operations a traced run of scenarios/efs-2018-touch.toml shows, most frequent first, and
# access: 14, past the ten colours a palette cycled per plot has
TOUCH_OPS = [
    "getattr",
    "flush",
    "lookup",
    "create",
    "setattr",
    "release",
    "unlink",
    "readdir",
    "statfs",
    "opendir",
    "releasedir",
    "mkdir",
    "rmdir",
    "access",
]


@pytest.fixture
def figures(monkeypatch):
    """The figures the plots draw, in order."""
    drawn = []

    def keep(*args, **kwargs):
        fig, axes = real(*args, **kwargs)
        drawn.append(fig)
        return fig, axes

    real = plots._figure
    monkeypatch.setattr(plots, "_figure", keep)
    return drawn


def _records(ops: list[str], per_op: int = 50, seed: int = 1) -> plots.Records:
    rng = np.random.default_rng(seed)
    n = per_op * len(ops)
    op = np.repeat(np.arange(len(ops), dtype=np.int8), per_op)
    return plots.Records(
        start_s=np.sort(rng.uniform(0, 60, n)),
        dur_ns=rng.integers(1_000, 10**7, n),
        op=op,
        ops=ops,
        result=rng.integers(0, 1 << 20, n),
        missing=0,
    )


def _curve_styles(fig) -> dict[str, tuple[str, str]]:
    """Operation -> (colour, dash) of the latency plot's curves, read from the drawn lines."""
    return {
        line.get_label().split(" (")[0]: (to_hex(line.get_color()), line.get_linestyle())
        for line in fig.axes[0].get_lines()
    }


def test_fourteen_operations_have_fourteen_colours(tmp_path, figures):
    assert plots.plot_latency_cdf(tmp_path / "cdf.png", _records(TOUCH_OPS)).drawn
    styles = _curve_styles(figures[0])
    assert set(styles) == set(TOUCH_OPS)
    assert len({colour for colour, _ in styles.values()}) == len(TOUCH_OPS)


def test_an_operation_keeps_its_colour_from_plot_to_plot(tmp_path, figures):
    plots.plot_latency_cdf(tmp_path / "a.png", _records(TOUCH_OPS))
    plots.plot_latency_cdf(tmp_path / "b.png", _records(["mkdir", "read", "rmdir", "write", "getattr"]))
    first, second = _curve_styles(figures[0]), _curve_styles(figures[1])
    for op in ("mkdir", "rmdir", "getattr"):
        assert first[op] == second[op], op


def test_every_fuse_operation_has_a_style_of_its_own():
    served = {
        name
        for name in vars(Operations)
        if name in vars(pyfuse3.Operations) and callable(getattr(pyfuse3.Operations, name))
    }
    assert len(served) >= 29
    assert served <= set(plots.OP_STYLE)
    assert len({colour for colour, _ in plots.OP_STYLE.values()}) == len(plots.OP_STYLE)


def _overlaps(texts) -> list[tuple[str, str]]:
    renderer = texts[0].get_figure(root=True).canvas.get_renderer()
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
    return [(a, b) for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2) if box_a.overlaps(box_b)]


def _steps(*spans: tuple[str, float, float]) -> list[dict]:
    return [{"name": name, "t0": t0, "t1": t1} for name, t0, t1 in spans]


# the credit-cliff scenario's steps: two at the same instant, one of them no time at all
CLIFF_STEPS = _steps(
    ("ls -l, credits left", 1.6, 3.1),
    ("stream files", 3.1, 50.1),
    ("ls -l after the cliff", 50.1, 50.1),
    ("ls -l behind another writer", 50.1, 56.8),
)


def test_step_names_do_not_overprint_on_the_throughput_plot(tmp_path, figures):
    records = _records(["read", "write"])
    assert plots.plot_throughput(tmp_path / "t.png", records, CLIFF_STEPS).drawn
    names = figures[0].axes[0].texts
    assert [t.get_text().strip() for t in names] == [s["name"] for s in CLIFF_STEPS]
    assert _overlaps(names) == []


def test_step_names_do_not_overprint_on_the_credits_plot(tmp_path, figures):
    result = {
        "steps": CLIFF_STEPS,
        "duration_s": 56.8,
        "samples": [
            {"t": t, "BurstCreditBalance": max(2.6e8 - t * 5e7, 0), "PermittedThroughput": 1e8}
            for t in np.arange(0, 56.8, 0.5).tolist()
        ],
    }
    assert plots.plot_credits(tmp_path / "c.png", result).drawn
    top, bottom = figures[0].axes
    assert len(top.texts) == len(CLIFF_STEPS) and not bottom.texts
    assert _overlaps(top.texts) == []


def test_many_short_steps_keep_their_names_apart_and_inside(tmp_path, figures):
    steps = _steps(*((f"step {k}", 30 + k * 0.05, 30 + (k + 1) * 0.05) for k in range(60)))
    plots.plot_throughput(tmp_path / "t.png", _records(["read", "write"]), steps)
    ax = figures[0].axes[0]
    renderer = figures[0].canvas.get_renderer()
    names = ax.texts
    assert 10 <= len(names) < len(steps)  # staggered to the axes' edge, the rest left out
    assert _overlaps(names) == []
    inside = ax.get_window_extent(renderer)
    assert all(inside.x0 <= t.get_window_extent(renderer).x1 <= inside.x1 for t in names)


def test_the_credits_plot_holds_each_sample_until_the_next(tmp_path, figures):
    """A balance set to 0 between two samples drops there, as a step, not a ramp over the
    half second between them; the last sample holds to the run's end."""
    from matplotlib.patches import StepPatch

    samples = [
        {"t": t, "BurstCreditBalance": 256 * 2**20 if t < 10.2 else 0.0, "PermittedThroughput": 1e8}
        for t in np.arange(0, 20, 0.5).tolist()
    ]
    result = {"steps": CLIFF_STEPS[:1], "duration_s": 20.3, "samples": samples}
    assert plots.plot_credits(tmp_path / "c.png", result).drawn
    [balance] = [p for p in figures[0].axes[0].patches if isinstance(p, StepPatch)]
    values, edges, _ = balance.get_data()
    assert list(edges) == [s["t"] for s in samples] + [20.3]
    assert list(values) == [256.0] * 21 + [0.0] * 19  # MiB: held at 256 through the sample at 10.0
    values, edges = plots.held(np.array([0.0, 1.0, 2.0]), np.array([5.0, np.nan, 7.0]), 1.5)
    assert list(values) == [5.0, 7.0] and list(edges) == [0.0, 2.0, 2.0]  # a sample past `end` ends there
