"""`fusetrace replay DIR TARGET`: a trace's operations issued again against TARGET, with
their recorded concurrency and timing, and how the replay kept to both.

The records stream in start order (fusetrace.trace.reader, bounded memory); one thread,
the dispatcher, reads them a batch ahead at most and issues each one
(fusetrace/rehearse/replay_calls.py says what it becomes) once

- every operation that had ended, in the recording, before it started has ended here
  too: what the recording shows one after the other (a process's next call, a file's
  create before another process opens it) stays in that order, and what overlapped
  may overlap here, so a process's concurrent threads stay concurrent; and
- its time has come: TARGET's clock started at the first record, and a record is due
  (start_ns - first start_ns) / speed later (at once with --as-fast-as-possible).

An operation the next record does not overlap runs on the dispatcher itself (the next
one waits for it anyway); one that may overlap the next goes to a worker thread, a new
one only while all are busy (at most MAX_WORKERS).  A record's lateness is when it was
issued less when it was due; the replay's span, from the first record's due time to the
last one's end, against the recording's span over speed, is its drift.
"""

import argparse
import collections
import contextlib
import errno
import heapq
import itertools
import json
import math
import os
import queue
import resource
import threading
import time
from collections import Counter
from collections.abc import Generator, Iterable
from typing import TypedDict

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import BadValue, UserError
from ..texttable import count, int_text, ns_text, printable, table
from ..trace import names, partial, reader
from .lanes import Lanes
from .prepare import Prepared, prepare
from .progress import counted
from .replay_calls import COLUMNS, Difference, Handle, Rec, Refused, Target
from .rows import last_closes

BATCH_ROWS = 4096  # records read from the trace at a time
MAX_WORKERS = 1024  # a FUSE mount serves 1,024 requests at once by default (--max-requests)
FIRST = 20  # differences listed one by one
# Records read ahead of the one being issued: enough to find the create a failed lookup was for.
LOOKAHEAD = 64
CREATES = frozenset(("create", "mkdir", "mknod", "symlink"))
CREATE_LOOKUP = "lookup of a missing name: the kernel's, for the create that follows (replayed, it looks it up)"
FORMAT = 3  # traces before it lack open handles, open flags and setattr's attributes


class Late(TypedDict):
    """How late operations were issued (ns)."""

    p50: int
    p99: int
    max: int


class DifferenceCount(TypedDict):
    op: str
    kind: str
    count: int


class DifferenceShown(TypedDict):
    """One of the first outcomes that differed from the recording."""

    at_ns: int
    op: str
    path: str
    path2: str | None
    kind: str
    detail: str


class Differences(TypedDict):
    count: int
    by_op: list[DifferenceCount]
    first: list[DifferenceShown]


class Summary(TypedDict):
    """Replay.summary(): what the replay did, what --json prints."""

    trace: str
    target: str
    stopped: bool
    speed: float | None
    as_fast_as_possible: bool
    records: int
    replayed: int
    replayed_by_op: dict[str, int]
    not_replayed: dict[str, int]
    span_ns: int
    recorded_span_ns: int
    due_span_ns: int | None
    drift: float | None
    late_ns: Late | None
    processes: int
    streams: int
    most_at_once: int
    waited_for_a_worker: int
    prepared: Prepared | None
    differences: Differences


class Lateness:
    """How late operations were issued: a histogram of log-spaced buckets (16 an octave,
    so a percentile is within 4.4 %), in constant memory however many there are."""

    STEPS = 16

    def __init__(self) -> None:
        self.counts: Counter[int] = Counter()
        self.n = 0
        self.max_ns = 0

    def add(self, ns: int) -> None:
        ns = max(ns, 0)
        self.counts[int(self.STEPS * math.log2(ns)) + 1 if ns else 0] += 1
        self.n += 1
        self.max_ns = max(self.max_ns, ns)

    def quantile(self, q: float) -> int:
        """The upper bound of the bucket holding the q-quantile (never above the maximum)."""
        rank, seen = q * self.n, 0
        for bucket in sorted(self.counts):
            seen += self.counts[bucket]
            if seen >= rank:
                return 0 if bucket == 0 else min(self.max_ns, round(2 ** (bucket / self.STEPS)))
        return self.max_ns


