"""Scenarios: the data files, and `fusetrace scenario run` on real emulated mounts."""

import html
import json
import math
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support import descendants, fusetrace, poll
from support.scenarios import write_scenario

from fusetrace.errors import UserError
from fusetrace.scenarios import children, command, spec
from fusetrace.scenarios.runner import NO_FIGURE

SCENARIO_MOUNT = "fusetrace-scenario-"


def _all_scenario_mounts() -> set[str]:
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:  # any name
        return {line.split()[4] for line in f if SCENARIO_MOUNT in line.split()[4]}


@pytest.fixture
def new_scenario_mounts():
    """The scenario mounts made since the test began: another run's on the machine are not ours."""
    before = _all_scenario_mounts()
    return lambda: _all_scenario_mounts() - before


def test_every_data_file_loads_and_names_a_real_profile():
    from fusetrace.shaping.profile import load_params

    names = spec.ids()
    assert len(names) == 15
    for name in names:
        s = spec.load(name)
        load_params(s.profile, s.overrides())
        assert s.steps and s.title and s.system and s.source


def test_every_scenario_names_its_public_source_and_its_year():
    """The publication first (its title, ending with the year it appeared), then what the file
    carries of it; never a note that figures are not carried: a row the file has no figure for
    says so in the table."""
    for name in spec.ids():
        scenario = spec.load(name)
        source = scenario.source
        if scenario.events or scenario.faults:  # a rehearsal: says so, and carries no figure
            assert source.startswith("A rehearsal, not a published experiment: "), (name, source)
            assert not any(step.published for step in scenario.steps), name
            continue
        publication = re.split(r"[;:] ", source)[0]
        assert re.fullmatch(r"[A-Z][^;:]{10,}\b(19|20)\d\d", publication), (name, source)
        assert not re.search(r"not carried|kept aside|predicts the result", source), (name, source)


def test_a_step_can_need_a_phase_of_the_run(tmp_path):
    path = write_scenario(tmp_path, '[[steps]]\nname = "after"\nrun = "true"\nneeds = "cliff"\n')
    assert spec.load(str(path)).steps[0].needs == "cliff"
    assert [step.name for step in spec.load("efs-2019-credit-cliff").steps if step.needs == "cliff"] == [
        "ls -l after the cliff",
        "ls -l behind another writer",
    ]
    from fusetrace.scenarios.runner import PHASE_CHECKS

    assert set(PHASE_CHECKS) == set(spec.PHASES)


@pytest.mark.parametrize(
    "text, says",
    [
        ('[[steps]]\nname = "a"\nrun = "true"\nfio = "-bs=4k"\n', "exactly one of 'fio'"),
        ('[[steps]]\nname = "a"\nrun = "true"\nneeds = "dawn"\n', "needs = 'dawn': must be one of 'cliff'"),
        ('[[steps]]\nname = "a"\nrun = "true"\nrepeats = 2\n', "unknown key 'repeats'"),
        ('[[steps]]\nname = "a"\nrun = "true"\nhost_check = "yes"\n', "host_check = 'yes': must be true or false"),
        ('[[steps]]\nname = "a"\nfio = "-bs=4k"\nhost_check = true\n', "unknown key 'host_check'"),
        ('[[steps]]\nname = "a"\nrun = "true"\nunit = "files"\n', "'unit' needs 'count'"),
        ('[[steps]]\nname = "a"\nfio = "-bs=4k"\nruntime = -1\n', "runtime = -1"),
        ('colour = "red"\n[[steps]]\nrun = "true"\n', "unknown key 'colour'"),
        ('[[events]]\nat = "1s"\n[[steps]]\nrun = "true"\n', "event 1: an event has exactly one of set"),
        ('[[events]]\nat = "$LATER"\nstall = "1s"\n[[steps]]\nrun = "true"\n', "event 1: no variable 'LATER'"),
        (
            '[fast_vars]\nAT = "soon"\n[vars]\nAT = "1"\n[[events]]\nat = "$AT"\nstall = "1s"\n[[steps]]\nrun = "true"\n',
            "event 1: at 'soon'",
        ),
        ('[[faults]]\nerrno = "EIOO"\n[[steps]]\nrun = "true"\n', "fault 1: errno 'EIOO'"),
        ('[[faults]]\nerrno = "$ERR"\n[[steps]]\nrun = "true"\n', "fault 1: no variable 'ERR'"),
        ('[[events]]\nat = "$"\nstall = "1s"\n[[steps]]\nrun = "true"\n', "event 1: Invalid placeholder"),
        (
            '[[events]]\nstep = "b"\nat = 0\nstall = "1s"\n[[steps]]\nname = "a"\nrun = "true"\n',
            "event 1: step = 'b': no such step",
        ),
    ],
)
def test_a_mistake_in_a_data_file_is_one_line_naming_it(tmp_path, text, says):
    path = write_scenario(tmp_path, text)
    with pytest.raises(UserError, match=says) as err:
        spec.load(str(path))
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def _run(*args, timeout=300):
    return fusetrace("scenario", "run", *args, check=False, timeout=timeout)


