"""`fusetrace fit`: latencies, bandwidth and slots recovered from synthetic traces whose
truth is known, a profile the emulator loads, and one-line errors."""

import dataclasses
import math
import os
import re
import tempfile
import tomllib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from support import emulated_trace, fusetrace_here, one_line_error

from fusetrace.emulator.params import LATENCY_CLASSES, RPC_LATENCIES, MiB, Params
from fusetrace.emulator.profiles import list_profiles, load_profile
from fusetrace.rehearse.fit import Fitter, render
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
    fusetrace_here("fit", str(trace), "-o", str(out), *extra)
    return tomllib.loads(out.read_text()), out.read_text()


def test_a_trace_mode_trace_gives_server_latency_and_bandwidth(tmp_path):
    """Over NFS: getattrs answered by the client's cache (microseconds) are left out;
    reads of three sizes give a per-request cost and a bandwidth."""
    rng = np.random.default_rng(1)
    records, t = [], 0
    meta_ms = lognormal(rng, 0.6, 2.0, 3000)
    for i, ms in enumerate(meta_ms):  # each file's first getattr goes to the server, its next is a cache hit
        t += 100_000
        records.append(rec(t, "getattr", int(ms * 1e6) - RT_NS, inode=100 + i))
        records.append(rec(t + 1, "getattr", int(rng.uniform(8_000, 30_000)), inode=100 + i))
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
    assert re.search(r"median of 2,9\d\d GETATTR records \(2,9\d\d alone\)", text)  # the inferred RPCs, counted
    assert "meta_write: no records of one LINK" in text  # nothing seen: the base's stands, and it says so


def test_records_a_fault_rule_acted_on_are_not_fitted(tmp_path):
    rng = np.random.default_rng(2)
    records, t = [], 0
    for i, ms in enumerate(lognormal(rng, 0.6, 2.0, 2000)):
        t += 100_000
        records.append(rec(t, "getattr", int(ms * 1e6) - RT_NS, inode=100 + i))
    for i in range(500):  # a 40 s stall held these: the outage, not the file system
        records.append(rec(t + i, "getattr", 40_000_000_000, inode=5000 + i)._replace(fault="failover"))
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
    assert profile["base"] == "efs-2018"  # --base overrides the trace's own
    assert profile["remove_latency_ms"] == pytest.approx(2.7, rel=0.04)
    assert "meta_write_latency_ms" not in profile  # no LINK, the one RPC the class alone times
    # the class's spread, from the REMOVEs', on the base's median
    assert profile["meta_write_latency_p99_ms"] == pytest.approx(5.5 * 6.0 / 2.7, rel=0.12)
    # a COMMIT after its WRITEs: latency_ns is the COMMIT's, the WRITEs' time its wait
    assert profile["commit_latency_ms"] == pytest.approx(9 * 2.7, rel=0.04)
    assert "median of 2,000 COMMIT records (2,000 after their WRITEs" in text
    assert "median of 2,000 REMOVE records (2,000 alone): the model's account of each record" in text


def test_names_made_after_their_lookup_get_its_time_back(tmp_path):
    """The emulated client takes a preceding LOOKUP's time off a create or mkdir (the
    caller spent it already): the fit adds it back."""
    records = []
    for i in range(100):
        t = i * 50_000_000
        lookup = rec(t, "lookup", 1_700_000, inode=1, nfs="LOOKUP", latency_ns=1_700_000, gate="latency")
        records.append(lookup._replace(path=f"/d{i}", errno=2))
        made = rec(t + 1_800_000, "mkdir", 1_000_000, inode=1, kind="meta_write", nfs="CREATE", latency_ns=1_000_000)
        records.append(made._replace(path=f"/d{i}", gate="latency"))
    write_trace(tmp_path / "t", records, emulation={"profile": "efs-bursting"})
    profile, text = fitted(tmp_path, tmp_path / "t")
    assert profile["create_latency_ms"] == pytest.approx(2.7)
    assert profile["lookup_latency_ms"] == pytest.approx(1.7)
    assert "100 names made after their LOOKUP, its time added back" in text


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
    records = [
        rec(i * 100_000, "lookup", int(ms * 1e6), inode=1)._replace(path=f"/n{i}")  # each name looked up once
        for i, ms in enumerate(lognormal(rng, 0.5, 1.5, 500))
    ]
    write_trace(tmp_path / "t", records)
    profile, text = fitted(tmp_path, tmp_path / "t")
    params = load_profile(tmp_path / "fitted.toml")
    assert params.lookup_latency_ms == profile["lookup_latency_ms"]
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
    done = fusetrace_here("fit", str(tmp_path / "t"), *out, *args, check=False)
    one_line_error(done, *needles, code=code)


