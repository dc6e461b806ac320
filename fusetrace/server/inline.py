"""Which system calls may run on the trio loop itself.

Handing a call to a worker thread and back costs far more than a getattr, a lookup or a
buffered 4 KiB write takes on a local file system, and more than a create on ext4 (see
docs/BENCHMARKS.md, "Figures behind design choices: server/").  So each operation keeps the share of its
recent calls that took longer than a threshold (100 us: under the cheapest hand-off,
so a call that takes less is quicker on the loop for its caller whatever the load);
while that share is small the operation runs on the loop, else in the workers.  One
call slower than EVICT_FACTOR thresholds sends the operation to the workers at once.
A scheduler hiccup in one call does not move anything; a file system that has become
slow does.  An operation in the workers is tried on the loop every PROBE_EVERY calls,
so a slow spell (a cold cache, a busy disk) does not exile it for good.

A data call is judged by its speed rather than its time: a write of `size` bytes is
slow when it takes longer than the threshold plus PER_BYTE_NS for each byte (a
write below 500 MB/s).  So a 1 MiB write that copies into the page cache below in
about a millisecond stays on the loop, where a hand-off would add to its time, while a
disk that has become slow sends it to the workers.  One
call over EVICT_FACTOR thresholds plus its bytes' allowance (4 ms for 1 MiB) moves
it at once, as for any call.

A slow call holds up only the requests that wait behind it.  So when the server is
alone with a call (no other request in its hands, none queued in the kernel: a single
caller's serial work, as tar's), an operation the shares send to the workers runs on the
loop anyway, where its caller saves the hand-off, unless its last call ran over
EVICT_FACTOR thresholds (a disk or a file system that stalls).  This also keeps a traced
mount's serial work on the loop: its trace writer thread, taking the interpreter lock
while a call runs, makes quick calls look slow.

A hung network file system would stall the whole loop on an inline call, so on
network file systems (and FUSE ones) nothing runs inline unless asked for
(`--inline always`); fsyncs and synchronous writes never do, as they wait for the disk.
A close after writes is a commit where the source writes back at close (NFS), so it never
runs inline there, even with `--inline always`; on a local file system it closes a
descriptor (ext4 and xfs have no flush operation; a last close after a truncation may
start write-back, not wait for it), so there a flush or release after writes is placed by
its speed like any call (`closes_inline`).
"""

from collections.abc import Callable
from typing import TypedDict

from ..request import Kind, WriteMode

NETWORK_FSTYPES = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "ceph",
        "glusterfs",
        "9p",
        "afs",
        "lustre",
        "gpfs",
        "beegfs",
        "ocfs2",
        "gfs2",
        "davfs",
        "sshfs",
        "orangefs",
        "pvfs2",
    }
)
NEVER_INLINE_KINDS = frozenset({Kind.COMMIT, WriteMode.SYNC})  # as Request.label names them
CLOSE_COMMITS = frozenset({"flush", "release"})  # commits that may still run inline (above)
SLOW_SHARE = 0.2  # inline while under this share of recent calls were slow
WEIGHT = 0.1  # of the newest call in the running share
EVICT_FACTOR = 20
PROBE_EVERY = 16
PER_BYTE_NS = 2.0  # a data call's allowance per byte on top of the threshold: 500 MB/s
FORGOTTEN = 0.001  # a share of slow calls this small is taken as none (44 quick calls after one slow)


def _never() -> bool:
    return False


def is_network(fstype: str) -> bool:
    return fstype in NETWORK_FSTYPES or fstype == "fuse" or fstype.startswith("fuse.")


class InlinePolicy:
    """Per (operation, kind) key, (Request.op, Request.label): the running share of
    slow calls, and whether the next call runs inline."""

    def __init__(self, threshold_us: float, closes_inline: bool = True):
        self.threshold_ns = threshold_us * 1000.0
        self.closes_inline = closes_inline  # a close after writes may run inline: a local source
        self._slow: dict[tuple[str, str], float] = {}
        self._skipped: dict[tuple[str, str], int] = {}
        self._stalled: set[tuple[str, str]] = set()  # the last call seen ran over EVICT_FACTOR thresholds
        # The keys with no slow call lately (share 0): each runs inline, and a call of it
        # that took at most threshold_ns changes nothing, so the caller may skip both
        # inline() and observe() for it (Pipeline.timed).
        self.calm: set[tuple[str, str]] = set()

    def _may_run_inline(self, key: tuple[str, str]) -> bool:
        return self.threshold_ns > 0 and (
            key[1] not in NEVER_INLINE_KINDS or (self.closes_inline and key[0] in CLOSE_COMMITS)
        )

    def inline(self, key: tuple[str, str], alone: Callable[[], bool] = _never) -> bool:
        """Whether the next call of `key` runs on the loop; `alone()`: whether the server
        has no other request in hand or queued (see the module's docstring), asked only
        of a slow operation (it costs a poll(2))."""
        if not self._may_run_inline(key):
            return False
        if self._slow.get(key, 0.0) < SLOW_SHARE or (key not in self._stalled and alone()):
            return True
        skipped = self._skipped.get(key, 0) + 1
        if skipped >= PROBE_EVERY:
            self._skipped[key] = 0
            return True
        self._skipped[key] = skipped
        return False

    def observe(self, key: tuple[str, str], ns: int, size: int = 0) -> None:
        """An inline call of `key` took `ns`; `size`: the bytes a data call carried."""
        share = self._slow.get(key)
        allowance = size * PER_BYTE_NS
        if share == 0.0 and ns <= self.threshold_ns + allowance:
            return  # quick, and no slow call lately: nothing changes (the common case, kept cheap)
        if ns >= EVICT_FACTOR * self.threshold_ns + allowance:
            share = 1.0
            self._stalled.add(key)
        else:
            self._stalled.discard(key)
            share = share or 0.0
            share += ((ns > self.threshold_ns + allowance) - share) * WEIGHT
            if share < FORGOTTEN:
                share = 0.0
        self._slow[key] = share
        if share == 0.0 and self._may_run_inline(key):
            self.calm.add(key)
        else:
            self.calm.discard(key)

    def describe(self) -> "Placement":
        """For `fusetrace stats`: the threshold, and which operations run where."""
        where: Placement = {"threshold_us": self.threshold_ns / 1000.0, "loop": [], "workers": []}
        for (op, kind), share in sorted(self._slow.items()):
            (where["loop"] if share < SLOW_SHARE else where["workers"]).append(f"{op}/{kind}")
        return where


class Placement(TypedDict):
    """Where calls run, for `fusetrace stats`: the threshold, and the operations (op/kind) on each side."""

    threshold_us: float
    loop: list[str]
    workers: list[str]
