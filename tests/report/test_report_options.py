"""`report --plot` without --timeline, and the --by tables' rates over each group's own span."""

import json

from support import fusetrace_here
from support.replays import rec, synthetic


def test_plot_without_timeline_draws_the_timeline(tmp_path):
    trace = synthetic(tmp_path / "t", [rec(t, "getattr", "/") for t in range(0, 3000, 100)])
    png = tmp_path / "timeline.png"
    done = fusetrace_here("report", str(trace), "--plot", str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "t (s)" in done.stdout  # the timeline's table is printed too: the plot implied it
    out = json.loads(fusetrace_here("report", str(trace), "--plot", str(png), "--json").stdout)
    assert out["timeline"]["plot"] == str(png)


def test_by_rates_are_over_each_groups_own_span(tmp_path):
    """`quick` reads 2 MB in its first second, `slow` stats over ten: per group's span, quick
    is 2 ops/s and 2 MB/s, where over the trace's 10 s it would have been a fifth of that."""
    mb = 1_000_000
    records = [
        rec(0, "read", "/a", size=mb, result=mb)._replace(comm="quick"),
        rec(999, "read", "/a", size=mb, result=mb)._replace(comm="quick"),  # ends at 1,000 ms
        *(rec(t, "getattr", "/b")._replace(comm="slow") for t in (0, 4_999, 9_999)),  # ends at 10,000 ms
    ]
    trace = synthetic(tmp_path / "t", records)
    rows = {
        r["comm"]: r for r in json.loads(fusetrace_here("report", str(trace), "--by", "comm", "--json").stdout)["ops"]
    }
    assert rows["quick"]["span_ns"] == 1_000_000_000 and rows["slow"]["span_ns"] == 10_000_000_000
    assert rows["quick"]["ops_per_s"] == 2.0 and rows["quick"]["bytes_per_s"] == 2 * mb
    assert rows["slow"]["ops_per_s"] == 0.3
    whole = json.loads(fusetrace_here("report", str(trace), "--json").stdout)["ops"]
    assert {r["op"]: r["ops_per_s"] for r in whole} == {"read": 0.2, "getattr": 0.3}  # no --by: the trace's span
    text = fusetrace_here("report", str(trace), "--by", "comm").stdout
    assert "ops/s and MB/s over each comm's own span" in " ".join(text.split())
