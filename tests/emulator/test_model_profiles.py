"""Profiles: every shipped one loads; bad values fail with one line naming key and origin."""

import dataclasses
import re
from pathlib import Path

import pytest

from fusetrace.emulator.model import Model
from fusetrace.emulator.params import MB, SPECS, GiB, KiB, MiB, Params, ProfileError, TiB
from fusetrace.emulator.profiles import PROFILE_DIR, apply_overrides, list_profiles, load_profile

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = [
    "efs-2016",
    "efs-2018",
    "efs-bursting",
    "efs-elastic",
    "efs-provisioned",
    "efs-onezone",
    "efs-maxio",
    "alinas-2016",
    "efs-tiny",
]


def test_every_named_profile_ships_with_a_one_line_description():
    rows = dict(list_profiles())
    assert set(SHIPPED) <= set(rows)
    for name, description in rows.items():
        assert description and "\n" not in description, name


@pytest.mark.parametrize("name", SHIPPED)
def test_every_profile_loads_and_runs(name):
    params = load_profile(name)
    assert params == load_profile(PROFILE_DIR / f"{name}.toml")
    Model(params, 0.0).metrics(1.0)


def test_defaults_are_the_efs_bursting_profile():
    assert dataclasses.replace(load_profile("efs-bursting"), description="") == Params()


def test_profiles_based_on_another_take_its_values():
    elastic, bursting = load_profile("efs-elastic"), load_profile("efs-bursting")
    assert elastic.throughput_mode == "elastic" and elastic.per_client_mibps == 1500
    assert elastic.write_latency_ms == bursting.write_latency_ms


