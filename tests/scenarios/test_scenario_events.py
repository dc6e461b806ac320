"""Scenarios that script faults: rules and events put in force at the first step, and what
the application saw (errors and latency per operation) in the result, the text and the page."""

import json

from support import fusetrace
from support.scenarios import write_scenario

from fusetrace.scenarios import spec


def run(tmp_path, text: str):
    """Write the scenario `text` and run it: (the command's result, the run's result.json)."""
    out = tmp_path / "out"
    done = fusetrace(
        "scenario", "run", str(write_scenario(tmp_path, text)), "--out", str(out), check=False, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done, json.loads((out / "sc" / "result.json").read_text())


def test_a_scripted_scenario_reports_what_the_application_saw(tmp_path):
    done, result = run(
        tmp_path,
        """
[vars]
AT = "0"

[[faults]]
op = "fsync"
path = "/tx/*"
errno = "EIO"
count = 2

[[events]]
at = "$AT"
set = { burst_credit_balance = 0 }

[[steps]]
name = "transactions"
setup = "mkdir -p tx"
run = 'for i in 1 2 3 4; do dd if=/dev/zero of="tx/t$i" bs=4k count=1 conv=fsync status=none || true; done'
count = "4"
unit = "transactions"
""",
    )
    assert [r["id"] for r in result["scripted"]["faults"]] == ["r1"]
    assert result["scripted"]["events"][0]["set"] == {"burst_credit_balance": 0.0}
    seen = {o["op"]: o for o in result["application"]}
    assert seen["fsync"]["errors"] == {"EIO": 2} and seen["fsync"]["count"] == 4
    assert "what the application saw" in done.stdout and "EIO 2" in done.stdout
    page = (tmp_path / "out" / "sc" / "index.html").read_text()
    assert "What the application saw" in page and "EIO 2" in page


def test_an_event_naming_a_step_happens_as_that_step_starts(tmp_path):
    _, result = run(
        tmp_path,
        """
[vars]
ERR = "ENOSPC"

[[faults]]
op = "write"
path = "/second"
errno = "$ERR"

[[events]]
step = "second"
at = 0
set = { burst_credit_balance = 0 }

[[steps]]
name = "first"
run = 'echo data > first'

[[steps]]
name = "second"
run = 'echo data > second || true'
""",
    )
    assert [(e["step"], e["set"]) for e in result["scripted"]["events"]] == [("second", {"burst_credit_balance": 0.0})]
    assert result["scripted"]["faults"][0]["errno"] == "ENOSPC"
    seen = {o["op"]: o for o in result["application"]}
    assert seen["write"]["errors"] == {"ENOSPC": 1}


def test_the_rehearsal_scenarios_script_a_failover_and_the_day_credits_ran_out():
    failover, credits = spec.load("efs-failover"), spec.load("efs-credits-run-out")
    assert failover.timeline(fast=False) == [{"at": "5", "stall": "40"}]
    assert failover.timeline(fast=True) == [{"at": "0.5", "stall": "2"}]
    assert credits.timeline(fast=True) == [
        {"step": "reads after the credits ran out", "at": 0, "set": {"burst_credit_balance": 0}}
    ]
