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
    if args.nfs or args.interval is not None:
        return _nfs(args, directories, filters)
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


def _nfs(args: argparse.Namespace, directories: list[str], filters: Filters) -> int:
    """`report --nfs`: the NFS view (fusetrace/report/nfs.py) instead of the summary."""
    from . import nfs

    if not args.nfs:
        raise BadValue(f"--interval {args.interval:g}: is the NFS view's; give --nfs with it")
    given = [o for o, on in (("--by", args.by), ("--timeline", args.timeline), ("--histogram", args.histogram)) if on]
    if given:
        raise BadValue(f"--nfs: a view of its own; give it without {given[0]}")
    try:
        v = nfs.view(Trace(directories, filters), args.interval)
    except duckdb.Error as exc:
        raise UserError(f"{directories[0]}: cannot read the trace: {str(exc).splitlines()[0]}") from None
    print(json.dumps(v, indent=2) if args.json else nfs.render(v))
    return 0
