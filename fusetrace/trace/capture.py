"""What a traced mount records: `--trace-only` filters and `--trace-sample` rates.

Every request is still served (and shaped, and counted by the emulator and the metrics):
only its record is left out.  A record left out is counted per operation, as `filtered`
(a `--trace-only` key did not match it) or `sampled` (`--trace-sample` skipped it), and the
writer puts both counts in `_metadata.json`'s `left_out` at every flush, so a reader knows
what the trace does not hold.  Filters are decided first: a sampled count is of operations
the filters kept.

Sampling is random (Bernoulli: each operation of a sampled kind kept with probability 1/N,
independently), not every Nth: a periodic workload (a loop that stats the same ten files)
would have every Nth land on the same file each time.  Independent draws make each kept
record stand for N operations without bias, so a reader weights it by its `sample` column
(N).  To keep the loop's cost to a decrement, the number of operations to skip until the
next kept one is drawn once per kept record, from the geometric distribution that the gaps
of Bernoulli draws follow.  The generator's seed is in the trace's options, so a run can be
drawn again.  Operations that change state (writes, creates, renames: `STATEFUL`) are
refused for sampling: a replay or a simulation of a trace with some of them missing would
act on files that do not exist or have the wrong sizes, and they are rarely the frequent
cheap operations that sampling is for.
"""

import math
import random
import re
from collections.abc import Sequence
from typing import Any

from ..errors import BadValue, UserError
from ..globs import glob_regex
from ..request import TRACED_OPERATIONS, Kind

KEYS = ("op", "path", "comm", "uid")
# The operation classes `op=` takes beside operation names: the kinds the emulator charges
# (fusetrace/request.py's Kind: meta_read, meta_write, read, write, commit, none), and
# `metadata` for both metadata kinds.
CLASSES: dict[str, frozenset[Kind]] = {
    **{k.value: frozenset((k,)) for k in Kind},
    "metadata": frozenset((Kind.META_READ, Kind.META_WRITE)),
}
# Operations that change what is on the file system, or that a replay needs to issue those
# (open and create make the handles later writes use): never sampled.
STATEFUL = frozenset(
    (
        "setattr",
        "mknod",
        "mkdir",
        "symlink",
        "unlink",
        "rmdir",
        "rename",
        "link",
        "open",
        "create",
        "write",
        "flush",
        "release",
        "fsync",
        "fsyncdir",
        "setxattr",
        "removexattr",
    )
)
MAX_FACTOR = 2**32 - 1  # the sample column is uint32


def parse_only(given: Sequence[str]) -> dict[str, list[str]]:
    """`--trace-only KEY=V[,V...]` options as {key: values}: values of one key (given in one
    option or several) are alternatives, keys all apply.  BadValue names the first bad one."""
    out: dict[str, list[str]] = {}
    for item in given:
        key, eq, text = item.partition("=")
        values = text.split(",")
        if not eq or key not in KEYS:
            raise BadValue(f"--trace-only {item}: give KEY=VALUE[,VALUE...], KEY one of {', '.join(KEYS)}")
        if not all(values):
            raise BadValue(f"--trace-only {item}: give a value after {key}=")
        for v in values:
            _check(key, v, item)
        out.setdefault(key, []).extend(v for v in values if v not in out.get(key, []))
    return out


def _check(key: str, value: str, item: str) -> None:
    if key == "op" and value not in TRACED_OPERATIONS and value not in CLASSES:
        raise BadValue(
            f"--trace-only {item}: {value!r} is no traced operation or class (operations: "
            f"{', '.join(TRACED_OPERATIONS)}; classes: {', '.join(CLASSES)})"
        )
    if key == "uid" and not (value.isdigit() and int(value) < 2**32):
        raise BadValue(f"--trace-only {item}: uid {value!r} is not a user id (0 to {2**32 - 1})")
    if key == "path":
        try:
            glob_regex(value, "--trace-only path")
        except UserError as exc:
            raise BadValue(str(exc)) from None
    if key == "comm" and len(value.encode()) > 15:
        raise BadValue(f"--trace-only {item}: a process name (comm) is at most 15 bytes; {value!r} never matches")


