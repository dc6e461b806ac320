"""`fusetrace compare A B`: verdicts against numbers known in advance, exit codes, the
--json shape, the page and plot of --out, and one-line errors."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from support import fusetrace_here, one_line_error

from fusetrace.rehearse.compare import HOST, judge
from fusetrace.trace.schema import TraceRecord
from fusetrace.trace.writer import TraceWriter


def write_trace(
    directory, latencies: dict[str, np.ndarray], round_trip_ns: int = 40_000, options: dict | None = None
) -> None:
    with TraceWriter(directory, {"fuse_round_trip_ns": round_trip_ns, "options": options or {}}) as w:
        t = 0
        for op, durs in latencies.items():
            for d in durs:
                t += 1000
                w.record(TraceRecord(t, int(d), op, 2, "/f", None, 0, 0, 0, 0, 0, 1, 0, 0, 0, kind="meta_read"))


def stats(p50: float, p99: float, count: int = 100) -> dict:
    return {"count": count, "records": count, "mean_ns": p50, "p50_ns": p50, "p90_ns": p50, "p99_ns": p99}


@pytest.mark.parametrize(
    "b, verdict",
    [
        (stats(1.05e6, 3.3e6), "pass"),
        (stats(1.2e6, 3.0e6), "fail"),  # p50 20 % off
        (stats(1.0e6, 3.6e6), "fail"),  # p99 20 % off
        (stats(1.0e6, 3.0e6, count=19), "too few"),
    ],
)
def test_verdicts(b, verdict):
    assert judge(stats(1e6, 3e6), b, 10, 15, 40_000)["verdict"] == verdict


def test_a_difference_within_the_round_trip_passes_as_the_hosts():
    a, b = stats(20_000, 60_000), stats(40_000, 90_000)  # twice as slow, by 20 and 30 µs
    assert judge(a, b, 10, 15, 40_000)["verdict"] == HOST
    assert judge(a, b, 10, 15, 10_000)["verdict"] == "fail"


def test_the_command_judges_each_op_and_exits_by_the_verdicts(tmp_path):
    rng = np.random.default_rng(5)
    base = rng.lognormal(np.log(1e6), 0.3, 2000)
    write_trace(tmp_path / "a", {"getattr": base, "mkdir": base, "rmdir": base[:10], "unlink": base})
    write_trace(tmp_path / "b", {"getattr": base * 1.02, "mkdir": base * 1.5, "rmdir": base[:10], "rename": base})
    done = fusetrace_here(
        "compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json", "--out", str(tmp_path / "o"), check=False
    )
    assert done.returncode == 1
    r = json.loads(done.stdout)
    verdicts = {row["op"]: row["verdict"] for row in r["ops"]}
    assert verdicts == {
        "getattr": "pass",
        "mkdir": "fail",
        "rmdir": "too few",
        "unlink": "only in A",
        "rename": "only in B",
    }
    row = next(row for row in r["ops"] if row["op"] == "mkdir")
    assert row["p50_ratio"] == pytest.approx(1.5) and row["a"]["p50_ns"] == pytest.approx(np.median(base))
    assert r["judged"] == 2 and r["failed"] == 1
    assert (tmp_path / "o" / "latency-cdf.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (tmp_path / "o" / "index.html").read_text()
    assert "data:image/png;base64," in page and "mkdir" in page
    text = fusetrace_here("compare", str(tmp_path / "a"), str(tmp_path / "a")).stdout  # a trace against itself
    assert "3 of 3 judged operations pass" in text  # getattr, mkdir, unlink; rmdir has too few


def test_a_write_back_cache_on_one_side_only_is_a_caution(tmp_path):
    # its writes are the kernel's write-back and its reads of written data are missing
    durations = np.full(50, 1e6)
    write_trace(tmp_path / "a", {"write": durations})
    write_trace(tmp_path / "b", {"write": durations[:5]}, options={"writeback_cache": True})
    r = json.loads(fusetrace_here("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json", check=False).stdout)
    assert r["b"]["writeback_cache"] and "only B's mounts had FUSE's write-back cache" in r["caution"]
    text = fusetrace_here("compare", str(tmp_path / "a"), str(tmp_path / "b"), check=False).stdout
    assert "caution: only B's mounts" in text
    alike = json.loads(fusetrace_here("compare", str(tmp_path / "b"), str(tmp_path / "b"), "--json").stdout)
    assert alike["caution"] is None
    mixed = json.loads(
        fusetrace_here(
            "compare", str(tmp_path / "a"), str(tmp_path / "b"), "--against", str(tmp_path / "b"), "--json", check=False
        ).stdout
    )
    assert mixed["a"]["writeback_cache"] is None and mixed["caution"].startswith("some of A's mounts had")


def test_two_real_traces_compare(mount):
    runs = []
    for _ in range(2):
        m = mount(trace=True)
        for i in range(30):
            (m.mountpoint / f"f{i}").write_bytes(b"x" * 100)
        m.unmount()
        runs.append(m.trace)
    done = fusetrace_here("compare", str(runs[0]), str(runs[1]), check=False)
    assert done.returncode in (0, 1) and "judged operations pass" in done.stdout
    assert "create" in done.stdout


def test_bad_input_is_one_line(tmp_path):
    write_trace(tmp_path / "a", {"getattr": np.ones(5)})
    one_line_error(
        fusetrace_here("compare", str(tmp_path / "a"), str(tmp_path / "none"), check=False),
        "no such trace directory",
        code=2,
    )
    (tmp_path / "file").write_text("")
    one_line_error(
        fusetrace_here(
            "compare", str(tmp_path / "a"), str(tmp_path / "a"), "--out", str(tmp_path / "file"), check=False
        ),
        "--out",
        "not a directory",
        code=2,
    )


def test_operations_of_equal_counts_come_in_one_order(tmp_path):
    """Ties in count are ordered by name, not by a set's order, which changes with the
    interpreter's hash seed: the same traces compare to the same output every run."""
    base = np.full(50, 1e6)
    write_trace(tmp_path / "a", {op: base for op in ("unlink", "getattr", "mkdir", "rmdir", "lookup")})
    outputs = set()
    for seed in ("1", "2", "3", "4"):
        done = subprocess.run(
            [sys.executable, "-m", "fusetrace", "compare", str(tmp_path / "a"), str(tmp_path / "a"), "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        outputs.add(tuple(row["op"] for row in json.loads(done.stdout)["ops"]))
    assert outputs == {("getattr", "lookup", "mkdir", "rmdir", "unlink")}
