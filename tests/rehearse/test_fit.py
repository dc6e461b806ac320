"""`fusetrace fit`: latencies, bandwidth and slots recovered from synthetic traces whose
truth is known, a profile the emulator loads, and one-line errors."""

import math
import tomllib

import numpy as np
import pytest
from support import fusetrace, one_line_error

from fusetrace.emulator.params import MiB
from fusetrace.emulator.profiles import load_profile
from fusetrace.trace.schema import TraceRecord
from fusetrace.trace.writer import TraceWriter

RT_NS = 40_000  # the FUSE round trip the synthetic traces say was measured
Z99 = 2.3263478740408408


def lognormal(rng, median_ms: float, p99_ms: float, n: int) -> np.ndarray:
    return rng.lognormal(math.log(median_ms), math.log(p99_ms / median_ms) / Z99, n)


def write_trace(directory, records: list[TraceRecord], **metadata) -> None:
    with TraceWriter(directory, {"fuse_round_trip_ns": RT_NS, **metadata}) as w:
        for r in records:
            w.record(r)


def rec(
    t: int,
    op: str,
    dur_ns: int,
    *,
    inode: int = 5,
    size: int = 0,
    kind: str = "meta_read",
    nfs: str | None = None,
    latency_ns: int = 0,
    transfer_ns: int = 0,
    gate: str | None = None,
) -> TraceRecord:
    return TraceRecord(
        t,
        dur_ns,
        op,
        inode,
        f"/f{inode}",
        None,
        0,
        0,
        size,
        size,
        0,
        100,
        0,
        0,
        0,
        gate,
        0,
        latency_ns,
        transfer_ns,
        nfs,
        "app",
        kind,
    )


def fitted(tmp_path, trace, *extra: str) -> tuple[dict, str]:
    out = tmp_path / "fitted.toml"
    fusetrace("fit", str(trace), "-o", str(out), *extra)
    return tomllib.loads(out.read_text()), out.read_text()


def test_a_trace_mode_trace_gives_server_latency_and_bandwidth(tmp_path):
    """Over NFS: getattrs answered by the client's cache (microseconds) are left out;
    reads of three sizes give a per-request cost and a bandwidth."""
    rng = np.random.default_rng(1)
    records, t = [], 0
    meta_ms = lognormal(rng, 0.6, 2.0, 3000)
    for ms in meta_ms:
        t += 100_000
        records.append(rec(t, "getattr", int(ms * 1e6) - RT_NS))
        records.append(rec(t + 1, "getattr", int(rng.uniform(8_000, 30_000))))  # a cache hit
    stream = 50 * MiB  # bytes a second
    for size in (4096, 65536, 1 << 20):
        for ms in lognormal(rng, 0.8, 2.4, 1000):
            t += 100_000
            records.append(rec(t, "read", int((ms + size / stream * 1e3) * 1e6) - RT_NS, size=size, kind="read"))
    write_trace(tmp_path / "t", records)
    profile, text = fitted(tmp_path, tmp_path / "t")
    assert profile["base"] == "efs-bursting"
    assert profile["meta_read_latency_ms"] == pytest.approx(0.6, rel=0.05)
    assert profile["meta_read_latency_p99_ms"] == pytest.approx(2.0, rel=0.12)
    assert profile["stream_mibps"] == pytest.approx(50, rel=0.1)
    assert profile["read_latency_ms"] == pytest.approx(0.8, rel=0.08)
    assert "over 120 µs" in text  # three round trips: what was answered from the client's caches is left out
    assert "meta_write: no records" in text  # nothing seen: the base's stands, and it says so


def test_records_a_fault_rule_acted_on_are_not_fitted(tmp_path):
    rng = np.random.default_rng(2)
    records, t = [], 0
    for ms in lognormal(rng, 0.6, 2.0, 2000):
        t += 100_000
        records.append(rec(t, "getattr", int(ms * 1e6) - RT_NS))
    for i in range(500):  # a 40 s stall held these: the outage, not the file system
        records.append(rec(t + i, "getattr", 40_000_000_000)._replace(fault="failover"))
    write_trace(tmp_path / "t", records)
    profile, _ = fitted(tmp_path, tmp_path / "t")
    assert profile["meta_read_latency_p99_ms"] == pytest.approx(2.0, rel=0.12)


