"""`fusetrace demo`: the efs-2016-fio scenario through the scenario runner, then its ceiling
check.

The runner mounts an emulated EFS over a temporary directory, runs the scenario's published
fio jobs through it with a progress display and gives the same table as `fusetrace scenario
run efs-2016-fio` (no trace and no report files: the table is the demo's result).  The
ceiling check (runner.check_ceilings) then runs each job that fell short of a published IOPS
figure on a mount with no emulation and marks the rows this host cannot reach as host-bound.
The demo exits 0 once the jobs have run, whatever the ratios; a job that fails is one line
and exit status 1, as for every command."""

import argparse
import time

from . import command, runner, spec

SCENARIO = "efs-2016-fio"  # the demo's published experiment


def run(args: argparse.Namespace) -> int:
    s = spec.load(SCENARIO)
    fast = args.quick  # --quick is the scenario's fast mode
    same = f"fusetrace scenario run {s.id}" + (" --fast" if fast else "")
    print(f"fusetrace demo: scenario {s.id} (as `{same}` runs it), then the ceiling check")
    print(command.header(s, fast, args.profile) + "\n")
    start = time.monotonic()
    rows = runner.run_checked(s, fast=fast, profile=args.profile)["rows"]
    print(command.table(rows))
    plain = {r["step"] for r in rows if r["ceiling"] is not None}
    checked = [r for r in rows if r["checked"]]
    off = [r for r in checked if not 0.85 <= r["ratio"] <= 1.15]
    print(
        f"\n{len(rows)} figures in {time.monotonic() - start:.0f} s; ratio = emulated / published.\n"
        f"Ceiling check: {len(plain)} job(s) short of a published IOPS figure ran again on a plain mount; "
        f"{len(checked)} figures checked (not host-bound, not inconsistent), {len(off)} of them off by "
        f"more than 15 %."
    )
    return 0
