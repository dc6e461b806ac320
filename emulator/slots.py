"""Serialisation points on the server: k slots per file (or directory), each with
the time it is next free.  An operation takes the slot that frees first and
holds it for a given time; with every slot busy it waits.
"""

from .ops import Gate

_SWEEP_AT = 4096  # tidy idle entries away once this many keys are kept


class SlotPools:
    __slots__ = ("_free", "_sweep_at", "label", "slots")

    def __init__(self, slots: int, label: Gate):
        self.slots = slots
        self.label = label  # names the pools in what the model reports as holding an operation
        self._free: dict[int, list[float]] = {}
        self._sweep_at = _SWEEP_AT

    def take(self, key: int, at: float, hold: float) -> float:
        """The time a slot of `key` is free for an operation ready at `at`;
        the slot is then busy for `hold` seconds."""
        free = self._free.get(key)
        if free is None:
            if len(self._free) >= self._sweep_at:
                self._sweep(at)
            self._free[key] = free = [at] * self.slots
        first = min(free)
        i = free.index(first)
        start = first if first > at else at
        free[i] = start + hold
        return start

    def busy(self, key: int, now: float) -> bool:
        """Whether every slot of `key` is still taken at `now`."""
        free = self._free.get(key)
        return free is not None and min(free) > now

    def resize(self, slots: int, now: float) -> None:
        """Change to `slots` (at least 1) per key: removed slots are the ones free
        soonest, added ones are free from `now`."""
        grown = slots - self.slots
        for key, free in self._free.items():
            free.sort()
            self._free[key] = free[-slots:] if grown < 0 else free + [now] * grown
        self.slots = slots

    def _sweep(self, now: float) -> None:
        self._free = {k: f for k, f in self._free.items() if max(f) > now}
        self._sweep_at = max(_SWEEP_AT, 2 * len(self._free))


class OneSlot:
    """SlotPools with one slot a key, kept as one float a key: a file's stripes, taken by
    every write (docs/BENCHMARKS.md: a tenth of a simulated week's time went to the list
    SlotPools keeps a key)."""

    __slots__ = ("_free", "_sweep_at", "label")

    def __init__(self, label: Gate):
        self.label = label
        self._free: dict[int, float] = {}
        self._sweep_at = _SWEEP_AT

    def take(self, key: int, at: float, hold: float) -> float:
        """As SlotPools.take."""
        start = self._free.get(key)
        if start is None:
            if len(self._free) >= self._sweep_at:
                self._sweep(at)
            start = at
        elif start < at:
            start = at
        self._free[key] = start + hold
        return start

    def _sweep(self, now: float) -> None:
        self._free = {k: t for k, t in self._free.items() if t > now}
        self._sweep_at = max(_SWEEP_AT, 2 * len(self._free))
