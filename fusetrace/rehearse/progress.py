"""A progress line on standard error while a command works through a long trace.

`fusetrace export` and `replay --as-fast-as-possible` of a million records take tens of
seconds (see docs/BENCHMARKS.md, "Figures behind design choices: rehearse/progress.py"): a
person at a terminal is told every INTERVAL seconds how far it has got and how long is
left, as tools that copy or sort a lot do.  Nothing is said when standard error is not a
terminal (a log, a pipe, a test), where the lines would only be noise.
"""

import sys
import time
from collections.abc import Iterable, Iterator
from typing import TextIO, TypeVar

T = TypeVar("T")
INTERVAL = 5.0  # seconds between lines
EVERY = 1024  # items between looks at the clock


def counted(
    items: Iterable[T],
    what: str,
    total: int,
    *,
    of_total: bool = True,
    out: TextIO | None = None,
    interval: float = INTERVAL,
) -> Iterator[T]:
    """`items` as they are, with a line on `out` (standard error) every `interval` seconds
    when it is a terminal: how many of `total` (or, when not `of_total`, because a filter
    keeps only some, of the trace's `total` records read so far) in how long."""
    out = sys.stderr if out is None else out
    if not out.isatty():
        yield from items
        return
    started = time.monotonic()
    due = started + interval
    for done, item in enumerate(items, 1):
        yield item
        if done % EVERY and interval:
            continue
        now = time.monotonic()
        if now < due:
            continue
        due = now + interval
        elapsed = now - started
        if of_total and total:
            left = elapsed * (total - done) / done
            line = (
                f"{what}: {done:,} of {total:,} records ({100 * done / total:.0f} %) in {elapsed:.0f} s, "
                f"about {left:.0f} s left"
            )
        else:
            line = f"{what}: {done:,} records written in {elapsed:.0f} s (of a trace of {total:,})"
        print(line, file=out, flush=True)
