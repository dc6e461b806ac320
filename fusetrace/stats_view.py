"""`fusetrace stats` for a terminal: the CloudWatch-named figures with units, what held
the operations, how the host keeps up, and what the run must be warned of."""

import time

from .hostload import load_words
from .texttable import duration_text, ns_text, printable, table

_BYTES = (
    "BurstCreditBalance",
    "MeteredIOBytes",
    "TotalIOBytes",
    "DataReadIOBytes",
    "DataWriteIOBytes",
    "MetadataIOBytes",
    "StorageBytes",
)
_RATES = ("PermittedThroughput",)


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.1f} {unit}" if unit != "B" else f"{n:,.0f} B"
        n /= 1024
    return f"{n:,.1f} TiB"


def _value(name: str, value) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return str(value)
    if name in _BYTES:
        return _human_bytes(value)
    if name in _RATES:
        return _human_bytes(value) + "/s"
    if name == "PercentIOLimit":
        return f"{value:.1f} %"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.3f}"


def _descriptors_line(fds: dict) -> str:
    """The descriptor limit and how it is spent: the inode table, open files and
    directories by user (each held to a share), the reserve for the server's own."""
    users = ", ".join(f"uid {uid} {n:,}" for uid, n in fds["open_by_user"].items()) or "none"
    in_use = "?" if fds.get("in_use") is None else f"{fds['in_use']:,}"
    line = (
        f"descriptors: {in_use} in use of a limit of {fds['limit']:,}; inode table {fds['inode_table']:,} "
        f"(at most {fds['table_most']:,} unless pinned by open files), open files and directories "
        f"{fds['open']:,} of {fds['open_most']:,} ({users}; at most {fds['share']:,} a user), "
        f"{fds['reserve']:,} reserved for the trace, the control socket and calls in flight"
    )
    if fds.get("refused"):
        line += f"; {fds['refused']:,} opens refused (EMFILE: a user at their share, or the budget spent)"
    if fds.get("flush_spares_used"):
        line += f"; {fds['flush_spares_used']:,} closes found no descriptor free (served by a kept one, or fsync)"
    return line


def _inline_line(inline: dict) -> str:
    if not inline["threshold_us"]:
        return "system calls: all in worker threads"
    return (
        f"system calls on the loop (under {inline['threshold_us']:g} us): "
        f"{', '.join(inline['loop']) or '-'}; in worker threads: {', '.join(inline['workers']) or '-'}"
    )


def _reads_line(reads: dict | None) -> str:
    if reads is None:
        return "requests read: each after a wait in trio (the server's /dev/fuse descriptor was not found)"
    return f"requests read: {reads['at_once']:,} found queued (read at once), {reads['in_trio']:,} waited for in trio"


def render(stats: dict) -> str:
    lines = []
    if "profile" in stats:
        lines.append(f"emulating {stats['profile']}")
    metrics = stats.get("metrics", {})
    credits = stats.get("credits")  # servers from before it had none
    if metrics:
        width = max(len(k) for k in metrics)
        for k, v in metrics.items():
            line = f"  {k:<{width}}  {_value(k, v)}"
            if k == "PermittedThroughput" and credits:
                line += f" (lowest in the last minute: {_value(k, credits['lowest_permitted_minute'])})"
            lines.append(line)
    if credits and credits["last_ran_out"]:
        lines.append(_ran_out_line(credits["last_ran_out"]))
    host = stats.get("host")
    if host:
        verdict = (
            "HOST-BOUND: the host, not the model, is setting the pace"
            if host.get("host_bound")
            else "keeping up with the model"
        )
        lines.append(
            f"host: {verdict} since mounting ({load_words(host)}; {host['late']:,} of {host['ops']:,} replies late)"
        )
    lines += [f"warning: {w}" for w in stats.get("warnings", [])]
    if stats.get("shared"):
        lines.append(_shared_line(stats["shared"]))
    if stats.get("gates"):
        lines.append(_gates_table(stats["gates"]))
    fds = stats.get("inode_fds", {})
    lines.append(
        f"inodes known: {stats['inodes']:,} ({fds.get('held', 0):,} held open, at most "
        f"{fds.get('most', 0):,}; {fds.get('reopened', 0):,} reopened), open files: "
        f"{stats['open_files']:,}"
    )
    if "descriptors" in stats:  # servers from before it had none
        lines.append(_descriptors_line(stats["descriptors"]))
    if stats.get("resized_beside"):
        lines.append(
            f"warning: opens of files resized beside the mount, whose size the kernel keeps as it was "
            f"(write-back cache; --no-writeback-cache if the source changes beside it): "
            f"{stats['resized_beside']:,}"
        )
    if stats.get("rmdirs_nfs_refuses"):
        lines.append(
            f"warning: directories removed that NFS would not remove (ENOTEMPTY: each held a file "
            f"unlinked while open, which NFS keeps as .nfsXXXX until its last close, and this mount "
            f"cannot show): {stats['rmdirs_nfs_refuses']:,}"
        )
    if stats.get("killed_released"):
        lines.append(f"held requests let go with EINTR, their callers being killed: {stats['killed_released']:,}")
    held = stats.get("held_long")
    if held:
        lines.append(f"waiting in the server: {'; '.join(held_words(h) for h in held)}")
    lines.append(_inline_line(stats["inline"]))
    if "fuse_reads" in stats:  # servers from before it had none
        lines.append(_reads_line(stats["fuse_reads"]))
    trace = stats.get("trace")
    if trace:
        lines.append(_trace_line(trace))
    if stats.get("operations"):  # a mount serving metrics (docs/METRICS.md)
        lines.append(_operations_table(stats["operations"]))
    faults = stats.get("faults")
    if faults and (faults["rules"] or faults["fired"]):
        rules = ", ".join(f"{r['id']} (fired {r['fired']:,} of {r['matched']:,} matched)" for r in faults["rules"])
        lines.append(
            f"faults: {faults['fired']:,} fired since mounting; in force: {rules or 'none'} "
            f"(fusetrace fault MOUNTPOINT list)"
        )
    return "\n".join(lines)


