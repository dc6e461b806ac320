"""Which records a report is about: the command line's `--op --pid --comm --path --since
--until` (`Filters`), and those filters resolved against one trace (`Selection`): its
instants, its path regex, and one DuckDB expression that the trace's view filters on.

Kept apart from the figures (query.py) because resolving them is the report's one piece of
parsing and time arithmetic; the values are constants of the expression, never quoted into
SQL: a trace's paths and names are whatever bytes their makers chose.
"""

import argparse
import functools
import math
import operator
import os
import re
from dataclasses import dataclass
from datetime import datetime, time, timedelta

import duckdb

from ..errors import BadValue
from ..globs import glob_regex
from ..request import TRACED_OPERATIONS
from ..trace import metadata as meta
from ..trace.names import readable
from .shapes import FiltersShown

COMM_BYTES = 15  # the kernel keeps a process name's first 15 bytes (TASK_COMM_LEN, 16 with its NUL)


@dataclass(frozen=True)
class Filters:
    """Which records a report is about (`--op --pid --comm --path --since --until`);
    the defaults keep every record.  `since`/`until` are as the user wrote them: the
    trace resolves them (seconds since its first record, or a wall-clock time)."""

    ops: tuple[str, ...] = ()
    pids: tuple[int, ...] = ()
    comms: tuple[str, ...] = ()
    path: str | None = None
    since: str | None = None
    until: str | None = None

    def __post_init__(self) -> None:
        unknown = [op for op in self.ops if op not in TRACED_OPERATIONS]
        if unknown:
            raise BadValue(f"--op {unknown[0]}: not a traced operation (one of: {', '.join(TRACED_OPERATIONS)})")
        # matched against the trace's text, where bytes that are not UTF-8 are U+FFFD
        # (fusetrace/trace/names.py): a name given with such bytes is made that text too
        object.__setattr__(
            self, "comms", tuple(os.fsencode(c)[:COMM_BYTES].decode("utf-8", "replace") for c in self.comms)
        )
        if self.path is not None:
            object.__setattr__(self, "path", readable(self.path))
            glob_regex(self.path)  # refused here, before the trace is read

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "Filters":
        ops = [op.strip() for given in args.op or () for op in given.split(",") if op.strip()]
        return cls(
            ops=tuple(dict.fromkeys(ops)),
            pids=tuple(args.pid or ()),
            comms=tuple(args.comm or ()),
            path=args.path,
            since=args.since,
            until=args.until,
        )

    def options(self) -> list[str]:
        """The filters as the command line gives them."""
        out = [f"--op {','.join(self.ops)}"] if self.ops else []
        out += [f"--pid {p}" for p in self.pids] + [f"--comm {c}" for c in self.comms]
        out += [f"--{k} {v}" for k, v in (("path", self.path), ("since", self.since), ("until", self.until)) if v]
        return out


NO_FILTERS = Filters()  # the defaults: every record kept (a constant, to be a default argument)