def parse_sample(given: Sequence[str]) -> dict[str, int]:
    """`--trace-sample OP=N` options as {op: N}; BadValue names the first bad one."""
    out: dict[str, int] = {}
    for item in given:
        op, eq, text = item.partition("=")
        if not eq or op not in TRACED_OPERATIONS:
            raise BadValue(f"--trace-sample {item}: give OP=N, OP a traced operation ({', '.join(TRACED_OPERATIONS)})")
        if op in STATEFUL:
            raise BadValue(
                f"--trace-sample {item}: {op} changes state and is never sampled (a replay or "
                f"simulation needs every one); --trace-only can leave it out instead"
            )
        if not (text.isdigit() and 1 <= int(text) <= MAX_FACTOR):
            raise BadValue(f"--trace-sample {item}: N must be a whole number from 1 to {MAX_FACTOR:,}")
        if op in out and out[op] != int(text):
            raise BadValue(f"--trace-sample {item}: {op} is given another rate too ({op}={out[op]})")
        out[op] = int(text)
    return out


class Capture:
    """Which records the loop queues (`keep`), and the counts of those it left out.  Its
    counters are written by the loop only; the writer thread copies them (a dict's copy
    is atomic under the GIL)."""

    def __init__(self, only: dict[str, list[str]], sample: dict[str, int], *, roots: Sequence[str] = (), seed: int):
        """only, sample: as parse_only and parse_sample give them; roots: the mountpoint
        and the source, which a path glob may start with (traces name paths below them)."""
        self.only, self.seed = only, seed
        self.factors = {op: n for op, n in sample.items() if n > 1}  # op: N, the sample column's
        ops = only.get("op", [])
        self._ops = frozenset(o for o in ops if o not in CLASSES) if ops else None
        self._kinds = frozenset(k for o in ops if o in CLASSES for k in CLASSES[o])
        paths = [_below(p, roots) for p in only.get("path", [])]
        self._path = re.compile("|".join(f"(?:{glob_regex(p)})" for p in paths)) if paths else None
        self._comms = frozenset(only["comm"]) if "comm" in only else None
        self._uids = frozenset(int(u) for u in only["uid"]) if "uid" in only else None
        self._filtering = bool(only)
        self._random = random.Random(seed)
        self._logs = {op: math.log1p(-1 / n) for op, n in self.factors.items()}
        self._skip = {op: self._gap(op) for op in self.factors}  # operations to leave out before the next kept
        self.filtered: dict[str, int] = {}
        self.sampled: dict[str, int] = {}

    def keep(self, req: Any, path: str, uid: int, comm: str) -> bool:
        """Whether the record of `req` (a Request: its op and kind) is queued; if not, it
        is counted in `filtered` or `sampled`."""
        op = req.op
        if self._filtering and not self._selected(op, req.kind, path, uid, comm):
            self.filtered[op] = self.filtered.get(op, 0) + 1
            return False
        skip = self._skip.get(op)
        if skip is None:
            return True
        if skip:
            self._skip[op] = skip - 1
            self.sampled[op] = self.sampled.get(op, 0) + 1
            return False
        self._skip[op] = self._gap(op)
        return True

    def _selected(self, op: str, kind: Kind, path: str, uid: int, comm: str) -> bool:
        if self._ops is not None and op not in self._ops and kind not in self._kinds:
            return False
        if self._uids is not None and uid not in self._uids:
            return False
        if self._comms is not None and comm not in self._comms:
            return False
        return self._path is None or self._path.fullmatch(path) is not None

    def _gap(self, op: str) -> int:
        """Operations of `op` to leave out before the next kept one: geometric, mean N-1."""
        return int(math.log(1.0 - self._random.random()) / self._logs[op])

    def left_out(self) -> dict[str, dict[str, int]]:
        """The counts of records left out, per reason and operation, for _metadata.json."""
        return {"filtered": dict(self.filtered), "sampled": dict(self.sampled)}

    def settings(self) -> dict[str, Any]:
        """What the trace's `options` say of the capture."""
        return {"trace_only": self.only, "trace_sample": self.factors, "trace_sample_seed": self.seed}


def _below(pattern: str, roots: Sequence[str]) -> str:
    """A glob written with the mountpoint (or source) in front, as trace paths are not."""
    for root in roots:
        root = root.rstrip("/")
        if root and pattern.startswith(root + "/"):
            return pattern[len(root) :]
    return pattern