def test_every_key_of_a_shipped_profile_says_where_its_value_comes_from():
    """A comment on each key's line: a documented fact and its source, a measurement's row, or
    "(inference)" with the reasoning (docs/EMULATOR.md, "Profiles")."""
    bare = [
        f"{path.name}:{number}"
        for path in sorted(PROFILE_DIR.glob("*.toml"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.match(r"[a-z0-9_]+\s*=", line) and not line.startswith(("description", "base")) and "#" not in line
    ]
    assert not bare


def test_each_era_follows_its_documented_changes():
    """docs/EMULATOR.md, "EFS by era": what changed when, in the profiles that stand for each era."""
    ga, tutorial, today = load_profile("efs-2016"), load_profile("efs-2018"), load_profile("efs-bursting")
    for old in (ga, tutorial):  # before the June 2020 floor and the 2021 read discount
        assert (old.throughput_mode, old.baseline_floor_mibps, old.read_factor) == ("bursting", 0, 1)
    assert (ga.per_client_mibps, tutorial.per_client_mibps * MiB) == (0, pytest.approx(250 * MB, rel=1e-3))
    assert tutorial.total_iops == 7000  # the documented General Purpose limit of the time
    # before the 2022 latency improvements
    assert (
        tutorial.write_latency_ms > 2 * today.write_latency_ms and tutorial.read_latency_ms > 2 * today.read_latency_ms
    )
    assert (today.baseline_floor_mibps, today.read_factor, today.per_client_mibps) == (1, pytest.approx(1 / 3), 500)
    elastic, onezone, maxio = load_profile("efs-elastic"), load_profile("efs-onezone"), load_profile("efs-maxio")
    assert (elastic.read_iops, elastic.write_iops, elastic.per_client_mibps) == (250_000, 50_000, 1500)
    # One Zone's writes: Regional's scaled by the guide's floors, 1.6 ms against 2.7 ms
    assert onezone.throughput_mode == "elastic"
    assert onezone.write_latency_ms / today.write_latency_ms == pytest.approx(1.6 / 2.7, rel=0.01)
    assert onezone.read_latency_ms == today.read_latency_ms
    assert maxio.throughput_mode == "bursting"  # Max I/O: not with elastic throughput, not on One Zone
    assert maxio.read_iops > today.read_iops and maxio.write_iops > today.write_iops
    assert maxio.read_latency_ms > today.read_latency_ms and maxio.write_latency_ms > today.write_latency_ms


def test_sizes_take_units():
    p = apply_overrides(
        Params(),
        ["stored_size=2 TiB", "burst_credit_balance=300MiB", "client_dirty_limit=15 GB", "metadata_io_size=4096"],
    )
    assert (p.stored_size, p.burst_credit_balance) == (2 * TiB, 300 * MiB)
    assert (p.client_dirty_limit, p.metadata_io_size) == (15 * 1000 * MB, 4 * KiB)
    assert load_profile("efs-2016").stored_size == 5 * GiB


def test_overrides_are_typed_from_text():
    p = apply_overrides(
        Params(),
        [
            "burst_mibps=250",
            "throughput_mode=provisioned",
            "provisioned_mibps=64",
            "file_write_slots=2",
            "description=x = y",
        ],
    )
    assert (p.burst_mibps, p.throughput_mode, p.file_write_slots, p.description) == (250.0, "provisioned", 2, "x = y")


def _write(tmp_path, text, name="mine.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "text, message",
    [
        (
            'description = "d"\nread_latency_ms = "fast"\n',
            "mine.toml:2: read_latency_ms: expected a number, got 'fast'",
        ),
        ("\n\nread_latncy_ms = 3\n", "mine.toml:3: read_latncy_ms: unknown parameter (did you mean read_latency_ms?)"),
        ("burst_mibps = -5\n", "mine.toml:1: burst_mibps: must not be negative"),
        ("file_write_slots = 2.5\n", "mine.toml:1: file_write_slots: expected a whole number, got 2.5"),
        ("baseline_floor_mibps = true\n", "mine.toml:1: baseline_floor_mibps: expected a number, got True"),
        (
            "throughput_mode = 'turbo'\n",
            "mine.toml:1: throughput_mode: expected one of bursting, provisioned, elastic, got 'turbo'",
        ),
        (
            "stored_size = '5 parsecs'\n",
            "mine.toml:1: stored_size: expected a size such as '300 MiB' or '15 GB', got '5 parsecs'",
        ),
        ("read_factor = 0\n", "mine.toml:1: read_factor: must be above 0 and at most 1"),
        ("x\n", "mine.toml:1: Expected '=' after a key in a key/value pair"),
        (
            "[table]\nread_iops = 1\n",
            "mine.toml:1: table: expected a single value (profiles are flat key = value lines)",
        ),
        ("\nwrite_latency_p99_ms = 1\n", "mine.toml:2: write_latency_p99_ms: must not be below write_latency_ms (4.3)"),
    ],
)
def test_bad_profile_values_name_key_file_and_line(tmp_path, text, message):
    path = _write(tmp_path, text)
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert str(info.value) == message.replace("mine.toml", str(path))


def test_errors_in_a_base_name_the_file_that_has_them(tmp_path):
    _write(tmp_path, "\nread_iops = 'lots'\n", "parent.toml")
    child = _write(tmp_path, "base = 'parent.toml'\nwrite_iops = 1\n")
    with pytest.raises(ProfileError) as info:
        load_profile(child)
    assert str(info.value) == f"{tmp_path}/parent.toml:2: read_iops: expected a number, got 'lots'"
    _write(tmp_path, "base = 'nowhere.toml'\n", "orphan.toml")
    with pytest.raises(ProfileError, match=r"orphan.toml:1: base: nowhere.toml: no such profile"):
        load_profile(tmp_path / "orphan.toml")


def test_a_base_loop_is_an_error_not_a_hang(tmp_path):
    _write(tmp_path, "base = 'b.toml'\n", "a.toml")
    _write(tmp_path, "base = 'a.toml'\n", "b.toml")
    with pytest.raises(ProfileError, match="too deeply"):
        load_profile(tmp_path / "a.toml")


def test_unknown_profile_lists_the_shipped_ones():
    with pytest.raises(ProfileError, match=r"efs-3000: no such profile \(shipped: alinas-2016, .*efs-tiny"):
        load_profile("efs-3000")


@pytest.mark.parametrize(
    "item, message",
    [
        ("burst_mibps=-1", "--set burst_mibps: must not be negative"),
        ("burst_mibps=fast", "--set burst_mibps: expected a number, got 'fast'"),
        ("burstmibps=1", "--set burstmibps: unknown parameter (did you mean burst_mibps?)"),
        ("burst_mibps", "--set burst_mibps: expected KEY=VALUE"),
        ("read_latency_ms=9", "--set read_latency_p99_ms: must not be below read_latency_ms (9)"),
        ("throughput_mode=provisioned", "--set provisioned_mibps: provisioned mode needs a rate above 0"),
    ],
)
def test_bad_overrides_name_the_key(item, message):
    with pytest.raises(ProfileError) as info:
        apply_overrides(Params(), [item])
    assert str(info.value) == message


def test_live_changes_are_checked_like_profiles():
    model = Model(Params(), 0.0)
    with pytest.raises(ProfileError) as info:
        model.set("read_iops", -3, 1.0)
    assert str(info.value) == "set read_iops: must not be negative"
    assert model.set("read_iops", "5000", 1.0) == 5000.0
    assert model.params.read_iops == 5000.0


def test_the_user_documentation_explains_every_parameter():
    text = (ROOT / "docs" / "EMULATOR.md").read_text()
    missing = [key for key in SPECS if f"`{key}`" not in text]
    assert not missing
