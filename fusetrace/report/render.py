"""The report as text: a summary (query.Trace.summary(), what --json prints) rendered as the
header, the tables, the histograms, the timeline and the hints."""

import math
from datetime import datetime
from typing import Any

from ..hostload import load_words
from ..texttable import count, int_text, ns_text, num_text, pct_text, printable, table
from ..trace import metadata as meta
from .credits import credit_words
from .query import QUANTILES
from .shapes import Summary, Timeline

TOP_GROUPS = 20  # groups the text report shows with --by unless --top says; --json has them all


def render(s: Summary) -> str:
    """The text report of a summary (Trace.summary())."""
    parts = ["\n".join(printable(line) for line in _header(s))]  # names a trace's makers chose
    if len(s["hosts"]) > 1:
        parts.append(_hosts_table(s))
    parts.append(_ops_table(s))
    shaping = _shaping(s)
    if shaping:
        parts.append(shaping)
    if s.get("histograms"):
        parts.append(_histograms(s["histograms"]))
    if timeline := s.get("timeline"):
        parts.append(_timeline(timeline))
    if s["hints"]:
        parts.append("\n".join(["hints", *(f"- {printable(h['text'])}" for h in s["hints"])]))
    return "\n\n".join(parts)


def _header(s: Summary) -> list[str]:
    m = s["metadata"]
    counts = f"({int_text(s['records'])} records in {int_text(s['files'])} file{'' if s['files'] == 1 else 's'})"
    if s["directory"] is not None:
        lines = [f"trace       {s['directory']}  {counts}"]
    else:
        traces = s["traces"]
        hosts = len({t["host"] for t in traces})
        lines = [f"traces      {len(traces)} traces from {hosts} host{'s' if hosts > 1 else ''}  {counts}"]
        lines += [f"            {t['host'] or '(no host)'}  {t['directory']}" for t in traces[:TOP_GROUPS]]
        if len(traces) > TOP_GROUPS:
            lines.append(f"            and {int_text(len(traces) - TOP_GROUPS)} more (--json lists them all)")
    lines += _kind(s)
    if "source" in m and s["kind"] != "syscalls":
        host = f" on {m['host']}" if m.get("host") else ""
        lines.append(f"source      {m['source']}{host}, mounted at {m.get('mountpoint', '?')}")
    if "start_wall_ns" in m:
        lines.append(f"started     {_wall(m['start_wall_ns'])}, records span {s['span_ns'] / 1e9:.3f} s")
    if s["filters"]:
        f = s["filters"]
        times = [
            f"{k} {_at(s, ns)}" for k, ns in (("since", f["since_ns"]), ("until", f["until_ns"])) if ns is not None
        ]
        lines.append(
            f"filters     {'  '.join(f['options'])}{' (' + '; '.join(times) + ')' if times else ''}: "
            f"{int_text(s['matched'])} of {int_text(s['records'])} records"
        )
    lines += _coverage(s)
    for t in s["left_out"]:  # what the trace did not see: counts, bytes and ops/s weigh the sampled
        where = "" if s["directory"] is not None else f"{t['directory']}: "
        lines.append(
            f"left out    {where}{printable(t['text'])}; counts, bytes and rates below are scaled "
            f"by each record's sample"
        )
    if m.get("dropped"):
        limit = (
            f"max_pending {m['max_pending']}"
            if m.get("max_pending") is not None
            else f"{m['max_pending_bytes'] / 2**20:g} MiB"
            if m.get("max_pending_bytes")
            else "max_pending ?"
        )
        lines.append(
            f"dropped     {int_text(m['dropped'])} records: the writer's queue was full ({limit}), "
            f"or a field was bad (the server's log says which)"
        )
    if m.get("write_errors"):
        lines.append(
            f"lost        {int_text(m.get('lost', 0))} records in {int_text(m['write_errors'])} failed "
            f"writes; last: {m.get('last_error')}"
        )
    if lost := meta.capture_lost(m):
        lines.append(
            f"lost        {int_text(sum(lost.values()))} calls the probes counted but did not deliver "
            f"({', '.join(f'{printable(op)} {int_text(n)}' for op, n in lost.items())}): every count here is short"
        )
    lines += _limited(m)
    lines += _emulation(m, s["traces"])
    lines += credit_words(s["credits"], m)
    lines += _crashes(m)
    for fault in s.get("faults", []):
        said = ", ".join(f"{o['op']} {o['errno'] or '(no error)'} {int_text(o['count'])}" for o in fault["ops"])
        lines.append(f"fault       rule {fault['rule']} acted on {int_text(fault['records'])} records: {said}")
    if s["directory"] is not None:
        warning = s["traces"][0]["warning"]
        lines += [f"warning     {warning}"] if warning else []
    else:
        lines += [f"warning     {t['directory']}: {t['warning']}" for t in s["traces"] if t["warning"]]
        lines += [
            f"warning     {d}: no clock mapping (start_wall_ns) in its {meta.NAME}: its times are its "
            f"own, not aligned with the other traces'"
            for d in s["unaligned"]
        ]
    return lines