def test_no_trace_is_one_line(tmp_path):
    done = fusetrace_here("fit", str(tmp_path / "none"), "-o", str(tmp_path / "p.toml"), check=False)
    one_line_error(done, "no such trace directory", code=2)


# ---- the fit recovers the profile a trace was emulated on (issue 39) -----------------------

SHIPPED = [name for name, _ in list_profiles()]


def effective(params: Params) -> dict[str, float]:
    """The median latency of every class and of every RPC with a key of its own (0: its class's)."""
    out = {cls: getattr(params, f"{cls}_latency_ms") for cls in LATENCY_CLASSES}
    for key, (cls, _) in RPC_LATENCIES.items():
        out[key] = getattr(params, f"{key}_latency_ms") or out[cls]
    return out


def fit_in_process(trace: Path, base: str) -> Params:
    """The fitted profile (written beside the trace, as fitted.toml) as the emulator loads
    it: what `fusetrace fit --base` does, in this process."""
    text = render(str(trace), base, Fitter(str(trace), load_profile(base)).fit())
    (trace.parent / "fitted.toml").write_text(text)
    return load_profile(trace.parent / "fitted.toml")


def perturbed(params: Params, factors: list[float]) -> Params:
    """`params` with each class's median (and its p99, keeping the spread) and each RPC's own
    median scaled by a factor of its own."""
    changes: dict[str, float] = {}
    scale = iter(factors)
    for cls in LATENCY_CLASSES:
        f = next(scale)
        changes[f"{cls}_latency_ms"] = getattr(params, f"{cls}_latency_ms") * f
        changes[f"{cls}_latency_p99_ms"] = getattr(params, f"{cls}_latency_p99_ms") * f
    for key, (cls, _) in RPC_LATENCIES.items():
        changes[f"{key}_latency_ms"] = (getattr(params, f"{key}_latency_ms") or changes[f"{cls}_latency_ms"]) * next(
            scale
        )
    return dataclasses.replace(params, **changes)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(SHIPPED),
    st.sampled_from(SHIPPED),
    st.lists(st.floats(0.5, 2.0), min_size=14, max_size=14),
)
def test_fit_of_an_emulated_trace_recovers_every_rpc_latency(truth_name, base, factors):
    """Hypothesis, in virtual time: fit(simulate(profile, workload)) recovers the profile's
    latencies, every class and every RPC, within 10 %, from another profile as base."""
    assume(truth_name != base)
    truth = perturbed(load_profile(truth_name), factors)
    with tempfile.TemporaryDirectory() as d:
        emulated_trace.record(Path(d) / "t", truth, 200, profile=truth_name)
        params = fit_in_process(Path(d) / "t", base)
        text = (Path(d) / "fitted.toml").read_text()
    got, want = effective(params), effective(truth)
    for name, value in want.items():
        if name == "create" and "create_latency_ms" not in tomllib.loads(text):
            # The model charges a create the kernel's LOOKUP of its name less: one faster
            # than that LOOKUP is charged nothing, and the trace cannot show its latency.
            assert want["create"] < 0.8 * want["lookup"] and "# create: " in text
            continue
        assert got[name] == pytest.approx(value, rel=0.10), (name, got[name], value)


def test_an_fsync_heavy_efs_2016_trace_fits_commit_on_its_own_profile(tmp_path):
    """The case of issue 39: an efs-2016 trace with hundreds of fsyncs.  The base is the
    trace's own profile, and commit (and write) come from the fsyncs."""
    emulated_trace.record(tmp_path / "t", load_profile("efs-2016"), 300, profile="efs-2016")
    out = tmp_path / "fitted.toml"
    done = fusetrace_here("fit", str(tmp_path / "t"), "-o", str(out))
    assert "base: efs-2016 (the trace's own profile, from its metadata)" in done.stdout
    profile, text = tomllib.loads(out.read_text()), out.read_text()
    assert profile["base"] == "efs-2016"
    assert profile["commit_latency_ms"] == pytest.approx(8.62, rel=0.1)
    assert "commit_latency_ms = " in text and "median of 300 COMMIT records (300 alone)" in text
    assert profile["write_latency_ms"] == pytest.approx(8.62, rel=0.1)
    assert "300 flushes of O_SYNC data, the time since the first write added back" in text
    assert "300 flushes that waited for a buffered write's one WRITE" in text  # as sqlite's fsyncs
    assert "buffered writes (WRITE(write-back)) say nothing of a WRITE's latency" in text


def test_a_trace_whose_profile_no_longer_loads_falls_back_and_says_so(tmp_path):
    write_trace(tmp_path / "t", [rec(1, "getattr", 500_000)], emulation={"profile": "/gone/mine.toml"})
    done = fusetrace_here("fit", str(tmp_path / "t"), "-o", str(tmp_path / "p.toml"))
    assert "base: efs-bursting (the trace's own profile /gone/mine.toml no longer loads)" in done.stdout
    assert tomllib.loads((tmp_path / "p.toml").read_text())["base"] == "efs-bursting"


