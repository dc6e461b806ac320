"""Whether the host, not the model, set an emulated run's pace: a pure verdict over two
readings of the shaper's, the kernel queue's and the loop's counters (`Emulation.host()`),
shared by the server's stats, the trace report and the scenario tables, and put in words
by `load_words`; and the flag of a run the FUSE kernel slowed in a way the model cannot
charge (`extending_writes_note`)."""

from collections.abc import Mapping
from typing import Any, TypedDict

HOST_BOUND_SHARE = 0.10  # replies late by more than this share of the modelled time: host-bound
LOOP_BOUND_SHARE = 0.75  # a loop busier than this admits requests late (where the queue is not measured)
# the model had an operation in hand for less than this share of the time: the callers'
# process starts and their work between system calls set most of the pace
PACED_SHARE = 0.5

NO_LOAD = {"late_ns": 0, "modelled_ns": 0, "loop_elapsed_ns": 0, "loop_idle_ns": 0}


class HostLoad(TypedDict):
    """host_load()'s verdict; kept whole in trace metadata and scenario results."""

    added_share: float
    queued_share: float | None
    loop_busy: float
    model_busy: float | None
    host_bound: bool
    host_paced: bool
    extending_writes: int


def host_load(before: Mapping[str, Any], after: Mapping[str, Any]) -> HostLoad:
    """Between two readings of the host counters: `added_share`, the time replies went out
    past their deadlines and requests waited unread in the kernel while the model had
    room for them (`queued_ns`, where measured: shaping/kernelqueue.py), as a share of
    the modelled time (0.25: the host made it a quarter slower), and `queued_share`, the
    second part alone (None: not measured); `loop_busy`, the share of the time the loop's
    thread ran; `host_bound`: the host, not the model, set the pace (over a tenth added;
    where the kernel's queue is not measured, also a loop too busy to admit requests when
    they came); `extending_writes`, the O_DIRECT writes the FUSE kernel ran one at a time
    because they extended their file (Shaper.extending_writes: a bound the model cannot
    charge, so a run with any is flagged); `model_busy`, the share of the time the model had
    an operation in hand (None: not counted), and `host_paced`, under PACED_SHARE of it:
    the mount mostly waited for its callers (process starts, a shell loop), so the host's
    pace outside the mount, not the model, set the run's."""
    modelled = after["modelled_ns"] - before["modelled_ns"]
    measured = "queued_ns" in after
    queued = after["queued_ns"] - before.get("queued_ns", 0) if measured else 0
    late = after["late_ns"] - before["late_ns"]
    added = (late + queued) / modelled if modelled > 0 else 0.0
    elapsed = after["loop_elapsed_ns"] - before["loop_elapsed_ns"]
    busy = 1 - (after["loop_idle_ns"] - before["loop_idle_ns"]) / elapsed if elapsed > 0 else 0.0
    counted = "busy_ns" in after and elapsed > 0
    model_busy = min(1.0, (after["busy_ns"] - before.get("busy_ns", 0)) / elapsed) if counted else None
    return {
        "added_share": added,
        "queued_share": (queued / modelled if modelled > 0 else 0.0) if measured else None,
        "loop_busy": busy,
        "model_busy": model_busy,
        "host_paced": model_busy is not None and modelled > 0 and model_busy < PACED_SHARE,
        "host_bound": added > HOST_BOUND_SHARE or (not measured and busy > LOOP_BOUND_SHARE),
        "extending_writes": after.get("extending_writes", 0) - before.get("extending_writes", 0),
    }


def load_words(load: Mapping[str, Any]) -> str:
    """A host_load() in words: what the host added to the modelled time, in its two parts
    (replies late; requests unread in the kernel while the model had room for them), and
    how busy the loop was."""
    queued = load.get("queued_share")
    late = load["added_share"] - (queued or 0.0)
    unread = (
        f"unread in the kernel {100 * queued:.1f} %"
        if queued is not None
        else f"kernel queue not measured: a loop busy over {100 * LOOP_BOUND_SHARE:.0f} % counts"
    )
    return (
        f"the host added {100 * load['added_share']:.1f} % to the modelled time (replies late "
        f"{100 * late:.1f} %, {unread}), loop busy {100 * load['loop_busy']:.0f} %"
    )


def paced_words(load: Mapping[str, Any]) -> str:
    """The host-paced flag in words, "" when the model had the mount busy enough."""
    if not load.get("host_paced"):
        return ""
    return (
        f"host-paced: the model had an operation in hand only {100 * load['model_busy']:.0f} % of the "
        f"time; the callers' process starts and work between system calls on this host set the rest"
    )


def extending_writes_note(load: Mapping[str, Any]) -> str:
    """The flag, with its remedy, of a run (a host_load() or a reading) in which the FUSE
    kernel serialised O_DIRECT writes that extended their file; "" when it did not."""
    count = load.get("extending_writes", 0)
    if not count:
        return ""
    return (
        f"kernel-serialised extending writes: {count:,} (FUSE runs O_DIRECT writes past the end of a "
        f"file one at a time; an NFS client keeps them in flight. Lay the file out first: "
        f"fio --fallocate=truncate, or truncate -s SIZE FILE)"
    )
