"""`fusetrace scenario list` and `fusetrace scenario run`."""

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from ..errors import BadValue, UserError
from ..texttable import table as text_table
from . import application, runner, spec
from .progress import Progress


def list_scenarios(args: argparse.Namespace) -> int:
    rows = []
    for name in spec.ids():
        s = spec.load(name)
        figures = sum(len(step.published) for step in s.steps)
        missing = runner.missing_tools(s)
        rows.append(
            [
                s.id,
                s.profile,
                str(figures) if figures else "-",
                s.title + (f"  (missing: {', '.join(missing)})" if missing else ""),
            ]
        )
    print(text_table(["scenario", "profile", "published", "what"], rows, "llrl"))
    return 0


def run_scenarios(args: argparse.Namespace) -> int:
    if args.all and args.names:
        raise BadValue(f"scenario run: --all runs every scenario; give it no names (got: {', '.join(args.names)})")
    names = spec.ids() if args.all else args.names
    if not names:
        raise BadValue("scenario run: name one or more scenarios, or --all (see: fusetrace scenario list)")
    scenarios = [spec.load(n) for n in names]  # an unknown name: one line listing the known ones
    out = writable_dir(args.out)
    for s in scenarios:  # everything that can be checked, before anything runs
        runner.preflight(s, args.profile, args.overrides)
    failed = []
    for s in scenarios:
        print(header(s, args.fast, args.profile))
        run_dir = out / s.id
        try:
            run_dir.mkdir(exist_ok=True)
        except OSError as exc:
            raise UserError(f"--out {args.out}: cannot create {run_dir} ({exc.strerror or exc})") from None
        try:
            result = runner.run(
                s,
                run_dir,
                fast=args.fast,
                profile=args.profile,
                sets=args.overrides,
                clients=args.clients,
                progress=Progress(s.id, s.steps),
            )
        except UserError as exc:
            print(f"fusetrace: {exc}", file=sys.stderr)
            failed.append(s.id)
            continue
        try:
            write_run(run_dir, result)
        except OSError as exc:
            raise UserError(
                f"--out {args.out}: cannot write {s.id}'s results ({exc.strerror or exc}{_where(exc)})"
            ) from None
        print(table(result["rows"]))
        if "application" in result:
            print("\nwhat the application saw (from the first step's start):")
            print(text_table(application.HEAD, application.table(result["application"]), "lrlrrrr"))
        print(f"\n{s.id}: {result['duration_s']:.0f} s; report in {run_dir / 'index.html'}\n")
    try:
        write_index(out)
    except OSError as exc:
        raise UserError(f"--out {args.out}: cannot write the index ({exc.strerror or exc}{_where(exc)})") from None
    if failed:
        print(f"fusetrace: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def writable_dir(path: str) -> Path:
    """`path` as a directory that files can be created in (made if missing);
    UserError naming it and why not."""
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UserError(f"--out {path}: exists and is not a directory") from None
    except OSError as exc:
        raise UserError(f"--out {path}: cannot create it ({exc.strerror or exc}{_where(exc, path)})") from None
    try:  # a directory of /proc or /sys, or a read-only mount, takes no new files even for root
        os.rmdir(tempfile.mkdtemp(prefix=".fusetrace-probe-", dir=out))
    except OSError as exc:
        raise UserError(f"--out {path}: cannot create files there ({exc.strerror or exc})") from None
    return out


def _where(exc: OSError, named: str = "") -> str:
    return f": {exc.filename}" if exc.filename and str(exc.filename) != named else ""


def header(s: spec.Scenario, fast: bool, profile: str | None) -> str:
    lines = [
        f"== {s.id}: {s.title}",
        f"   measured on: {s.system}",
        f"   source: {s.source}",
        f"   emulated with: {profile or s.profile}" + (f", {', '.join(s.overrides())}" if s.overrides() else ""),
    ]
    if s.scaling:
        lines.append(f"   scaled: {s.scaling}")
    if fast:
        lines.append(f"   FAST MODE: {s.fast or 'shorter runs'}")
    return "\n".join(lines)


def table(rows: list[dict]) -> str:
    """The side-by-side table of a run's rows: metric, emulated, published, ratio; "-" where
    a row has no figure (its note says why)."""
    body = [
        [
            r["step"],
            r["metric"],
            figure(r["emulated"]),
            figure(r["published"]),
            f"{r['ratio']:.2f}" if r["ratio"] is not None else "-",
            r["note"],
        ]
        for r in rows
    ]
    return text_table(["step", "metric", "emulated", "published", "ratio", "note"], body, "llrrrl")


def figure(x: float | None) -> str:
    """A table's figure: two decimals, "-" where there is none."""
    return "-" if x is None else f"{x:,.2f}"


def write_run(run_dir: Path, result: dict) -> None:
    """result.json, the plots and the run's HTML page."""
    from . import html, plots

    (run_dir / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    images = plots.write_all(run_dir, result)
    html.write_run(run_dir, result, images)


def write_index(out: Path) -> None:
    from . import html

    html.write_index(out)
