"""Metrics on any mount (`--metrics-port`, `--metrics-addr`): per-operation counts, errors
by errno, bytes and latency histograms, checked against the trace of the same workload; a
Unix socket; the places refused before anything is mounted."""

import os
import re
import socket
import stat
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
from support import fusetrace, mount_fails, one_line_error, poll
from support.metrics import families, free_port, scrape, scrape_unix

from fusetrace.shaping.opmetrics import BOUNDS_S, OpCollector, OpCounts

MISSING = 7  # lookups of names that are not there: ENOENT each (negative_timeout 0: none cached)


def _workload(root) -> int:
    """Files written, read back, stat'ed, removed, and missing names looked up; the bytes read."""
    read = 0
    for i in range(5):
        (root / f"f{i}").write_bytes(b"x" * (1000 * (i + 1)))
    for i in range(5):
        read += len((root / f"f{i}").read_bytes())
    (root / "d").mkdir()
    (root / "d").rmdir()
    os.unlink(root / "f0")
    for i in range(MISSING):
        assert not (root / f"missing{i}").exists()
    return read


def _by_op(fams: dict, name: str) -> dict[str, float]:
    return {s.labels["op"]: s.value for s in fams[name].samples if s.name == name + "_total"}


def _closed(fams: dict) -> bool:
    n = _by_op(fams, "fusetrace_operations")
    return n.get("release", 0) == n.get("open", 0) + n.get("create", 0)


def test_a_traced_mount_counts_what_its_trace_records(mount):
    port = free_port()
    m = mount("--metrics-port", str(port), trace=True)
    read = _workload(m.mountpoint)
    # the kernel sends a file's release after close(2) returns: wait for every handle's
    fams = poll(lambda: _closed(f := families(scrape(port))) and f, timeout=20)
    m.unmount()
    counted = _by_op(fams, "fusetrace_operations")
    trace = pd.read_parquet(m.trace)
    assert counted == trace["op"].value_counts().to_dict()

    errors = {(s.labels["op"], s.labels["errno"]): s.value for s in fams["fusetrace_operation_errors"].samples}
    assert errors[("lookup", "ENOENT")] == ((trace.op == "lookup") & (trace.errno == 2)).sum() >= MISSING
    failed = trace[trace.errno != 0].groupby(["op", "errno"]).size()
    assert sum(errors.values()) == failed.sum()

    moved = _by_op(fams, "fusetrace_bytes")
    assert moved["write"] == trace[trace.op == "write"]["result"].sum() == sum(1000 * (i + 1) for i in range(5))
    assert moved["read"] == trace[(trace.op == "read") & (trace.errno == 0)]["result"].sum() >= read
    assert set(moved) == {"read", "write"}


def test_latency_histograms_are_cumulative_and_count_every_request(mount):
    port = free_port()
    m = mount("--metrics-port", str(port))  # neither traced nor emulated: counted all the same
    _workload(m.mountpoint)
    fams = families(scrape(port))
    counted = _by_op(fams, "fusetrace_operations")
    assert counted["lookup"] >= MISSING and counted["write"] >= 5
    bounds = [*map(float, BOUNDS_S), float("inf")]
    assert bounds[0] == 1e-5 and bounds[-2] == 60.0
    seen = set()
    for op, n in counted.items():
        samples = [s for s in fams["fusetrace_operation_seconds"].samples if s.labels["op"] == op]
        buckets = [(float(s.labels["le"]), s.value) for s in samples if s.name.endswith("_bucket")]
        assert [le for le, _ in buckets] == bounds, op
        values = [v for _, v in buckets]
        assert values == sorted(values), op  # cumulative: never falls
        (count,) = [s.value for s in samples if s.name.endswith("_count")]
        (total,) = [s.value for s in samples if s.name.endswith("_sum")]
        assert values[-1] == count == n, op
        assert 0 < total < 60 * n, op
        seen.add(op)
    assert {"lookup", "create", "write", "read", "flush", "release", "mkdir", "rmdir", "unlink"} <= seen
    # fusetrace stats shows the same counts, from the control socket
    shown = fusetrace("stats", str(m.mountpoint)).stdout
    table = shown.partition("requests since mounting")[2]
    (enoent,) = [s.value for s in fams["fusetrace_operation_errors"].samples if s.labels["errno"] == "ENOENT"]
    assert re.search(rf"^lookup +{int(counted['lookup'])} +ENOENT {int(enoent)}\b", table, re.M), table


