"""What a traced mount records: `--trace-only` keeps what it names and counts the rest,
`--trace-sample` keeps about 1 in N with the factor in `sample`, every record carries its
wall-clock `time`, an older trace still reads, and a partial trace is refused where a
result would be wrong."""

import json
import math
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support import fusetrace, fusetrace_here, is_mounted, one_line_error

from fusetrace.request import Kind
from fusetrace.trace import reader
from fusetrace.trace.capture import Capture


def _meta(trace: Path) -> dict:
    return json.loads((trace / "_metadata.json").read_text())


def _records(trace: Path, sql: str) -> list[tuple]:
    return duckdb.sql(sql.replace("TRACE", f"read_parquet('{trace}/*.parquet')")).fetchall()


def test_trace_only_keeps_what_it_names_and_counts_the_rest(mount):
    """op and path filters AND together; what they leave out is counted per op, and every
    operation is still served."""
    m = mount("--attr-timeout", "0", "--trace-only", "op=create,write", "--trace-only", "path=/keep/**", trace=True)
    for d in ("keep", "other"):
        os.mkdir(m.mountpoint / d)
        for i in range(5):
            with open(m.mountpoint / d / f"f{i}", "wb", buffering=0) as f:
                f.write(b"x" * 100)
                f.write(b"y" * 100)
    m.unmount()
    assert all(
        (m.source / d / f"f{i}").read_bytes() == b"x" * 100 + b"y" * 100 for d in ("keep", "other") for i in range(5)
    )
    kept = _records(m.trace, "select op, path, count(*) from TRACE group by all order by all")
    assert kept == [("create", f"/keep/f{i}", 1) for i in range(5)] + [("write", f"/keep/f{i}", 2) for i in range(5)]
    meta = _meta(m.trace)
    filtered = meta["left_out"]["filtered"]
    assert filtered["create"] == 5 and filtered["write"] == 10 and filtered["mkdir"] == 2  # the others' and /other's
    assert meta["left_out"]["sampled"] == {} and meta["records"] == 15
    assert meta["options"]["trace_only"] == {"op": ["create", "write"], "path": ["/keep/**"]}
    text = fusetrace_here("report", str(m.trace)).stdout
    assert "left out" in text and "filtered out (--trace-only op=create,write path=/keep/**)" in text


def test_trace_only_by_process_name_and_class(mount, tmp_path):
    """comm= keeps one program's records; op=read is the read class."""
    m = mount("--trace-only", "comm=cat", "--trace-only", "op=read", trace=True)
    for name in ("a", "b"):
        (m.source / name).write_bytes(b"z" * 8192)
    subprocess.run(["cat", str(m.mountpoint / "a")], check=True, capture_output=True)
    subprocess.run(["dd", f"if={m.mountpoint / 'b'}", "of=/dev/null", "status=none"], check=True)
    m.unmount()
    kept = _records(m.trace, "select distinct op, comm, path from TRACE")
    assert kept == [("read", "cat", "/a")]
    assert _meta(m.trace)["left_out"]["filtered"]["read"] >= 1  # dd's


def test_sampling_keeps_about_one_in_n_and_the_report_scales_it(mount):
    """1 in 10 getattrs kept, each with sample 10; kept and left out add up to all served,
    and the report's count is the weighted one.  Kept ~ Binomial(n, 0.1): within 5 standard
    deviations of n/10 (a false failure about once in 1.7 million runs)."""
    m = mount("--attr-timeout", "0", "--trace-sample", "getattr=10", trace=True)
    (m.source / "f").write_bytes(b"")
    for _ in range(3000):
        os.stat(m.mountpoint / "f")
    m.unmount()
    [(kept, factors)] = _records(m.trace, "select count(*), list(distinct sample) from TRACE where op = 'getattr'")
    assert factors == [10]
    assert _records(m.trace, "select distinct sample from TRACE where op <> 'getattr'") == [(1,)]
    left = _meta(m.trace)["left_out"]["sampled"]["getattr"]
    served = kept + left
    assert served >= 3000
    assert abs(kept - served / 10) <= 5 * math.sqrt(served * 0.1 * 0.9), (kept, served)
    report = json.loads(fusetrace_here("report", str(m.trace), "--json").stdout)
    [row] = [r for r in report["ops"] if r["op"] == "getattr"]
    assert row["count"] == 10 * kept
    assert abs(row["count"] - served) <= 0.3 * served  # the weighted count estimates what was served
    assert report["left_out"][0]["sampled"] == {"getattr": left}
    compared = json.loads(fusetrace_here("compare", str(m.trace), str(m.trace), "--json").stdout)
    [row] = [r for r in compared["ops"] if r["op"] == "getattr"]
    assert (row["a"]["count"], row["a"]["records"]) == (10 * kept, kept)
    assert "sampled out (--trace-sample getattr=10" in compared["caution"]