def _kind(s: Summary) -> list[str]:
    """The header's line on what the records are: the requests a FUSE mount served, or the
    system calls a capture saw (metadata.trace_kind); none when no metadata says."""
    m, kind = s["metadata"], s["kind"]
    if kind == "syscalls":
        host = f" on {m['host']}" if m.get("host") else ""
        return [
            f"recorded    system calls (eBPF capture of {m.get('mountpoint', '?')}{host}): no server in the "
            f"path, every call the processes made, those the kernel answered from its caches included"
        ]
    if kind == "fuse":
        return [
            "recorded    FUSE requests (a fusetrace mount): what the kernel sent past its caches, a server in the path"
        ]
    if kind == "mixed":
        captured = sum(t["kind"] == "syscalls" for t in s["traces"])
        return [
            f"recorded    FUSE requests ({count(len(s['traces']) - captured, 'trace')}) and system calls "
            f"({count(captured, 'trace')}, eBPF captures): their records are not alike"
        ]
    return []


def _limited(m: meta.Metadata) -> list[str]:
    """What a trace's limits (--trace-max, --trace-max-age) left out of it, one line each."""
    lines = []
    if m.get("rotated"):
        first = m.get("first_start_ns")
        since = f"; it now starts {_wall(meta.to_wall_ns(m, first))}" if first and "start_wall_ns" in m else ""
        lines.append(
            f"rotated     {int_text(m['rotated'])} records: the trace's first parts were rotated out at "
            f"its limit ({_limits(m)}){since}"
        )
    if m.get("stopped"):
        lines.append(
            f"stopped     {int_text(m['stopped'])} records not recorded: the trace reached its limit "
            f"({_limits(m)}, --trace-full stop)"
        )
    return lines


def _crashes(m: meta.Metadata) -> list[str]:
    """A line per crash fault (the server's `crashes`); an entry not of its shape is skipped."""
    keys = ("at_ns", "files", "pages_lost", "pages_torn", "handles")
    lines = []
    for c in m["crashes"] if isinstance(m.get("crashes"), list) else []:
        if not (isinstance(c, dict) and all(type(c.get(k)) is int and 0 <= c[k] < meta.MAX_INT for k in keys)):
            continue
        lines.append(
            f"crash       the client crashed at {_wall(c['at_ns'])}: {int_text(c['files'])} files put back as "
            f"last made durable ({int_text(c['pages_lost'])} pages undone, {int_text(c['pages_torn'])} torn), "
            f"{int_text(c['handles'])} open files stale"
        )
    return lines


