"""Every command that reads a trace meets a damaged or hostile one with exit 0, or exit 2
and one line naming the part, the column and the record; never a traceback (issue 37,
item 3).  The damaged traces are made here (tests/support/damaged_traces.py, and Hypothesis over
the schema); the commands run in this process, as tests/report/test_report.py runs `report`,
but for a handful of real runs of the command line.

Before the reader checked its parts, the sweep (test_every_command_meets_every_damage)
got 67 tracebacks in 450 runs (the first 50 damages, 9 commands); now 0 in 531 (59)."""

import json
import os
import resource
import select
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import fusetrace, one_line_error, run_in_process
from support.damaged_traces import COMMANDS, DAMAGES, INT64_MAX, _rewrite, damaged, good_trace, scratch

from fusetrace.rehearse import progress
from fusetrace.trace import reader
from fusetrace.trace.schema import SCHEMA


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    return good_trace(tmp_path_factory.mktemp("good") / "t")


def assert_met(argv: list[str], done: tuple[int | None, str, str]) -> None:
    """Exit 0 (warnings allowed), or exit 2 with exactly one line; no traceback."""
    code, _, err = done
    assert code is not None and "Traceback" not in err, (argv, err)
    assert code in (0, 2), (argv, code, err)
    if code == 2:
        assert len(err.strip().splitlines()) == 1, (argv, err)


def test_the_good_trace_passes_every_command(good, tmp_path):
    for name, make in COMMANDS.items():
        argv = make(good, good, scratch(tmp_path, "s"))
        code, _, err = run_in_process(argv)
        assert code == 0 and err == "", (name, err)


# Each damage through one command, the commands in turn: every damage and every command
# in the quick suite; the slow sweep below runs every pair.
ROTATION = [(d, list(COMMANDS)[i % len(COMMANDS)]) for i, d in enumerate(DAMAGES)]


@pytest.mark.parametrize("damage, command", ROTATION)
def test_a_damage_met_by_a_command(tmp_path, good, damage, command):
    t = damaged(tmp_path, good, damage)
    argv = COMMANDS[command](t, good, scratch(tmp_path, "s"))
    assert_met(argv, run_in_process(argv))


@pytest.mark.slow
def test_every_command_meets_every_damage(tmp_path, good):
    runs, failed = 0, []
    for damage in DAMAGES:
        t = damaged(tmp_path, good, damage)
        for make in COMMANDS.values():
            argv = make(t, good, scratch(tmp_path, "s"))
            runs += 1
            try:
                assert_met(argv, run_in_process(argv))
            except AssertionError as exc:
                failed.append(str(exc)[:300])
    assert runs == len(DAMAGES) * len(COMMANDS) and not failed, failed


@pytest.mark.parametrize(
    "damage, needles",
    [
        ("op's levels spoiled", ["part-000000.parquet: not a readable trace part (its pages decode"]),
        ("path null", ["part-000000.parquet: record 3: path is null"]),
        ("path integer", ["part-000000.parquet: column path is int64, not a string"]),
        ("path_raw integer", ["part-000000.parquet: column path_raw is int64, not bytes"]),
        ("only start_ns and op", ["part-000000.parquet: no column dur_ns, inode, path", "start_ns to shaped_ns"]),
        ("dur_ns int64 max", ["record 3: dur_ns 9223372036854775807: out of range (0 to 9,007,199,254,740,992)"]),
        ("dur_ns negative", ["record 3: dur_ns -5: out of range"]),
        ("write size negative", ["record 3: size -4096: out of range"]),
        ("op null", ["record 3: op is null"]),
        ("start_ns uint64 max", ["record 3: start_ns 18446744073709551615: out of range"]),
        ("only part truncated", ["part-000000.parquet: not a readable trace part"]),
        ("only part spoiled inside", ["part-000000.parquet: not a readable trace part"]),
    ],
)
def test_what_is_refused_names_part_column_and_record(tmp_path, good, damage, needles):
    t = damaged(tmp_path, good, damage)
    code, _, err = run_in_process(["report", str(t)])
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"fusetrace: {t}/"), err
    for needle in needles:
        assert needle in err, err


