"""A fleet's traces read as one: the host column from --host or a host=NAME directory, two
real traced mounts read together by `fusetrace report` (a line per host), by DuckDB with
docs/FLEET.md's queries as written, and by `fusetrace compare`; one clock across hosts;
format 4 traces still read; every mistake one line.  PySpark, where it is installed, runs
docs/FLEET.md's Spark example."""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow.parquet as pq
import pytest
from support import ROOT, fusetrace, fusetrace_here, mount_here, one_line_error

from fusetrace.report.filters import Filters
from fusetrace.report.query import Trace
from fusetrace.report.render import render
from fusetrace.trace import metadata as meta
from fusetrace.trace import reader
from fusetrace.trace.schema import TraceRecord
from fusetrace.trace.writer import TraceWriter

FLEET_DOC = ROOT / "docs" / "FLEET.md"
FILES = {"web1": 7, "web2": 19}  # files each host writes: its creates, known in advance


def blocks(language: str) -> list[str]:
    """docs/FLEET.md's code blocks in `language`, as written."""
    return re.findall(rf"```{language}\n(.*?)```", FLEET_DOC.read_text(), re.S)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Path:
    """traces/host=web1 (named by its directory) and traces/host=web2 (named by --host too),
    each a real traced mount on which FILES[host] files were written; both unmounted.  Made
    once for the module: the tests only read it."""
    root = tmp_path_factory.mktemp("fleet")
    traces = root / "traces"
    for host, n in FILES.items():
        src, mnt = root / f"src-{host}", root / f"mnt-{host}"
        src.mkdir()
        mnt.mkdir()
        named = ("--host", host) if host == "web2" else ()
        mount_here(
            src,
            mnt,
            "--attr-timeout",
            "0",
            "--entry-timeout",
            "0",
            "--trace",
            str(traces / f"host={host}"),
            *named,
        )
        try:
            for i in range(n):
                (mnt / f"f{i}").write_bytes(b"x" * 1000)
        finally:
            fusetrace_here("umount", str(mnt))
    return traces


def records(traces: Path) -> pd.DataFrame:
    """Every record of every trace below `traces`, read trace by trace with pyarrow alone."""
    return pd.concat([pq.read_table(d).to_pandas() for d in sorted(traces.iterdir())], ignore_index=True)


def test_each_trace_names_its_host(fleet):
    for host in FILES:
        d = fleet / f"host={host}"
        m = meta.read(d)
        assert m["format_version"] == 8 and m["host"] == host and m["hostname"] == socket.gethostname()
        assert pq.read_table(d).column("host").to_pylist() == [host] * m["records"]


def test_report_over_two_hosts_has_a_line_per_host(fleet):
    df = records(fleet)
    done = fusetrace_here("report", str(fleet / "*"), "--json")
    out = json.loads(done.stdout)
    assert out["directory"] is None and out["directories"] == [str(fleet / "host=web1"), str(fleet / "host=web2")]
    assert out["records"] == len(df) and out["unaligned"] == []
    hosts = {h["host"]: h for h in out["hosts"]}
    assert set(hosts) == set(FILES)
    for host, h in hosts.items():
        mine = df[df.host == host]
        assert (h["traces"], h["count"], h["errors"], h["total_ns"]) == (
            1,
            len(mine),
            int((mine.errno != 0).sum()),
            int(mine.dur_ns.sum()),
        )
    assert sum(h["share"] for h in hosts.values()) == pytest.approx(1)
    # each host's files were created on that host
    by_host = json.loads(fusetrace_here("report", str(fleet / "*"), "--json", "--by", "host", "--op", "create").stdout)
    assert {r["host"]: r["count"] for r in by_host["ops"]} == FILES
    text = fusetrace_here("report", str(fleet / "*")).stdout
    lines = text.splitlines()
    assert lines[0].startswith("traces      2 traces from 2 hosts  (")
    table = lines[lines.index("per host") + 1 :]
    assert table[0].split() == ["host", "traces", "ops", "errors", "ops/s", "total", "%total", "span"]
    for host in FILES:
        row = next(ln for ln in table if ln.startswith(host + " ")).split()
        assert row[1:3] == ["1", f"{hosts[host]['count']:,}"]
    # one trace alone: no line per host
    single = fusetrace_here("report", str(fleet / "host=web1")).stdout
    assert single.startswith(f"trace       {fleet / 'host=web1'}  (") and "per host" not in single


def test_an_idle_hosts_trace_is_left_out_of_a_fleet_with_a_warning(fleet, tmp_path):
    traces = tmp_path / "traces"
    shutil.copytree(fleet, traces)
    (tmp_path / "src").mkdir()
    (tmp_path / "mnt").mkdir()
    mount_here(tmp_path / "src", tmp_path / "mnt", "--trace", str(traces / "host=idle"))
    fusetrace_here("umount", str(tmp_path / "mnt"))  # nothing done through it
    for command in (
        ["report", str(traces / "*")],
        ["compare", str(traces / "host=web*"), "--against", str(traces / "*")],
    ):
        done = fusetrace_here(*command)
        assert f"{traces / 'host=idle'}: the mount recorded no operation; left out" in done.stderr, done.stderr
    assert fusetrace_here("report", str(traces / "*")).stdout.startswith("traces      2 traces from 2 hosts")
    # named alone, or all a glob matches, it is still the one line
    one_line_error(fusetrace_here("report", str(traces / "host=idle"), check=False), "the mount recorded no operation")
    one_line_error(fusetrace_here("report", str(traces / "host=idl*"), check=False), "the mount recorded no operation")


