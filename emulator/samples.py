"""What TraceSim samples of the model as it goes (a Sample every so often), and the samples
merged into fewer (a one-pass simulation's length is not known beforehand, nor its rows)."""

import math
from dataclasses import dataclass


@dataclass
class Sample:
    """The model at `t` (s since the origin), and the operations admitted since the
    sample before (extrapolated: their share of a repetition's)."""

    t: float
    balance: float  # BurstCreditBalance, bytes
    permitted: float  # PermittedThroughput, bytes/s
    metered: float  # MeteredIOBytes since the origin
    ops: float
    waited: float  # their waits for limits, slots and queues, summed (s)
    max_wait: float  # the longest of them (s)
    simulated: bool  # op by op; False: extrapolated


def coarsened(samples: list[Sample], every: float) -> list[Sample]:
    """The samples merged into one every `every` seconds (and the last): each says the
    model at its end, and sums up the operations since the one before."""
    kept = [samples[0]]
    for x in samples[1:]:
        last = kept[-1]
        if len(kept) > 1 and math.ceil(last.t / every - 1e-9) == math.ceil(x.t / every - 1e-9):
            kept[-1] = Sample(
                x.t,
                x.balance,
                x.permitted,
                x.metered,
                last.ops + x.ops,
                last.waited + x.waited,
                max(last.max_wait, x.max_wait),
                last.simulated and x.simulated,
            )
        else:
            kept.append(x)
    return kept
