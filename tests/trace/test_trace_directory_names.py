"""A trace directory's name may be any bytes a path holds: every command that reads a trace
reads one whose name is not UTF-8 (and has a quote, a backslash and a newline) as it reads
the same trace under a plain name.  pyarrow and DuckDB take only UTF-8 names; before the
reader handed them /proc/self/fd/N/<part>, each of these commands ended in a
UnicodeEncodeError traceback."""

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from support import run_in_process
from support.damaged_traces import COMMANDS, good_trace, scratch

from fusetrace.texttable import printable

BAD = "it's \\ \n" + "\udcff"  # os.fsdecode(b"it's \\ \n\xff")
# Each command that reads a trace, and report over a fleet (the trace and another).
READERS = {**COMMANDS, "report, a fleet": lambda t, good, tmp: ["report", str(t), str(good)]}
# Masked in replay's and simulate's output: wall-clock figures with their units (a replay as
# fast as possible may take 900 µs or 1.1 ms), and the concurrency it happened to reach.
CLOCKED = re.compile(r"\d[\d.,]*\s?(?:[nµm]?s\b)?|concurrency: .*")


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    return good_trace(tmp_path_factory.mktemp("good") / "t")


def output(name: str, trace: Path, good: Path, tmp: Path) -> tuple[int | None, list[str], str]:
    """(exit code, stdout's lines, stderr) of command `name` over `trace`, the trace's
    name in any form it is printed in (as given, printable, JSON) read as 'TRACE'.  Lines
    sorted: compare lists operations of equal counts in no fixed order."""
    code, out, err = run_in_process(READERS[name](trace, good, scratch(tmp, "s")))
    for form in sorted({str(trace), printable(str(trace)), json.dumps(str(trace))[1:-1]}, key=len, reverse=True):
        out, err = out.replace(form, "TRACE"), err.replace(form, "TRACE")
    if name in ("replay", "simulate"):
        out = CLOCKED.sub("N", out)
    return code, sorted(out.splitlines()), err


@pytest.mark.parametrize("name", READERS)
def test_a_trace_directory_whose_name_is_not_utf8_reads_as_any(tmp_path, good, name):
    plain, bad = tmp_path / "plain" / "t", tmp_path / BAD / "t"
    shutil.copytree(good, plain)
    shutil.copytree(good, bad)
    expected = output(name, plain, good, tmp_path)
    assert expected[0] == 0 and expected[2] == "", expected
    assert output(name, bad, good, tmp_path) == expected


@pytest.mark.parametrize("name", READERS)
def test_a_part_whose_own_name_is_not_utf8_is_skipped_with_a_warning(tmp_path, good, name):
    """No writer names a part so: a reader meets it as a part that cannot be read, and
    `compact`, which would remove the files it merges, refuses the directory, changing nothing."""
    t = tmp_path / "t"
    shutil.copytree(good, t)
    shutil.copy(t / "part-000000.parquet", t / "part-\udcff.parquet")
    before = sorted(os.listdir(t))
    code, _, err = run_in_process(READERS[name](t, good, scratch(tmp_path, "s")))
    if name == "compact":
        assert code == 2 and err.count("\n") == 1, err
        assert "holds part-?.parquet, which no fusetrace writer names: not a trace" in err
        assert sorted(os.listdir(t)) == before
        return
    assert code == 0 and err.count("\n") == 1, err
    assert f"warning: {t}/part-?.parquet: not a readable trace part (its name is not UTF-8" in err


@pytest.mark.parametrize("name", READERS)
def test_no_trace_under_such_a_name_is_one_line(tmp_path, good, name):
    code, _, err = run_in_process(READERS[name](tmp_path / BAD, good, scratch(tmp_path, "s")))
    assert code == 2 and err == f"fusetrace: {printable(str(tmp_path / BAD))}: no such trace directory\n", err