def test_duckdb_reads_the_fleet_as_documented(fleet):
    """docs/FLEET.md's DuckDB queries, as written, from the folder that holds traces/."""
    per_host, wall = blocks("sql")
    df = records(fleet)
    db = duckdb.connect()
    cwd = os.getcwd()
    os.chdir(fleet.parent)
    try:
        rows = db.sql(per_host).fetchall()
        first = db.sql(wall).fetchall()
        unpartitioned = db.sql(
            per_host.replace(
                "read_parquet('traces/*/*.parquet')", "read_parquet('traces/*/*.parquet', hive_partitioning = false)"
            )
        ).fetchall()
    finally:
        os.chdir(cwd)
    assert unpartitioned == rows
    assert [r[:3] for r in rows] == [
        (h, int((df.host == h).sum()), int(((df.host == h) & (df.errno != 0)).sum())) for h in sorted(FILES)
    ]
    assert [r[3] for r in rows] == pytest.approx([df[df.host == h].dur_ns.sum() / 1e9 for h in sorted(FILES)])
    assert len(first) == 20 and [r[3] for r in first] == sorted(r[3] for r in first)
    assert first[0][0] == "web1"  # web1 was mounted, written and unmounted before web2 was mounted


def test_compare_takes_globs_and_several_directories(fleet):
    one = json.loads(
        fusetrace_here("compare", str(fleet / "host=web1"), str(fleet / "host=web2"), "--json", check=False).stdout
    )
    assert one["a"]["hosts"] == ["web1"] and one["b"]["hosts"] == ["web2"]
    assert {r["op"]: r["a"]["count"] for r in one["ops"] if r["op"] == "create"} == {"create": FILES["web1"]}
    done = fusetrace_here("compare", str(fleet / "*"), "--against", str(fleet / "host=web2"), "--json", check=False)
    assert done.returncode in (0, 1), done.stderr
    both = json.loads(done.stdout)
    df = records(fleet)
    assert both["a"]["directory"] is None and both["a"]["hosts"] == ["web1", "web2"]
    assert (both["a"]["records"], both["b"]["records"]) == (len(df), int((df.host == "web2").sum()))
    creates = next(r for r in both["ops"] if r["op"] == "create")
    assert (creates["a"]["count"], creates["b"]["count"]) == (sum(FILES.values()), FILES["web2"])
    text = fusetrace_here("compare", str(fleet / "*"), str(fleet / "host=web*"), check=False).stdout
    assert text.startswith("A  2 traces (hosts web1, web2): ") and "judged operations pass" in text


def write(directory: Path, host: str, wall_ns: int, mono_ns: int, starts_s: list[float]) -> None:
    """A synthetic trace whose clock pair is (wall_ns, mono_ns): a getattr at each of `starts_s`
    seconds after it, 1 ms each."""
    with TraceWriter(directory, {"host": host, "start_wall_ns": wall_ns, "start_monotonic_ns": mono_ns}) as w:
        for t in starts_s:
            w.record(TraceRecord(mono_ns + round(t * 1e9), 10**6, "getattr", 1, "/", None, 0, 0, 0, 0, 0, 1, 0, 0, 0))


def test_two_hosts_clocks_are_put_on_one(tmp_path):
    """Host b booted long after host a and started its trace 2 s later by the wall clock: its
    records land 2 s after its start on a's clock, interleaved by wall time."""
    wall = 1_800_000_000 * 10**9
    write(tmp_path / "a", "a", wall, 10**15, [0.0, 1.0, 3.0])
    write(tmp_path / "b", "b", wall + 2 * 10**9, 5 * 10**12, [0.5])
    s = Trace([tmp_path / "a", tmp_path / "b"]).summary(timeline=True)
    assert s["origin_ns"] == 10**15 and s["span_ns"] == 3 * 10**9 + 10**6
    assert {h["host"]: h["span_ns"] for h in s["hosts"]} == {"a": 3 * 10**9 + 10**6, "b": 10**6}
    assert [b["ops"] for b in s["timeline"]["buckets"] if b["ops"]] == [1, 1, 1, 1]
    at = [b["t_s"] for b in s["timeline"]["buckets"] if b["ops"]]
    assert at == pytest.approx([0.0, 1.0, 2.5, 3.0])
    # the same with b alone: its own clock, untouched
    assert Trace(tmp_path / "b").summary()["origin_ns"] == 5 * 10**12 + 5 * 10**8
    # --since counts from the fleet's first record
    late = Trace([tmp_path / "a", tmp_path / "b"], Filters(since="2")).summary()
    assert late["matched"] == 2 and {h["host"] for h in late["hosts"]} == {"a", "b"}


