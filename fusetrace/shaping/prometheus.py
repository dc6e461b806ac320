"""The emulator's metrics for Prometheus, through `prometheus_client` (served beside every
mount's per-operation figures, opmetrics.py, where exporter.py listens).

Names follow CloudWatch's EFS metrics in Prometheus style (`MeteredIOBytes` is
`efs_metered_io_bytes_total`): cumulative figures are counters, current values
gauges, units in the names.  What CloudWatch does not show (the emulated NFS
client's state, how the host keeps up with the model) is named `fusetrace_...`; and
prometheus_client's usual `process_...` metrics describe the server process.
docs/METRICS.md lists them all; docs/grafana-dashboard.json charts them.

Nothing is counted per operation here: the collector reads the model's own
counters when Prometheus scrapes.
"""

import dataclasses
import enum
from collections.abc import Callable, Iterator, Mapping

import trio
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

_NS = 1e9


class MetricType(enum.Enum):
    COUNTER = "counter"
    GAUGE = "gauge"


@dataclasses.dataclass(frozen=True)
class Exported:
    """One metric: its Prometheus name (as scraped), type, HELP text and the CloudWatch
    metric it mirrors ("" if none); `sources` maps label values to keys of the snapshot
    (`Emulation.prometheus_metrics()`), one unlabelled key when `label` is ""."""

    name: str
    kind: MetricType
    cloudwatch: str
    help: str
    sources: tuple[tuple[str, str], ...]
    label: str = ""
    scale: float = 1.0

    @property
    def family(self) -> str:
        """The name without a counter's `_total`, as a parser reports the family."""
        return self.name.removesuffix("_total") if self.kind is MetricType.COUNTER else self.name


def _efs(name: str, kind: MetricType, cloudwatch: str, help: str) -> Exported:
    """A metric CloudWatch shows, read from the model's figure of the same name."""
    return Exported(name, kind, cloudwatch, f"{help} (CloudWatch {cloudwatch}).", (("", cloudwatch),))


def _own(name: str, kind: MetricType, key: str, help: str, scale: float = 1.0) -> Exported:
    """A metric of the emulation that CloudWatch does not show."""
    return Exported(name, kind, "", f"{help} (no CloudWatch counterpart).", (("", key),), scale=scale)


