"""What `fusetrace simulate` reads and says of a fleet: several hosts' traces through one
emulated file system at once (`simulate 'traces/*'`), each host its own NFS client.

The records of every trace come in one stream, in start order over all the hosts (each
trace's start_ns moved onto the clock of the one that started first, as `report` does:
reader.TraceSet), sorted by DuckDB within SORT_MEMORY, spilling to disk past it, and read
a batch at a time.  In closed loop a process's operations read but not yet made (it fell
behind its recording) are kept at most 2 x CHUNK in memory, the rest on disk (Spilled).
Memory is then bounded by SORT_MEMORY, an Arrow batch, 2 x CHUNK operations a process
(about 300 bytes each) and each host's client state, however long the trace and however
far a process falls behind.  Each host's
records are rebuilt into its requests by its own Rebuilder (its handles and directories
are its own), a captured trace's system calls (`source` "syscalls") by its own Syscalls
(syscalls.py, fit's translation: the requests the kernel in front of the Linux NFS client
passes on for them, made one after another from the call's start), and carry its index
(`Call.host`), which tracesim.py hands to that host's NfsClient, on its own Model sharing
the file system's gates (Model's `fs`).

Hosts are named by their trace's `host` (its records', else its metadata's; the directory's
name when it names none); two traces of one host are two clients all the same, the second
named `NAME#2`, the third `NAME#3`, in the order the arguments give them.
"""

import dataclasses
import math
import operator
import os
import pickle
import random
import shutil
import tempfile
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import IO, TypedDict

import duckdb
import numpy as np

from ..emulator.call import Call
from ..emulator.chains import Op
from ..emulator.model import Model
from ..emulator.nfsclient import NfsClient
from ..emulator.ops import Admission
from ..emulator.params import Params
from ..emulator.tracesim import Timed
from ..report.query import Trace
from ..texttable import printable, table
from ..trace import metadata as meta
from ..trace import names, reader
from . import syscalls
from .requests import COLUMNS, Gaps, Rebuilder
from .syscalls import Syscalls

CACHE_CALLS = 500_000  # a fleet of at most this many records is kept in memory (about 300 bytes a call)
BATCH_ROWS = 65_536
SORT_MEMORY = "128MB"  # DuckDB's for the sort of every record: past it, it spills to its scratch directory
CHUNK = 256  # a chain's operations read but not yet made, kept in memory: at most two chunks, the rest on disk
TOP_HOSTS = 10  # the hosts said, those that waited most


class Host(TypedDict):
    """One host's share of a fleet simulated together: its operations, the time they waited
    (for the file system's limits, slots and queues, and its own client's), the gate that
    held them longest in all, and in closed loop its first pass as recorded and simulated."""

    host: str
    trace: str
    records: int
    operations: int  # simulated op by op (every pass of them, with --days), which the waits are of
    waited_s: float
    top_gate: str | None  # None: nothing waited
    recorded_s: float | None
    simulated_s: float | None
    slowdown: float | None


def host_names(trace: Trace) -> list[str]:
    """Each trace's host as the fleet names it (see the module's doc)."""
    seen: dict[str, int] = {}
    out = []
    for m in trace.set.members:
        name = m.host or os.path.basename(m.directory.rstrip("/"))
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return out


def origin_ns(trace: Trace) -> int:
    """Virtual time 0 on the fleet's clock: when the first mount's model started (an emulated
    mount's metadata says), else when it began tracing, else its first record; credits earned
    before the first operation count."""
    starts = []
    for m in trace.set.members:
        started = (m.metadata.get("emulation") or {}).get("started_monotonic_ns", m.metadata.get("start_monotonic_ns"))
        if isinstance(started, int):
            starts.append(started + m.offset_ns)
    first = trace.origin_ns
    return min((s for s in starts if s <= first), default=first)


def clients(params: Params, origin: float, hosts: int) -> tuple[Model, list[NfsClient]]:
    """The file system's model (the first host's) and a client for each host, each on its own
    model sharing the first one's file system; latencies drawn from a random stream of each
    host's own (the first host's as one trace's alone)."""
    first = Model(params, origin)
    models = [first] + [Model(params, origin, random.Random(f"{params.seed}/{i}"), first) for i in range(1, hosts)]
    return first, [NfsClient(m) for m in models]