def _limits(m: meta.Metadata) -> str:
    """The trace's limits as they were given: --trace-max 300K --trace-max-age 7d."""
    said = []
    if size := m.get("trace_max"):
        k = max(i for i in range(5) if i == 0 or size >= 1024**i)
        said.append(f"--trace-max {size / 1024**k:.3g}{' KMGT'[k].strip()}")
    if age := m.get("trace_max_age_s"):
        unit, n = next((u, n) for u, n in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)) if age % n == 0)
        said.append(f"--trace-max-age {age // n}{unit}")
    return " ".join(said) or "its size or age"


def _hosts_table(s: Summary) -> str:
    """One line per host of a report over several traces."""
    head = ["host", "traces", "ops", "errors", "ops/s", "total", "%total", "span"]
    rows = [
        [
            h["host"] or "(no host)",
            int_text(h["traces"]),
            int_text(h["count"]),
            int_text(h["errors"]),
            num_text(h["ops_per_s"]),
            ns_text(h["total_ns"]),
            f"{100 * h['share']:.1f}",
            f"{h['span_ns'] / 1e9:.3f} s",
        ]
        for h in s["hosts"]
    ]
    return (
        f"per host\n{table(head, rows, 'l' + 'r' * 7)}\n(ops: the records kept on each host, ops/s over all "
        f"hosts' span, not the host's own, so that the hosts' rates add up to the fleet's; total: their "
        f"latencies added up, %total its share of all hosts'; span: from the "
        f"host's first operation to its last reply)"
    )


def _at(s: Summary, ns: int) -> str:
    """A trace time as seconds since the first record, and its time of day when known."""
    m = s["metadata"]
    seconds = f"{(ns - (s['origin_ns'] or 0)) / 1e9:+.3f} s"
    if "start_wall_ns" not in m or "start_monotonic_ns" not in m:
        return seconds
    return f"{seconds}, {_clock(meta.to_wall_ns(m, ns), 3)}"


def _coverage(s: Summary) -> list[str]:
    """The header's lines on how much of the span the operations account for."""
    c = s["coverage"]
    if c is None or not c["span_ns"]:
        return []
    lines = [
        f"in flight   {c['busy_ns'] / 1e9:.3f} s of the records' {c['span_ns'] / 1e9:.3f} s span "
        f"({pct_text(c['busy_share'])}) had an operation in flight; their latencies sum to "
        f"{c['summed_ns'] / 1e9:.3f} s"
    ]
    widened = c["busy_with_round_trip_ns"]  # set with round_trip_ns
    if s["kind"] == "syscalls":  # no server in the path: no round trip to add
        pass
    elif c["round_trip_ns"] is None or widened is None:
        why = "a trace from before format 3" if s["format_version"] < 3 else f"not in its {meta.NAME}"
        lines.append(f"round trip  FUSE's own, before and after each operation: not measured ({why})")
    else:
        lines.append(
            f"round trip  with FUSE's ({ns_text(c['round_trip_ns'])} each, measured at mount) added to each "
            f"operation: {widened / 1e9:.3f} s "
            f"({pct_text(c['busy_with_round_trip_share'])})"
        )
    cached = "" if s["kind"] == "syscalls" else " and what the kernel answered from its caches"
    lines.append(
        f"the rest    {pct_text(c['rest_share'])} of the span: the application's own time (CPU, other I/O, "
        f"waiting){cached}"
    )
    return lines


def _label(key: str, r: dict[str, Any]) -> str:
    """A --by group as the text table names it."""
    if key == "pid":
        return " ".join([str(r["pid"]), ",".join(r["comms"][:3]) + ("…" if len(r["comms"]) > 3 else "")]).rstrip()
    if key == "comm" and not r["comm"]:
        return "(unknown)"
    return _short(r[key])