def test_an_emulated_trace_gives_the_models_own_latency(tmp_path):
    """With the model's account, its sampled latency is read, not dur_ns (which holds the
    host's delays too); operations that sent more than one request, or none, are left out."""
    rng = np.random.default_rng(2)
    records, t = [], 0
    for ms in lognormal(rng, 2.7, 6.0, 2000):
        t += 50_000
        records.append(
            rec(t, "unlink", int(ms * 3e6), kind="meta_write", nfs="REMOVE", latency_ns=int(ms * 1e6), gate="latency")
        )
        records.append(
            rec(
                t + 1,
                "flush",
                int(ms * 2e6),
                kind="commit",
                nfs="WRITE x4,COMMIT",
                latency_ns=int(ms * 9e6),
                gate="writeback",
            )
        )
    write_trace(tmp_path / "t", records, emulation={"profile": "efs-bursting"})
    profile, text = fitted(tmp_path, tmp_path / "t", "--base", "efs-2018")
    assert profile["base"] == "efs-2018"
    assert profile["meta_write_latency_ms"] == pytest.approx(2.7, rel=0.04)
    assert profile["meta_write_latency_p99_ms"] == pytest.approx(6.0, rel=0.12)
    assert "commit_latency_ms" not in profile  # only ever sent with WRITEs: nothing says what one COMMIT costs
    assert "median of 2,000: the model's sampled latency" in text


def test_names_made_after_their_lookup_are_left_out_of_an_emulated_fit(tmp_path):
    """The emulated client takes a preceding lookup's time off a create or mkdir, so their
    latency_ns is below a request's: they are not fitted from."""
    records = [
        rec(i * 50_000, "mkdir", 3_000_000, kind="meta_write", nfs="CREATE", latency_ns=1_000_000, gate="latency")
        for i in range(100)
    ]
    records += [
        rec(
            10**8 + i * 50_000,
            "rmdir",
            3_000_000,
            kind="meta_write",
            nfs="REMOVE",
            latency_ns=2_700_000,
            gate="latency",
        )
        for i in range(100)
    ]
    write_trace(tmp_path / "t", records, emulation={"profile": "efs-bursting"})
    profile, _ = fitted(tmp_path, tmp_path / "t")
    assert profile["meta_write_latency_ms"] == pytest.approx(2.7)


def test_slots_are_raised_only_where_the_trace_had_more_at_once(tmp_path):
    records, t = [], 0
    for _ in range(30):  # five namespace changes at once in directory 9, six times over
        t += 10_000_000
        records += [rec(t + k, "unlink", 3_000_000, inode=9, kind="meta_write") for k in range(5)]
    write_trace(tmp_path / "t", records)
    profile, text = fitted(tmp_path, tmp_path / "t")
    assert "the most namespace changes in service at once in one directory (150 records)" in text
    assert profile["dir_write_slots"] == 5  # the base (efs-bursting) has 1
    assert "file_write_slots" not in profile


def test_the_profile_loads_and_every_key_says_where_it_came_from(tmp_path):
    rng = np.random.default_rng(3)
    records = [rec(i * 100_000, "lookup", int(ms * 1e6)) for i, ms in enumerate(lognormal(rng, 0.5, 1.5, 500))]
    write_trace(tmp_path / "t", records)
    profile, text = fitted(tmp_path, tmp_path / "t")
    params = load_profile(tmp_path / "fitted.toml")
    assert params.meta_read_latency_ms == profile["meta_read_latency_ms"]
    assert params.write_latency_ms == load_profile("efs-bursting").write_latency_ms  # from the base
    for line in text.splitlines():
        if "=" in line and not line.startswith(("#", "base", "description")):
            assert "  # " in line, line


def test_a_fitted_profile_emulates(tmp_path, mount):
    rng = np.random.default_rng(4)
    records = [rec(i * 100_000, "getattr", int(ms * 1e6)) for i, ms in enumerate(lognormal(rng, 0.5, 1.5, 200))]
    write_trace(tmp_path / "t", records)
    fitted(tmp_path, tmp_path / "t")
    m = mount("--emulate", str(tmp_path / "fitted.toml"))
    (m.mountpoint / "f").write_bytes(b"x")
    assert (m.source / "f").read_bytes() == b"x"


@pytest.mark.parametrize(
    "args, needles, code",
    [
        (["--base", "no-such"], ["--base no-such", "no such profile"], 2),
        (["-o", "/nonexistent/dir/p.toml"], ["-o /nonexistent/dir/p.toml", "no such directory"], 2),
    ],
)
def test_bad_input_is_one_line(tmp_path, args, needles, code):
    write_trace(tmp_path / "t", [rec(1, "getattr", 500_000)])
    out = ["-o", str(tmp_path / "p.toml")] if "-o" not in args else []
    done = fusetrace("fit", str(tmp_path / "t"), *out, *args, check=False)
    one_line_error(done, *needles, code=code)


def test_no_trace_is_one_line(tmp_path):
    done = fusetrace("fit", str(tmp_path / "none"), "-o", str(tmp_path / "p.toml"), check=False)
    one_line_error(done, "no such trace directory", code=2)
