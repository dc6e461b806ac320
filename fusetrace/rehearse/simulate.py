"""`fusetrace simulate DIR --profile P [--set K=V] [--days N] [--open-loop] [--plot FILE.png]
[--json]`: a trace's operations through the emulated NFS client and the EFS model in virtual
time, no mount and no sleeping, once or back to back for N days: how much longer the job
would take (closed loop, the default: each process waits for its own operations, as it
did; --open-loop makes every operation at its recorded time instead), when the burst
credits run out, if they do, the throughput after, and the time operations waited.

The records become the requests the mount's handlers made (requests.py), or for a
captured trace of system calls the requests the kernel in front of the Linux NFS client
passes on for them (syscalls.py, as `fusetrace fit` infers them: path walks, page cache,
dirty data held until its write-back, close-to-open), in start order, streamed from the
trace in bounded memory (a trace of up to CACHE_CALLS records is read once and kept), each
with its recorded start and end and its process;
emulator/tracesim.py runs them, simulating op by op around every change of regime and
extrapolating the steady stretches between (it says which).
"""

import argparse
import datetime
import json
import os
import time
from collections.abc import Sequence
from typing import NotRequired, TypedDict

import duckdb

from ..emulator.params import Params
from ..emulator.samples import coarsened
from ..emulator.throughput import credit_cap
from ..emulator.tracesim import Result, TraceSim
from ..errors import UserError
from ..report.query import Trace, expand_traces
from ..shaping.profile import load_params
from ..stats_view import _human_bytes
from ..texttable import ns_text, printable, table
from ..trace import metadata as meta
from ..trace import partial, reader
from . import simulate_fleet as fleet
from . import simulate_plot

TOP_PROCESSES = 10  # the processes said, those the simulation slows down most
TABLE_ROWS = 24  # at most, besides the start
SAMPLES_PER_ROW = 20  # samples a table row sums up (the plot draws every one)
DAY = 86400.0
# Steps a table row may take (s): the least that keeps the table within TABLE_ROWS.
_STEPS = [k * 10.0**e for e in range(-3, 1) for k in (1, 2, 5)] + [
    15,
    30,
    60,
    120,
    300,
    600,
    900,
    1800,
    3600,
    7200,
    10800,
    21600,
    43200,
    DAY,
]


class Operations(TypedDict):
    simulated: int  # op by op
    total: float  # with the extrapolated ones


class Credits(TypedDict):
    """The burst credit balance: from, to, its least, its change, when it runs out."""

    start_bytes: float
    end_bytes: float
    least_bytes: float
    change_per_repetition_bytes: float | None
    change_per_day_bytes: float | None
    run_out_s: float | None
    run_out_at: str | None
    run_out_wall: NotRequired[str]  # when, on the wall clock (UTC), if the traces map their clock to it
    run_out_simulated: bool | None
    projected_run_out_s: float | None
    projected_run_out_at: str | None
    after_run_out_bytes_per_s: float | None


class Waited(TypedDict):
    total_s: float
    mean_s: float
    max_s: float


class SpanShown(TypedDict):
    start_s: float
    end_s: float
    simulated: bool
    repetitions: float


class SampleShown(TypedDict):
    t_s: float
    balance_bytes: float
    permitted_bytes_per_s: float
    metered_bytes: float
    ops: float
    waited_s: float
    max_wait_s: float
    simulated: bool


class Process(TypedDict):
    """A process's first pass: its first recorded start to its last end, as recorded and
    as simulated in closed loop."""

    pid: int
    comm: str  # its name, as the trace gives it ("" unknown)
    host: NotRequired[str]  # a fleet's: the host it ran on
    recorded_s: float
    simulated_s: float
    slowdown: float


class Made(TypedDict):
    """An operation's records and the requests of a pass made of the NFS client by that name
    (a syscall trace's: its system calls, and what the kernel passed on for them)."""

    op: str
    records: int
    requests: int


class Rebuilt(TypedDict):
    """What rebuilding the requests from the records could not know (requests.Gaps)."""

    new_directories: int
    unknown_handles: int
    unknown_ops: int