def _ops_table(s: Summary) -> str:
    if not s["ops"]:
        return "no records match the filters" if s["filters"] else "no records"
    key = s["by"]
    head = ([key] if key else []) + [
        "op",
        "count",
        "errors",
        "ops/s",
        "MB/s",
        "mean",
        "p50",
        "p90",
        "p99",
        "p99.9",
        "max",
        "total",
        "%total",
        "errno",
    ]
    total = s["total_ns"] or 1
    rows, last = [], None
    for r in s["ops"]:
        row = [] if not key else [_label(key, r) if r[key] != last else ""]
        last = r[key] if key else None
        io = r["op"] in ("read", "write")
        row += [
            r["op"],
            int_text(r["count"]),
            int_text(r["errors"]),
            num_text(r["ops_per_s"]),
            num_text(r["bytes_per_s"] / 1e6) if io and r["bytes_per_s"] is not None else "-",
            *(ns_text(r[c]) for c in ("mean_ns", *QUANTILES, "max_ns", "total_ns")),
            f"{100 * r['total_ns'] / total:.1f}",
            ", ".join(f"{name} {int_text(n)}" for name, n in r["errnos"].items()),
        ]
        rows.append(row)
    left = 2 if key else 1
    text = table(head, rows, "l" * left + "r" * (len(head) - left - 1) + "l")
    note = (
        f"latency is dur_ns ({'system call entry to exit' if s['kind'] == 'syscalls' else 'admission to reply'}); "
        "total: the latencies added up, %total: its share of all rows' "
        "total, not of wall time (operations overlap: see 'in flight'); MB = 10^6 bytes; "
        + (
            f"ops/s and MB/s over each {key}'s own span (its first start to its last end), not the trace's; "
            if key
            else ""
        )
        + "sorted by total"
    )
    if key and s["top"] and s["groups"] > s["top"]:
        note += f"; top {s['top']} of {int_text(s['groups'])} {key}s (--top N shows more, --json has all)"
    return f"{text}\n({note})"


def _emulation(m: dict[str, Any], traces: list[dict[str, Any]]) -> list[str]:
    """The header's lines on an emulated trace: the profile, whether the host kept up
    with the model, whether the mount had FUSE's write-back cache, and what the run must
    be warned of (its metadata's `warnings`); over several traces, the hosts that did not
    keep up."""
    if "emulation" not in m:
        return []
    lines = [f"emulated    {m['emulation'].get('profile', '?')}"]
    host = m.get("host_load")
    if len(traces) > 1:
        bound = [t["host"] or t["directory"] for t in traces if t["host_bound"]]
        unknown = [t["host"] or t["directory"] for t in traces if t["profile"] and t["host_bound"] is None]
        lines[0] += (
            f"; HOST-BOUND on {', '.join(bound)}: there the host, not the model, set the pace"
            if bound
            else "; every host kept up with the model"
            if not unknown
            else ""
        )
        if unknown:
            lines[0] += f"; whether the host kept up is unknown on {', '.join(unknown)}"
    elif host is None:
        lines[0] += "; whether the host kept up is unknown (no final metadata)"
    else:
        verdict = (
            "HOST-BOUND: the host, not the model, set the pace"
            if host["host_bound"]
            else "the host kept up with the model"
        )
        lines[0] += f"; {verdict} ({load_words(host)})"
    if (m.get("options") or {}).get("writeback_cache"):
        lines.append(
            "write-back  FUSE's write-back cache: its writes are the kernel's write-back of many write(2) "
            "calls, reads of data written through the mount are not here, and gate kernel marks the "
            "kernel's own requests, which cost nothing"
        )
    lines += [f"warning     {w}" for w in m.get("warnings", [])]
    return lines


