"""Self-contained HTML reports of scenario runs: DIR/<id>/index.html for one run, with its
plots embedded as data: URIs, and DIR/index.html listing every run in DIR.

No scripts, no external files, nothing fetched: a page can be mailed or archived alone.
Every text from a result goes through html.escape.
"""

import base64
import json
from html import escape
from pathlib import Path
from urllib.parse import quote

from . import application
from .plots import Plot

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; max-width: 960px; margin: 2em auto; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.2em; margin-top: 1.8em; }
.sub { color: #666; margin-top: 0; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 0.2em 1em; }
dt { font-weight: 600; } dd { margin: 0; }
table { border-collapse: collapse; font-size: 14px; margin: 0.5em 0; }
th, td { padding: 0.25em 0.7em; border-bottom: 1px solid #ddd; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 1em 0; } img { max-width: 100%; border: 1px solid #eee; }
figcaption, .note { color: #555; font-size: 14px; }
.fast { background: #fff3cd; padding: 0.1em 0.4em; }
"""


def write_run(run_dir: Path, result: dict, plots: list[Plot]) -> Path:
    """Write run_dir/index.html: the run's description, table and plots (the PNGs that
    `plots` says were drawn, read from run_dir)."""
    run_dir = Path(run_dir)
    body = [
        f"<h1>{escape(result['title'])}</h1>",
        f'<p class="sub">{escape(result["id"])} · started {escape(result["started"])} · '
        f"{result['duration_s']:.1f} s</p>",
        _description(result),
        "<h2>Emulated and published figures</h2>",
        figures_table(result["rows"]),
        *_application(result),
        "<h2>Plots</h2>",
        *(_plot(run_dir, p) for p in plots),
    ]
    path = run_dir / "index.html"
    path.write_text(_page(result["title"], body), encoding="utf-8")
    return path


def write_index(out_dir: Path) -> Path:
    """Write out_dir/index.html: every run in out_dir (each <id>/result.json), its table
    inline and a link to its page."""
    out_dir = Path(out_dir)
    body = ["<h1>Scenario runs</h1>"]
    for result_json in sorted(out_dir.glob("*/result.json")):
        body.append(_index_entry(result_json))
    if len(body) == 1:
        body.append('<p class="note">No runs in this directory.</p>')
    path = out_dir / "index.html"
    path.write_text(_page("Scenario runs", body), encoding="utf-8")
    return path


def figures_table(rows: list[dict]) -> str:
    """The side-by-side table; a figure's cell is blank where the row has none (nothing
    published, or a step not run), and its note says why.  A step's name is shown on its
    first row only."""
    head = "".join(f"<th>{h}</th>" for h in ("step", "metric", "emulated", "published", "ratio", "note"))
    lines, last = [], None
    for r in rows:
        step = escape(r["step"]) if r["step"] != last else ""
        last = r["step"]
        lines.append(
            f"<tr><td>{step}</td><td>{escape(r['metric'])}</td>"
            f'<td class="num">{_number(r["emulated"])}</td><td class="num">{_number(r["published"])}</td>'
            f'<td class="num">{_ratio(r["ratio"])}</td><td>{escape(r["note"])}</td></tr>'
        )
    if not lines:
        return '<p class="note">No figures: the run measured nothing.</p>'
    return (
        f"<table><thead><tr>{head}</tr></thead><tbody>\n" + "\n".join(lines) + "\n</tbody></table>"
        '<p class="note">ratio = emulated / published</p>'
    )


def _application(result: dict) -> list[str]:
    """A scripted run's events and fault rules, and what the application saw: errors and
    latency per operation (scenarios/application.py)."""
    if "application" not in result:
        return []
    scripted = [f"<li>event: {escape(json.dumps(e))}</li>" for e in result["scripted"]["events"]]
    scripted += [f"<li>fault rule: {escape(json.dumps(r))}</li>" for r in result["scripted"]["faults"]]
    head = "".join(f"<th>{escape(h)}</th>" for h in application.HEAD)
    rows = "\n".join(
        "<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>"
        for row in application.table(result["application"])
    )
    return [
        "<h2>What the application saw</h2>",
        f"<ul>{''.join(scripted)}</ul>",
        f"<table><thead><tr>{head}</tr></thead><tbody>\n{rows}\n</tbody></table>",
        "<p class=\"note\">latency per operation from the run's trace; times after the first step's start, "
        "when the events and rules took effect</p>",
    ]


def _description(result: dict) -> str:
    overrides = ", ".join(f"{k} = {v}" for k, v in result["overrides"].items()) or "none"
    fast = (
        f'<span class="fast">yes: {escape(result.get("fast_note") or "shorter runs")}</span>'
        if result["fast"]
        else "no"
    )
    items = [
        ("System", escape(result["system"])),
        ("Source", escape(result["source"])),
        ("Profile", escape(result["profile"])),
        ("Overrides", escape(overrides)),
        ("Scaling", escape(result["scaling"]) or "none"),
        ("Fast mode", fast),
    ]
    return "<dl>" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in items) + "</dl>"


def _plot(run_dir: Path, plot: Plot) -> str:
    if not plot.drawn:
        return f'<h3>{escape(plot.title)}</h3><p class="note">Not drawn: {escape(plot.note)}</p>'
    data = base64.b64encode((run_dir / plot.file).read_bytes()).decode("ascii")
    return (
        f'<h3>{escape(plot.title)}</h3><figure><img alt="{escape(plot.title)}" '
        f'src="data:image/png;base64,{data}"><figcaption>{escape(plot.note)}</figcaption></figure>'
    )


def _index_entry(result_json: Path) -> str:
    run = result_json.parent.name
    link = f"{quote(run)}/index.html"
    try:
        result = json.loads(result_json.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return f'<h2>{escape(run)}</h2><p class="note">{escape(run)}/result.json unreadable: {escape(str(exc))}</p>'
    fast = ' · <span class="fast">fast mode</span>' if result["fast"] else ""
    return (
        f'<h2><a href="{escape(link)}">{escape(result["title"])}</a></h2>'
        f'<p class="sub">{escape(run)} · {escape(result["system"])} · profile {escape(result["profile"])}'
        f"{fast}</p>" + figures_table(result["rows"])
    )


def _page(title: str, body: list[str]) -> str:
    return (
        f'<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )


def _number(x: float | None) -> str:
    """As `fusetrace scenario run` prints it; blank for no figure."""
    return "" if x is None else f"{x:,.2f}"


def _ratio(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}"