def test_a_unix_socket_is_the_users_alone_and_goes_with_the_mount(mount, tmp_path):
    path = tmp_path / "metrics.sock"
    m = mount("-o", f"metrics_addr=unix:{path}")  # as mount(8) and /etc/fstab give it
    st = os.lstat(path)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.geteuid()
    (m.mountpoint / "f").write_bytes(b"abc")
    fams = poll(lambda: (f := families(scrape_unix(str(path)))) and _by_op(f, "fusetrace_bytes").get("write") and f)
    assert _by_op(fams, "fusetrace_bytes")["write"] == 3
    assert "process_resident_memory_bytes" in fams
    m.unmount()
    assert not path.exists()
    # a stale socket of this user's (a server that was killed) is replaced at the next mount
    with socket.socket(socket.AF_UNIX) as stale:
        stale.bind(str(path))
    m = mount("--metrics-addr", f"unix:{path}")
    assert "fusetrace_operations_total" in scrape_unix(str(path))


@pytest.mark.parametrize("addr, url_host", [("0.0.0.0", "127.0.0.1"), ("::1", "[::1]")])
def test_an_address_given_is_where_it_listens(mount, addr, url_host):
    if ":" in addr and not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    port = free_port()
    m = mount("--metrics-addr", addr, "--metrics-port", str(port))
    (m.mountpoint / "f").write_bytes(b"abc")
    page = urllib.request.urlopen(f"http://{url_host}:{port}/metrics", timeout=10).read().decode()
    assert 'fusetrace_bytes_total{op="write"} 3.0' in page


@pytest.mark.parametrize(
    "options, needles",
    [
        (["--metrics-addr", "0.0.0.0"], ["--metrics-addr 0.0.0.0: give --metrics-port PORT too"]),
        (["--metrics-addr", "localhost", "--metrics-port", "9108"], ["--metrics-addr localhost", "not an IP"]),
        (["--metrics-addr", "unix:/tmp/m.sock", "--metrics-port", "9108"], ["a Unix socket has no port"]),
        (["--metrics-addr", "unix:"], ["--metrics-addr unix:", "give the socket's path"]),
        (["--metrics-addr", "unix:/nonexistent/dir/m.sock"], ["no such directory /nonexistent/dir"]),
        (["--metrics-addr", "unix:/" + "x" * 120], ["at most 107 bytes"]),
        (["--metrics-port", "70000"], ["--metrics-port 70000", "1 to 65535"]),
    ],
)
def test_a_bad_metrics_place_is_one_line_and_no_mount(dirs, options, needles):
    one_line_error(mount_fails(dirs, *options), *needles, code=2)


@pytest.mark.parametrize("planted", ["file", "link", "directory"])
def test_a_socket_path_that_is_not_ours_is_never_replaced(dirs, planted):
    path, target = dirs / "m.sock", dirs / "target"
    target.write_text("keep")
    if planted == "file":
        path.write_text("keep")
    elif planted == "link":
        path.symlink_to(target)
    else:
        path.mkdir()
    done = mount_fails(dirs, "--metrics-addr", f"unix:{path}")
    one_line_error(done, f"--metrics-addr unix:{path}: exists and is not a socket of this user's", code=2)
    assert target.read_text() == "keep"
    assert {"file": path.is_file, "link": path.is_symlink, "directory": path.is_dir}[planted]()


def test_a_port_in_use_is_one_line_and_no_mount(dirs):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = mount_fails(dirs, "--metrics-port", str(port))
    one_line_error(done, f"--metrics-port {port}: cannot listen on 127.0.0.1:{port}", "in use", code=2)


def test_a_live_socket_is_not_taken_over(dirs, mount):
    path = dirs / "m.sock"
    mount("--metrics-addr", f"unix:{path}")
    done = mount_fails(dirs, "--metrics-addr", f"unix:{path}")
    one_line_error(done, "a server answers on this socket already", code=2)
    assert "fusetrace_operations_total" in scrape_unix(str(path))


def test_docs_list_every_metric_with_its_type_and_labels():
    counts = OpCounts()
    counts.add("read", 0, b"x", 0)
    counts.add("lookup", 0, None, 2)
    text = (Path(__file__).resolve().parents[2] / "docs" / "METRICS.md").read_text()
    for family in OpCollector(counts).collect():
        name = family.name + "_total" if family.type == "counter" else family.name
        row = re.search(rf"^\| `{name}` \| {family.type} \| (.*)$", text, re.M)
        assert row, name
        for label in {key for sample in family.samples for key in sample.labels}:
            assert f"`{label}`" in row.group(1), (name, label)
