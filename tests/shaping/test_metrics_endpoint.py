"""The Prometheus endpoint of an emulated mount (`--metrics-port`), its names, and the
Grafana dashboard in docs/ that charts them."""

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from support import poll
from support.metrics import free_port, scrape, values

from fusetrace.emulator.model import Model
from fusetrace.shaping.emulation import Emulation
from fusetrace.shaping.opmetrics import OpCollector, OpCounts
from fusetrace.shaping.prometheus import METRICS, MetricType

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"
MiB = 1 << 20


def _listening_addresses(port: int) -> set[str]:
    """The local addresses (hex, as /proc/net/tcp{,6} spell them) listening on `port`."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                address, _, hex_port = local.partition(":")
                if int(hex_port, 16) == port and state == "0A":  # LISTEN
                    found.add(address)
    return found


def test_prometheus_endpoint(mount):
    port = free_port()
    m = mount("--emulate", "efs-tiny", "--metrics-port", str(port))
    (m.mountpoint / "f").write_bytes(b"z" * 4096)
    body = scrape(port)
    assert "efs_burst_credit_balance" in body and "efs_permitted_throughput" in body
    assert _listening_addresses(port) == {"0100007F"}  # 127.0.0.1 alone

    families = {f.name: f for f in text_string_to_metric_families(body)}
    process = {name for name in families if name.startswith("process_")}
    assert {"process_resident_memory_bytes", "process_open_fds", "process_cpu_seconds"} <= process
    per_op = {"fusetrace_operations", "fusetrace_operation_errors", "fusetrace_bytes", "fusetrace_operation_seconds"}
    assert set(families) - process - per_op == {metric.family for metric in METRICS}  # the model's
    assert {"fusetrace_operations", "fusetrace_bytes", "fusetrace_operation_seconds"} <= set(families)  # any mount's
    assert families["fusetrace_operation_seconds"].type == "histogram"
    for metric in METRICS:
        family = families[metric.family]
        assert family.type == metric.kind.value, metric.name
        assert f"# HELP {metric.name} " in body and family.documentation, metric.name
        assert f"# TYPE {metric.name} {metric.kind.value}" in body
        assert {s.name for s in family.samples} == {metric.name}
    assert families["efs_burst_credit_balance_bytes"].type == "gauge"
    assert families["fusetrace_late_operations"].type == "counter"


def test_counters_rise_with_io_through_the_mount(mount):
    port = free_port()
    m = mount("--emulate", "efs-tiny", "--metrics-port", str(port))
    before = values(scrape(port))
    with open(m.mountpoint / "f", "wb") as f:
        f.write(b"w" * MiB)
    after = poll(
        lambda: (
            (v := values(scrape(port)))["efs_data_write_io_bytes_total"]
            >= before["efs_data_write_io_bytes_total"] + MiB
            and v
        )
    )
    for name in (
        "efs_metered_io_bytes_total",
        "efs_total_io_bytes_total",
        "efs_operations_total",
        "fusetrace_shaped_operations_total",
    ):
        assert after[name] > before[name], name


def test_every_model_figure_and_host_counter_is_exported():
    emulation = Emulation.open("efs-tiny", [], "/nonexistent")
    snapshot = emulation.prometheus_metrics()
    sources = {key for metric in METRICS for _, key in metric.sources}
    # the kernel's queue is read only from a mounted connection (the test above scrapes it)
    assert sources - {"queued_ns"} <= set(snapshot)
    assert set(Model(emulation.model.params, 0.0).metrics(0.0)) <= sources  # no figure of the model left out
    for metric in METRICS:
        assert metric.name.startswith(("efs_", "fusetrace_")), metric.name
        assert metric.name.endswith("_total") == (metric.kind is MetricType.COUNTER), metric.name
        assert metric.name.startswith("efs_") == bool(metric.cloudwatch), metric.name
        assert ("CloudWatch" in metric.help) and metric.help.endswith("."), metric.name


def test_dashboard_queries_only_exported_metrics():
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    counts = OpCounts()
    counts.add("read", 0, b"x", 0)
    counts.add("lookup", 0, None, 2)
    per_op = {sample.name for family in OpCollector(counts).collect() for sample in family.samples}
    exported = {metric.name for metric in METRICS} | per_op
    queried = set()
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
            names = set(re.findall(r"\b(?:efs|fusetrace)_[a-z_]+\b", target["expr"]))
            assert names and names <= exported, (panel["title"], names - exported)
            queried |= names
    for needed in (
        "efs_data_read_io_bytes_total",
        "efs_data_write_io_bytes_total",
        "efs_burst_credit_balance_bytes",
        "efs_percent_io_limit",
        "efs_permitted_throughput_bytes_per_second",
        "fusetrace_late_operations_total",
        "fusetrace_operations_total",
        "fusetrace_operation_errors_total",
        "fusetrace_operation_seconds_bucket",
        "fusetrace_bytes_total",
    ):
        assert needed in queried, needed
    assert variables["instance"]["query"]["query"] == "label_values(fusetrace_operations_total, instance)"  # any mount


def test_docs_list_every_metric_with_its_type():
    text = (DASHBOARD.parent / "EMULATOR.md").read_text()
    for metric in METRICS:
        label = r"\{" + metric.label + r"\}" if metric.label else ""
        assert re.search(rf"^\| `{metric.name}{label}` \| {metric.kind.value} \|", text, re.M), metric.name
