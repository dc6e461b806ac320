"""`fusetrace export DIR --format fio-iolog|perfetto|csv -o FILE`: a trace in another
tool's format (iolog.py, perfetto.py, nfscsv.py say what each holds).

The trace is streamed in start order (bounded memory, however long); the output is
written under a hidden temporary name in its directory and renamed into place, so an
error leaves no half-written file, and a symbolic link at FILE is replaced, never
followed.  An existing FILE is overwritten.  It is made mode 0600, as the trace's own
files are: it holds the same paths and pids.
"""

import io
import os
import sys
from typing import BinaryIO

import duckdb

from ..errors import UserError
from ..texttable import printable
from ..trace import metadata as meta
from ..trace import reader
from . import iolog, nfscsv, perfetto
from .rows import Outcome, last_closes, records


def run(args) -> int:
    """The command: args has trace_dir, format and output."""
    trace_dir, output = args.trace_dir, args.output
    reader.checked_parts(trace_dir)  # NoTrace or DamagedTrace, before anything is written
    _check_output(output, trace_dir)
    done: list[Outcome] = []

    def fill(f: BinaryIO) -> None:
        # fio's iolog names files by their exact bytes; the others are UTF-8 (their writers
        # give names that are not as text, fusetrace/trace/names.py's readable)
        out = io.TextIOWrapper(
            f, encoding="utf-8", newline="", errors="surrogateescape" if args.format == "fio-iolog" else "strict"
        )
        done.append(_export(args.format, trace_dir, out))
        out.flush()
        out.detach()  # atomic_write flushes, syncs and closes the file itself

    try:
        meta.atomic_write(output, fill)
    except duckdb.Error as exc:
        raise UserError(f"{printable(trace_dir)}: cannot read the trace: {str(exc).splitlines()[0]}") from None
    except OSError as exc:
        raise UserError(f"{output}: cannot write it: {exc.strerror or exc}") from None
    for line in done[0].notes:
        print(f"fusetrace export: {line}", file=sys.stderr)
    print(f"{output}: {done[0].summary}")
    return 0


def _export(fmt: str, trace_dir: str, out: io.TextIOWrapper) -> Outcome:
    if fmt == "fio-iolog":
        t0, wanted = iolog.survey(trace_dir)
        return iolog.write(records(trace_dir, iolog.COLUMNS, iolog.WHERE), out, t0, wanted, last_closes(trace_dir))
    if fmt == "perfetto":
        return perfetto.write(records(trace_dir, perfetto.COLUMNS), out, reader.metadata(trace_dir))
    return nfscsv.write(records(trace_dir, nfscsv.COLUMNS, nfscsv.WHERE), out)


def _check_output(output: str, trace_dir: str) -> None:
    """Refuse, before any work, an output that cannot be written where asked."""
    if os.path.isdir(output) and not os.path.islink(output):
        raise UserError(f"{output}: is a directory; give a file name")
    parent = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(parent):
        raise UserError(f"{output}: no such directory: {parent}")
    if os.path.samefile(parent, trace_dir):
        raise UserError(
            f"{output}: inside the trace directory, where readers of the trace would take it "
            f"for part of it; write it elsewhere"
        )
