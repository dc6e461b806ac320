"""Scenario plots and HTML pages from a result.json and a real trace written by TraceWriter:
the throughput and latency arithmetic, which PNGs appear when, and pages that embed them,
show the right figures and escape every text."""

import base64
import json
import re

import numpy as np
import pytest
from PIL import Image
from support import poll

from fusetrace.scenarios import html, plots
from fusetrace.trace.schema import TraceRecord
from fusetrace.trace.writer import TraceWriter

T0 = 5_000_000_000_000  # the run's t=0, CLOCK_MONOTONIC ns
PNG = b"\x89PNG\r\n\x1a\n"
MB = 1_000_000

# (seconds since t=0, duration s, op, result, errno); the two batches become two parts
# with different op dictionaries.
FIRST = [
    (0.1, 0.001, "read", 250_000, 0),
    (0.3, 0.001, "read", 250_000, 0),
    (0.5, 0.001, "read", 250_000, 0),
    (0.7, 0.001, "read", 250_000, 0),
    (0.8, 0.001, "read", 0, 5),  # failed: no bytes
    (-0.5, 0.001, "lookup", 0, 0),  # the mount's own traffic, before t=0
    (2.95, 0.1, "read", 1_000_000, 0),
]  # starts in second 2, completes in second 3
SECOND = [
    (2.1, 0.002, "write", 2_000_000, 0),
    (2.2, 0.002, "write", 2_000_000, 0),
    (2.3, 0.002, "write", 2_000_000, 0),
    (0.2, 0.0001, "getattr", 1, 0),
]  # getattr's 1 is no byte


def write_trace(directory, *batches) -> None:
    """A real trace: one part per batch.  Its own clock pair is 2 s before the run's t=0,
    so only result["start_monotonic_ns"] aligns it right."""
    w = TraceWriter(
        directory,
        {"start_wall_ns": 1_700_000_000_000_000_000, "start_monotonic_ns": T0 - 2 * 10**9},
        flush_interval=0.01,
    )
    for batch in batches:
        done = w.files
        for t, dur, op, nbytes, err in batch:
            w.record(
                TraceRecord(
                    T0 + round(t * 1e9), round(dur * 1e9), op, 2, "/f", None, 3, 0, nbytes, nbytes, err, 100, 0, 0, 0
                )
            )
        poll(lambda done=done: w.files > done, timeout=5)
    w.close()


def make_result(**changes) -> dict:
    result = {
        "id": "efs-2018-touch",
        "title": "Touching files on EFS",
        "system": "Amazon EFS, 2018",
        "source": "a blog post",
        "profile": "efs-bursting",
        "overrides": {"burst_credit_balance": "256 MiB"},
        "scaling": "1/10 of the files",
        "fast": False,
        "credits": True,
        "started": "2026-11-22T23:10:00+00:00",
        "start_monotonic_ns": T0,
        "duration_s": 4.0,
        "steps": [
            {
                "name": "serial touch",
                "kind": "shell",
                "t0": 0.0,
                "t1": 1.5,
                "metrics": {"seconds": 1.5, "files/s": 105.6, "ms/file": 9.47},
                "published": {"files/s": 100.0},
                "inconsistent": {},
                "series": [],
            },
            {
                "name": "copy $SRC to $DST",
                "kind": "shell",
                "t0": 1.5,
                "t1": 4.0,
                "metrics": {"seconds": 2.5, "MB/s": 2.4},
                "published": {"MB/s": 3.0},
                "inconsistent": {},
                "series": [{"i": i, "t": 1.5 + i / 2, "seconds": 0.5, "MB/s": 2.0 + i / 10} for i in range(1, 5)],
            },
        ],
        "rows": [
            {
                "step": "serial touch",
                "metric": "seconds",
                "emulated": 1.5,
                "published": None,
                "ratio": None,
                "note": "",
            },
            {
                "step": "serial touch",
                "metric": "files/s",
                "emulated": 105.6,
                "published": 100.0,
                "ratio": 1.056,
                "note": "",
            },
            {
                "step": "serial touch",
                "metric": "ms/file",
                "emulated": 9.47,
                "published": None,
                "ratio": None,
                "note": "",
            },
            {
                "step": "copy $SRC to $DST",
                "metric": "MB/s",
                "emulated": 2.4,
                "published": 3.0,
                "ratio": 0.8,
                "note": "published figures disagree: 3.0 in the text, 2.5 in the chart",
            },
        ],
        "samples": [
            {"t": t, "BurstCreditBalance": 2.6e8 - t * 1e7, "PermittedThroughput": 1.04e8}
            for t in np.arange(0, 4.0, 0.5).tolist()
        ],
    }
    return {**result, **changes}


@pytest.fixture
def run_dir(tmp_path):
    d = tmp_path / "out" / "efs-2018-touch"
    d.mkdir(parents=True)
    write_trace(d / "trace", FIRST, SECOND)
    return d


def is_png(path) -> bool:
    data = path.read_bytes()
    return data.startswith(PNG) and len(data) > 5000