class Replay:
    """Issues records against a Target, in the dispatcher's thread and its workers'."""

    def __init__(self, target: Target, speed: float | None, max_workers: int = MAX_WORKERS):
        self.target, self.speed, self.max_workers = target, speed, max_workers
        self._cond = threading.Condition()  # the operations handed to workers, and the dispatcher's wait
        self._ends: list[tuple[int, int]] = []  # heap: (recorded end, number) of operations handed to workers
        self._running: set[int] = set()  # their numbers, until they end
        self._waiting = False  # the dispatcher waits for an operation to end
        self._handed = 0
        self._queue: queue.SimpleQueue[tuple[int, Rec, Handle | None, int | None] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._crash: BaseException | None = None
        self._lock = threading.Lock()  # the figures below
        self.records = 0
        self.replayed: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()
        self.differences: Counter[tuple[str, str]] = Counter()
        self.first: list[Difference] = []
        self.late = Lateness()
        self.lanes = Lanes()
        self.pids: set[int] = set()
        self.most_at_once = 0
        self.waited_for_worker = 0
        self.first_ns: int | None = None
        self.last_end_ns = 0
        self.t0 = self.done_ns = 0

    def run(self, records: Iterable[Rec]) -> None:
        """Issue every record; returns when all have ended."""
        stream = iter(records)
        ahead: collections.deque[Rec] = collections.deque(itertools.islice(stream, LOOKAHEAD))
        while ahead:
            rec = ahead.popleft()
            ahead.extend(itertools.islice(stream, 1))
            if rec.op == "lookup" and rec.errno == errno.ENOENT and _made_for_what_follows(rec, ahead):
                self._count(rec)
                with self._lock:
                    self.refused[CREATE_LOOKUP] += 1
                continue
            self._dispatch(rec, alone=not ahead or ahead[0].start_ns >= rec.start_ns + rec.dur_ns)
        self.stop(None)

    def stop(self, timeout: float | None = 10.0) -> bool:
        """Wait for the operations under way (at most `timeout` seconds), then end the
        workers; False when some were still under way."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._running:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._waiting = True
                self._cond.wait(left)
            self._waiting = False
        for _ in self._threads:
            self._queue.put(None)
        for t in self._threads:
            t.join()
        self._threads.clear()
        self._raise_crash()
        return True

    def note(self, found: list[Difference]) -> None:
        with self._lock:
            self._note(found)

    # ---- the dispatcher -------------------------------------------------------------

    def _dispatch(self, rec: Rec, alone: bool) -> None:
        """Issue rec when what it follows has ended and its time has come; `alone`: the
        next record does not overlap it, so it may run here."""
        self._raise_crash()
        first = self._count(rec)
        handle = self.target.bind(rec)
        self._after_what_it_follows(rec.start_ns)
        due = None
        if self.speed is not None:
            due = self.t0 + int((rec.start_ns - first) / self.speed)
            wait = due - time.monotonic_ns()
            if wait > 0:
                time.sleep(wait / 1e9)
        if alone:
            self.most_at_once = max(self.most_at_once, len(self._running) + 1)
            self._issue(rec, handle, due)
            return
        with self._cond:
            self._handed += 1
            self._running.add(self._handed)
            heapq.heappush(self._ends, (rec.start_ns + rec.dur_ns, self._handed))
            self.most_at_once = max(self.most_at_once, len(self._running))
            if len(self._running) > len(self._threads):
                if len(self._threads) < self.max_workers:
                    t = threading.Thread(target=self._work, name=f"replay-{len(self._threads)}", daemon=True)
                    t.start()
                    self._threads.append(t)
                else:
                    self.waited_for_worker += 1
        self._queue.put((self._handed, rec, handle, due))

    def _count(self, rec: Rec) -> int:
        """A record read, for the recording's span and concurrency; the first one's start_ns."""
        if self.first_ns is None:
            self.first_ns, self.t0 = rec.start_ns, time.monotonic_ns()
        end = rec.start_ns + rec.dur_ns
        self.records += 1
        self.last_end_ns = max(self.last_end_ns, end)
        self.lanes.place(rec.pid, rec.start_ns, end)
        self.pids.add(rec.pid)
        return self.first_ns

    def _after_what_it_follows(self, start_ns: int) -> None:
        """Wait until no operation handed to a worker that had ended by start_ns, in the
        recording, is still under way here."""
        with self._cond:
            while True:
                while self._ends and self._ends[0][1] not in self._running:
                    heapq.heappop(self._ends)
                if not self._ends or self._ends[0][0] > start_ns:
                    self._waiting = False
                    return
                self._waiting = True
                self._cond.wait()

    def _raise_crash(self) -> None:
        if self._crash is not None:
            raise self._crash

    # ---- issuing --------------------------------------------------------------------

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            number, rec, handle, due = item
            try:
                self._issue(rec, handle, due)
            except BaseException as exc:  # a bug: the dispatcher raises it
                self._crash = exc
            finally:
                with self._cond:
                    self._running.discard(number)
                    if self._waiting:
                        self._cond.notify()

    def _issue(self, rec: Rec, handle: Handle | None, due: int | None) -> None:
        issued = time.monotonic_ns()
        try:
            found = self.target.issue(rec, handle)
        except Refused as refused:
            with self._lock:
                self.refused[str(refused)] += 1
            return
        except (ValueError, OverflowError, MemoryError) as exc:  # a value no system call takes
            with self._lock:
                self.refused[f"a value the system call cannot take ({type(exc).__name__})"] += 1
            return
        done = time.monotonic_ns()
        with self._lock:
            self.replayed[rec.op] += 1
            if due is not None:
                self.late.add(issued - due)
            self.done_ns = max(self.done_ns, done)
            self._note(found)

    def _note(self, found: list[Difference]) -> None:
        for rec, kind, detail in found:
            self.differences[(rec.op, kind)] += 1
            if len(self.first) < FIRST:
                self.first.append((rec, kind, detail))

    # ---- the summary ----------------------------------------------------------------

    def summary(self, trace_dir: str, target: str, stopped: bool, prepared: Prepared | None = None) -> Summary:
        replayed = sum(self.replayed.values())
        recorded = self.last_end_ns - self.first_ns if self.first_ns is not None else 0
        span = max(0, self.done_ns - self.t0) if replayed else 0
        due_span = None if self.speed is None else recorded / self.speed
        return {
            "trace": trace_dir,
            "target": target,
            "stopped": stopped,
            "speed": self.speed,
            "as_fast_as_possible": self.speed is None,
            "records": self.records,
            "replayed": replayed,
            "replayed_by_op": dict(self.replayed.most_common()),
            "not_replayed": dict(self.refused.most_common()),
            "span_ns": span,
            "recorded_span_ns": recorded,
            "due_span_ns": None if due_span is None else round(due_span),
            "drift": span / due_span - 1 if due_span else None,
            "late_ns": None
            if not self.late.n
            else {"p50": self.late.quantile(0.5), "p99": self.late.quantile(0.99), "max": self.late.max_ns},
            "processes": len(self.pids),
            "streams": sum(self.lanes.count(pid) for pid in self.pids),
            "most_at_once": self.most_at_once,
            "waited_for_a_worker": self.waited_for_worker,
            "prepared": prepared,
            "differences": {
                "count": sum(self.differences.values()),
                "by_op": [{"op": op, "kind": kind, "count": n} for (op, kind), n in self.differences.most_common()],
                "first": [
                    {
                        "at_ns": rec.start_ns - (self.first_ns or 0),
                        "op": rec.op,
                        "path": names.readable(rec.path),
                        "path2": None if rec.path2 is None else names.readable(rec.path2),
                        "kind": kind,
                        "detail": detail,
                    }
                    for rec, kind, detail in self.first
                ],
            },
        }


def _made_for_what_follows(lookup: Rec, ahead: Iterable[Rec]) -> bool:
    """Whether a lookup that found nothing was the kernel's, for the call that creates
    that name next in its process (creat, mkdir, mknod, symlink, rename or link to it):
    that call, replayed, makes the target's kernel look the name up again."""
    for rec in ahead:
        if rec.pid == lookup.pid and lookup.path in (rec.path, rec.path2):
            return (rec.op in CREATES and rec.path == lookup.path) or (
                rec.op in ("rename", "link") and rec.path2 == lookup.path
            )
    return False


def records(trace_dir: str) -> Generator[Rec, None, None]:
    """The trace's records in start order, BATCH_ROWS at a time, their names exact (a name
    that is not UTF-8 as os.fsdecode gives its recorded bytes, which system calls take back)."""
    for batch in reader.ordered_batches(trace_dir, names.with_raw(COLUMNS), batch_rows=BATCH_ROWS):
        yield from map(Rec._make, names.rows(batch, COLUMNS))


def check_trace(trace_dir: str) -> None:
    """A trace replay can read (NoTrace, or BadValue for a damaged part or an older format)."""
    files = reader.checked_parts(trace_dir)
    version = reader.metadata(trace_dir).get("format_version")
    if version is None:
        try:
            version = FORMAT if "entry" in pq.read_schema(files[0]).names else 2
        except (OSError, pa.ArrowException) as exc:
            part = os.path.join(trace_dir, os.path.basename(files[0]))  # files[0] may be /proc/self/fd/N/...
            raise BadValue(f"{printable(part)}: not a readable trace part: {exc}") from None
    if version < FORMAT:
        raise BadValue(
            f"{printable(trace_dir)}: a format {version} trace: replay needs format {FORMAT} or later "
            f"(earlier ones do not keep open handles, open flags or what a setattr set); trace again "
            f"with this fusetrace"
        )


def check_whole(trace_dir: str, go_on: bool) -> None:
    """PartialTrace (exit 2) for a trace that left operations out (--trace-only,
    --trace-sample), unless `go_on` (--partial): then a note says what the replay lacks."""
    m = reader.metadata(trace_dir)
    why = "a replay issues only the operations recorded, so the files, handles and load it needs would not be all there"
    if not go_on:
        partial.refuse_partial(trace_dir, m, "replay", why)
    elif (left := partial.described(m)) is not None:
        print(f"fusetrace replay: note: {printable(trace_dir)} left out {left}: only its records are replayed")


def run(args: argparse.Namespace) -> int:
    check_trace(args.trace_dir)
    check_whole(args.trace_dir, args.partial)
    prepared = None
    if args.prepare or args.prepare_into:
        try:
            prepared = prepare(args.trace_dir, args.prepare_into or args.target)
        except duckdb.Error as exc:
            raise UserError(f"{printable(args.trace_dir)}: cannot read the trace: {str(exc).splitlines()[0]}") from None
    try:
        target = Target(args.target, last_closes(args.trace_dir))
    except duckdb.Error as exc:
        raise UserError(f"{printable(args.trace_dir)}: cannot read the trace: {str(exc).splitlines()[0]}") from None
    _room_for_descriptors()
    replay = Replay(target, None if args.as_fast_as_possible else args.speed)
    stopped = False
    umask = os.umask(0)  # modes as recorded (they are the replies', the caller's umask applied)
    try:
        with contextlib.closing(records(args.trace_dir)) as stream:
            replay.run(counted(stream, "fusetrace replay", reader.record_count(args.trace_dir)))
    except KeyboardInterrupt:
        stopped = True
        replay.stop()
    except duckdb.Error as exc:
        replay.stop()
        raise UserError(f"{printable(args.trace_dir)}: cannot read the trace: {str(exc).splitlines()[0]}") from None
    finally:
        os.umask(umask)
        replay.note(target.close())
    s = replay.summary(args.trace_dir, args.target, stopped, prepared)
    print(json.dumps(s, indent=2) if args.json else render(s))
    return 130 if stopped else 0


def _room_for_descriptors() -> None:
    """As many descriptors as the hard limit allows: the trace's processes held their
    open files each, the replay holds them all."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _prepared_line(p: Prepared) -> str:
    line = (
        f"prepared in {printable(p['into'])}: {p['directories']:,} director{'y' if p['directories'] == 1 else 'ies'}, "
        f"{count(p['files'], 'file')} ({int_text(p['bytes'])} bytes), {count(p['symlinks'], 'symbolic link')}"
    )
    not_made = "; ".join(f"{int_text(n)} {why}" for why, n in p["not_made"].items())
    return line + (f"; not made: {not_made}" if not_made else "")


def render(s: Summary) -> str:
    lines = []
    if s["stopped"]:
        lines.append("stopped by Ctrl-C: what was replayed until then")
    head = (
        f"replayed {int_text(s['replayed'])} of {int_text(s['records'])} operations of {s['trace']} into "
        f"{s['target']} in {ns_text(s['span_ns'])}"
    )
    due = s["due_span_ns"]  # None as fast as possible
    if s["as_fast_as_possible"] or due is None:
        ratio = s["recorded_span_ns"] / s["span_ns"] if s["span_ns"] else None
        head += f", as fast as possible (recorded {ns_text(s['recorded_span_ns'])}" + (
            f": {ratio:.1f}x as fast)" if ratio else ")"
        )
    else:
        head += f" (recorded {ns_text(s['recorded_span_ns'])}, due in {ns_text(due)} at speed {s['speed']:g}" + (
            f": drift {100 * s['drift']:+.1f}%)" if s["drift"] is not None else ")"
        )
    if s["prepared"]:
        lines.append(_prepared_line(s["prepared"]))
    lines.append(head)
    if s["late_ns"]:
        late = s["late_ns"]
        lines.append(f"issued late: p50 {ns_text(late['p50'])}, p99 {ns_text(late['p99'])}, max {ns_text(late['max'])}")
    lines.append(
        f"concurrency: {int_text(s['processes'])} processes, {int_text(s['streams'])} streams (a process's "
        f"overlapping operations), up to {count(s['most_at_once'], 'operation')} at once"
        + (f"; {int_text(s['waited_for_a_worker'])} waited for a worker" if s["waited_for_a_worker"] else "")
    )
    if s["not_replayed"]:
        lines += ["", "not issued on their own:"]
        lines += [f"  {int_text(n):>9}  {reason}" for reason, n in s["not_replayed"].items()]
    diffs = s["differences"]
    if not diffs["count"]:
        lines += ["", "outcomes: every operation's as recorded"]
        return "\n".join(lines)
    lines += [
        "",
        f"outcomes that differ from the recording: {int_text(diffs['count'])}",
        table(
            ["op", "difference", "count"], [[d["op"], d["kind"], int_text(d["count"])] for d in diffs["by_op"]], "llr"
        ),
        "",
        f"first {len(diffs['first'])}:",
        table(
            ["at", "op", "path", "difference"],
            [
                [
                    ns_text(d["at_ns"]),
                    d["op"],
                    d["path"] + (f" -> {d['path2']}" if d["path2"] else ""),
                    d["kind"] + (f" ({d['detail']})" if d["detail"] else ""),
                ]
                for d in diffs["first"]
            ],
            "rlll",
        ),
    ]
    return "\n".join(lines)
