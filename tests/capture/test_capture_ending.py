"""How a capture with no command ends: by itself at --for, or at a SIGINT, with its trace
whole (the records from before the signal, the counts read, nothing lost).  Two captures:
slow."""

import json
import os
import signal
import subprocess
import time

import pytest
from support.capture import CAPTURE_TIMEOUT_S, FUSETRACE, records

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _metadata(trace) -> dict:
    return json.loads((trace / "_metadata.json").read_text())


def test_for_ends_the_capture_by_itself(tmpfs, tmp_path):
    trace = tmp_path / "trace"
    started = time.monotonic()
    done = subprocess.run(
        [*FUSETRACE, "capture", str(tmpfs), "--trace", str(trace), "--for", "2s"],
        capture_output=True,
        text=True,
        timeout=CAPTURE_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started >= 2  # (a lower bound only: the host may be slow)
    assert "fusetrace: capturing" in done.stderr and "fusetrace: captured" in done.stderr
    meta = _metadata(trace)
    assert meta["capture"]["lost"] == {} and meta["capture"]["error"] is None
    assert meta["end_wall_ns"] > meta["start_wall_ns"]


def test_sigint_ends_the_capture_with_its_records(tmpfs, tmp_path):
    trace = tmp_path / "trace"
    proc = subprocess.Popen(
        [*FUSETRACE, "capture", str(tmpfs), "--trace", str(trace)], stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()  # (blocks until the probes are attached, or the capture failed)
        assert line.startswith("fusetrace: capturing"), line + proc.stderr.read()
        fd = os.open(tmpfs / "before-sigint", os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, b"s" * 123)
        os.close(fd)
        proc.send_signal(signal.SIGINT)
        rest = proc.communicate(timeout=CAPTURE_TIMEOUT_S)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, rest
    recs = [(r["op"], r["path"], r["result"]) for r in records(trace) if r["path"] == "/before-sigint"]
    assert recs == [("create", "/before-sigint", 0), ("write", "/before-sigint", 123), ("flush", "/before-sigint", 0)]
    assert _metadata(trace)["capture"]["lost"] == {}
