"""What a filtered or sampled trace leaves out, from its _metadata.json, as the readers say it.

A mount given `--trace-only` or `--trace-sample` (fusetrace/trace/capture.py) counts the
records it left out per operation (`left_out`) and keeps its settings in `options`.  The
report and the rehearsal commands say so in one line (`described`); those whose result
would be wrong without every operation refuse such a trace (`refuse_partial`, exit 2)
unless told to go on (`--partial`).  Imports no pyarrow.
"""

from typing import Any

from ..errors import BadValue
from ..texttable import int_text, printable
from .metadata import Metadata


class PartialTrace(BadValue):
    """A command whose result needs every operation, given a trace that left some out."""


def left_out(m: Metadata) -> dict[str, dict[str, int]]:
    """{"filtered": {op: n}, "sampled": {op: n}} of one trace's metadata ({} of each when
    it left nothing out, or is from before format 7)."""
    raw = m.get("left_out")
    raw = raw if isinstance(raw, dict) else {}
    return {
        why: {op: n for op, n in counts.items() if isinstance(n, int) and n > 0}
        if isinstance(counts := raw.get(why), dict)
        else {}
        for why in ("filtered", "sampled")
    }


def settings(m: Metadata) -> tuple[dict[str, Any], dict[str, Any]]:
    """(--trace-only as {key: values}, --trace-sample as {op: N}) of the trace's options."""
    options = m.get("options")
    options = options if isinstance(options, dict) else {}
    only, sample = options.get("trace_only"), options.get("trace_sample")
    return (only if isinstance(only, dict) else {}), (sample if isinstance(sample, dict) else {})


def is_filtered(m: Metadata) -> bool:
    """The mount recorded only what --trace-only named (whether or not it met anything else)."""
    return bool(settings(m)[0] or left_out(m)["filtered"])


def is_sampled(m: Metadata) -> bool:
    return bool(settings(m)[1] or left_out(m)["sampled"])


def described(m: Metadata) -> str | None:
    """One line on what the trace did not record, or None when it recorded every operation."""
    only, sample = settings(m)
    counts = left_out(m)
    said = []
    if only or counts["filtered"]:
        given = " ".join(f"{k}={','.join(map(str, v))}" for k, v in only.items()) if only else "?"
        said.append(f"{_counted(counts['filtered'])} filtered out (--trace-only {given})")
    if sample or counts["sampled"]:
        given = " ".join(f"{op}={n}" for op, n in sample.items()) if sample else "?"
        said.append(f"{_counted(counts['sampled'])} sampled out (--trace-sample {given}, 1 in N kept at random)")
    return "; ".join(said) or None


def _counted(ops: dict[str, int]) -> str:
    total = sum(ops.values())
    most = sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ", ".join(f"{op} {int_text(n)}" for op, n in most[:5]) + (", ..." if len(most) > 5 else "")
    return f"{int_text(total)} operation{'' if total == 1 else 's'}" + (f" ({shown})" if shown else "")


def refuse_partial(directory: str, m: Metadata, command: str, why: str) -> None:
    """PartialTrace (one line, exit 2) naming the trace, what it left out and why `command`
    needs it, when the trace is filtered or sampled."""
    line = described(m)
    if line is not None:
        raise PartialTrace(
            f"{command}: {printable(directory)}: a partial trace ({line}): {why}; give --partial to go on anyway"
        )