class Calls:
    """One pass of the fleet as the NFS clients' calls, each time it is called: read from the
    traces, or from memory once a whole pass has been read if the fleet is small.  A call's
    chain is its process on its host (pid x hosts + host; none for pid 0, the kernel's own
    requests, nor in open loop).  `params`: the profile whose NFS client a captured trace's
    system calls are translated for (Syscalls keeps the kernel's caches in front of it for
    as long as it trusts them); its defaults if not given."""

    def __init__(self, trace: Trace, closed: bool, params: Params | None = None):
        self.trace, self.closed = trace, closed
        self.params = params or Params()
        self.keep = trace.records <= CACHE_CALLS
        self.cached: list[Timed] | None = None
        self.gaps = Gaps()
        self.made: dict[str, int] = {}  # the first pass's requests, by operation
        self.spill = Spill()  # the chains' operations read but not yet made, past CHUNK

    def __call__(self) -> Iterable[Timed]:
        return self.cached if self.cached is not None else self._read()

    def _read(self) -> Iterator[Timed]:
        members = self.trace.set.members
        n = len(members)
        captured = [meta.trace_kind(m.metadata) == "syscalls" for m in members]
        origin = origin_ns(self.trace)
        rebuilders = [Rebuilder() for _ in members]
        translators = {i: Syscalls(self.params, origin) for i, c in enumerate(captured) if c}
        # a Rebuilder's columns first, then the others a Syscalls reads
        columns = list(dict.fromkeys([*COLUMNS, *(syscalls.COLUMNS if translators else ())]))
        at, width = [columns.index(c) for c in syscalls.COLUMNS] if translators else [], len(COLUMNS)
        kept: list[Timed] | None = [] if self.keep else None
        made = None if self.made else self.made  # counted as the first pass is read
        latest = -math.inf  # the last call's time
        closed = self.closed
        head = list(dict.fromkeys(["start_ns", "dur_ns", "pid", "uid", *columns]))
        for batch in _batches(self.trace, names.with_raw(head)):
            # what depends on no record before it, a batch at a time: times in seconds, chains
            start_ns = batch.column("start_ns").to_numpy()
            member, pid = batch.column("member").to_numpy(), batch.column("pid").to_numpy().astype(np.int64)
            chain = np.where(pid > 0, pid * n + member, -1) if closed else np.full(len(pid), -1)
            for host, ns, start, end, key, uid, record in zip(
                member.tolist(),
                start_ns.tolist(),
                (start_ns / 1e9).tolist(),
                ((start_ns + batch.column("dur_ns").to_numpy()) / 1e9).tolist(),
                chain.tolist(),
                batch.column("uid").to_pylist(),
                names.rows(batch, columns),
            ):
                translator = translators.get(host)
                if translator is not None:  # a system call: what the kernel passed on for it
                    translator.rpcs(ns, uid, tuple(record[i] for i in at))
                    passed = translator.requests
                else:
                    request = rebuilders[host].rebuild(*(record[:width] if at else record))
                    passed = [request] if request is not None else []
                last = len(passed) - 1
                for i, request in enumerate(passed):
                    if made is not None:
                        made[request.op] = made.get(request.op, 0) + 1
                    c = request.call(uid)
                    c.host = host
                    # A call's requests one after another (each ends, as recorded, as the next
                    # starts, 1 ns on: in closed loop each waits for the one before), the last
                    # ending with the call; never before one already made
                    made_at = max(start + i * 1e-9, latest)
                    latest = made_at
                    call = (made_at, max(end, made_at) if i == last else made_at + 1e-9, key, c)
                    if kept is not None:
                        kept.append(call)
                    yield call
        gaps = self.gaps = Gaps()
        for r in [*rebuilders, *(t.rebuilder for t in translators.values())]:
            gaps.new_directories += r.gaps.new_directories
            gaps.unknown_handles += r.gaps.unknown_handles
            gaps.unknown_ops += r.gaps.unknown_ops
        gaps.unknown_ops += sum(t.unknown for t in translators.values())
        self.cached = kept