def test_a_format_4_trace_still_reports_alone_and_in_a_fleet(fleet, tmp_path):
    """A trace from before the host column: the readers give it its metadata's host."""
    old = tmp_path / "old"
    old.mkdir()
    for p in (fleet / "host=web1").glob("*.parquet"):
        pq.write_table(pq.read_table(p).drop_columns(["host"]), old / p.name)
    m = meta.read(fleet / "host=web1")
    del m["hostname"]
    meta.write(str(old), {**m, "format_version": 4, "host": "old-box"})
    alone = json.loads(fusetrace_here("report", str(old), "--json").stdout)
    assert alone["format_version"] == 4 and [h["host"] for h in alone["hosts"]] == ["old-box"]
    assert (
        alone["records"] == m["records"]
        and alone["ops"] == json.loads(fusetrace_here("report", str(fleet / "host=web1"), "--json").stdout)["ops"]
    )
    mixed = json.loads(fusetrace_here("report", str(old), str(fleet / "host=web2"), "--json", "--by", "host").stdout)
    assert mixed["format_version"] == 4 and {h["host"] for h in mixed["hosts"]} == {"old-box", "web2"}
    assert {r["host"] for r in mixed["ops"]} == {"old-box", "web2"}
    hosts = {batch.column("host")[0].as_py() for batch in reader.ordered_batches(str(old), ["start_ns", "host"])}
    assert hosts == {"old-box"}
    assert "per host" in render(Trace([old, fleet / "host=web2"]).summary())


def test_mistakes_are_one_line(fleet, tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "empty").mkdir()
    for argv, needles in [
        (["report", str(tmp_path / "nothing-*")], [f"{tmp_path / 'nothing-*'}: matches nothing"]),
        (
            ["report", str(fleet / "host=web1"), str(tmp_path / "notes.txt")],
            [f"{tmp_path / 'notes.txt'}: not a trace directory"],
        ),
        (["report", str(tmp_path / "*")], [f"{tmp_path / 'empty'}: no trace files (*.parquet) in it"]),
        (
            ["report", str(fleet)],
            [
                f"{fleet}: no trace files (*.parquet) in it, but 2 trace directories below it",
                f"give '{fleet / '*'}' (quoted)",
            ],
        ),
        (
            ["compare", str(fleet / "host=web1"), str(tmp_path / "none")],
            [f"{tmp_path / 'none'}: no such trace directory"],
        ),
        (["compare", str(fleet / "x*"), str(fleet / "host=web1")], [f"{fleet / 'x*'}: matches nothing"]),
        (
            ["compare", str(fleet / "host=web1"), str(fleet / "host=web2"), str(fleet / "host=web2")],
            ["give two traces, A B", "--against", "got 3"],
        ),
    ]:
        one_line_error(fusetrace_here(*argv, check=False), *needles, code=2)


@pytest.mark.parametrize(
    "argv, needles",
    [
        (["--host", "web 1"], ["--host 'web 1': not a host name (1 to 64 letters, digits"]),
        (["--host", "a/b"], ["--host 'a/b': not a host name"]),
        (["--host", "x" * 65], ["not a host name"]),
        (
            ["--host", "web2", "--trace", "{tmp}/t/host=web1"],
            ["--host web2: the trace directory {tmp}/t/host=web1 is named for host web1", "give --host web1"],
        ),
        (["--trace", "{tmp}/t/host=-bad"], ["--trace {tmp}/t/host=-bad: host='-bad' is not a host name"]),
        (["--host", "web1"], ["--host web1: names the host in the trace; give --trace DIR with it"]),
    ],
)
def test_a_bad_host_is_refused_before_mounting(tmp_path, argv, needles):
    (tmp_path / "src").mkdir()
    (tmp_path / "mnt").mkdir()
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    done = fusetrace("mount", str(tmp_path / "src"), str(tmp_path / "mnt"), *argv, check=False)
    one_line_error(done, *(n.replace("{tmp}", str(tmp_path)) for n in needles), code=2)
    assert not (tmp_path / "t").exists() and not os.listdir(tmp_path / "mnt")


@pytest.mark.slow
def test_pyspark_reads_the_fleet_as_documented(fleet):
    """docs/FLEET.md's PySpark example, as written, in local mode (needs pyspark and a JVM)."""
    pytest.importorskip("pyspark")
    [example] = blocks("python")
    script = example + "\nimport json\nprint(json.dumps([row.asDict() for row in per_host.collect()]))\nspark.stop()\n"
    done = subprocess.run([sys.executable, "-c", script], cwd=fleet.parent, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    df = records(fleet)
    assert [(r["host"], r["ops"], r["total_ns"]) for r in rows] == [
        (h, int((df.host == h).sum()), int(df[df.host == h].dur_ns.sum())) for h in sorted(FILES)
    ]