def test_capture_samples_each_operation_independently():
    """A pure check of the geometric skips: the kept share is 1/N, and a periodic
    workload (every 4th call the same op) is not aliased by a rate of 4."""
    capture = Capture({}, {"getattr": 4}, seed=7)
    req = SimpleNamespace(op="getattr", kind=Kind.META_READ)
    kept = [capture.keep(req, "/f", 0, "x") for _ in range(400_000)]
    assert abs(sum(kept) / len(kept) - 0.25) < 0.005
    phases = [sum(kept[i::4]) for i in range(4)]  # every-4th would keep one phase only
    assert min(phases) > 0.9 * max(phases)
    assert capture.sampled["getattr"] == len(kept) - sum(kept)


def test_every_record_has_its_wall_clock_time_as_a_timestamp_with_zone(mount):
    m = mount(trace=True)
    (m.mountpoint / "f").write_bytes(b"t")
    m.unmount()
    meta = _meta(m.trace)
    [(kind,)] = _records(m.trace, "select distinct typeof(time) from TRACE")
    assert kind in ("TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ_NS")
    rows = pq.read_table(m.trace, columns=["start_ns", "time"])
    assert rows.schema.field("time").type == pa.timestamp("ns", tz="UTC")
    offset = meta["start_wall_ns"] - meta["start_monotonic_ns"]
    assert [t.value for t in rows["time"]] == [s + offset for s in rows["start_ns"].to_pylist()]
    assert meta["format_version"] == 8


def _as_format_6(trace: Path) -> None:
    """The trace as fusetrace wrote it before format 7: no time or sample column."""
    for part in trace.glob("*.parquet"):
        table = pq.read_table(part)
        pq.write_table(table.drop_columns(["time", "sample"]), part)
    meta = _meta(trace)
    meta["format_version"] = 6
    (trace / "_metadata.json").write_text(json.dumps(meta))


def test_a_trace_from_before_format_7_still_reads(mount, tmp_path):
    m = mount(trace=True)
    for i in range(3):
        (m.mountpoint / f"f{i}").write_bytes(b"o" * 4096)
    m.unmount()
    _as_format_6(m.trace)
    meta = _meta(m.trace)
    [batch] = list(reader.ordered_batches(str(m.trace), ["start_ns", "time", "sample"]))
    offset = meta["start_wall_ns"] - meta["start_monotonic_ns"]
    assert set(batch["sample"].to_pylist()) == {1}
    assert [t.value for t in batch["time"]] == [s + offset for s in batch["start_ns"].to_pylist()]
    report = json.loads(fusetrace_here("report", str(m.trace), "--json").stdout)
    assert report["format_version"] == 6 and report["left_out"] == []
    assert sum(r["count"] for r in report["ops"] if r["op"] == "create") == 3
    fusetrace_here("fit", str(m.trace), "-o", str(tmp_path / "fitted.toml"))
    fusetrace_here("export", str(m.trace), "--format", "csv", "-o", str(tmp_path / "out.csv"))
    assert (tmp_path / "out.csv").read_text().count("\n") >= 1


def test_replay_and_simulate_refuse_a_filtered_trace(mount, tmp_path):
    m = mount("--trace-only", "op=write", trace=True)
    (m.mountpoint / "f").write_bytes(b"w" * 100)
    m.unmount()
    target = tmp_path / "target"
    target.mkdir()
    done = fusetrace_here("replay", str(m.trace), str(target), check=False)
    one_line_error(done, "replay", str(m.trace), "filtered out", "--partial", code=2)
    assert os.listdir(target) == []
    done = fusetrace_here("simulate", str(m.trace), "--profile", "efs-bursting", check=False)
    one_line_error(done, "simulate", str(m.trace), "part of the load", code=2)
    out = fusetrace_here("simulate", str(m.trace), "--profile", "efs-bursting", "--partial").stdout
    assert "left out" in out


@pytest.mark.parametrize(
    "options, needle",
    [
        (["--trace-only", "op=wirte"], "'wirte' is no traced operation"),
        (["--trace-only", "colour=red"], "KEY one of op, path, comm, uid"),
        (["--trace-only", "op="], "give a value"),
        (["--trace-only", "uid=root"], "not a user id"),
        (["--trace-only", "path=/a/[b"], "character class"),
        (["--trace-sample", "write=10"], "changes state"),
        (["--trace-sample", "getattr=0"], "whole number"),
        (["-o", "trace_only=op=wirte"], "'wirte'"),
    ],
)
def test_bad_capture_options_exit_2_with_one_line(tmp_path, options, needle):
    for d in ("src", "mnt"):
        (tmp_path / d).mkdir()
    done = fusetrace(
        "mount", str(tmp_path / "src"), str(tmp_path / "mnt"), "--trace", str(tmp_path / "t"), *options, check=False
    )
    one_line_error(done, needle, code=2)
    assert not is_mounted(tmp_path / "mnt")


def test_capture_options_need_a_trace(tmp_path):
    for d in ("src", "mnt"):
        (tmp_path / d).mkdir()
    done = fusetrace("mount", str(tmp_path / "src"), str(tmp_path / "mnt"), "--trace-only", "op=read", check=False)
    one_line_error(done, "--trace-only", "--trace DIR", code=2)
    assert not is_mounted(tmp_path / "mnt")
