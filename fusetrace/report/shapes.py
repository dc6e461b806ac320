"""The report's data as types: what `fusetrace report --json` prints (query.Trace.summary()),
shared by the queries that make it and the text, plots and rehearsals that read it.  Keys are
in the order the JSON has them; the rows of the tables stay dicts, keyed by their columns."""

from typing import Any, NotRequired, TypedDict


class Coverage(TypedDict):
    """How much of the records' span had an operation in flight (Trace.coverage())."""

    span_ns: int
    busy_ns: int
    busy_share: float | None
    summed_ns: int
    round_trip_ns: int | None
    round_trips_ns: int | None
    busy_with_round_trip_ns: int | None
    busy_with_round_trip_share: float | None
    rest_share: float | None


class TimelineBucket(TypedDict):
    """One bucket of the timeline: the operations that started in it."""

    t_s: float
    start_ns: int
    wall_ns: int | None
    ops: int
    errors: int
    read_bytes: int
    write_bytes: int
    ops_per_s: float
    read_mb_per_s: float
    write_mb_per_s: float


class Timeline(TypedDict):
    """Operations and bytes over time (Trace.timeline()); `plot`: the PNG drawn of it."""

    origin_ns: int
    width_ns: int
    buckets: list[TimelineBucket]
    plot: NotRequired[str]


class FiltersShown(TypedDict):
    """The filters a report applied, as given and as resolved (paths to a regex, times to ns)."""

    op: list[str]
    pid: list[int]
    comm: list[str]
    path: str | None
    path_regex: str | None
    since: str | None
    since_ns: int | None
    until: str | None
    until_ns: int | None
    options: list[str]


class Summary(TypedDict):
    """Everything the report shows (Trace.summary()); `histograms` and `timeline` when asked."""

    directory: str | None
    directories: list[str]
    traces: list[dict[str, Any]]
    hosts: list[dict[str, Any]]
    unaligned: list[str]
    files: int
    records: int
    format_version: int
    kind: str | None  # "fuse", "syscalls" (metadata.trace_kind), "mixed" (a fleet of both), None unknown
    filters: FiltersShown | None
    matched: int
    origin_ns: int | None
    first_ns: int | None
    last_ns: int | None
    span_ns: int
    total_ns: int
    metadata: dict[str, Any]  # the trace's own (or what a fleet's share): open keys
    metadata_error: str | None
    closed: bool
    by: str | None
    top: int | None
    groups: int
    ops: list[dict[str, Any]]
    coverage: Coverage | None
    shaping: list[dict[str, Any]] | None
    credits: dict[str, Any] | None  # credits.credits(): when the burst credits ran out
    faults: list[dict[str, Any]]
    hints: list[dict[str, Any]]
    left_out: list[dict[str, Any]]  # the traces that recorded only some operations (Trace.left_out)
    histograms: NotRequired[dict[str, list[dict[str, Any]]]]
    timeline: NotRequired[Timeline | None]
