"""docs/ARCHITECTURE.md names one place to add a trace column and one to add a profile
key; these fail when that place is no longer the only one needed."""

import ast
import dataclasses
import inspect
import re
import textwrap
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from fusetrace.emulator.params import SPECS, Params
from fusetrace.emulator.profiles import apply_overrides, load_profile
from fusetrace.server.pipeline import Pipeline
from fusetrace.trace import reader, writer
from fusetrace.trace.schema import COLUMNS, RECORD_SCHEMA, TraceRecord
from fusetrace.trace.writer import TraceWriter

DOCS = next(p for p in Path(__file__).resolve().parents if (p / "docs").is_dir()) / "docs"  # wherever tests/ groups it


def _value(i: int, field: pa.Field) -> object:
    """A value of the column's type that no other column is given."""
    if pa.types.is_integer(field.type):
        return 10**12 + i if field.name == "start_ns" else 1000 + i
    return f"/v{i}" if field.name.startswith("path") else f"v{i}"


def _calls(fn: Callable[..., object], name: str) -> list[ast.Call]:
    """The calls of a method called `name` in the source of `fn`."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == name
    ]


def _name(arg: ast.expr) -> str:
    """What an argument is named by: a variable's name, or an attribute's (`site.path`: path)."""
    return arg.attr if isinstance(arg, ast.Attribute) else arg.id if isinstance(arg, ast.Name) else ast.unparse(arg)


def test_every_trace_column_is_filled_from_a_source_of_its_name():
    """TraceWriter.add writes each of TraceRecord's fields from the attribute of its name
    (`site.path`: checked by mypy against trace/sources.py) or a variable of its name, in
    its place in the packed integers or the strings; and what the pipeline works out
    itself reaches add's parameters by position (keywords cost too much on the loop),
    each as a name spelt as the parameter is.  A column added to TraceRecord but not
    filled, or two values swapped, fails here."""
    (pack,) = _calls(TraceWriter.add, "pack")
    (extend,) = _calls(TraceWriter.add, "extend")
    assert [_name(a) for a in pack.args] == [f.name for f in writer._INT_COLUMNS]
    assert isinstance(extend.args[0], ast.Tuple)
    assert [_name(a) for a in extend.args[0].elts] == [f.name for f in writer._STR_COLUMNS]
    params = list(inspect.signature(TraceWriter.add).parameters)
    parts = params.index("model") + 1  # self, the times and the five parts (sources.py)
    for fn in (Pipeline._trace, TraceWriter.record):
        (add,) = _calls(fn, "add")
        assert [_name(a) for a in add.args[parts - 1 :]] == params[parts:], fn.__qualname__


def test_a_trace_column_is_a_field_of_trace_record_and_nothing_else(tmp_path):
    """Each field of TraceRecord, given by name, comes back in its own column through the
    writer and the reader; an older trace without it reads as its default;
    TRACE_FORMAT.md has its row."""
    given = {f.name: _value(i, f) for i, f in enumerate(RECORD_SCHEMA)}
    with TraceWriter(tmp_path / "t", {"host": "h"}) as w:
        w.record(TraceRecord(**given))  # type: ignore[arg-type]
    batches = list(reader.ordered_batches(str(tmp_path / "t")))
    [back] = pa.Table.from_batches(batches).to_pylist()
    time = back.pop("time")  # the wall clock of start_ns, through the metadata's clock pair
    assert back == {**given, "host": "h", "path_raw": None, "path2_raw": None, "sample": 1}
    m = reader.metadata(str(tmp_path / "t"))
    assert time.value == given["start_ns"] + m["start_wall_ns"] - m["start_monotonic_ns"]
    later = [c for c in COLUMNS if c not in reader.REQUIRED and c not in ("host", "time")]
    assert sorted(reader.DEFAULTS) == sorted(later)
    documented = set(re.findall(r"^\| `(\w+)` \|", (DOCS / "TRACE_FORMAT.md").read_text(), re.MULTILINE))
    assert set(COLUMNS) <= documented


def _text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def test_a_profile_key_is_a_field_of_params_and_nothing_else(tmp_path):
    """Each field of Params has its description and kind, a row in EMULATOR.md's parameter
    table, and is taken from a profile file and from --set with nothing else to change."""
    table = "\n".join(line for line in (DOCS / "EMULATOR.md").read_text().splitlines() if line.startswith("| `"))
    profile = tmp_path / "every-key.toml"
    lines = []
    for f in dataclasses.fields(Params):
        spec = SPECS[f.name]
        assert spec["doc"] and spec["kind"], f.name
        assert f"`{f.name}`" in table, f"{f.name}: no row in docs/EMULATOR.md's parameter table"
        value = f.default
        lines.append(f"{f.name} = {_text(value) if isinstance(value, (bool, int, float)) else repr(value)}")
        assert getattr(apply_overrides(Params(), [f"{f.name}={_text(value)}"]), f.name) == value
    profile.write_text("\n".join(lines) + "\n")
    assert load_profile(profile) == Params()