_FIELDS = operator.attrgetter(*(f.name for f in dataclasses.fields(Call)))


class Spill:
    """Where the chains of a simulation keep their operations read but not yet made (`queue`
    makes a chain's, TraceSim's `pending`): past CHUNK of a chain, pickled into a scratch file
    of its own (unnamed, gone once closed)."""

    def __init__(self) -> None:
        self.file: IO[bytes] | None = None

    def queue(self) -> "Spilled":
        return Spilled(self)

    def write(self, ops: list[Op]) -> tuple[int, int]:
        """Keep `ops`: where they are (offset, length)."""
        if self.file is None:
            self.file = tempfile.TemporaryFile(prefix="fusetrace-chains-")  # noqa: SIM115 (closed by close)
        data = pickle.dumps([(a, b, *_FIELDS(c)) for a, b, c in ops], pickle.HIGHEST_PROTOCOL)
        self.file.seek(0, os.SEEK_END)
        at = self.file.tell()
        self.file.write(data)
        return at, len(data)

    def read(self, at: int, length: int) -> Iterator[Op]:
        """The operations kept at `at` (Spill.write's answer), in order."""
        assert self.file is not None
        self.file.seek(at)
        return ((r[0], r[1], Call(*r[2:])) for r in pickle.loads(self.file.read(length)))

    def close(self) -> None:
        """Let the spilled operations go."""
        if self.file is not None:
            self.file.close()
            self.file = None


class Spilled:
    """A chain's operations read but not yet made (chains.Pending), first in first out:
    at most CHUNK in memory to be made next and CHUNK being added, the chunks between
    them in the simulation's Spill.  A process that falls behind its recording (its
    operations wait for a slower file system) has every operation it recorded since then
    read and waiting: a day of a hundred hosts' is millions, which would otherwise all be
    held."""

    __slots__ = ("_chunks", "_head", "_spill", "_tail")

    def __init__(self, spill: Spill):
        self._spill = spill
        self._head: deque[Op] = deque()  # made next
        self._chunks: deque[tuple[int, int]] = deque()  # then these (where in the spill), in order
        self._tail: list[Op] = []  # then these, the last added

    def append(self, op: Op, /) -> None:
        if len(self._head) < CHUNK and not self._chunks and not self._tail:
            self._head.append(op)
            return
        tail = self._tail
        tail.append(op)
        if len(tail) >= CHUNK:
            self._chunks.append(self._spill.write(tail))
            tail.clear()

    def popleft(self) -> Op:
        op = self._head.popleft()
        if not self._head:
            if self._chunks:
                self._head.extend(self._spill.read(*self._chunks.popleft()))
            elif self._tail:
                self._head.extend(self._tail)
                self._tail.clear()
        return op

    def __getitem__(self, i: int, /) -> Op:
        return self._head[i]  # chains.py asks for the first only

    def __len__(self) -> int:
        return len(self._head)  # empty only once the chunks and the tail are


