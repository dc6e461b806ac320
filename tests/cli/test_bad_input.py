"""Values nobody checked: every profile key has bounds, every command-line value is
checked, and every bad input is one line naming what and where, a non-zero exit,
and no mount left behind (issue 10, item 6)."""

import math
import random

import pytest
from support import fusetrace, mount_fails, one_line_error

from fusetrace.emulator.model import Model, Op, OpClass
from fusetrace.emulator.params import HOUR_MS, LEAST_WHY, SPECS, ProfileError
from fusetrace.emulator.profiles import apply_overrides, load_profile

INT64_NS = 2**63 - 1


# ---- profile keys: bounds at load, at --set, at fusetrace set -------------------------


@pytest.mark.parametrize(
    "item, message",
    [
        ("file_write_slots=1e23", "--set file_write_slots: must be at most 1,024, got '1e23'"),
        ("file_write_slots=1e8", "--set file_write_slots: must be at most 1,024, got '1e8'"),
        ("dir_write_slots=2000", "--set dir_write_slots: must be at most 1,024, got '2000'"),
        ("read_iops=1e30", "--set read_iops: must be at most 1,000,000,000 ops/s, got '1e30'"),
        ("write_iops=1e-9", "--set write_iops: must be 0 or at least 0.001 ops/s (" + LEAST_WHY + "), got '1e-9'"),
        ("burst_mibps=1e8", "--set burst_mibps: must be at most 10,000,000 MiB/s, got '1e8'"),
        (
            "stream_mibps=1e-300",
            "--set stream_mibps: must be 0 or at least 0.001 MiB/s (" + LEAST_WHY + "), got '1e-300'",
        ),
        ("elastic_read_gibps=1e5", "--set elastic_read_gibps: must be at most 10,000 GiB/s, got '1e5'"),
        ("client_network_mbps=1e9", "--set client_network_mbps: must be at most 100,000,000 Mbit/s, got '1e9'"),
        ("read_latency_ms=3600001", "--set read_latency_ms: must be at most 3,600,000 ms, got '3600001'"),
        ("file_write_hold_ms=1e30", "--set file_write_hold_ms: must be at most 3,600,000 ms, got '1e30'"),
        ("stored_size=2 EiB", "--set stored_size: must be at most 1 EiB, got '2 EiB'"),
        ("burst_credit_balance=1e30", "--set burst_credit_balance: must be at most 1 EiB, got '1e30'"),
        ("nfs_io_size=100", "--set nfs_io_size: must be at least 1 KiB, got '100'"),
        ("nfs_io_size=0.5", "--set nfs_io_size: must be at least 1 KiB, got '0.5'"),
        ("storage_remeasure_s=1e-300", "--set storage_remeasure_s: must be 0 or at least 1 s, got '1e-300'"),
        ("seed=1e300", "--set seed: must be at most 9,007,199,254,740,992, got '1e300'"),
        (
            "read_latency_p99_ms=1000",
            ("--set read_latency_p99_ms: must be at most 1,000 times read_latency_ms (0.9), got 1000"),
        ),
    ],
)
def test_every_key_has_bounds_at_set(item, message):
    with pytest.raises(ProfileError) as info:
        apply_overrides(load_profile("efs-tiny"), [item])
    assert str(info.value) == message


def test_every_number_has_an_upper_bound():
    unbounded = [k for k, s in SPECS.items() if s["kind"] in ("number", "int", "bytes") and s["most"] is None]
    assert not unbounded


