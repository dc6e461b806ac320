"""O_DIRECT writes that extend their file: the FUSE kernel sends them one at a time
(fs/fuse/file.c), where an NFS client keeps a queue of them in flight, and no server can
tell that queue from a single writer's.  The emulated mount counts them and flags the
run, with the remedy, in `fusetrace stats`, the trace's metadata and its report."""

import json
import shutil
import subprocess

import pytest
from support import fusetrace, stats_json

from fusetrace.hostload import host_load
from fusetrace.scenarios.runner import rows

FLAG = "kernel-serialised extending writes: "
REMEDY = "Lay the file out first: fio --fallocate=truncate, or truncate -s SIZE FILE"


def fio(directory, name: str, *extra: str) -> None:
    """The efs-2016 512k-write-qd16 job, briefly: 16 MiB written once, in 32 writes."""
    subprocess.run(
        [
            "fio",
            f"--name={name}",
            f"--filename={name}",
            "--direct=1",
            "--ioengine=libaio",
            "--iodepth=16",
            "--rw=write",
            "--bs=512k",
            "--size=16M",
            *extra,
        ],
        cwd=directory,
        check=True,
        capture_output=True,
        timeout=60,
    )


def host(m) -> dict:
    return stats_json(m.mountpoint)["host"]


@pytest.mark.skipif(shutil.which("fio") is None, reason="needs fio")
def test_extending_direct_writes_are_counted_and_flagged(mount):
    m = mount("--emulate", "efs-2016", trace=True)
    fio(m.mountpoint, "laid-out", "--fallocate=truncate")  # the file's size set before the first write
    assert host(m)["extending_writes"] == 0
    assert FLAG not in fusetrace("stats", str(m.mountpoint)).stdout
    fio(m.mountpoint, "fresh")  # every write goes past the end
    assert host(m)["extending_writes"] == 32
    fio(m.mountpoint, "fresh")  # the same file again: laid out by the first pass
    assert host(m)["extending_writes"] == 32
    text = fusetrace("stats", str(m.mountpoint)).stdout
    assert f"warning: {FLAG}32 (FUSE runs O_DIRECT writes" in text and REMEDY in text
    m.unmount()
    metadata = json.loads((m.trace / "_metadata.json").read_text())
    assert metadata["host_load"]["extending_writes"] == 32
    [warning] = metadata["warnings"]
    assert warning.startswith(f"{FLAG}32 ") and REMEDY in warning
    assert f"warning     {warning}" in fusetrace("report", str(m.trace)).stdout


def test_a_scenario_step_with_extending_writes_is_flagged_in_its_rows():
    """The step's load is host_load() over the readings either side of it: only the
    writes made during the step count."""
    before = {"late_ns": 0, "modelled_ns": 1_000, "loop_elapsed_ns": 1_000, "loop_idle_ns": 900, "extending_writes": 5}
    after = {**before, "modelled_ns": 2_000, "loop_elapsed_ns": 2_000, "loop_idle_ns": 1_800}
    quiet = {
        "name": "laid-out",
        "metrics": {"mbps": 40.0},
        "published": {"mbps": 40},
        "inconsistent": {},
        "load": host_load(before, after),
    }
    fresh = {
        **quiet,
        "name": "fresh",
        "metrics": {"mbps": 23.0},
        "load": host_load(before, {**after, "extending_writes": 405}),
    }
    bound = {**fresh, "name": "bound", "load": {**fresh["load"], "added_share": 0.5, "host_bound": True}}
    laid_out, flagged, both = rows([quiet, fresh, bound])
    assert laid_out["note"] == ""
    assert flagged["note"].startswith(f"{FLAG}400 (FUSE runs O_DIRECT writes") and flagged["note"].endswith(
        REMEDY + ")"
    )
    assert (
        both["note"].startswith("host-bound: the host added 50.0 % to the modelled time")
        and FLAG + "400" in both["note"]
    )