def test_a_trace_emulated_on_a_profile_file_takes_it_as_base_from_beside_the_trace(tmp_path):
    (tmp_path / "mine.toml").write_text('base = "efs-2018"\n')
    write_trace(tmp_path / "t", [rec(1, "getattr", 500_000)], emulation={"profile": "mine.toml"})
    done = fusetrace_here("fit", str(tmp_path / "t"), "-o", str(tmp_path / "p.toml"))  # run from elsewhere
    assert f"base: {tmp_path / 'mine.toml'} (the trace's own profile, from its metadata)" in done.stdout
    assert load_profile(tmp_path / "p.toml").write_latency_ms == load_profile("efs-2018").write_latency_ms


def test_a_trace_without_nfs_has_its_rpcs_inferred(tmp_path):
    """A trace-only mount over EFS (no `nfs`, no model's account): the records are replayed
    through the model's NFS client to name their RPCs; each RPC is fitted from the records
    that sent it alone, and says how many."""
    truth = load_profile("efs-2018")
    emulated_trace.record(tmp_path / "t", truth, 200, metadata={"fuse_round_trip_ns": RT_NS}, nfs=False)
    profile, text = fitted(tmp_path, tmp_path / "t")
    assert profile["base"] == "efs-bursting"  # the trace names no profile
    want = effective(truth)
    for name in ("read", "meta_read", "lookup", "access", "open", "close", "readdir"):
        assert profile[f"{name}_latency_ms"] == pytest.approx(want[name], rel=0.1), name
    for name in ("setattr", "remove", "rename"):  # their directory's slot held some: dur_ns has it
        assert profile[f"{name}_latency_ms"] == pytest.approx(want[name], rel=0.2), name
    # (create is not checked: this synthetic trace's creates took what the emulated client
    # charges, its LOOKUP's time less, where a real mount's take a whole OPEN)
    assert profile["stream_mibps"] == pytest.approx(truth.stream_mibps, rel=0.1)
    assert "median of 200 LOOKUP records (200 alone)" in text
    assert "the model's NFS client, replaying the trace on the base, sends that one RPC" in text


def test_a_trace_only_mount_over_a_slow_file_system_fits_its_reads(slow_mount, tmp_path):
    """A real trace-only mount over a slow file system (every read 20 ms, the rest at once):
    the RPCs are inferred, the reads fitted from their dur_ns, and what answered at once
    (lookups, getattrs: under three FUSE round trips) left to the base."""
    m = slow_mount(20, 1 << 20, trace=True)
    fd = os.open(m.mountpoint / "f", os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # one FUSE read per pread: no read-ahead
        for i in range(30):
            os.pread(fd, 4096, i * 32768)
    finally:
        os.close(fd)
    m.unmount()
    profile, text = fitted(tmp_path, m.trace)
    assert profile["base"] == "efs-bursting"  # a trace-only mount names no profile
    assert 20 <= profile["read_latency_ms"] < 40
    assert re.search(r"read_latency_ms = .* median of \d+ READ records \(\d+ alone\): dur_ns plus one FUSE", text)
    assert "replaying the trace on the base, sends that one RPC" in text
    assert "lookup_latency_ms" not in profile  # answered at once: under the floor, not the server's


def test_the_stripe_rate_comes_from_stable_writes_where_stripes_are_modelled(tmp_path):
    """efs-2018 takes a stripe's written bytes at 32 MiB/s: the stable WRITEs' bytes over their
    transfer_ns give it back, on a base without stripes; the stripe size stays the base's."""
    emulated_trace.record(tmp_path / "t", load_profile("efs-2018"), 100, profile="efs-2018")
    params = fit_in_process(tmp_path / "t", "efs-bursting")
    assert params.stripe_write_mibps == pytest.approx(32, rel=0.01)
    assert params.file_stripe_size == load_profile("efs-bursting").file_stripe_size
    assert "of 200 stable WRITEs" in (tmp_path / "fitted.toml").read_text()


def test_labels_no_request_of_its_operation_has_fit_without_a_traceback(tmp_path):
    """A damaged or hostile trace-mode trace: a mkdir labelled a read, a getattr a write.
    The request is rebuilt by what it is (requests.py) and the fit goes on."""
    records = [
        rec(1, "mkdir", 500_000, kind="read")._replace(path="/d", mode=0o40755),
        rec(2, "getattr", 500_000, kind="write"),
        rec(3, "rename", 500_000, kind="meta_read")._replace(path="/d", path2="/e"),
    ]
    write_trace(tmp_path / "t", records)
    profile, _ = fitted(tmp_path, tmp_path / "t")
    assert profile["base"] == "efs-bursting"
