"""The report's line on burst credits, from a trace's `credits_at_zero` (written by an
emulated mount) and its records: what ran out when, what it held and what it cost; nothing
for a trace without that record."""

import json

import pytest

from fusetrace import cli
from fusetrace.report.credits import credit_words, credits
from fusetrace.report.filters import Filters
from fusetrace.report.plots import plot_timeline, spent
from fusetrace.report.query import Trace
from fusetrace.trace.schema import TraceRecord
from fusetrace.trace.writer import TraceWriter

T0 = 1_000_000_000_000
S = 10**9
MiB = 1 << 20


def write(d, metadata, gates=("dirty", "writeback", "throughput", "latency")):
    """Records every second for 100 s: writes held 2 s at `gates` in turn, from T0."""
    with TraceWriter(d, {"host": "box", **metadata}, flush_interval=3600) as w:
        for i in range(100):
            gate = gates[i % len(gates)]
            wait = 2 * S if gate != "latency" else 0
            w.record(
                TraceRecord(
                    T0 + i * S, wait + 1000, "write", 2, "/f", None, 0, 0, 4096, 4096, 0, 7, 0, 0, 0, gate, wait
                )
            )
    return d


EMULATED = {"emulation": {"profile": "efs-tiny"}, "start_wall_ns": 1_800_000_000 * S, "start_monotonic_ns": T0}


def test_the_credits_line_says_when_what_and_what_it_cost(tmp_path, capsys):
    stretches = [
        {"from_ns": T0 + 20 * S, "to_ns": T0 + 40 * S, "baseline_bytes_per_s": MiB},
        {"from_ns": T0 + 60 * S, "to_ns": None, "baseline_bytes_per_s": MiB},
    ]
    d = write(tmp_path / "t", {**EMULATED, "credits_at_zero": stretches})
    c = credits(Trace(d))
    assert c is not None and c["ran_out_s"] == 20 and c["until_ns"] is None
    end = T0 + 100 * S + 1000  # the last reply: record 98's, held 2 s
    assert c["held_ns"] == 20 * S + (end - (T0 + 60 * S))
    # the held records in flight in [20 s, 40 s) or [60 s, end): started 18 s to 39 s, and 58 s on
    held = [i for i in range(100) if i % 4 != 3 and (18 <= i < 40 or i >= 58)]
    assert len(held) == 47 and c["waiting"]["ops"] == 47 and c["waiting"]["wait_ns"] == 2 * S * 47
    assert c["waiting"]["gates"] == {"throughput": 17, "dirty": 15, "writeback": 15}
    assert c["waiting"]["share"] == pytest.approx(2 * S * 47 / (75 * (2 * S + 1000) + 25 * 1000))
    [line] = credit_words(c, Trace(d).metadata)
    assert line.startswith("credits     Burst credits ran out 2 times, first at ")
    assert "(20 s in); the baseline (1.0 MiB/s) held the workload for 1 min in all, until the end; " in line
    assert "operations waiting behind it: 47, waited 1 min 34 s in all (62.7 % of the summed operation" in line
    assert "gates throughput 17, dirty 15, writeback 15, but the spent credits are the cause" in line
    assert cli.main(["report", str(d), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["credits"]["waiting"]["ops"] == 47


def test_the_filters_apply_and_a_stretch_that_ended_says_until_when(tmp_path):
    stretches = [{"from_ns": T0 + 20 * S, "to_ns": T0 + 40 * S, "baseline_bytes_per_s": MiB}]
    d = write(tmp_path / "t", {**EMULATED, "credits_at_zero": stretches})
    [line] = credit_words(credits(Trace(d)), Trace(d).metadata)
    assert "held the workload for 20 s, until " in line and "until the end" not in line
    later = credits(Trace(d, Filters(since="50")))
    assert later == {"stretches": []}  # the records kept are after it
    assert credit_words(later, {}) == []


@pytest.mark.parametrize(
    "metadata",
    [{}, {"credits_at_zero": [{"from_ns": T0, "to_ns": None, "baseline_bytes_per_s": MiB}]}, EMULATED],
    ids=["trace-only", "not-emulated", "before-credits-were-recorded"],
)
def test_nothing_is_said_without_a_record_of_the_credits(tmp_path, capsys, metadata):
    d = write(tmp_path / "t", metadata)
    assert credits(Trace(d)) is None
    assert cli.main(["report", str(d)]) == 0
    assert "credits" not in capsys.readouterr().out


def test_the_timeline_plot_shades_where_the_credits_were_spent(tmp_path):
    stretches = [
        {"from_ns": T0 + 20 * S, "to_ns": T0 + 40 * S, "baseline_bytes_per_s": MiB},
        {"from_ns": T0 + 60 * S, "to_ns": None, "baseline_bytes_per_s": MiB},
    ]
    d = write(tmp_path / "t", {**EMULATED, "credits_at_zero": stretches})
    s = Trace(d).summary(timeline=True)
    assert spent(s) == [(20.0, 40.0), (60.0, 100.000001)]  # the last until the records' last reply
    plot_timeline(str(tmp_path / "t.png"), s)
    assert (tmp_path / "t.png").read_bytes().startswith(b"\x89PNG")
    assert spent(Trace(write(tmp_path / "u", {})).summary()) == []