class Selection:
    """`filters` resolved against one trace, whose `metadata` and first record's start
    (`origin_ns`) it is given: `since_ns`/`until_ns` as trace times (CLOCK_MONOTONIC ns),
    --path below its mount, the whole as one DuckDB expression."""

    def __init__(
        self, filters: Filters, metadata: meta.Metadata, metadata_error: str | None, origin_ns: int | None
    ) -> None:
        self.filters = filters
        self.metadata = metadata
        self.metadata_error = metadata_error
        self.origin_ns = origin_ns
        self.since_ns = self._instant("since", filters.since)
        self.until_ns = self._instant("until", filters.until)
        if self.since_ns is not None and self.until_ns is not None and self.since_ns >= self.until_ns:
            raise BadValue(f"--since {filters.since} is not before --until {filters.until}")

    def expression(self) -> duckdb.Expression | None:
        """The filters as one DuckDB expression, their values constants of it (None for none).
        --comm needs a trace with process names: the caller checks its columns first."""
        f = self.filters
        terms = []
        if f.ops:
            terms.append(_column("op").isin(*map(duckdb.ConstantExpression, f.ops)))
        if f.pids:
            terms.append(_column("pid").isin(*(duckdb.ConstantExpression(int(p)) for p in f.pids)))
        if f.comms:
            terms.append(_column("comm").isin(*map(duckdb.ConstantExpression, f.comms)))
        if f.path is not None:
            regex = duckdb.ConstantExpression(glob_regex(self._below_mount(f.path)))
            terms.append(duckdb.FunctionExpression("regexp_full_match", _column("path"), regex))
        if self.since_ns is not None:
            terms.append(_column("start_ns") >= duckdb.ConstantExpression(self.since_ns))
        if self.until_ns is not None:
            terms.append(_column("start_ns") < duckdb.ConstantExpression(self.until_ns))
        return functools.reduce(operator.and_, terms) if terms else None

    def shown(self) -> FiltersShown | None:
        """The filters as the report shows them (None for none)."""
        f = self.filters
        if f == NO_FILTERS:
            return None
        return {
            "op": list(f.ops),
            "pid": list(f.pids),
            "comm": list(f.comms),
            "path": f.path,
            "path_regex": None if f.path is None else glob_regex(self._below_mount(f.path)),
            "since": f.since,
            "since_ns": self.since_ns,
            "until": f.until,
            "until_ns": self.until_ns,
            "options": f.options(),
        }

    def _below_mount(self, pattern: str) -> str:
        """A glob written with the mountpoint (or source) in front, as the trace's paths are not."""
        for root in (self.metadata.get("mountpoint"), self.metadata.get("source")):
            root = readable(root).rstrip("/") if isinstance(root, str) else ""  # as the glob was made (Filters)
            if root and pattern.startswith(root + "/"):
                return pattern[len(root) :]
        return pattern

    def _instant(self, option: str, text: str | None) -> int | None:
        """--since/--until T as a trace time (CLOCK_MONOTONIC ns): seconds since the first
        record, a time of day (its occurrence within 12 hours of the first record, local
        time) or an ISO date and time (local time unless it gives its zone)."""
        if text is None:
            return None
        origin = self.origin_ns or 0
        try:
            seconds = float(text)
        except ValueError:
            pass
        else:
            if not math.isfinite(seconds) or seconds < 0:
                raise BadValue(f"--{option} {text}: seconds since the trace's first record must be 0 or more")
            return origin + round(seconds * 1e9)
        wall: datetime | None = None
        try:
            if re.fullmatch(r"\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?", text):
                of_day = time.fromisoformat(text if len(text.split(":")[0]) == 2 else "0" + text)
            else:
                wall = datetime.fromisoformat(text).astimezone()
        except ValueError:
            raise BadValue(
                f"--{option} {text}: not seconds since the trace's first record (12.5), a time of day "
                f"(14:03:07) or a date and time (2026-11-23T14:03:07)"
            ) from None
        if "start_wall_ns" not in self.metadata or "start_monotonic_ns" not in self.metadata:
            why = self.metadata_error or f"no start_wall_ns in its {meta.NAME}"
            raise BadValue(
                f"--{option} {text}: this trace has no clock mapping ({why}); give seconds since its first record"
            )
        if wall is None:
            first = datetime.fromtimestamp(meta.to_wall_ns(self.metadata, origin) / 1e9).astimezone()
            wall = datetime.combine(first.date(), of_day, tzinfo=first.tzinfo)
            wall += timedelta(days=round((first - wall) / timedelta(days=1)))  # the nearest occurrence
        wall_ns = round(wall.timestamp() * 1e6) * 1000
        monotonic_ns: int = self.metadata["start_monotonic_ns"]  # both checked present above
        start_wall_ns: int = self.metadata["start_wall_ns"]
        return monotonic_ns + (wall_ns - start_wall_ns)


def _column(name: str) -> duckdb.Expression:
    return duckdb.ColumnExpression(name)
