"""A pass of a recorded workload in closed loop: each thread's (or process's) operations
wait for the ones it had seen complete, as the application did.

The recording says which operations of a chain (one thread, or one process where the
trace names no threads) had completed when another was made: those that ended before it
started.  Each of those completing `x` later in the simulation than it did in the
recording delays it by `x` (the largest such delay so far is the chain's `slip`), and the
time the application spent between them (its think time: the recording's gap from the
earlier's end to the later's start) is kept.  So an operation is made at its recorded
time shifted by its chain's slip, never before: on a file system as fast as the
recording's every operation is made when it was, and on a slower one the chain, and the
job, stretch.  Operations that overlapped in the recording (threads of one process, a
process's asynchronous requests) do not wait for one another.

`Chains` takes a pass's operations in recorded order and makes them in the order they
are made, each once the operations it waits for have been admitted.  Pure and
clock-free, like the model.
"""

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from .call import Call

Op = tuple[float, float, Call]  # recorded start, end, call


class Pending(Protocol):
    """A chain's operations read but not yet made, first in first out: a deque, or what
    keeps a long queue elsewhere (the fleet's spill, rehearse/simulate_fleet.py)."""

    def append(self, op: Op, /) -> None: ...
    def popleft(self) -> Op: ...
    def __getitem__(self, i: int, /) -> Op: ...
    def __len__(self) -> int: ...


@dataclass(slots=True)
class Chain:
    """One chain's operations in a pass: those waiting to be made, the delays of those made
    (by recorded end), and its recorded and simulated extent."""

    pending: Pending
    ends: list[tuple[float, float]] = field(default_factory=list)  # heap: recorded end, delay at completion
    slip: float = 0.0
    busy: bool = False  # its next operation is scheduled, or being admitted
    first: float = 0.0  # its first operation's recorded start
    last_end: float = 0.0  # its last recorded end
    last_done: float = 0.0  # when its last operation completed in the simulation (shifted back)


class Chains:
    """A pass shifted by `shift` seconds: `add` its operations in recorded start order, and
    `make` those due up to a moment, in the order they are made; `heap[0][0]` is when the
    next one is (shifted).  `pending` makes each chain's queue."""

    def __init__(self, shift: float, pending: Callable[[], Pending] = deque):
        self.shift, self._pending = shift, pending
        self.chains: dict[int, Chain] = {}
        self.heap: list[tuple[float, int, int]] = []  # issue time (shifted), order, chain
        self._order = 0

    def add(self, start: float, end: float, key: int, call: Call) -> None:
        """An operation of chain `key` recorded over [start, end] (s, unshifted)."""
        chain = self.chains.get(key)
        if chain is None:
            chain = self.chains[key] = Chain(self._pending(), first=start, last_end=end)
        chain.pending.append((start, end, call))
        if end > chain.last_end:
            chain.last_end = end
        if not chain.busy:
            ends = chain.ends
            while ends and ends[0][0] <= start:  # it started after these had completed: it waits for them
                delay = heapq.heappop(ends)[1]
                if delay > chain.slip:
                    chain.slip = delay
            chain.busy = True
            heapq.heappush(self.heap, (start + chain.slip + self.shift, self._order, key))
            self._order += 1

    def make(self, limit: float, stop: float, admit: Callable[[Call, float], float]) -> bool:
        """Make the operations due up to `limit` (shifted), in order: `admit(call, t)` says when
        each completes, which schedules its chain's next.  True if one is due at `stop` or
        later (the time simulated is over)."""
        heap, chains, shift = self.heap, self.chains, self.shift
        pop, push = heapq.heappop, heapq.heappush
        while heap and heap[0][0] <= limit:
            t, _, key = heap[0]
            if t >= stop:
                return True
            pop(heap)
            chain = chains[key]
            pending = chain.pending
            end, call = pending.popleft()[1:]
            done = admit(call, t) - shift
            if done > chain.last_done:
                chain.last_done = done
            ends = chain.ends
            if not pending:
                push(ends, (end, done - end))
                chain.busy = False
                continue
            start = pending[0][0]
            if not ends and end <= start:  # the usual: one after the other, nothing else outstanding
                if done - end > chain.slip:
                    chain.slip = done - end
            else:
                push(ends, (end, done - end))
                while ends and ends[0][0] <= start:
                    delay = pop(ends)[1]
                    if delay > chain.slip:
                        chain.slip = delay
            push(heap, (start + chain.slip + shift, self._order, key))
            self._order += 1
        return False
