"""Whether the host, not the model, set an emulated run's pace: a pure verdict over two
readings of the shaper's and the loop's counters (`Emulation.host()`), shared by the
server's stats and the scenario tables."""

HOST_BOUND_SHARE = 0.10  # replies late by more than this share of the modelled time: host-bound
LOOP_BOUND_SHARE = 0.75  # a loop busy more than this share of the time admits requests late

NO_LOAD = {"late_ns": 0, "modelled_ns": 0, "loop_elapsed_ns": 0, "loop_idle_ns": 0}


def host_load(before: dict, after: dict) -> dict:
    """Between two readings of the host counters: `added_share`, the time replies went out
    past their deadlines as a share of the modelled time (0.25: the host made it a quarter
    slower); `loop_busy`, the share of the time the loop was busy; `host_bound`: the host,
    not the model, set the pace (replies over a tenth later than modelled, or a loop too
    busy to admit requests when they came)."""
    modelled = after["modelled_ns"] - before["modelled_ns"]
    added = (after["late_ns"] - before["late_ns"]) / modelled if modelled > 0 else 0.0
    elapsed = after["loop_elapsed_ns"] - before["loop_elapsed_ns"]
    busy = 1 - (after["loop_idle_ns"] - before["loop_idle_ns"]) / elapsed if elapsed > 0 else 0.0
    return {"added_share": added, "loop_busy": busy,
            "host_bound": added > HOST_BOUND_SHARE or busy > LOOP_BOUND_SHARE}