C, G = MetricType.COUNTER, MetricType.GAUGE
METRICS: tuple[Exported, ...] = (
    _efs(
        "efs_metered_io_bytes_total",
        C,
        "MeteredIOBytes",
        "Metered bytes since mount: reads x read_factor, writes, metadata operations at metadata_io_size",
    ),
    _efs("efs_total_io_bytes_total", C, "TotalIOBytes", "Data read, data written and metadata bytes since mount"),
    _efs("efs_data_read_io_bytes_total", C, "DataReadIOBytes", "Data bytes read since mount"),
    _efs("efs_data_write_io_bytes_total", C, "DataWriteIOBytes", "Data bytes written since mount"),
    _efs(
        "efs_metadata_io_bytes_total",
        C,
        "MetadataIOBytes",
        "Metadata bytes since mount (metadata and commit operations)",
    ),
    Exported(
        "efs_operations_total",
        C,
        "SampleCount of DataReadIOBytes, DataWriteIOBytes, MetadataIOBytes",
        "Operations admitted by the emulated file system since mount, by class; a buffered write and its "
        "write-back count once (CloudWatch: the SampleCount statistic of DataReadIOBytes, "
        "DataWriteIOBytes and MetadataIOBytes).",
        (
            ("data_read", "DataReadOps"),
            ("data_write", "DataWriteOps"),
            ("metadata_read", "MetadataReadOps"),
            ("metadata_write", "MetadataWriteOps"),
            ("commit", "CommitOps"),
        ),
        label="class",
    ),
    _efs("efs_burst_credit_balance_bytes", G, "BurstCreditBalance", "Burst credits left"),
    _efs(
        "efs_percent_io_limit",
        G,
        "PercentIOLimit",
        "Operations over the last 60 s as a percentage (0 to 100) of the tightest IOPS limit",
    ),
    _efs(
        "efs_permitted_throughput_bytes_per_second",
        G,
        "PermittedThroughput",
        "Throughput allowed now: burst while credits last, else baseline; provisioned; elastic: "
        "the read limit (0: no limit)",
    ),
    _efs(
        "efs_storage_bytes",
        G,
        "StorageBytes",
        "Stored size that sets the bursting baseline (the source, measured every minute)",
    ),
    _efs(
        "efs_client_connections",
        G,
        "ClientConnections",
        "Clients connected: 1, or with --shared the file system's live clients",
    ),
    _own(
        "fusetrace_client_dirty_bytes",
        G,
        "DirtyBytes",
        "The emulated NFS client's buffered-write data not yet written back",
    ),
    _own(
        "fusetrace_client_network_credit_balance_bytes",
        G,
        "ClientNetworkCreditBalance",
        "The emulated client's network credits left (0 without a client network limit)",
    ),
    _own("fusetrace_shaped_operations_total", C, "ops", "Operations the shaper held to the model's time"),
    _own("fusetrace_faults_fired_total", C, "faults_fired", "Fault rules fired on operations (docs/FAULTS.md)"),
    _own(
        "fusetrace_open_descriptors",
        G,
        "open_descriptors",
        "Files and directories held open through the mount, each user at most a share of them (docs/RELIABILITY.md)",
    ),
    _own("fusetrace_inode_descriptors", G, "inode_descriptors", "Descriptors the inode table holds"),
    _own(
        "fusetrace_opens_refused_total",
        C,
        "opens_refused",
        "Opens answered EMFILE: the user at their share of the descriptors, or the budget spent",
    ),
    _own(
        "fusetrace_late_operations_total",
        C,
        "late",
        "Replies later than their deadline by over a tenth of "
        "their modelled time: the host, not the model, set their pace",
    ),
    _own(
        "fusetrace_late_seconds_total",
        C,
        "late_ns",
        "Time replies went out past their deadlines, summed",
        scale=1 / _NS,
    ),
    _own(
        "fusetrace_modelled_seconds_total",
        C,
        "modelled_ns",
        "The modelled time of the operations callers waited on, summed (late over modelled: the share the host added)",
        scale=1 / _NS,
    ),
    _own(
        "fusetrace_kernel_unread_seconds_total",
        C,
        "queued_ns",
        "Time requests waited unread in the FUSE "
        "kernel while the model had room for them, summed (with late, over modelled: the share the host added; "
        "absent where the kernel's counters cannot be read)",
        scale=1 / _NS,
    ),
    _own(
        "fusetrace_loop_busy_seconds_total",
        C,
        "loop_busy_ns",
        "CPU time of the server's event loop (a rate "
        "over 0.75 counts as host-bound only where the kernel's queue is not measured)",
        scale=1 / _NS,
    ),
)


class EmulationCollector:
    """Builds METRICS from one snapshot taken at scrape time.

    The HTTP server answers in its own threads while the model is mutated on the
    trio thread (every admitted operation; and reading metrics advances it), so the
    snapshot is taken *on* the trio thread: `trio.from_thread.run_sync` hands
    `snapshot` to the loop and waits for its answer.  Every figure is then from the
    same instant and current at the scrape, the loop's thread CPU time is read on the
    loop's thread as loopload.py requires, and the loop does no work at all between
    scrapes (a snapshot refreshed every second would wake it even with no scraper and
    be up to a second old; a lock would cost every operation).  A scrape waits while
    the loop is busy, which is what Prometheus's scrape timeout is for."""

    def __init__(self, snapshot: Callable[[], Mapping[str, float]], token: trio.lowlevel.TrioToken):
        self._snapshot, self._token = snapshot, token

    def collect(self) -> Iterator[Metric]:
        values = trio.from_thread.run_sync(self._snapshot, trio_token=self._token)
        for m in METRICS:
            labels = [m.label] if m.label else None
            family = (CounterMetricFamily if m.kind is MetricType.COUNTER else GaugeMetricFamily)(
                m.name, m.help, labels=labels
            )
            for label_value, key in m.sources:
                if key in values:  # the kernel's queue may not be measured (Emulation.host)
                    family.add_metric([label_value] if m.label else [], float(values[key]) * m.scale)
            yield family
