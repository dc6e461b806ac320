"""The loop, end to end, on real mounts: record a mixed workload on a mount emulating a
profile, fit a profile to the trace, emulate the fitted profile, replay the trace into it,
and compare the two traces per operation.  What this asserts is that the loop holds
together: the fit finds the profile's latencies, the replay re-issues every operation with
its outcome, compare judges the two.  How close the timings come is a benchmark's claim
(bench/rehearsal.py, docs/BENCHMARKS.md), not a test's."""

import json
import subprocess
import tomllib
from pathlib import Path

import pytest
from support import fusetrace

from fusetrace.emulator.profiles import load_profile

WORKLOAD = Path(__file__).resolve().parents[1] / "workloads" / "mixed.sh"


def test_record_fit_emulate_replay_compare(mount, tmp_path):
    original = mount("--emulate", "efs-bursting", trace=True)
    subprocess.run(["sh", str(WORKLOAD), str(original.mountpoint), "1"], check=True, timeout=300)
    original.unmount()

    profile = tmp_path / "fitted.toml"
    fusetrace("fit", str(original.trace), "-o", str(profile))
    fitted, truth = tomllib.loads(profile.read_text()), load_profile("efs-bursting")
    for key, cls in (("meta_read", "meta_read"), ("lookup", "meta_read"), ("remove", "meta_write")):
        # from the model's own samples; an RPC's own key is 0 in the profile: its class's
        want = getattr(truth, f"{key}_latency_ms") or getattr(truth, f"{cls}_latency_ms")
        assert fitted[f"{key}_latency_ms"] == pytest.approx(want, rel=0.15), (key, profile.read_text())

    rehearsal = mount("--emulate", str(profile), trace=True)
    replayed = json.loads(
        fusetrace("replay", str(original.trace), str(rehearsal.mountpoint), "--json", timeout=600).stdout
    )
    assert replayed["differences"]["count"] == 0, replayed["differences"]
    rehearsal.unmount()

    done = fusetrace("compare", str(original.trace), str(rehearsal.trace), "--json", check=False)
    assert done.returncode in (0, 1), done.stderr
    result = json.loads(done.stdout)
    counts = {r["op"]: (r["a"] or {}).get("count", 0) - (r["b"] or {}).get("count", 0) for r in result["ops"]}
    # (no reads: the files read back were written through the mount, and its kernel's
    # write-back cache keeps their pages, as an NFS client keeps its own writes')
    for op in ("create", "mkdir", "rename", "unlink", "rmdir", "write", "fsync"):
        assert counts[op] == 0, (op, counts)  # each operation the workload made, made again
    judged = {r["op"] for r in result["ops"] if r["verdict"] != "too few"}
    assert judged >= {"create", "mkdir", "rename", "unlink", "rmdir", "write"}