def test_bounds_in_a_profile_name_file_and_line(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('base = "efs-tiny"\nfile_write_slots = 100000000\n')
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert str(info.value) == f"{path}:2: file_write_slots: must be at most 1,024, got 100000000"
    path.write_text("stored_size = 1" + "0" * 400 + "\n")  # a TOML integer of any size: no OverflowError
    with pytest.raises(ProfileError, match=r"mine.toml:1: stored_size: must be at most 1 EiB, got 1000"):
        load_profile(path)


def test_the_bounds_themselves_are_accepted():
    params = apply_overrides(
        load_profile("efs-tiny"),
        [
            "file_write_slots=1024",
            "stored_size=1 EiB",
            "read_iops=1e9",
            "burst_mibps=1e7",
            "read_latency_ms=3600",
            "read_latency_p99_ms=3600000",
            "nfs_io_size=1 KiB",
            "stream_mibps=0.001",
        ],
    )
    assert params.file_write_slots == 1024 and params.stored_size == 2**60


@pytest.mark.parametrize("edge", ["most", "least"])
def test_the_model_works_at_every_bound(edge):
    """Every key at its bound at once: every operation gets a finite deadline the
    timer can hold (int64 nanoseconds), with no OverflowError."""
    items = []
    for key, spec in SPECS.items():
        bound = spec.get(edge) if edge == "most" else (spec.get("least") or spec.get("floor"))
        if bound is not None and spec["kind"] in ("number", "int", "bytes"):
            items.append(f"{key}={int(bound) if spec['kind'] == 'int' else bound!r}")
    for cls in ("read", "write", "meta_read", "meta_write", "commit"):  # the widest spread allowed
        items += [
            f"{cls}_latency_ms={HOUR_MS / 1000 if edge == 'most' else 0.001}",
            f"{cls}_latency_p99_ms={HOUR_MS if edge == 'most' else 1.0}",
        ]
    params = apply_overrides(load_profile("efs-tiny"), items)
    model = Model(params, 0.0, random.Random(1))
    now = 0.0
    for i in range(300):
        for op in (
            Op(OpClass.DATA_WRITE, nbytes=1 << 20, file=i % 7 + 1, write_mode="direct"),
            Op(OpClass.DATA_WRITE, nbytes=4096, file=i % 7 + 1),
            Op(OpClass.DATA_READ, nbytes=1 << 20, file=1),
            Op(OpClass.META_READ, file=1),
            Op(OpClass.META_WRITE, file=2, directory=1),
            Op(OpClass.COMMIT, file=i % 7 + 1),
        ):
            done = model.admit(op, now).done_at
            assert math.isfinite(done) and done * 1e9 < INT64_NS, (op, done)
        now += 0.01


def test_mount_refuses_an_out_of_bounds_set(dirs):
    done = mount_fails(dirs, "--emulate", "efs-tiny", "--set", "file_write_slots=1e23")
    one_line_error(done, "--set file_write_slots", "at most 1,024", code=2)


def test_fusetrace_set_refuses_out_of_bounds(mount):
    m = mount("--emulate", "efs-tiny")
    done = fusetrace("set", str(m.mountpoint), "file_write_slots=1e30", check=False)
    one_line_error(done, str(m.mountpoint), "set file_write_slots", "at most 1,024", "1e30", code=2)
    done = fusetrace("set", str(m.mountpoint), "read_latency_p99_ms=0.001", check=False)  # the model refuses
    one_line_error(done, "set read_latency_p99_ms", "must not be below read_latency_ms", code=2)
    done = fusetrace("set", str(m.mountpoint), "burst_mibps=5", "read_iops=1e30", check=False)
    one_line_error(done, "set read_iops", code=2)
    (m.mountpoint / "f").write_bytes(b"x" * 65536)  # the mount serves on, unchanged
    assert (m.mountpoint / "f").read_bytes() == b"x" * 65536
    assert "file_write_slots = 1024" in fusetrace("set", str(m.mountpoint), "file_write_slots=1024").stdout
    assert "burst_mibps = 100" in fusetrace("set", str(m.mountpoint), "burst_mibps=100").stdout


# ---- profile files that cannot be read -----------------------------------------------


def test_a_profile_that_is_not_utf8(dirs):
    path = dirs / "latin1.toml"
    path.write_bytes(b'base = "efs-tiny"\ndescription = "caf\xe9"\n')
    done = mount_fails(dirs, "--emulate", str(path))
    one_line_error(done, f"{path}:2: not UTF-8", code=2)


def test_a_profile_that_is_a_directory(dirs):
    (dirs / "dir.toml").mkdir()
    done = mount_fails(dirs, "--emulate", str(dirs / "dir.toml"))
    one_line_error(done, str(dirs / "dir.toml"), "a directory", code=2)


def test_a_profile_that_cannot_be_read(dirs):
    done = mount_fails(dirs, "--emulate", "/proc/self/mem")  # a regular file whose read fails, even for root
    one_line_error(done, "/proc/self/mem: cannot read", code=2)


def test_a_base_that_is_not_utf8_names_both_files(dirs):
    (dirs / "latin1.toml").write_bytes(b'description = "\xff"\n')
    (dirs / "top.toml").write_text('base = "latin1.toml"\n')
    done = mount_fails(dirs, "--emulate", str(dirs / "top.toml"))
    one_line_error(done, "top.toml:1: base:", "latin1.toml:1: not UTF-8", code=2)


# ---- mount options ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "options, needles",
    [
        (["--metrics-port", "-1", "--emulate", "efs-tiny"], ["--metrics-port -1", "1 to 65535"]),
        (["--metrics-port", "0", "--emulate", "efs-tiny"], ["--metrics-port 0", "1 to 65535"]),
        (["--metrics-port", "70000", "--emulate", "efs-tiny"], ["--metrics-port 70000", "1 to 65535"]),
        (["--max-requests", "0"], ["--max-requests 0", "1 to 65536"]),
        (["--max-requests", "-1"], ["--max-requests -1", "1 to 65536"]),
        (["--max-requests", "65537"], ["--max-requests 65537", "1 to 65536"]),
        (["--attr-timeout", "nan"], ["--attr-timeout nan", "finite"]),
        (["--attr-timeout", "inf"], ["--attr-timeout inf", "finite"]),
        (["--attr-timeout", "-1"], ["--attr-timeout -1", "0 or more"]),
        (["--entry-timeout", "nan"], ["--entry-timeout nan", "finite"]),
        (["--entry-timeout", "-0.5"], ["--entry-timeout -0.5", "0 or more"]),
        (["--negative-timeout", "-1"], ["--negative-timeout -1", "0 or more"]),
        (["--negative-timeout", "30", "--emulate", "efs-tiny"], ["--negative-timeout 30", "nfs_acdirmin_s"]),
        (["--attr-timeout", "0", "--emulate", "efs-tiny"], ["--attr-timeout 0", "nfs_acregmin_s"]),
        (["--threads", "0"], ["--threads 0", "1 to 1024"]),
        (["--threads", "100000"], ["--threads 100000", "1 to 1024"]),
        (["-o", "subtype=x"], ["-o subtype=x", "fusetrace sets subtype itself"]),
        (["-o", "allow_other,fsname=elsewhere"], ["-o fsname=elsewhere", "fusetrace sets fsname itself"]),
    ],
)
def test_mount_option_out_of_range(dirs, options, needles):
    one_line_error(mount_fails(dirs, *options), *needles, code=2)


