"""An emulated mount whose burst credits run out under a real `dd`: `fusetrace stats` keeps
the minute's lowest permitted throughput after the credits are earned back, and the
report says when they ran out, for how long the baseline held the workload, and what
waited behind it."""

import json
import subprocess

from support import fusetrace, poll, stats_json

MiB = 1 << 20


def test_stats_and_report_say_the_credits_ran_out(mount):
    m = mount("--emulate", "efs-tiny", "--set", "burst_credit_balance=3 MiB", trace=True)
    subprocess.run(
        ["dd", "if=/dev/zero", f"of={m.mountpoint / 'f'}", "bs=1M", "count=6", "conv=fsync"],
        check=True,
        capture_output=True,
        timeout=60,
    )

    def stats():
        return stats_json(m.mountpoint)

    # idle once dd's fsync returned: the credits come back at the baseline, and the burst with them
    after = poll(lambda: (s := stats())["metrics"]["PermittedThroughput"] == 100 * MiB and s)
    assert after["credits"]["lowest_permitted_minute"] == MiB  # the baseline, within the minute
    last = after["credits"]["last_ran_out"]
    assert last["ended_ago_s"] is not None and 1.5 < last["held_s"] < 30 and last["baseline_bytes_per_s"] == MiB
    text = fusetrace("stats", str(m.mountpoint)).stdout
    [permitted] = [ln.split() for ln in text.splitlines() if ln.strip().startswith("PermittedThroughput ")]
    assert " ".join(permitted[1:]) == "100.0 MiB/s (lowest in the last minute: 1.0 MiB/s)", text
    assert "credits: burst credits last ran out " in text and "the baseline (1.0 MiB/s) held the workload" in text
    m.unmount()

    report = fusetrace("report", str(m.trace)).stdout
    [line] = [ln for ln in report.splitlines() if ln.startswith("credits     ")]
    assert "Burst credits ran out at " in line and "the baseline (1.0 MiB/s) held the workload for " in line, line
    assert "operations waiting behind it: " in line and "the spent credits are the cause" in line, line
    c = json.loads(fusetrace("report", str(m.trace), "--json").stdout)["credits"]
    assert len(c["stretches"]) == 1 and 1.5e9 < c["held_ns"] < 30e9 and c["baseline_bytes_per_s"] == MiB
    assert c["waiting"]["ops"] > 0 and set(c["waiting"]["gates"]) <= {"throughput", "dirty", "writeback"}
    assert 0 < c["waiting"]["share"] <= 1