class Simulation(TypedDict):
    """simulate()'s result, what --json prints; `profile` and `overrides` the command's, `plot`
    the PNG drawn."""

    trace: str
    loop: str  # closed (each process waits for its operations), or open (made at their recorded times)
    records: int
    format_version: int
    throughput_mode: str
    stored_size_bytes: float
    credit_cap_bytes: float
    span_s: float
    recorded_s: float  # the job once, as recorded: its first start to its last end
    simulated_s: float | None  # and as simulated, to its last completion (None: not within the days)
    slowdown: float | None  # simulated over recorded
    steady_pass_s: float | None  # closed loop: a pass's length where the last were skipped (None: none were)
    processes: list[Process]  # closed loop: those slowed down most, at most TOP_PROCESSES
    process_count: int
    duration_s: float
    days: float | None
    repetitions: float
    operations: Operations
    wall_s: float
    credits: Credits
    permitted_end_bytes_per_s: float
    metered_bytes: float
    metered_bytes_per_s: float
    first_operation_s: float
    waited: Waited
    saturated: bool
    row_s: float
    spans: list[SpanShown]
    samples: list[SampleShown]
    rebuilt: Rebuilt
    requests: list[Made]
    notes: list[str]
    profile: NotRequired[str]
    overrides: NotRequired[list[str]]
    plot: NotRequired[str]
    traces: NotRequired[list[str]]  # a fleet's trace directories
    hosts: NotRequired[list[fleet.Host]]  # a fleet's hosts, those that waited most first


def run(args: argparse.Namespace) -> int:
    """The command: args has trace_dirs (directories and globs: a fleet's), profile, overrides,
    days, open_loop, plot and json."""
    (directories,) = expand_traces(args.trace_dirs)
    params = load_params(args.profile, args.overrides)
    lefts = []
    for directory in directories:
        known = reader.metadata(directory)
        if not args.partial:  # credits, throughput and IOPS of part of the load would be wrong
            partial.refuse_partial(directory, known, "simulate", "the model would see only part of the load")
        if (left := partial.described(known)) is not None:
            lefts.append(left if len(directories) == 1 else f"{printable(directory)}: {left}")
    if args.plot and not os.path.isdir(os.path.dirname(os.path.abspath(args.plot))):
        raise UserError(f"{args.plot}: no such directory to write the plot in")
    try:
        summary = simulate(directories, params, args.days, closed=not args.open_loop)
    except duckdb.Error as exc:
        what = printable(directories[0]) if len(directories) == 1 else f"{len(directories)} traces"
        raise UserError(f"{what}: cannot read the trace: {str(exc).splitlines()[0]}") from None
    summary["profile"], summary["overrides"] = args.profile, args.overrides
    for left in lefts:
        summary["notes"].append(f"the trace left out {left}: the model saw only its records (--partial)")
    if args.plot:
        try:
            simulate_plot.plot(args.plot, summary)
        except OSError as exc:
            raise UserError(f"{args.plot}: cannot write it: {exc.strerror or exc}") from None
        summary["plot"] = args.plot
    print(json.dumps(summary, indent=1) if args.json else render(summary))
    return 0


def simulate(trace_dirs: str | Sequence[str], params: Params, days: float | None, closed: bool = True) -> Simulation:
    """The simulation of the trace at `trace_dirs` (or of several, a fleet's, through one file
    system: simulate_fleet.py) under `params` (once, or back to back for `days`), in closed
    loop or open, as the command's --json gives it."""
    trace = Trace(trace_dirs)
    if not trace.records:
        raise reader.NoTrace(f"{trace.label}: the trace holds no records")
    first, last = trace.origin_ns, trace.last_ns
    origin = fleet.origin_ns(trace)
    span = max(last - first, 1000) / 1e9  # at least a microsecond
    # once in closed loop: until the job's last operation completes, however long that is
    # (the table's rows are chosen for the recorded length, and merged if it is longer)
    duration = days * DAY if days else (last - origin) / 1e9 or span
    step = _step(duration)
    calls = fleet.Calls(trace, closed, params)
    hosts = len(trace.set.members)
    model, clients = fleet.clients(params, origin / 1e9, hosts)
    waits = fleet.Waits(hosts) if hosts > 1 else None
    began = time.perf_counter()
    try:
        result = TraceSim(
            model,
            calls,
            origin=origin / 1e9,
            first=first / 1e9,
            span=span,
            every=step / SAMPLES_PER_ROW,
            closed=closed,
            admitted=waits,
            clients=clients,
            pending=calls.spill.queue,
        ).run(duration if days or not closed else None, most=2 * TABLE_ROWS * SAMPLES_PER_ROW)
    finally:
        calls.spill.close()
    wall = time.perf_counter() - began
    duration = result.samples[-1].t
    if duration > step * TABLE_ROWS * 1.000001:
        step = _step(duration)
        result.samples = coarsened(result.samples, step / SAMPLES_PER_ROW)
    summary = _summary(trace, params, result, calls, span, duration, days, step, wall, (first - origin) / 1e9, closed)
    clock = trace.set.base
    if result.cliff is not None and "start_wall_ns" in clock:
        wall_ns = meta.to_wall_ns(clock, origin + round(result.cliff * 1e9))
        summary["credits"]["run_out_wall"] = datetime.datetime.fromtimestamp(wall_ns / 1e9, datetime.UTC).isoformat(
            timespec="seconds"
        )
    if waits is not None:
        summary["traces"] = trace.directories
        summary["hosts"] = fleet.hosts(trace, waits, result.chains)
    return summary