def test_unknown_scenario_missing_tool_and_wrong_key_are_one_line_each(tmp_path, new_scenario_mounts):
    done = _run("no-such-scenario", "--out", str(tmp_path / "o"))
    assert done.returncode == 2 and "no such scenario" in done.stderr
    tool = write_scenario(tmp_path, 'tools = ["no-such-tool"]\n[[steps]]\nrun = "true"\n', "tool.toml")
    done = _run(str(tool), "--out", str(tmp_path / "o"))
    assert done.returncode == 1 and "needs no-such-tool: not installed" in done.stderr
    key = write_scenario(tmp_path, '[[steps]]\nrun = "true"\n', "key.toml")
    done = _run(str(key), "--set", "no_such_key=1", "--out", str(tmp_path / "o"))
    assert done.returncode == 2 and "no_such_key" in done.stderr
    assert not new_scenario_mounts()


def test_a_failing_step_names_itself_and_leaves_no_mount(tmp_path, new_scenario_mounts):
    path = write_scenario(
        tmp_path,
        '[[steps]]\nname = "ok"\nrun = "touch a"\n[[steps]]\nname = "breaks"\nrun = "echo gone wrong >&2; exit 3"\n',
    )
    done = _run(str(path), "--out", str(tmp_path / "o"))
    assert done.returncode == 1
    assert "step 'breaks': gone wrong" in done.stderr
    assert not new_scenario_mounts()


