"""bench/smallfiles.py and bench/fuserequests.py: bad options get one line, the kernel's request
counts are the mount's own, and a one-round run writes its section (no timing: the benchmark
itself is run by hand)."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "smallfiles.py"
_spec = importlib.util.spec_from_file_location("bench_fuserequests", REPO / "bench" / "fuserequests.py")
assert _spec is not None and _spec.loader is not None
fuserequests = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fuserequests)


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=240)


def _need_tracing() -> None:
    why = fuserequests.available()
    if why:
        pytest.skip(f"kernel fuse tracepoints: {why}")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--only", "fusetrace,nosuch"], "bench/smallfiles.py: --only: no target nosuch (targets: native,"),
        (["--tree", "/no/such/tree"], "bench/smallfiles.py: --tree /no/such/tree: not a directory"),
        (["--rounds", "0"], "bench/smallfiles.py: --rounds 0: must be at least 1"),
    ],
)
def test_bad_options_get_one_line(args, message):
    done = _run(*args)
    assert done.returncode == 2
    assert done.stderr.startswith(message) and done.stderr.count("\n") == 1, done.stderr


def _instances() -> set[str]:
    return {p.name for p in (fuserequests.TRACING / "instances").iterdir()}


@pytest.mark.slow
def test_requests_are_counted_per_kind_for_the_mount_alone(mount):
    _need_tracing()
    before = _instances()
    m, other = mount(), mount()
    with fuserequests.FuseRequests(str(m.mountpoint)) as seen:
        (m.mountpoint / "d").mkdir()
        for i in range(3):
            (m.mountpoint / "d" / f"f{i}").write_text("x")
        for i in range(5):  # another mount's requests, at the same time: not this one's
            (other.mountpoint / f"g{i}").write_text("y")
    assert seen.kinds["MKDIR"].count == 1
    assert seen.kinds["CREATE"].count == 3
    assert seen.kinds["WRITE"].count == 3
    assert seen.lost == 0
    assert all(k.mean_us is not None and k.mean_us > 0 for k in seen.kinds.values() if k.count)
    assert _instances() == before  # its ftrace instance is gone


@pytest.mark.slow
def test_an_error_in_the_block_leaves_no_instance(mount):
    _need_tracing()
    before = _instances()
    m = mount()
    inside: list[set[str]] = []

    def failing_workload() -> None:
        with fuserequests.FuseRequests(str(m.mountpoint)):
            inside.append(_instances())
            raise RuntimeError("the workload failed")

    with pytest.raises(RuntimeError, match="the workload failed"):
        failing_workload()
    assert len(inside[0] - before) == 1  # it was there meanwhile
    assert _instances() == before


@pytest.mark.slow
def test_a_quick_round_writes_its_section_and_raw_figures(tmp_path):
    _need_tracing()
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    for i in range(20):
        (tree / "sub" / f"f{i}").write_text("x" * i)
    out = tmp_path / "BENCH.md"
    out.write_text("# Bench\n\n<!-- smallfiles -->\nSTALE FIGURES\n<!-- smallfiles -->\n\nafter\n")
    done = _run(
        "--tree", str(tree), "--only", "native,fusetrace", "--rounds", "1",
        "--workdir", str(tmp_path / "work"), "--out", str(out),
    )  # fmt: skip
    tar = Path(done.stderr.split(":", 1)[0])  # "<tarball>: 22 entries, ..." on the first line
    try:
        assert done.returncode == 0, done.stderr
        text = out.read_text()
        assert "STALE FIGURES" not in text and text.endswith("<!-- smallfiles -->\n\nafter\n")
        assert "| fusetrace | " in text and "| **all** | " in text
        assert "not measured: no passthrough_hp (needs --passthrough-hp PATH)" in text
        raw = Path(done.stdout.rstrip().rpartition("raw figures: ")[2].rstrip(")"))
        results = json.loads(raw.read_text())["results"]
        tar_x = results["fusetrace"]["runs"]["tar"][0]["requests"]
        assert tar_x["CREATE"]["count"] == 20 and tar_x["MKDIR"]["count"] == 2
        assert results["native"]["runs"]["ls"][0]["seconds"] > 0
        raw.unlink()
    finally:
        if tar.suffix == ".tar" and tar.parent == REPO / "bench" / "out":
            os.unlink(tar)