def _step(duration: float) -> float:
    """The least step (s) a table row may take that keeps the table within TABLE_ROWS."""
    return next((s for s in _STEPS if s * TABLE_ROWS >= duration), None) or DAY * -(-duration // (DAY * TABLE_ROWS))


def _summary(
    trace: Trace,
    params: Params,
    result: Result,
    calls: fleet.Calls,
    span: float,
    duration: float,
    days: float | None,
    step: float,
    wall: float,
    lead: float,
    closed: bool,
) -> Simulation:
    """`lead`: virtual seconds from the mount's start (time 0) to the first record's."""
    r, gaps = result, calls.gaps
    delta = r.delta
    projected = None
    if r.cliff is None and delta is not None and delta < 0 and params.throughput_mode != "elastic":
        projected = duration + r.end_balance / -delta * r.period
    notes = []
    loss = meta.loss_summary(trace.directory)
    if loss:
        notes.append(loss)
    if trace.format_version < 3:
        notes.append(
            f"a format {trace.format_version} trace: open flags, the requests' kinds and the replies' "
            f"types are not recorded: writes are taken as buffered, directories known only from the "
            f"operations on them"
        )
    if trace.kind in ("syscalls", "mixed"):
        notes.append(
            "system calls (a capture's trace), made into the requests the kernel in front of the NFS "
            "client passes on (path walks, page cache, dirty data held until a close, fsync, stat or "
            "30 s): read-ahead, write-back under memory pressure and symbolic links in paths are not "
            "modelled"
        )
    if gaps.new_directories:
        notes.append(
            f"{gaps.new_directories:,} renames or links into a directory the trace had not named: its "
            f"caches are kept apart from the directory's own"
        )
    if gaps.unknown_handles:
        n = gaps.unknown_handles
        notes.append(
            f"{n:,} {'use' if n == 1 else 'uses'} of a handle whose open is not in the trace: its flags unknown"
        )
    if gaps.unknown_ops:
        notes.append(f"{gaps.unknown_ops:,} records of operations no handler makes: left out")
    comms = (
        {(h, pid): c for h, pid, c in trace.rows("select host, pid, max(comm) from trace group by host, pid")}
        if "comm" in trace.columns
        else {}
    )
    records = dict(trace.rows("select op, count(*) from trace group by op"))
    members, named = trace.set.members, fleet.host_names(trace)
    processes: list[Process] = []
    for key, (first, end, done) in r.chains.items():
        pid, h = divmod(key, len(members))
        process: Process = {
            "pid": pid,
            "comm": comms.get((members[h].host, pid)) or "",
            "recorded_s": end - first,
            "simulated_s": done - first,
            "slowdown": (done - first) / (end - first) if end > first else 1.0,
        }
        if trace.fleet:
            process["host"] = named[h]
        processes.append(process)
    processes.sort(key=lambda p: (p["recorded_s"] - p["simulated_s"], p["pid"]))
    return {
        "trace": trace.label,
        "loop": "closed" if closed else "open",
        "records": trace.records,
        "format_version": trace.format_version,
        "throughput_mode": params.throughput_mode,
        "stored_size_bytes": params.stored_size,
        "credit_cap_bytes": credit_cap(params, params.stored_size),
        "span_s": span,
        "recorded_s": span,
        "simulated_s": r.job,
        "slowdown": r.job / span if r.job is not None else None,
        "steady_pass_s": r.steady,
        "processes": processes[:TOP_PROCESSES],
        "process_count": len(processes),
        "duration_s": duration,
        "days": days,
        "repetitions": r.reps,
        "operations": {"simulated": r.ops, "total": r.ops_total},
        "wall_s": wall,
        "credits": {
            "start_bytes": r.start_balance,
            "end_bytes": r.end_balance,
            "least_bytes": r.least_balance,
            "change_per_repetition_bytes": delta,
            "change_per_day_bytes": delta * DAY / r.period if delta is not None else None,
            "run_out_s": r.cliff,
            "run_out_at": _when(r.cliff) if r.cliff is not None else None,
            "run_out_simulated": r.cliff_simulated if r.cliff is not None else None,
            "projected_run_out_s": projected,
            "projected_run_out_at": _when(projected) if projected is not None else None,
            "after_run_out_bytes_per_s": r.after_cliff,
        },
        "permitted_end_bytes_per_s": r.end_permitted,
        # once: over the operations' own span, as --days averages (the mount idle before them left out)
        "metered_bytes": r.metered,
        "metered_bytes_per_s": r.metered / (duration if days else span),
        "first_operation_s": lead,
        "waited": {"total_s": r.waited, "mean_s": r.waited / r.ops_total if r.ops_total else 0.0, "max_s": r.max_wait},
        "saturated": r.saturated,
        "row_s": step,
        "spans": [
            {"start_s": s.start, "end_s": s.end, "simulated": s.simulated, "repetitions": s.reps} for s in r.spans
        ],
        "samples": [
            {
                "t_s": s.t,
                "balance_bytes": s.balance,
                "permitted_bytes_per_s": s.permitted,
                "metered_bytes": s.metered,
                "ops": s.ops,
                "waited_s": s.waited,
                "max_wait_s": s.max_wait,
                "simulated": s.simulated,
            }
            for s in r.samples
        ],
        "rebuilt": {
            "new_directories": gaps.new_directories,
            "unknown_handles": gaps.unknown_handles,
            "unknown_ops": gaps.unknown_ops,
        },
        "requests": [
            {"op": op, "records": records.get(op, 0), "requests": calls.made.get(op, 0)}
            for op in sorted(records.keys() | calls.made.keys())
        ],
        "notes": notes,
    }


# ---- text ------------------------------------------------------------------------------


def render(s: Simulation) -> str:
    w, ops = s["waited"], s["operations"]
    settings = ", ".join(s["overrides"])
    lines = [
        f"simulate: {s['trace']}"
        + (f" ({len(s['hosts']):,} hosts through one file system)" if "hosts" in s else "")
        + f" ({s['records']:,} records over {_seconds(s['span_s'])}), profile "
        f"{s['profile']}"
        + (f", {settings}" if settings else "")
        + f" ({_human_bytes(s['stored_size_bytes'])} stored: stored_size)"
    ]
    if s["days"]:
        lines.append(
            f"{s['days']:g} days of virtual time: the trace {s['repetitions']:,.1f} times back to back; "
            f"{ops['simulated']:,} operations simulated op by op, {_count(ops['total'])} in all, "
            f"in {s['wall_s']:.2f} s"
        )
    else:
        lead = f" (the first {_seconds(s['first_operation_s'])} idle)" if s["first_operation_s"] >= 0.01 else ""
        lines.append(
            f"the trace once, {_seconds(s['duration_s'])} of virtual time from the mount's start{lead}: "
            f"{ops['simulated']:,} operations, in {s['wall_s']:.2f} s"
        )
    lines += _job_lines(s)
    lines += ["", _table(s), ""]
    if s["requests"] and any(m["records"] != m["requests"] for m in s["requests"]):
        lines += [_made(s["requests"]), ""]
    lines += _credit_lines(s)
    if "hosts" in s:
        lines += fleet.host_lines(s["hosts"], _seconds, _length)
    lines.append(
        f"time operations waited (for limits, slots and queues): {_seconds(w['total_s'])} in all, "
        f"{_seconds(w['mean_s'])} on average, {_seconds(w['max_s'])} at most"
    )
    if s["saturated"]:
        lines.append(
            "the workload asks for more than is permitted: in open loop operations are made at their "
            "recorded times, so the queue, and every operation's wait, grows without end (without "
            "--open-loop each process waits for its operations instead, and the job stretches)"
        )
    lines.append(_spans(s["spans"], s["row_s"]))
    lines += [f"note: {n}" for n in s["notes"]]
    if s.get("plot"):
        lines.append(f"plot: {s['plot']}")
    return "\n".join(lines)


def _job_lines(s: Simulation) -> list[str]:
    """How long the job takes, as recorded and as simulated: its answer in words."""
    recorded, simulated = s["recorded_s"], s["simulated_s"]
    if s["loop"] == "open":
        how = "open loop: operations made at their recorded times, not waiting for one another"
        if simulated is None:
            return [f"{how}; the first pass's last operation does not complete within the time simulated"]
        return [
            f"{how}; the first pass's last operation completes {_length(simulated)} after its first "
            f"starts, against {_length(recorded)} recorded ({simulated / recorded:,.2f}x)"
        ]
    lines = ["closed loop: each process's next operation waits for those it had seen complete, as the application did"]
    if simulated is None:
        lines.append(f"the job does not end within the time simulated (recorded: {_length(recorded)})")
    else:
        lines.append(
            f"the job would take {_length(simulated)} instead of {_length(recorded)} ({simulated / recorded:,.2f}x)"
        )
    steady = s["steady_pass_s"]
    if steady is not None and (simulated is None or abs(steady - simulated) > 0.01 * simulated):
        lines.append(f"later, where it is steady, a pass takes {_length(steady)} ({steady / recorded:,.2f}x)")
    if s["days"]:
        lines.append(
            f"in {s['days']:g} days: {s['repetitions']:,.1f} passes of the job, against "
            f"{s['duration_s'] / recorded:,.1f} at its recorded pace"
        )
    if s["process_count"] > 1:
        shown = [
            f"{printable(p['host']) + ':' if 'host' in p else ''}{p['pid']}{_named(p['comm'])} "
            f"{_length(p['simulated_s'])} "
            f"instead of {_length(p['recorded_s'])} ({p['slowdown']:,.2f}x)"
            for p in s["processes"][:5]
        ]
        more = s["process_count"] - len(shown)
        lines.append("processes slowed down most: " + "; ".join(shown) + (f"; and {more:,} more" if more > 0 else ""))
    return lines


def _named(comm: str) -> str:
    return f" ({printable(comm)})" if comm else ""


def _length(s: float) -> str:
    """A job's length: hours and minutes, minutes and seconds, or seconds."""
    if s >= 3600:
        hours, minutes = divmod(round(s / 60), 60)
        return f"{hours:,} h {minutes:02d} min"
    if s >= 60:
        minutes, seconds = divmod(round(s), 60)
        return f"{minutes} min {seconds:02d} s"
    return _seconds(s)


def _credit_lines(s: Simulation) -> list[str]:
    c = s["credits"]
    if s["throughput_mode"] == "elastic":
        return ["elastic throughput: no burst credits to run out"]
    moving = ""
    per_repetition, change = c["change_per_repetition_bytes"], c["change_per_day_bytes"]
    if per_repetition is not None and change is not None:  # both or neither
        if abs(per_repetition) < 1:
            moving = ", steady"
        elif change < 0:
            moving = f", falling {_human_bytes(-change)} a day"
        else:
            moving = f", rising {_human_bytes(change)} a day up to their cap ({_human_bytes(s['credit_cap_bytes'])})"
    lines = [
        f"burst credits: {_human_bytes(c['start_bytes'])} at the start, {_human_bytes(c['end_bytes'])} at "
        f"the end, {_human_bytes(c['least_bytes'])} at the lowest{moving}; the workload meters "
        f"{_human_bytes(s['metered_bytes_per_s'])}/s on average"
        + ("" if s["days"] else f" over its operations' {_seconds(s['span_s'])}")
    ]
    after = c["after_run_out_bytes_per_s"]  # set with run_out_s
    if c["run_out_s"] is not None and after is not None:
        how = "simulated op by op" if c["run_out_simulated"] else "extrapolated"
        wall = f", {c['run_out_wall'].replace('T', ' ').replace('+00:00', ' UTC')}" if "run_out_wall" in c else ""
        lines.append(
            f"credits run out at {c['run_out_s']:,.0f} s, {c['run_out_at']} from the trace's start{wall} "
            f"({how}); then {_human_bytes(after)}/s is permitted (the baseline)"
        )
    elif c["projected_run_out_s"] is not None:
        lines.append(
            f"credits do not run out in the time simulated; at this rate they would at "
            f"{c['projected_run_out_s']:,.0f} s, {c['projected_run_out_at']} from the trace's start"
        )
    else:
        lines.append(
            "credits do not run out" + ("" if s["days"] else " in the trace's time (--days N repeats it for N days)")
        )
    return lines


def _table(s: Simulation) -> str:
    samples = s["samples"]
    head = ["time", "credits", "permitted", "metered/s", "ops/s", "mean wait", "max wait", "how"]
    rows = [
        [
            _when(0.0, s["row_s"]),
            _human_bytes(samples[0]["balance_bytes"]),
            _human_bytes(samples[0]["permitted_bytes_per_s"]) + "/s",
            "",
            "",
            "",
            "",
            "start",
        ]
    ]
    prev = samples[0]
    for i in range(1, len(samples), SAMPLES_PER_ROW):
        chunk = samples[i : i + SAMPLES_PER_ROW]
        end = chunk[-1]
        seconds = end["t_s"] - prev["t_s"]
        n = sum(x["ops"] for x in chunk)
        waited = sum(x["waited_s"] for x in chunk)
        how = {x["simulated"] for x in chunk}
        rows.append(
            [
                _when(end["t_s"], s["row_s"]),
                _human_bytes(end["balance_bytes"]),
                _human_bytes(end["permitted_bytes_per_s"]) + "/s",
                _human_bytes((end["metered_bytes"] - prev["metered_bytes"]) / seconds),
                f"{n / seconds:,.1f}",
                _seconds(waited / n) if n else "-",
                _seconds(max(x["max_wait_s"] for x in chunk)),
                "op by op" if how == {True} else "extrapolated" if how == {False} else "both",
            ]
        )
        prev = end
    return table(head, rows, "lrrrrrrl")


def _made(made: list[Made]) -> str:
    """Where the model's requests differ from the records (a syscall trace's, always)."""
    rows = [[m["op"], f"{m['records']:,}", f"{m['requests']:,}"] for m in made]
    return table(["operation", "records", "requests of a pass"], rows, "lrr")


def _spans(spans: list[SpanShown], step: float) -> str:
    def text(x: SpanShown) -> str:
        return f"{_when(x['start_s'], step)} to {_when(x['end_s'], step)} ({x['repetitions']:,.1f}x)"

    simulated = [text(x) for x in spans if x["simulated"]]
    extrapolated = [text(x) for x in spans if not x["simulated"]]
    line = "simulated op by op: " + "; ".join(simulated)
    return line + ("; extrapolated: " + "; ".join(extrapolated) if extrapolated else "")


def _when(t: float, step: float = 60.0) -> str:
    """Virtual time since the start as day+hh:mm (day+hh:mm:ss where rows are under a
    minute, with milliseconds where they are under a second)."""
    digits = 3 if step < 1 else 0
    minutes, seconds = divmod(round(t / 60) * 60 if step >= 60 else round(t, digits), 60)
    hours, minutes = divmod(int(minutes), 60)
    days, hours = divmod(hours, 24)
    if step >= 60:
        return f"{days}+{hours:02d}:{minutes:02d}"
    return f"{days}+{hours:02d}:{minutes:02d}:{seconds:0{3 + digits if digits else 2}.{digits}f}"


def _seconds(s: float) -> str:
    """A duration: report's units up to seconds, then minutes, hours and days."""
    for unit, size in (("d", DAY), ("h", 3600.0), ("min", 60.0)):
        if s >= 2 * size:
            return f"{s / size:,.1f} {unit}"
    return ns_text(s * 1e9)


def _count(n: float) -> str:
    return f"{n / 1e6:,.1f} million" if n >= 1e7 else f"{n:,.0f}"