def test_ctrl_c_unmounts(tmp_path, new_scenario_mounts):
    path = write_scenario(tmp_path, '[[steps]]\nname = "long"\nrun = "sleep 600"\n')
    # SIGINT at its default, as in a terminal: a suite started in the background (`cmd &` in a
    # script) passes it on ignored, and Python then leaves Ctrl-C ignored too.
    proc = subprocess.Popen(
        [sys.executable, "-m", "fusetrace", "scenario", "run", str(path), "--out", str(tmp_path / "o")],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        poll(new_scenario_mounts, timeout=60)
        poll(lambda: "sleep 600" in descendants(proc.pid).values(), timeout=30)  # the step runs
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            below = descendants(proc.pid)
            pytest.fail(f"no exit within 60 s of SIGINT; still below it: {below}")
        assert code == 130
    finally:
        if proc.poll() is None:  # failed: leave nothing behind (its step, its mount)
            children.kill_tree(proc)
            print("runner's stderr:", proc.communicate()[1][-3000:])
            for mount in new_scenario_mounts():
                fusetrace("umount", mount, check=False)
    assert not new_scenario_mounts()


def test_clients_are_mounts_of_one_file_system(tmp_path, new_scenario_mounts):
    """--clients 3: three mounts over one directory, one emulated file system between them;
    the file's three write slots are the file system's, so three clients together write at
    one file's rate (efs-2016: 3 slots / 9.68 ms = 310 writes/s), not three times it."""
    path = write_scenario(
        tmp_path,
        'profile = "efs-2016"\ntools = ["fio", "redis-server"]\n[[steps]]\nname = "w"\n'
        'fio = "-direct=1 -iodepth 16 -rw=randwrite -ioengine=libaio -bs=4K -size=64M"\n'
        "[steps.published]\niops = 310\n",
        "clients.toml",
    )
    path.write_text(path.read_text().replace('profile = "efs-tiny"\n', ""))
    out = tmp_path / "out"
    done = _run(str(path), "--fast", "--clients", "3", "--out", str(out))
    assert done.returncode == 0, done.stderr
    result = json.loads((out / "clients" / "result.json").read_text())
    assert result["clients"] == 3
    row = next(r for r in result["rows"] if r["metric"] == "iops")
    assert 200 < row["emulated"] < 1.15 * 310  # one file's rate in all; three unshared mounts would give 930
    # (a figure published from one client, beside three clients' together, is said to be so)
    assert row["note"].endswith("3 clients together; published from 1") and "published from 1" in done.stdout
    assert not new_scenario_mounts()


@pytest.fixture(scope="module")
def fast_run(tmp_path_factory):
    """fast_run(name) -> (`scenario run NAME --fast` done, its --out directory): each scenario
    run once a module, whichever test needs it first (the demo's and the sweep's efs-2016-fio);
    the tests only read its outputs.  The run is checked to leave no scenario mount behind."""
    runs: dict[str, tuple[subprocess.CompletedProcess, Path]] = {}

    def run(name: str) -> tuple[subprocess.CompletedProcess, Path]:
        if name not in runs:
            out = tmp_path_factory.mktemp("fast") / "out"
            before = _all_scenario_mounts()
            done = _run(name, "--fast", "--out", str(out), timeout=600)
            assert not _all_scenario_mounts() - before
            runs[name] = (done, out)
        return runs[name]

    return run


# The ones that take over ten seconds, or near it, run with --all only (./run.sh).
SLOW_SCENARIOS = {
    "efs-2016-fio",
    "alinas-2016-fio",
    "efs-2018-transfer",
    "alinas-2016-tar",
    "efs-2016-two-clients",
    "efs-2019-credit-cliff",
}


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_SCENARIOS else n for n in spec.ids()]
)
def test_every_scenario_runs_in_fast_mode_with_sane_outputs(fast_run, new_scenario_mounts, name):
    done, out = fast_run(name)
    assert done.returncode == 0, done.stderr
    run_dir = out / name
    result = json.loads((run_dir / "result.json").read_text())
    assert result["fast"] and result["id"] == name
    assert result["rows"], "no figures"
    for row in result["rows"]:
        if row["emulated"] is None:  # a step needing a phase this short run did not reach
            assert row["note"].startswith("not reached in this run (credits left: "), row
            continue
        assert math.isfinite(row["emulated"]) and row["emulated"] > 0, row
        if row["published"] is not None:
            assert row["ratio"] == pytest.approx(row["emulated"] / row["published"])
        else:
            assert NO_FIGURE in row["note"], row
    page = (run_dir / "index.html").read_text()
    pngs = ["latency-cdf.png"] + (["credits.png"] if result["credits"] else [])
    if "no read or write records" not in page:  # a metadata-only scenario moves no data
        pngs.append("throughput.png")
    for png in pngs:
        assert (run_dir / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    assert list((run_dir / "trace").glob("part-*.parquet"))
    assert html.escape(result["title"]) in page and "data:image/png;base64," in page
    assert name in (out / "index.html").read_text()
    assert not new_scenario_mounts()


def test_the_table_keeps_published_metrics_and_says_when_the_host_set_the_pace():
    from fusetrace.scenarios.runner import rows

    steps = [
        {
            "name": "qd1",
            "metrics": {"iops": 100.0, "mbps": 0.4, "lat_ms": 10.0},
            "published": {"iops": 110},
            "inconsistent": {},
            "load": {"added_share": 0.0, "loop_busy": 0.2, "host_bound": False},
        },
        {
            "name": "qd1024",
            "metrics": {"iops": 5000.0},
            "published": {"iops": 7449},
            "inconsistent": {},
            "load": {"added_share": 0.3, "loop_busy": 0.5, "host_bound": True},
        },
        {
            "name": "mixed",
            "metrics": {"read_iops": 30.0, "write_iops": 10.0},
            "published": {},
            "inconsistent": {},
            "load": {"added_share": 0.0, "loop_busy": 0.2, "host_bound": False},
        },
        {
            "name": "odd",
            "metrics": {"lat_ms": 9.0},
            "published": {"lat_ms": 9.2},
            "inconsistent": {"lat_ms": "Little's law"},
            "load": {"added_share": 0.0, "loop_busy": 0.2, "host_bound": False},
        },
    ]
    table = rows(steps)
    assert [(r["step"], r["metric"]) for r in table] == [
        ("qd1", "iops"),
        ("qd1024", "iops"),
        ("mixed", "read_iops"),
        ("mixed", "write_iops"),
        ("odd", "lat_ms"),
    ]
    assert table[0]["ratio"] == pytest.approx(100 / 110) and table[0]["note"] == ""
    assert table[1]["note"] == (
        "host-bound: the host added 30.0 % to the modelled time (replies late 30.0 %, "
        "kernel queue not measured: a loop busy over 75 % counts), loop busy 50 %"
    )
    assert table[2]["published"] is None and table[2]["ratio"] is None
    assert table[2]["note"] == table[3]["note"] == "no published figure in this repo"
    assert "Little's law" in table[4]["note"]


def test_a_step_short_of_its_phase_is_not_run_and_its_rows_say_why():
    from fusetrace.emulator.params import MiB
    from fusetrace.scenarios.runner import phase_missing, rows

    assert phase_missing("cliff", 256 * MiB, 2 * MiB) == ""  # under 1% of the start: the cliff
    missing = phase_missing("cliff", 256 * MiB, 200 * MiB)
    assert missing == "not reached in this run (credits left: 200 MiB)"
    skipped = {
        "name": "ls after",
        "metrics": {"seconds": None, "files/s": None},
        "published": {},
        "inconsistent": {},
        "missing": missing,
        "load": {"added_share": 0.0, "loop_busy": 0.0, "host_bound": False},
    }
    table = rows([skipped])
    assert [(r["metric"], r["emulated"], r["ratio"]) for r in table] == [
        ("seconds", None, None),
        ("files/s", None, None),
    ]
    assert table[0]["note"] == f"{missing}; no published figure in this repo"
    assert "-" in command.table(table).splitlines()[2].split()


def test_the_runner_checks_a_phase_before_each_step_that_needs_it(tmp_path):
    from fusetrace.scenarios.runner import run

    path = write_scenario(
        tmp_path,
        '[[steps]]\nname = "early"\nneeds = "cliff"\nrun = "touch early"\n'
        '[[steps]]\nname = "spend"\nset = { burst_credit_balance = 0 }\nrun = "true"\n'
        '[[steps]]\nname = "late"\nneeds = "cliff"\nrun = "test ! -e early"\n'
        'count = "1"\nunit = "files"\n',
    )
    result = run(spec.load(str(path)), None, fast=True)
    notes = {r["step"]: (r["emulated"], r["note"]) for r in result["rows"]}
    assert notes["early"] == (None, "not reached in this run (credits left: 256 MiB); no published figure in this repo")
    emulated, note = notes["late"]  # run: the cliff came with the step before (and "early" made no file)
    assert emulated > 0 and note.endswith("no published figure in this repo") and "not reached" not in note


def test_host_load_between_two_readings():
    from fusetrace.hostload import host_load

    before = {"late_ns": 100, "modelled_ns": 1_000, "loop_elapsed_ns": 1_000, "loop_idle_ns": 500}
    after = {"late_ns": 300, "modelled_ns": 2_000, "loop_elapsed_ns": 2_000, "loop_idle_ns": 600}
    load = host_load(before, after)
    assert load["added_share"] == pytest.approx(0.2) and load["loop_busy"] == pytest.approx(0.9)
    assert load["host_bound"]
    idle = host_load(before, {**after, "late_ns": 110, "loop_idle_ns": 1_400})
    assert idle["added_share"] == pytest.approx(0.01) and idle["loop_busy"] == pytest.approx(0.1)
    assert not idle["host_bound"]


def _table(stdout: str) -> list[tuple[str, str, str]]:
    """(step, metric, published) of each row of the table a run prints."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["step", "metric"]) + 2
    rows = []
    for line in lines[start:]:
        if not line.strip():
            break
        words = line.split()
        rows.append((words[0], words[1], words[3]))
    return rows


@pytest.mark.slow
def test_the_demo_prints_the_rows_of_its_scenario(fast_run):
    demo = fusetrace("demo", "--quick", timeout=300)
    scenario, _ = fast_run("efs-2016-fio")
    assert scenario.returncode == 0, scenario.stderr
    assert _table(demo.stdout) == _table(scenario.stdout)
    assert len(_table(demo.stdout)) == sum(len(step.published) for step in spec.load("efs-2016-fio").steps)
    assert "Ceiling check:" in demo.stdout


def test_the_ceiling_check_runs_a_short_job_on_a_plain_mount(tmp_path):
    from fusetrace.scenarios.runner import run_checked

    job = "-direct=1 -rw=randread -ioengine=libaio -bs=4k -size=16M"
    path = write_scenario(
        tmp_path,
        f'tools = ["fio"]\n'
        f'[[steps]]\nname = "far"\nfio = "{job} -iodepth 4"\nfast_runtime = 1\n'
        f"[steps.published]\niops = 10000000\nlat_ms = 0.001\n"
        f'[[steps]]\nname = "near"\nfio = "{job} -iodepth 1"\nfast_runtime = 1\n'
        f'[steps.published]\niops = 1\nlat_ms = 1\n[steps.inconsistent]\nlat_ms = "why"\n',
    )
    rows = {(r["step"], r["metric"]): r for r in run_checked(spec.load(str(path)), fast=True)["rows"]}
    far = rows["far", "iops"]
    assert far["ceiling"] > 0 and not far["checked"]
    assert (
        far["note"].startswith("host-bound: ")
        and f"a plain mount here drives {far['ceiling']:,.0f} IOPS" in far["note"]
    )
    assert rows["far", "lat_ms"]["ceiling"] == far["ceiling"] and not rows["far", "lat_ms"]["checked"]
    assert rows["near", "iops"]["ceiling"] is None and rows["near", "iops"]["checked"]
    assert not rows["near", "lat_ms"]["checked"]  # inconsistent: shown, not matched
