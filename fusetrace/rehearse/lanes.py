"""Concurrent operations of one process, put on lanes that never overlap.

A trace names the process of each operation, not its thread; a process's operations
that overlap in time must have come from different threads (or from asynchronous I/O).
`Lanes` gives each operation, in start order, the lowest-numbered lane of its process
that is free by then, so each lane is a sequence a single thread could have made:
Perfetto draws them as tracks that nest properly, and replay runs one worker per lane.
"""

from collections.abc import Hashable


class Lanes:
    def __init__(self) -> None:
        self._ends: dict[Hashable, list[int]] = {}  # per key: when each lane's last operation ended

    def place(self, key: Hashable, start: int, end: int) -> int:
        """The lane (0, 1, ...) of key's operation over [start, end); operations must
        come in start order."""
        ends = self._ends.setdefault(key, [])
        for lane, busy_until in enumerate(ends):
            if busy_until <= start:
                ends[lane] = end
                return lane
        ends.append(end)
        return len(ends) - 1

    def count(self, key: Hashable) -> int:
        """How many lanes key has needed so far."""
        return len(self._ends.get(key, ()))
