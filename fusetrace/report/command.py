"""`fusetrace report DIR`: the command, from its checked arguments to the text or JSON on
stdout (and the PNG of --plot)."""

import argparse
import json
import os

import duckdb

from ..errors import BadValue, UserError
from .filters import Filters
from .plots import plot_timeline
from .query import Trace, expand_traces
from .render import render


def run(args: argparse.Namespace) -> int:
    """The `fusetrace report` command (its arguments: fusetrace/cli.py)."""
    if args.plot is not None:
        args.timeline = True  # the plot draws the timeline: asking for it asks for that
        if not args.plot.lower().endswith(".png"):
            raise BadValue(f"--plot {args.plot}: the plot is a PNG; name the file .png")
        folder = os.path.dirname(os.path.abspath(args.plot))
        if not os.path.isdir(folder):
            raise UserError(f"--plot {args.plot}: no such directory {folder}")
    filters = Filters.from_args(args)
    (directories,) = expand_traces(args.trace_dir)
    try:
        trace = Trace(directories, filters)
        s = trace.summary(args.by, args.histogram, None if args.json else args.top, args.timeline)
    except duckdb.Error as exc:
        what = directories[0] if len(directories) == 1 else " ".join(args.trace_dir)
        raise UserError(f"{what}: cannot read the trace: {str(exc).splitlines()[0]}") from None
    if args.plot is not None and s["timeline"] is not None:
        try:
            plot_timeline(args.plot, s)
        except OSError as exc:
            raise UserError(f"--plot {args.plot}: cannot write it: {exc.strerror or exc}") from None
        s["timeline"]["plot"] = os.path.abspath(args.plot)
    print(json.dumps(s, indent=2) if args.json else render(s))
    return 0