def test_a_raw_name_climbing_out_of_the_target_replays_nothing_outside_it(tmp_path, good):
    t = damaged(tmp_path, good, "path_raw climbing out")
    target = scratch(tmp_path, "deep") / "a" / "b"
    target.mkdir(parents=True)
    run_in_process(["replay", str(t), str(target), "--as-fast-as-possible"])
    assert not [
        p
        for p, _, names in os.walk(os.fsencode(tmp_path))
        for n in [*names, os.path.basename(p)]
        if n.startswith(b"out")
    ]


def test_an_unknown_op_with_escapes_reaches_no_terminal(tmp_path, good):
    """Every command's output shows a hostile trace's text with '?' for what a terminal
    would act on: replay listed an unknown op raw among those it did not issue."""
    t = damaged(tmp_path, good, "op unknown, with escapes")
    for make in COMMANDS.values():
        argv = make(t, good, scratch(tmp_path, "s"))
        code, out, err = run_in_process(argv)
        assert code in (0, 2) and not {"\x1b", "\x07"} & set(out + err), (argv, out + err)


@pytest.mark.parametrize("damage", ["last part truncated", "last part empty", "last part spoiled inside"])
def test_a_damaged_part_beside_good_ones_is_skipped_with_a_warning(tmp_path, good, damage):
    t = damaged(tmp_path, good, damage)
    code, out, err = run_in_process(["report", str(t), "--json"])
    assert code == 0, err
    assert err == (
        f"fusetrace: warning: {t}/part-000099.parquet: not a readable trace part "
        f"({err.split('(', 1)[1].split(')')[0]}): skipped, the other part read\n"
    ), err
    assert json.loads(out)["records"] == 8  # the good part's, all of them


@pytest.mark.parametrize(
    "damage", ["metadata nested 100000 deep", "metadata wall time 2**200", "metadata int of 5000 digits"]
)
def test_a_hostile_metadata_is_read_around_with_a_warning(tmp_path, good, damage):
    t = damaged(tmp_path, good, damage)
    code, _, err = run_in_process(["export", str(t), "--format", "csv", "-o", str(tmp_path / "x.csv")])
    assert code == 0 and err.startswith(f"fusetrace: warning: {t}/_metadata.json: unreadable ("), err
    assert len(err.strip().splitlines()) == 1


def test_unknown_columns_and_older_formats_are_read(tmp_path, good):
    t = damaged(tmp_path, good, "extra columns path_raw")
    assert len(reader.checked_parts(str(t))) == 1
    old = shutil.copytree(good, tmp_path / "format1")
    _rewrite(old, lambda table: table.select(list(reader.REQUIRED)))  # format 1's columns
    (old / "_metadata.json").unlink()
    code, out, err = run_in_process(["report", str(old), "--json"])
    assert code == 0 and json.loads(out)["records"] == 8, err


# ---- Hypothesis over the schema: a value of any type, null or extreme, in any column ------

_VALUES = st.one_of(
    st.none(),
    st.integers(-(2**64), 2**64),
    st.sampled_from([INT64_MAX, -(2**63), 2**63, 2**62]),
    st.floats(allow_nan=True),
    st.text(max_size=5),
    st.binary(max_size=5),
    st.booleans(),
)


def _arrow(value: object) -> pa.Array:
    try:
        return pa.array([value])
    except (pa.ArrowInvalid, OverflowError):
        return pa.array([str(value)])


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    column=st.sampled_from([*SCHEMA.names, "path_raw"]),
    value=_VALUES,
    row=st.integers(0, 7),
    command=st.sampled_from(["report", "export csv", "export perfetto", "replay", "simulate"]),
)
def test_any_value_in_any_column(tmp_path_factory, good, column, value, row, command):
    tmp = tmp_path_factory.mktemp("h")
    t = shutil.copytree(good, tmp / "t")
    good_table = pq.read_table(sorted(good.glob("*.parquet"))[0])

    def change(_: pa.Table) -> pa.Table:
        full = good_table.column(column).to_pylist() if column in good_table.column_names else [None] * 8
        one = _arrow(value)
        try:
            values = pa.array(full, one.type).to_pylist()
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            values = [one[0].as_py()] * 8
        values[row] = one[0].as_py()
        array = pa.array(values, one.type if one.type != pa.null() else None)
        i = good_table.schema.get_field_index(column)
        return good_table.set_column(i, column, array) if i >= 0 else good_table.append_column(column, array)

    _rewrite(t, change)
    argv = COMMANDS[command](t, good, scratch(tmp, "s"))
    assert_met(argv, run_in_process(argv))


@settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    keep=st.floats(0, 1),
    nest=st.integers(1, 200_000),
    key=st.sampled_from(["start_wall_ns", "records", "host"]),
    big=st.integers(-(2**300), 2**300),
)
def test_truncation_and_metadata_of_any_depth_or_size(tmp_path_factory, good, keep, nest, key, big):
    tmp = tmp_path_factory.mktemp("h")
    t = damaged(tmp, good, "last part truncated")
    last = t / "part-000099.parquet"
    last.write_bytes(sorted(good.glob("*.parquet"))[0].read_bytes()[: int(keep * last.stat().st_size)])
    m = json.loads((t / "_metadata.json").read_text())
    m[key] = big
    (t / "_metadata.json").write_text(json.dumps(m)[:-1] + ', "deep": ' + "[" * nest + "]" * nest + "}")
    for argv in (["report", str(t)], ["export", str(t), "--format", "perfetto", "-o", str(tmp / "x.json")]):
        assert_met(argv, run_in_process(argv))


# ---- the real command line, a handful of times: exit status, one line, bounded -------------


@pytest.mark.parametrize(
    "damage, command, code",
    [
        ("last part truncated", "fit", 0),
        ("path null", "replay", 2),
        ("metadata nested 100000 deep", "export perfetto", 0),
        ("dur_ns int64 max", "report", 2),
    ],
)
def test_the_command_line_itself(tmp_path, good, damage, command, code):
    t = damaged(tmp_path, good, damage)
    done = fusetrace(*COMMANDS[command](t, good, scratch(tmp_path, "s")), check=False, timeout=60)
    assert "Traceback" not in done.stderr and done.returncode == code, done.stderr
    if code:
        one_line_error(done, str(t), code=code)
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss < 1 << 20, "over 1 GiB"  # KiB


def test_profiles_nested_deep_or_huge_are_one_line(tmp_path, good):
    deep, huge, long, fifo = (tmp_path / f"{n}.toml" for n in ("deep", "huge", "long", "fifo"))
    deep.write_text('base = "efs-tiny"\nx = ' + "[" * 5000 + "]" * 5000 + "\n")
    huge.write_text("# " + "x" * (2 << 20) + "\n")
    long.write_text("burst_mibps = " + "9" * 5000 + "\n")  # a traceback from tomllib's int()
    os.mkfifo(fifo)  # which the command waited on for good
    for path, says in (
        (deep, "arrays or tables nested too deep to read"),
        (huge, "over 1,048,576 bytes"),
        (long, "a number too long to read"),
        (fifo, "not a regular file"),
    ):
        for argv in (
            ["simulate", str(good), "--profile", str(path)],
            ["fit", str(good), "-o", str(tmp_path / "f.toml"), "--base", str(path)],
        ):
            code, _, err = run_in_process(argv)
            assert code == 2 and len(err.strip().splitlines()) == 1 and says in err and str(path) in err, err


# ---- a long read tells a terminal how far it has got --------------------------------------


def _lines_from(master: int, want: int) -> list[str]:
    """What a pty's other side was told, once `want` lines have come: the kernel hands a
    pty's writes over to the reader in its own time, a line or a few at a time."""
    got = b""
    deadline = time.monotonic() + 10
    while got.count(b"\n") < want and time.monotonic() < deadline:
        if select.select([master], [], [], max(0.0, deadline - time.monotonic()))[0]:
            got += os.read(master, 65536)
    return got.decode().splitlines()


def test_progress_is_told_to_a_terminal_only():
    master, slave = os.openpty()
    with open(slave, "w") as terminal:
        assert list(progress.counted(range(3), "fusetrace export", 3, out=terminal, interval=0)) == [0, 1, 2]
        assert list(progress.counted(range(2), "fusetrace export", 9, of_total=False, out=terminal, interval=0)) == [
            0,
            1,
        ]
        told = _lines_from(master, 5)  # (read while the terminal is open)
    os.close(master)
    assert told[0].startswith("fusetrace export: 1 of 3 records (33 %) in 0 s, about 0 s left"), told
    assert len(told) == 5 and told[4] == "fusetrace export: 2 records written in 0 s (of a trace of 9)", told
    read, write = os.pipe()
    with open(write, "w") as pipe:
        assert list(progress.counted(range(3), "fusetrace export", 3, out=pipe, interval=0)) == [0, 1, 2]
    with os.fdopen(read) as said:
        assert said.read() == ""