def test_mount_option_foreground_is_checked_too(dirs):
    done = mount_fails(dirs, "--foreground", "--max-requests", "0")
    one_line_error(done, "--max-requests 0", code=2)


def test_mount_option_of_the_wrong_type_is_one_line(dirs):
    done = mount_fails(dirs, "--threads", "many")
    one_line_error(done, "--threads", "invalid int value: 'many'", "fusetrace mount --help", code=2)
    done = fusetrace("mount", str(dirs / "src"), check=False)
    one_line_error(done, "required: mountpoint", code=2)


# ---- scenario run ---------------------------------------------------------------------


def test_scenario_names_with_all_are_refused():
    done = fusetrace("scenario", "run", "--all", "nosuch", check=False)
    one_line_error(done, "--all", "nosuch", code=2)


def test_an_unknown_scenario_lists_the_known_ones():
    done = fusetrace("scenario", "run", "efs-2018-touch", "nosuch", check=False)
    one_line_error(done, "scenario nosuch: no such scenario", "efs-2018-touch", "efs-2019-credit-cliff", code=2)


@pytest.mark.parametrize(
    "where, needles",
    [
        ("file", ["exists and is not a directory"]),
        ("file/sub", ["cannot create it", "Not a directory"]),
        ("/proc", ["--out /proc: cannot create files there"]),
        ("/proc/nosuch", ["--out /proc/nosuch: cannot create it"]),
    ],
)
def test_scenario_out_that_cannot_take_results(tmp_path, where, needles):
    (tmp_path / "file").write_text("x")
    out = where if where.startswith("/") else str(tmp_path / where)
    done = fusetrace("scenario", "run", "efs-2018-touch", "--fast", "--out", out, check=False)
    one_line_error(done, f"--out {out}", *needles, code=1)
    assert (tmp_path / "file").read_text() == "x"