def embedded(page: str, path) -> bool:
    return f'src="data:image/png;base64,{base64.b64encode(path.read_bytes()).decode()}"' in page


# ---- arithmetic ------------------------------------------------------------------------


def test_throughput_bins_a_known_trace_by_completion_second(run_dir):
    records = plots.read_records(run_dir / "trace", T0)
    edges, read_mb, write_mb = plots.throughput(records)
    assert edges.tolist() == [0, 1, 2, 3, 4]
    assert read_mb == pytest.approx([1.0, 0, 0, 1.0])  # 4 x 250 kB in second 0; the slow read lands in 3
    assert write_mb == pytest.approx([0, 0, 6.0, 0])


def test_throughput_half_second_bins_are_rates(run_dir):
    edges, read_mb, write_mb = plots.throughput(plots.read_records(run_dir / "trace", T0), width=0.5)
    assert edges[0] == 0 and edges[-1] == 3.5
    assert read_mb[:2] == pytest.approx([1.0, 1.0])  # 500 kB per half second
    assert write_mb[4] == pytest.approx(12.0)


def test_records_are_aligned_on_the_run_not_the_trace_start(run_dir):
    records = plots.read_records(run_dir / "trace", T0)
    assert sorted(records.ops) == ["getattr", "lookup", "read", "write"]
    assert records.start_s.min() == pytest.approx(-0.5)
    assert records.is_op("write").sum() == 3 and records.is_op("rename").sum() == 0


def test_throughput_of_millions_of_records_matches_a_histogram():
    rng = np.random.default_rng(3)
    n = 2_000_000
    op = rng.integers(0, 3, n)  # read, write, getattr
    records = plots.Records(
        start_s=rng.uniform(0, 600, n),
        dur_ns=rng.integers(0, 10**8, n),
        op=op,
        ops=["read", "write", "getattr"],
        result=rng.integers(0, 2**20, n),
        missing=0,
    )
    edges, read_mb, write_mb = plots.throughput(records)
    end = records.start_s + records.dur_ns / 1e9
    for code, got in ((0, read_mb), (1, write_mb)):
        want, _ = np.histogram(end[op == code], bins=edges, weights=records.result[op == code])
        assert got == pytest.approx(want / MB)


def test_nothing_to_bin_without_reads_or_writes(tmp_path):
    write_trace(tmp_path / "t", [(0.1, 0.001, "getattr", 1, 0)])
    assert plots.throughput(plots.read_records(tmp_path / "t", T0)) is None


def test_latency_cdf_per_op_most_frequent_first_and_bounded():
    dur = np.concatenate([np.arange(1, 5001) * 1_000_000, [7_000_000, 3_000_000]])  # 5000 reads: 1..5000 ms
    records = plots.Records(
        start_s=np.zeros(5002),
        dur_ns=dur,
        op=np.array([0] * 5000 + [1, 1]),
        ops=["read", "open"],
        result=np.zeros(5002, np.int64),
        missing=0,
    )
    curves = plots.latency_cdf(records, points=1000)
    assert list(curves) == ["read", "open"]
    ms, fraction, n = curves["read"]
    assert n == 5000 and len(ms) <= 1000
    assert (ms[0], ms[-1], fraction[-1]) == (1.0, 5000.0, 1.0)
    assert np.all(np.diff(ms) > 0) and np.all(np.diff(fraction) > 0)
    assert ms[np.searchsorted(fraction, 0.5)] == pytest.approx(2500, rel=0.01)
    assert curves["open"][0].tolist() == [3.0, 7.0] and curves["open"][1].tolist() == [0.5, 1.0]


# ---- files -----------------------------------------------------------------------------


def test_every_plot_is_drawn_and_embedded(run_dir):
    result = make_result()
    drawn = plots.write_all(run_dir, result)
    names = ["throughput.png", "latency-cdf.png", "credits.png", "iterations.png"]
    assert [p.file for p in drawn] == names and all(p.drawn for p in drawn)
    for name in names:
        assert is_png(run_dir / name), name
    with Image.open(run_dir / "throughput.png") as im:
        assert im.size == (900, 360)
    page = html.write_run(run_dir, result, drawn).read_text(encoding="utf-8")
    for name in names:
        assert embedded(page, run_dir / name), name
    assert re.findall(r'src="([^"]{0,22})', page) == ["data:image/png;base64,"] * 4
    assert "<script" not in page and "<link" not in page and "http" not in page


