"""`fusetrace report --nfs`: a real FUSE mount whose sampler reads a stand-in for
/proc/self/mountstats (the server's test hook), records the RPCs that moved each second,
and the report sets them beside the FUSE operations; an emulated mount's table comes from
its model's nfs column; a damaged sidecar or a trace with neither is one line, exit 2."""

import json
import os
import shutil
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from support import Mount, fusetrace, fusetrace_here, mount_here, one_line_error, poll
from support.nfs_standin import NFS41, NFS41_MOUNT, bump, write

from fusetrace.server import nfssampler

WRITE_MOVE = (16, 16, 0, 1 << 20, 2000, 3, 300, 310)  # 16 WRITEs of 64 KiB, 18.75 ms RTT each
GETATTR_MOVE = (5, 5, 0, 900, 1200, 0, 6, 7)


@pytest.fixture
def standin(tmp_path, monkeypatch):
    """The stand-in file, and the server pointed at it (its environment is the test's)."""
    path = tmp_path / "mountstats"
    write(path, NFS41.read_text())
    monkeypatch.setenv(nfssampler.ENV_FILE, str(path))
    monkeypatch.setenv(nfssampler.ENV_MOUNT, NFS41_MOUNT)
    return path


def _rows(trace):
    lines = (trace / nfssampler.SIDECAR).read_text().splitlines()
    return json.loads(lines[0]), [json.loads(line) for line in lines[1:]]


def _moved(trace, standin, text=None):
    """Move the stand-in's counters on (or set them to `text`), then wait for the sampler
    to have taken it: a row more in the sidecar."""
    rows = len(_rows(trace)[1])
    write(standin, text or bump(standin.read_text(), {"WRITE": WRITE_MOVE, "GETATTR": GETATTR_MOVE}))
    poll(lambda: len(_rows(trace)[1]) > rows, timeout=20)


def _report(trace, *options, check=True):
    return fusetrace_here("report", str(trace), "--nfs", *options, check=check)


def test_samples_each_second_beside_the_fuse_operations(mount, standin):
    m = mount(trace=True)
    poll(lambda: (m.trace / nfssampler.SIDECAR).exists(), timeout=20)
    for i in range(3):
        (m.mountpoint / f"f{i}").write_bytes(b"x" * (1 << 20))
        _moved(m.trace, standin)
    m.unmount()

    head, rows = _rows(m.trace)
    assert head["device"] == "fs.example.com:/volume4/apps/home-automation/node-red-data"
    assert head["mountpoint"] == NFS41_MOUNT and head["fstype"] == "nfs4" and head["interval_s"] == 1.0
    assert len(rows) == 3  # one row a move: a second in which nothing moved writes none
    for row in rows:
        assert row["rpcs"] == {"WRITE": [*WRITE_MOVE, 0], "GETATTR": [*GETATTR_MOVE, 0]}
        assert 0 < row["dt_ns"] < 60 * 10**9
    assert [r["t_ns"] for r in rows] == sorted(r["t_ns"] for r in rows)
    meta = json.loads((m.trace / "_metadata.json").read_text())["nfs"]
    assert meta["sidecar"] == "_nfs.jsonl" and meta["test_hook"] is True
    assert meta["restarts"] == 0 and meta["bad_lines"] == 0 and meta["error"] is None
    assert meta["samples"] >= 3 and meta["last_ns"] >= rows[-1]["t_ns"]
    assert len(pd.read_parquet(m.trace)) > 0  # the sidecar is never taken for a part

    v = json.loads(_report(m.trace, "--json").stdout)
    assert v["source"] == "samples" and v["interval_s"] == 1.0
    write_total = next(r for r in v["total"]["rpcs"] if r["rpc"] == "WRITE")
    assert write_total["count"] == 48 and write_total["rtt_ms"] == 18.75 and write_total["exec_ms"] == 310 / 16
    assert sum(r["count"] for iv in v["intervals"] for r in iv["rpcs"] if r["rpc"] == "GETATTR") == 15
    records = pd.read_parquet(m.trace)
    assert v["total"]["fuse_ops"] == len(records)
    assert v["total"]["fuse"]["write"] == int((records.op == "write").sum())
    assert v["total"]["fuse_mb"] == pytest.approx(3 * (1 << 20) / 1e6)

    text = _report(m.trace).stdout
    assert "from /proc/self/mountstats" in text and "nfs4" in text
    total = [line for line in text.splitlines() if line.startswith("total")]
    assert len(total) == 1 and "WRITE" in total[0] and " 48 " in total[0]
    wide = json.loads(_report(m.trace, "--json", "--interval", "3600").stdout)
    assert len(wide["intervals"]) == 1 and wide["intervals"][0]["rpcs"] == wide["total"]["rpcs"]


def test_a_remount_restarts_the_series(mount, standin):
    m = mount(trace=True)
    poll(lambda: (m.trace / nfssampler.SIDECAR).exists(), timeout=20)
    (m.mountpoint / "f").write_bytes(b"x")
    _moved(m.trace, standin)
    _moved(m.trace, standin, NFS41.read_text())  # back to the first counters: as a remount reads
    _moved(m.trace, standin)
    m.unmount()
    rows = _rows(m.trace)[1]
    assert rows[1].get("restart") is True and "rpcs" not in rows[1]
    assert rows[2]["rpcs"]["WRITE"] == [*WRITE_MOVE, 0]  # counted from the restart, not across it
    assert json.loads((m.trace / "_metadata.json").read_text())["nfs"]["restarts"] == 1
    v = json.loads(_report(m.trace, "--json").stdout)
    assert next(r for r in v["total"]["rpcs"] if r["rpc"] == "WRITE")["count"] == 32