def _ran_out_line(last: dict) -> str:
    """When the burst credits last ran out, and how long the baseline held the workload."""
    held = f"held the workload for {duration_text(last['held_s'])}"
    until = "and still does" if last["ended_ago_s"] is None else f"until {duration_text(last['ended_ago_s'])} ago"
    return (
        f"credits: burst credits last ran out {duration_text(last['ago_s'])} ago; the baseline "
        f"({_human_bytes(last['baseline_bytes_per_s'])}/s) {held}, {until}"
    )


def held_words(held: dict) -> str:
    """One request the server holds long (Holds.held_long, server/holds.py) in words: who waits, in
    what, for how long and on what."""
    return (
        f"{printable(held['name'])} (pid {held['pid']}) in {held['op']} of {held['path']!r} for "
        f"{held['for_s']} s, held by {held['why']}, {held['left_s']} s left"
    )


def _shared_line(shared: dict) -> str:
    """Whose file system this is and whether Redis answers: a mount on its own copy says so."""
    state = (
        "Redis answers"
        if shared["state"] == "ok"
        else f"Redis at {shared['url']} DOES NOT ANSWER: serving on this mount's own copy of the state since "
        f"{time.strftime('%H:%M:%S', time.localtime(shared['since']))}, reports kept until it does"
        if shared["state"] == "unreachable"
        else "starting"
    )
    clients = (
        f"{shared['clients']} client(s) live"
        if shared["state"] == "ok"
        else f"{shared['clients']} client(s) live when Redis last answered"
    )
    refused = shared.get("refused_sets")
    return (
        f"shared: file system {shared['fs_id']} at {shared['url']}, {clients}; "
        f"{state}; {shared['exchanges']:,} exchanges, {shared['failed']:,} failed, "
        f"{len(shared['outages'])} outage(s)"
    ) + (
        f"\nwarning: another client's set this mount's own --set refused, so the clients differ: {'; '.join(refused)}"
        if refused
        else ""
    )


def _gates_table(gates: dict) -> str:
    """Per gate, the operations it held since mounting and their modelled time: in all
    (s) and per operation (ms), split into wait, latency and transfer."""
    head = ["gate", "ops"]
    for part in ("wait", "latency", "transfer"):
        head += [f"{part} s", "mean ms"]
    rows = []
    for gate, g in gates.items():
        row = [gate, f"{g['ops']:,}"]
        for part in ("wait_ns", "latency_ns", "transfer_ns"):
            row += [f"{g[part] / 1e9:,.3f}", f"{g[part] / g['ops'] / 1e6:,.3f}"]
        rows.append(row)
    return "what set each operation's modelled time, since mounting:\n" + table(head, rows, "l" + "r" * 7)


def _operations_table(operations: dict) -> str:
    """Per operation since mounting: requests, errors by errno, bytes, mean time and the
    histogram buckets its median and 99th percentile fall in."""

    def bound(s: float | None) -> str:
        return "> 60s" if s is None else f"<= {ns_text(s * 1e9)}"

    rows = [
        [
            op,
            f"{f['count']:,}",
            ", ".join(f"{name} {n:,}" for name, n in f["errors"].items()) or "-",
            _human_bytes(f["bytes"]) if f["bytes"] else "-",
            ns_text(f["mean_s"] * 1e9),
            bound(f["p50_le_s"]),
            bound(f["p99_le_s"]),
        ]
        for op, f in operations.items()
    ]
    head = ["op", "requests", "errors", "bytes", "mean", "p50", "p99"]
    return "requests since mounting (the metrics' counts):\n" + table(head, rows, "lrlrrrr")


def _trace_line(trace: dict) -> str:
    queued = f"{trace.get('queued', 0):,} queued"
    if trace.get("max_pending_bytes"):
        queued += f" ({_human_bytes(trace.get('queued_bytes', 0))} of {_human_bytes(trace['max_pending_bytes'])})"
    line = (
        f"trace: {trace['records']:,} records written, {queued}, "
        f"{trace['dropped']:,} dropped (queue full, or a bad field), {trace.get('lost', 0):,} lost in "
        f"{trace.get('write_errors', 0):,} failed writes"
    )
    if trace.get("deferred"):
        line += f"; {trace['deferred']:,} writes put off for want of a descriptor (records kept)"
    if trace.get("last_error"):
        line += f"; last error: {trace['last_error']}"
    return line
