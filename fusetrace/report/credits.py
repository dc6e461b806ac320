"""The report on burst credits: when an emulated file system's credits ran out, for how long
its baseline held the workload, and what that cost the operations.

The emulation writes when the credit balance was at zero into the trace's metadata
(`credits_at_zero`: the model's own record, shaping/emulation.py), so the report says it
exactly rather than inferring it from the operations' waits.  Writes held at gate `dirty`
or `writeback` while the credits were spent waited behind the throughput pipe running at
the baseline: the gate is where they queued, the credits are why, and this says so.
"""

from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..texttable import duration_text, int_text, pct_text
from ..trace import metadata as meta

if TYPE_CHECKING:
    from .query import Trace

# the gates that queue behind the file system's throughput: the pipe itself, a buffered write
# waiting for the client's dirty data to drain into it, a flush or stat waiting for its file's
WAITING_GATES = ("throughput", "dirty", "writeback")


def credits(trace: "Trace") -> dict[str, Any] | None:
    """When the credits were spent in the span of the records the filters keep: the
    stretches (`from_ns`, `to_ns`, None: still at the trace's end), the first one's start
    (`ran_out_ns`, and `ran_out_s` after the trace's first record), the baseline, the
    time at the baseline in all (`held_ns`), the last one's end (`until_ns`, None: the end
    of the records), and the operations that waited behind it (`waiting`: `ops`,
    `wait_ns`, its `share` of the summed operation time, and per gate).  None when the
    trace has no such record (not emulated, a fleet's, or written before it)."""
    m = trace.metadata
    raw = m.get("credits_at_zero")
    if "emulation" not in m or not isinstance(raw, list) or not trace.matched:
        return None
    end = trace.last_ns
    stretches = [
        {"from_ns": s["from_ns"], "to_ns": s["to_ns"], "baseline_bytes_per_s": s["baseline_bytes_per_s"]}
        for s in raw
        if s["from_ns"] < end and (s["to_ns"] is None or s["to_ns"] > trace.first_ns)
    ]
    out: dict[str, Any] = {"stretches": stretches}
    if not stretches:
        return out
    ends = [end if s["to_ns"] is None else min(s["to_ns"], end) for s in stretches]
    last = stretches[-1]["to_ns"]
    wait = _waiting(trace, [s["from_ns"] for s in stretches], ends)
    out.update(
        ran_out_ns=stretches[0]["from_ns"],
        ran_out_s=(stretches[0]["from_ns"] - trace.origin_ns) / 1e9,
        baseline_bytes_per_s=stretches[-1]["baseline_bytes_per_s"],
        held_ns=sum(b - max(s["from_ns"], trace.first_ns) for s, b in zip(stretches, ends)),
        until_ns=None if last is None or last >= end else last,
        waiting=wait,
    )
    return out


def _waiting(trace: "Trace", starts: list[int], ends: list[int]) -> dict[str, Any]:
    """The records held at WAITING_GATES that were in flight while the credits were spent."""
    if "gate" not in trace.columns:
        return {"ops": 0, "wait_ns": 0, "share": 0.0, "gates": {}}
    rows = trace.rows(
        """
        with spent as (select unnest($starts) as a, unnest($ends) as b)
        select gate, count(*), sum(wait_ns) from trace
        where gate in (select unnest($gates)) and wait_ns > 0
          and exists (select 1 from spent where start_ns < b and start_ns + dur_ns > a)
        group by gate order by count(*) desc, gate""",
        {"starts": starts, "ends": ends, "gates": list(WAITING_GATES)},
    )
    waited = sum(int(w) for _, _, w in rows)
    return {
        "ops": sum(n for _, n, _ in rows),
        "wait_ns": waited,
        "share": waited / trace.total_ns if trace.total_ns else 0.0,
        "gates": {gate: n for gate, n, _ in rows},
    }


def credit_words(c: dict[str, Any] | None, m: dict[str, Any]) -> list[str]:
    """The report's line on the credits (`c`: credits()), none when they did not run out;
    `m` the trace's metadata (its clock)."""
    if not c or not c["stretches"]:
        return []
    n = len(c["stretches"])
    rate = c["baseline_bytes_per_s"] / 2**20
    first = f"ran out {n} times, first at" if n > 1 else "ran out at"
    until = "until the end" if c["until_ns"] is None else f"until {_clock(m, c['until_ns'])}"
    w = c["waiting"]
    line = (
        f"Burst credits {first} {_clock(m, c['ran_out_ns'])} ({_since(c['ran_out_s'])}); the baseline "
        f"({rate:.1f} MiB/s) held the workload for {duration_text(c['held_ns'] / 1e9)}"
        f"{' in all' if n > 1 else ''}, {until}"
    )
    if w["ops"]:
        gates = ", ".join(f"{gate} {int_text(k)}" for gate, k in w["gates"].items())
        line += (
            f"; operations waiting behind it: {int_text(w['ops'])}, waited {duration_text(w['wait_ns'] / 1e9)} in "
            f"all ({pct_text(w['share'])} of the summed operation time); they queued at gates {gates}, but "
            f"the spent credits are the cause"
        )
    return [f"credits     {line}"]


def _since(s: float) -> str:
    return f"{duration_text(s)} in" if s >= 0 else "before the first record"


def _clock(m: dict[str, Any], ns: int) -> str:
    """A trace time as the time of day, where the trace maps its clock to the wall's."""
    if not isinstance(m.get("start_wall_ns"), int) or not isinstance(m.get("start_monotonic_ns"), int):
        return f"{ns / 1e9:.3f} s on the trace's clock"
    return datetime.fromtimestamp(meta.to_wall_ns(m, ns) / 1e9).astimezone().strftime("%H:%M:%S")