def _shaping(s: Summary) -> str:
    """Where the modelled time went, per op; "" when nothing was shaped."""
    rows = s["shaping"]
    if rows is None:
        if "emulation" not in s["metadata"]:
            return ""
        return (
            "where the modelled time went: not recorded (a format 1 trace, from before fusetrace "
            "recorded each operation's gate and wait / latency / transfer)"
        )
    if not rows:
        return ""
    head = ["op", "shaped", "modelled", "mean", "wait%", "latency%", "transfer%", "gates (operations)"]
    body = []
    for r in rows:
        total = r["modelled_ns"] or 1
        body.append(
            [
                r["op"],
                int_text(r["count"]),
                ns_text(r["modelled_ns"]),
                ns_text(r["modelled_ns"] / r["count"]),
                *(f"{100 * r[k] / total:.1f}" for k in ("wait_ns", "latency_ns", "transfer_ns")),
                ", ".join(f"{gate} {int_text(n)}" for gate, n in r["gates"].items()),
            ]
        )
    text = table(head, body, "l" + "r" * 6 + "l")
    spent = "; where the credits ran out (above), the spent credits held those at throughput, dirty and writeback"
    return (
        f"where the modelled time went\n{text}\n(modelled = wait + latency + transfer, the model's time for "
        f"the operation; gates: what set it, with how many operations each"
        f"{spent if s['credits'] and s['credits']['stretches'] else ''})"
    )


def _histograms(hists: dict[str, list[dict[str, Any]]]) -> str:
    blocks = []
    for op, buckets in hists.items():
        total = sum(b["count"] for b in buckets)
        peak = max(b["count"] for b in buckets)
        lines = [f"{op}  ({int_text(total)} ops)"]
        for b in buckets:
            low = "0" if b["bucket"] == 0 else ns_text(b["low_ns"])
            lines.append(
                f"  {low:>7} - {ns_text(b['high_ns']):<7} {_bar(b['count'] / peak):<40} "
                f"{int_text(b['count']):>11} {100 * b['count'] / total:5.1f}%"
            )
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _timeline(t: Timeline) -> str:
    buckets = t["buckets"]
    wall = buckets[0]["wall_ns"] is not None
    peak = max(b["ops_per_s"] for b in buckets) or 1
    head = ["t (s)", *(["time"] if wall else []), "ops", "ops/s", "", "read MB/s", "write MB/s", "errors"]
    digits = max(0, -math.floor(math.log10(t["width_ns"] / 1e9)))
    rows = [
        [
            f"{b['t_s']:.{digits}f}",
            *([_clock(w, digits)] if (w := b["wall_ns"]) is not None else []),
            int_text(b["ops"]),
            _rate(b["ops_per_s"]),
            _bar(b["ops_per_s"] / peak, 20),
            _rate(b["read_mb_per_s"]),
            _rate(b["write_mb_per_s"]),
            int_text(b["errors"]),
        ]
        for b in buckets
    ]
    text = table(head, rows, "r" * (len(head) - 4) + "lrrr")
    note = (
        f"operations that started in each {bucket_width(t['width_ns'])}, and the bytes they read and wrote, per "
        f"second; t: seconds since the trace's first record; MB = 10^6 bytes"
    )
    if t.get("plot"):
        note += f"; drawn into {t['plot']}"
    return f"timeline\n{text}\n({note})"


def _bar(fraction: float, width: int = 40) -> str:
    eighths = round(fraction * width * 8)
    return "█" * (eighths // 8) + ("", "▏", "▎", "▍", "▌", "▋", "▊", "▉")[eighths % 8]


def _rate(x: float) -> str:
    return num_text(x) if x else "0"


def bucket_width(ns: int) -> str:
    """A timeline bucket's width: 0.02 s, 1 s, 300 s."""
    return f"{ns / 1e9:g} s"


def _short(value: object, width: int = 48) -> str:
    text = str(value)
    return text if len(text) <= width else "…" + text[-(width - 1) :]


def _wall(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9).astimezone().isoformat(sep=" ", timespec="milliseconds")


def _clock(ns: int, digits: int) -> str:
    """Local time of day, to `digits` decimals of a second (at most 3)."""
    text = datetime.fromtimestamp(ns / 1e9).astimezone().strftime("%H:%M:%S.%f")
    return text[: 9 + min(digits, 3)] if digits else text[:8]
