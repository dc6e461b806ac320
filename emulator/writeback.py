"""The NFS client's dirty data: buffered writes acknowledged before they reach
the server, written back in the background, waited for by COMMIT.

Each buffered write's write-back finishes at a time the model computed; the
client holds at most `limit` bytes not yet written back, so a writer that would
go over waits until enough earlier data has drained (as Linux's dirty-page
throttling does).  Drain times are kept in order of arrival as a running
maximum (write-back completes in order), which makes the bytes still dirty at
any time a bisection away.
"""

from bisect import bisect_left, bisect_right

_COMPACT_AT = 4096


class Writeback:
    __slots__ = ("_cum", "_done", "_file_done", "_head", "_total", "limit")

    def __init__(self, limit: float):
        self.limit = limit
        self._done: list[float] = []  # drain time of each buffered write, running max
        self._cum: list[float] = []  # bytes written up to and including each one
        self._head = 0  # writes before this index have drained
        self._total = 0.0
        self._file_done: dict[int, float] = {}  # per file: when its dirty data has drained

    def room_at(self, now: float, nbytes: float) -> float:
        """The earliest time >= now at which nbytes more fit under the limit."""
        self._forget_drained(now)
        need = self._total + nbytes - self.limit  # bytes that must have drained by then
        done = self._done
        if need <= self._drained() or self._head == len(done):
            return now
        i = bisect_left(self._cum, need, self._head)
        return done[min(i, len(done) - 1)]

    def add(self, file: int, nbytes: float, drained_at: float) -> None:
        if self._done and self._done[-1] > drained_at:
            drained_at = self._done[-1]
        self._total += nbytes
        self._done.append(drained_at)
        self._cum.append(self._total)
        if self._file_done.get(file, 0.0) < drained_at:
            self._file_done[file] = drained_at

    def drained_at(self, file: int) -> float:
        """When all of the file's dirty data will have reached the server."""
        return self._file_done.get(file, float("-inf"))

    def dirty(self, now: float) -> float:
        """Bytes written but not yet written back at `now`."""
        self._forget_drained(now)
        return self._total - self._drained()

    def _drained(self) -> float:
        return self._cum[self._head - 1] if self._head else 0.0

    def _forget_drained(self, now: float) -> None:
        done = self._done
        head = bisect_right(done, now, self._head)
        if head >= _COMPACT_AT and head * 2 >= len(done):
            drained = self._cum[head - 1]
            del done[:head], self._cum[:head]
            self._cum = [c - drained for c in self._cum]
            self._total -= drained
            head = 0
            self._file_done = {f: t for f, t in self._file_done.items() if t > now}
        self._head = head
