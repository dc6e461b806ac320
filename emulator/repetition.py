"""One repetition of a workload simulated op by op (tracesim.py), as the fast-forward
compares it with the ones before: the model at its boundaries, its work, its waits and
what it carried past its end."""

import math
from dataclasses import dataclass
from itertools import pairwise

SAME_WORK = 0.05  # repetitions alike: their metered bytes (and closed-loop lengths) within this share
GROWING = 0.01  # a queue growing by more than this share of the span a repetition is saturated


@dataclass
class Rep:
    """One repetition simulated op by op: the model at its boundaries, and its work."""

    balance: float
    client_balance: float
    metered: float
    length: float = 0.0  # how long it took (s)
    ops: int = 0
    waited: float = 0.0
    max_wait: float = 0.0
    longest: float = 0.0  # the longest any of its operations took (s): a queue shorter is none
    last_done: float = -math.inf  # when its last operation completes
    end_balance: float = 0.0
    end_client_balance: float = 0.0
    end_metered: float = 0.0
    end_permitted: float = 0.0
    dirty: float = 0.0  # buffered data not yet written back at its end
    carried: float = 0.0  # how long its work runs on past its end (s)
    sent: int = 0  # operations the client did not answer alone
    low: float = 0.0  # the balance was never below this in it

    @property
    def delta(self) -> float:
        return self.end_balance - self.balance

    @property
    def work(self) -> float:
        return self.end_metered - self.metered


def alike(reps: list[Rep]) -> bool:
    """The repetitions did the same work, and the client's network credits did not move."""
    works = [x.work for x in reps]
    if max(works) - min(works) > SAME_WORK * max(max(works), 1.0):
        return False
    return all(abs(x.end_client_balance - x.client_balance) <= 1.0 for x in reps)


def queue(rep: Rep) -> float:
    """The queue at a repetition's end (s): the longer of its work carried past the end and
    its buffered data still to be written back, at the rate permitted."""
    return max(rep.carried, rep.dirty / rep.end_permitted if rep.end_permitted else 0.0)


def queue_growth(reps: list[Rep], span: float) -> float | None:
    """How much the queue grows a repetition (s), when it grows steadily, and the
    operations' mean wait with it, or not at all; else None."""
    for series in ([queue(x) for x in reps], [x.waited / max(x.ops, 1) for x in reps]):
        steps = [b - a for a, b in pairwise(series)]
        average = mean(steps)
        if any(abs(g - average) > 0.1 * abs(average) + GROWING * span / 10 for g in steps):
            return None
    return max(mean([queue(b) - queue(a) for a, b in pairwise(reps)]), 0.0)


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)