def _batches(trace: Trace, columns: list[str]) -> Iterator:
    """Every member's records, `columns` of them and its index (`member`), on the fleet's
    clock, in start order (ties by member), a batch at a time, in bounded memory (as
    reader.ordered_batches reads one trace).  One scan of every part (a scan a member would
    hold buffers for each, past the memory limit with a hundred), each file's member and
    clock offset joined by its name; a column some members lack reads as its default there."""
    members = trace.set.members
    have = set().union(*(m.columns for m in members))
    fields = []
    for c in columns:
        default = reader.DEFAULTS.get(c, "null")
        if c == "start_ns":
            fields.append("start_ns + f.offset_ns as start_ns")
        elif c not in have:
            fields.append(f'{default} as "{c}"')
        elif all(c in m.columns for m in members) or default.startswith("null"):
            fields.append(f't."{c}"')
        else:
            fields.append(f'coalesce(t."{c}", {default}) as "{c}"')
    files = [(f, i, m.offset_ns) for i, m in enumerate(members) for f in m.files]
    scratch = tempfile.mkdtemp(prefix="fusetrace-sort-")  # 0700, ours
    try:
        db = duckdb.connect(
            config={"memory_limit": SORT_MEMORY, "temp_directory": scratch, "preserve_insertion_order": False}
        )
        try:
            db.execute("create table f (filename varchar, member integer, offset_ns bigint)")
            db.executemany("insert into f values (?, ?, ?)", files)
            db.read_parquet(
                [f for f, _, _ in files], union_by_name=True, hive_partitioning=False, filename=True
            ).create_view("t")
            query = (
                f"select {', '.join(fields)}, f.member as member from t join f using (filename) "
                "order by start_ns, member"
            )
            yield from db.sql(query).to_arrow_reader(BATCH_ROWS)
        finally:
            db.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


class Waits:
    """Each host's operations' waits as they are simulated (TraceSim's `admitted`): in all,
    and by the gate that set their time."""

    def __init__(self, hosts: int):
        self.ops = [0] * hosts
        self.waited = [0.0] * hosts
        self.gates: list[dict[str, float]] = [{} for _ in range(hosts)]

    def __call__(self, call: Call, t: float, a: Admission) -> None:
        h, w = call.host, a.wait
        self.ops[h] += 1
        if w > 0.0:
            self.waited[h] += w
            gates = self.gates[h]
            gates[a.gate] = gates.get(a.gate, 0.0) + w


def hosts(trace: Trace, waits: Waits, chains: dict[int, tuple[float, float, float]]) -> list[Host]:
    """The fleet's hosts, those that waited most first (closed loop: `chains`, the
    processes' first passes, keyed pid x hosts + host, give each host's)."""
    members = trace.set.members
    n = len(members)
    first, end, done = [math.inf] * n, [-math.inf] * n, [-math.inf] * n
    for key, (f, e, d) in chains.items():
        h = key % n
        first[h], end[h], done[h] = min(first[h], f), max(end[h], e), max(done[h], d)
    out: list[Host] = []
    for h, (m, name) in enumerate(zip(members, host_names(trace))):
        gates = waits.gates[h]
        recorded = end[h] - first[h] if end[h] > first[h] else None
        simulated = done[h] - first[h] if recorded is not None else None
        out.append(
            {
                "host": name,
                "trace": m.directory,
                "records": reader.record_count(m.directory),
                "operations": waits.ops[h],
                "waited_s": waits.waited[h],
                "top_gate": max(gates, key=gates.__getitem__) if gates else None,
                "recorded_s": recorded,
                "simulated_s": simulated,
                "slowdown": simulated / recorded if recorded and simulated is not None else None,
            }
        )
    out.sort(key=lambda x: (-x["waited_s"], x["host"]))
    return out


def host_lines(hosts: list[Host], seconds: Callable[[float], str], length: Callable[[float], str]) -> list[str]:
    """The table of the hosts that waited most (at most TOP_HOSTS), and how many more."""
    head = ["host", "records", "waited", "mean wait", "slowdown", "top gate"]
    rows = [
        [
            printable(h["host"]),
            f"{h['records']:,}",
            seconds(h["waited_s"]),
            seconds(h["waited_s"] / h["operations"]) if h["operations"] else "-",
            f"{h['slowdown']:,.2f}x ({length(h['simulated_s'])})"
            if h["slowdown"] is not None and h["simulated_s"] is not None
            else "-",
            h["top_gate"] or "-",
        ]
        for h in hosts[:TOP_HOSTS]
    ]
    more = len(hosts) - len(rows)
    lines = [
        f"hosts that waited most (of {len(hosts):,}), in the operations simulated op by op; slowdown: the "
        "host's first start to its last completion in the first pass, as simulated against as recorded; "
        "top gate: what held its operations longest in all:",
        table(head, rows, "lrrrrl"),
    ]
    if more > 0:
        lines.append(f"and {more:,} more (--json: every host)")
    return lines