def test_page_shows_the_run_and_its_table(run_dir):
    result = make_result(fast=True, fast_note="100 files instead of 1000")
    page = html.write_run(run_dir, result, plots.write_all(run_dir, result)).read_text(encoding="utf-8")
    for text in (
        "Touching files on EFS",
        "Amazon EFS, 2018",
        "a blog post",
        "efs-bursting",
        "burst_credit_balance = 256 MiB",
        "1/10 of the files",
        "yes: 100 files instead of 1000",
    ):
        assert text in page
    # no published figure: blank cells; the step's name only on its first row
    assert (
        '<tr><td>serial touch</td><td>seconds</td><td class="num">1.50</td><td class="num"></td>'
        '<td class="num"></td><td></td></tr>'
    ) in page
    assert (
        '<tr><td></td><td>files/s</td><td class="num">105.60</td><td class="num">100.00</td>'
        '<td class="num">1.06</td><td></td></tr>'
    ) in page
    assert (
        '<tr><td></td><td>ms/file</td><td class="num">9.47</td><td class="num"></td><td class="num"></td><td></td></tr>'
    ) in page
    assert '<td class="num">0.80</td><td>published figures disagree: 3.0 in the text' in page


def test_a_row_without_figures_shows_its_note():
    """A step not run for want of its phase: no emulated figure, nothing published, and why."""
    note = "not reached in this run (credits left: 255 MiB); no published figure in this repo"
    table = html.figures_table(
        [
            {
                "step": "ls -l after the cliff",
                "metric": "files/s",
                "emulated": None,
                "published": None,
                "ratio": None,
                "note": note,
            }
        ]
    )
    assert (f'<td class="num"></td><td class="num"></td><td class="num"></td><td>{note}</td>') in table


def test_all_text_is_escaped(run_dir):
    evil = '<script>alert("x")</script> & <b>'
    result = make_result(title=evil, system=evil, overrides={"k": evil})
    result["rows"][0] = {**result["rows"][0], "step": evil, "note": evil}
    page = html.write_run(run_dir, result, plots.write_all(run_dir, result)).read_text(encoding="utf-8")
    assert "<script" not in page and "<b>" not in page
    assert page.count("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &lt;b&gt;") >= 5


def test_credits_only_when_the_scenario_has_them(run_dir):
    plots.write_all(run_dir, make_result())
    assert (run_dir / "credits.png").exists()
    result = make_result(credits=False)
    drawn = plots.write_all(run_dir, result)  # same directory: the earlier credits.png goes
    assert "credits.png" not in [p.file for p in drawn]
    assert not (run_dir / "credits.png").exists()
    page = html.write_run(run_dir, result, drawn).read_text(encoding="utf-8")
    assert "Burst credits" not in page


def test_credits_without_samples_say_so(run_dir):
    result = make_result(samples=[])
    drawn = {p.file: p for p in plots.write_all(run_dir, result)}
    assert not drawn["credits.png"].drawn and not (run_dir / "credits.png").exists()
    page = html.write_run(run_dir, result, list(drawn.values())).read_text(encoding="utf-8")
    assert "Not drawn: the emulator reported no credit metrics during the run." in page


def test_no_iterations_plot_without_series(run_dir):
    result = make_result()
    result["steps"][1]["series"] = []
    drawn = plots.write_all(run_dir, result)
    assert "iterations.png" not in [p.file for p in drawn] and not (run_dir / "iterations.png").exists()


def test_empty_trace_gives_notes_not_plots(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    TraceWriter(d / "trace", {}).close()  # metadata, no parts
    result = make_result(credits=False)
    drawn = plots.write_all(d, result)
    assert [(p.file, p.drawn) for p in drawn] == [
        ("throughput.png", False),
        ("latency-cdf.png", False),
        ("iterations.png", True),
    ]
    assert not (d / "throughput.png").exists() and not (d / "latency-cdf.png").exists()
    page = html.write_run(d, result, drawn).read_text(encoding="utf-8")
    assert page.count("Not drawn: the trace holds no records.") == 2
    assert embedded(page, d / "iterations.png")


def test_trace_without_io_has_latency_but_no_throughput(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    write_trace(d / "trace", [(0.1, 0.001, "getattr", 1, 0), (0.2, 0.002, "lookup", 0, 2)])
    result = make_result(credits=False)
    drawn = {p.file: p for p in plots.write_all(d, result)}
    assert not drawn["throughput.png"].drawn and drawn["latency-cdf.png"].drawn
    assert is_png(d / "latency-cdf.png")
    page = html.write_run(d, result, list(drawn.values())).read_text(encoding="utf-8")
    assert "Not drawn: the trace holds no read or write records." in page


def test_index_lists_every_run_with_its_table(tmp_path):
    out = tmp_path / "out"
    for run_id, title in (("b-run", "Second <run>"), ("a-run", "First run")):
        (out / run_id).mkdir(parents=True)
        (out / run_id / "result.json").write_text(json.dumps(make_result(id=run_id, title=title)))
    (out / "broken").mkdir()
    (out / "broken" / "result.json").write_text("{not json")
    page = html.write_index(out).read_text(encoding="utf-8")
    assert page.index('<a href="a-run/index.html">First run</a>') < page.index(
        '<a href="b-run/index.html">Second &lt;run&gt;</a>'
    )
    assert page.count('<td class="num">105.60</td><td class="num">100.00</td><td class="num">1.06</td>') == 2
    assert "broken/result.json unreadable" in page
    assert "<run>" not in page and "<script" not in page
