"""`fusetrace scenario list` and `fusetrace scenario run`."""

import json
import sys
from pathlib import Path

from fusetrace.errors import UserError
from fusetrace.texttable import table
from . import runner, spec
from .progress import Progress


def list_scenarios(args) -> int:
    rows = []
    for name in spec.ids():
        s = spec.load(name)
        figures = sum(len(step.published) for step in s.steps)
        missing = runner.missing_tools(s)
        rows.append([s.id, s.profile, str(figures) if figures else "-",
                     s.title + (f"  (missing: {', '.join(missing)})" if missing else "")])
    print(table(["scenario", "profile", "published", "what"], rows, "llrl"))
    return 0


def run_scenarios(args) -> int:
    names = spec.ids() if args.all else args.names
    if not names:
        raise UserError("scenario run: name one or more scenarios, or --all (see: fusetrace scenario list)")
    scenarios = [spec.load(n) for n in names]
    for s in scenarios:  # everything that can be checked, before anything runs
        runner.preflight(s, args.profile, args.overrides)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    failed = []
    for s in scenarios:
        print(header(s, args.fast, args.profile))
        run_dir = out / s.id
        run_dir.mkdir(exist_ok=True)
        try:
            result = runner.run(s, run_dir, fast=args.fast, profile=args.profile, sets=args.overrides,
                                progress=Progress(s.id, s.steps))
        except UserError as exc:
            print(f"fusetrace: {exc}", file=sys.stderr)
            failed.append(s.id)
            continue
        write_run(run_dir, result)
        print(text(result))
        print(f"\n{s.id}: {result['duration_s']:.0f} s; report in {run_dir / 'index.html'}\n")
    write_index(out)
    if failed:
        print(f"fusetrace: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def header(s: spec.Scenario, fast: bool, profile: str | None) -> str:
    lines = [f"== {s.id}: {s.title}", f"   measured on: {s.system}", f"   figures: {s.source}",
             f"   emulated with: {profile or s.profile}" + (f", {', '.join(s.overrides())}" if s.overrides() else "")]
    if s.scaling:
        lines.append(f"   scaled: {s.scaling}")
    if fast:
        lines.append(f"   FAST MODE: {s.fast or 'shorter runs'}")
    return "\n".join(lines)


def text(result: dict) -> str:
    """The side-by-side table: metric, emulated, published, ratio."""
    body = [[r["step"], r["metric"], f"{r['emulated']:,.2f}",
             f"{r['published']:,.2f}" if r["published"] is not None else "-",
             f"{r['ratio']:.2f}" if r["ratio"] is not None else "-", r["note"]]
            for r in result["rows"]]
    return table(["step", "metric", "emulated", "published", "ratio", "note"], body, "llrrrl")


def write_run(run_dir: Path, result: dict) -> None:
    """result.json, the plots and the run's HTML page."""
    from . import html, plots

    (run_dir / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    images = plots.write_all(run_dir, result)
    html.write_run(run_dir, result, images)


def write_index(out: Path) -> None:
    from . import html

    html.write_index(out)