@pytest.mark.parametrize("planted", ["symlink", "fifo", "another user's", "too large"])
def test_a_stand_in_that_is_not_the_users_plain_file_is_refused(mount, standin, tmp_path, planted):
    real = tmp_path / "real"
    shutil.copy(standin, real)
    if planted == "symlink":
        standin.unlink()
        standin.symlink_to(real)
    elif planted == "fifo":
        standin.unlink()
        os.mkfifo(standin)
    elif planted == "another user's":
        os.chown(standin, os.getuid() + 1, -1)
    else:
        os.truncate(standin, nfssampler.MAX_BYTES + 1)  # sparse: costs no disk
    m = mount(trace=True)
    (m.mountpoint / "f").write_bytes(b"x")
    poll(lambda: "nfs" in json.loads((m.trace / "_metadata.json").read_text()), timeout=20)
    m.unmount()
    meta = json.loads((m.trace / "_metadata.json").read_text())["nfs"]
    assert meta["error"].startswith(str(standin)) and meta["test_hook"] is True
    assert not (m.trace / nfssampler.SIDECAR).exists()
    one_line_error(_report(m.trace, check=False), "no NFS samples", str(standin), code=2)


def test_an_emulated_mounts_table_comes_from_the_model(mount):
    m = mount("--emulate", "efs-tiny", trace=True)
    for i in range(3):
        (m.mountpoint / f"f{i}").write_bytes(b"y" * 65536)
        os.stat(m.mountpoint / f"f{i}")
    m.unmount()
    records = pd.read_parquet(m.trace)
    sent: Counter[str] = Counter()
    for nfs in records.nfs.dropna():
        for part in filter(None, str(nfs).split(",")):
            name, _, times = part.partition(" x")
            sent[name] += int(times) if times.isdigit() else 1
    assert sent  # the emulated client sent RPCs
    v = json.loads(_report(m.trace, "--json").stdout)
    assert v["source"] == "model" and v["device"] is None
    assert {r["rpc"]: r["count"] for r in v["total"]["rpcs"]} == dict(sent)
    assert v["total"]["fuse_ops"] == len(records)
    assert all(r["exec_ms"] is None and r["rtt_ms"] is not None for r in v["total"]["rpcs"])
    text = _report(m.trace).stdout
    assert "MODEL's emulated NFS client" in text and "model ms" in text


@pytest.fixture(scope="module")
def sampled_once(tmp_path_factory):
    """A trace with samples, made once for the module (a mount and a sampler's second)."""
    base = tmp_path_factory.mktemp("sampled")
    standin = base / "mountstats"
    write(standin, NFS41.read_text())
    for d in ("src", "mnt"):
        (base / d).mkdir()
    m = Mount(base / "src", base / "mnt", base / "trace")
    with pytest.MonkeyPatch.context() as env:  # as the standin fixture, for the module
        env.setenv(nfssampler.ENV_FILE, str(standin))
        env.setenv(nfssampler.ENV_MOUNT, NFS41_MOUNT)
        mount_here(m.source, m.mountpoint, "--trace", str(m.trace), "--log", str(base / "log"))
    try:
        poll(lambda: (m.trace / nfssampler.SIDECAR).exists(), timeout=20)
        (m.mountpoint / "f").write_bytes(b"x")
        _moved(m.trace, standin)
    finally:
        m.unmount()
    return m.trace


@pytest.fixture
def sampled(sampled_once, tmp_path):
    """A trace with samples, the test's own copy to damage."""
    return Path(shutil.copytree(sampled_once, tmp_path / "trace"))


@pytest.mark.parametrize(
    "damage, needle",
    [
        (lambda text: text.replace('"rpcs":{', '"rpcs":[', 1), "not JSON"),
        (lambda text: text.replace('"WRITE":[16', '"WRITE":[-16', 1), "WRITE: not 9 counters"),
        (lambda text: text.replace('"WRITE"', '"WR\\u001b[2JITE"', 1), "RPC name"),
        (lambda text: text.replace('"start_ns"', '"started"', 1), "header"),
        (lambda text: text + "[1, 2]\n", "not an object"),
        (lambda text: "", "empty"),
    ],
)
def test_a_damaged_sidecar_is_one_line_exit_2(sampled, damage, needle):
    path = sampled / nfssampler.SIDECAR
    path.write_text(damage(path.read_text()))
    err = one_line_error(_report(sampled, check=False), str(path), needle, code=2)
    assert "\x1b" not in err


def test_a_torn_last_line_is_left_out_and_said(sampled):
    path = sampled / nfssampler.SIDECAR
    path.write_text(path.read_text() + '{"t_ns": 12')
    done = _report(sampled)
    assert "last line was torn" in done.stdout
    assert json.loads(_report(sampled, "--json").stdout)["torn_lines"] == 1


def test_a_trace_with_neither_samples_nor_model_is_one_line(mount):
    m = mount(trace=True)
    (m.mountpoint / "f").write_bytes(b"x")
    m.unmount()
    assert "nfs" not in json.loads((m.trace / "_metadata.json").read_text())  # the source is not on NFS
    assert not (m.trace / nfssampler.SIDECAR).exists()
    one_line_error(_report(m.trace, check=False), "no NFS samples", "no model's nfs column", code=2)


def test_interval_without_nfs_and_nfs_with_timeline_are_usage_errors(sampled):
    one_line_error(fusetrace("report", str(sampled), "--interval", "5", check=False), "--interval", code=2)  # as typed
    one_line_error(_report(sampled, "--timeline", check=False), "--timeline", code=2)
