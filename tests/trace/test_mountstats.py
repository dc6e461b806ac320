"""The /proc/self/mountstats parser on public texts of real NFS clients, the difference of
two readings, and hostile text (fusetrace/trace/mountstats.py)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.nfs_standin import DATA, NFS41, NFS41_MOUNT, bump

from fusetrace.trace import mountstats as ms

TEXTS = sorted(DATA.glob("*.mountstats"))


def test_every_public_text_has_its_source_named():
    readme = (DATA / "README.md").read_text()
    assert TEXTS and all(f"`{t.name}`" in readme for t in TEXTS)


@pytest.mark.parametrize("path", TEXTS, ids=lambda p: p.name)
def test_every_public_text_parses_whole(path):
    p = ms.parse(path.read_text())
    assert p.bad_lines == 0
    nfs = [e for e in p.entries if e.is_nfs]
    assert len(nfs) == 1
    e = nfs[0]
    assert e.fstype == "nfs4" and e.statvers == "1.1" and e.opts.startswith("rw,vers=4.")
    assert e.age_s and len(e.bytes) == 8 and len(e.events) == 27
    assert {"NULL", "READ", "WRITE"} <= set(e.ops)
    assert ms.find(p, e.mountpoint) is e and ms.find(p, e.mountpoint, "other:/") is None


def test_nfs41_client_with_errors_field():
    p = ms.parse(NFS41.read_text())
    [e] = p.entries
    assert e.device == "fs.example.com:/volume4/apps/home-automation/node-red-data"
    assert e.mountpoint == NFS41_MOUNT
    assert len(e.ops) == 63  # NFSv4.1's RPCs, NULL to LAYOUTERROR
    assert e.ops["WRITE"] == ms.OpStats(322308, 322308, 0, 39161277084, 56725504, 401718334, 10139998, 411864389, 0)
    assert e.ops["FREE_STATEID"].errors == 10413  # the 9th field, Linux 5.3 and later
    assert e.age_s == 83520 and e.bytes[0] == 2021340783


def test_whole_file_of_devices_and_an_older_kernel():
    p = ms.parse((DATA / "procfs-nfs40-fixture.mountstats").read_text())
    assert [(e.device, e.fstype) for e in p.entries][:4] == [
        ("rootfs", "rootfs"),
        ("sysfs", "sysfs"),
        ("proc", "proc"),
        ("/dev/sda1", "ext4"),
    ]
    e = ms.find(p, "/mnt/nfs/test")
    assert e is not None and e.device == "192.168.1.1:/srv/test"
    assert e.ops["READ"] == ms.OpStats(1298, 1298, 0, 207680, 1210292152, 6, 79386, 79407)  # 8 fields: errors 0
    assert e.ops["ACCESS"].queue_ms == 18446743919241604546  # a u64 near its end, as the kernel left it


def test_delta_of_two_readings():
    before = ms.find(ms.parse(NFS41.read_text()), NFS41_MOUNT)
    moved = bump(NFS41.read_text(), {"WRITE": (10, 11, 0, 10 << 20, 1400, 2, 180, 190), "GETATTR": (4, 4, 0, 800)})
    after = ms.find(ms.parse(moved), NFS41_MOUNT)
    assert before and after
    d = ms.delta(before, after)
    assert d == {
        "WRITE": ms.OpStats(10, 11, 0, 10 << 20, 1400, 2, 180, 190, 0),
        "GETATTR": ms.OpStats(4, 4, 0, 800, 0, 0, 0, 0, 0),
    }
    assert ms.mean_ms(d["WRITE"].rtt_ms, d["WRITE"].ops) == 18.0
    assert ms.mean_ms(0, 0) is None
    assert ms.delta(after, after) == {}  # nothing moved


def test_a_counter_that_went_back_restarts_the_series():
    after = ms.find(ms.parse(NFS41.read_text()), NFS41_MOUNT)
    before = ms.find(ms.parse(bump(NFS41.read_text(), {"READ": (1,)})), NFS41_MOUNT)
    assert before and after and ms.delta(before, after) is None
    fresh = ms.parse(NFS41.read_text().replace("age:    83520", "age:    3"))
    assert ms.delta(after, ms.find(fresh, NFS41_MOUNT)) is None  # remounted: younger


def test_names_are_unescaped_as_mountinfo_gives_them():
    text = "device srv:/a\\040b mounted on /mnt/with\\040space\\134x with fstype nfs4 statvers=1.1\n"
    p = ms.parse(text + "\tage:\t5\n")
    assert p.bad_lines == 0
    e = ms.find(p, "/mnt/with space\\x", "srv:/a b")
    assert e is not None and e.age_s == 5


@pytest.mark.parametrize(
    "line",
    [
        "\t\tREAD: 1 2 3",  # too few
        "\t\tREAD: 1 2 3 4 5 6 7 8 9 10",  # too many
        "\t\tREAD: 1 2 -3 4 5 6 7 8",
        f"\t\tREAD: {2**64} 0 0 0 0 0 0 0",  # not a u64
        "\t\tREAD: 1 2 3 4 5 6 7 ٨",  # a digit, but not ASCII
        "\t\tNULL: 0 0 0 0 0 0 0 0",  # twice
        "\tbytes: 1 x 3",
        "\tage: 1 2",
        "no colon here",
        "device half a device line",
    ],
)
def test_a_bad_line_is_skipped_and_counted(line):
    text = NFS41.read_text().rstrip("\n") + "\n" + line + "\n"
    p = ms.parse(text)
    assert p.bad_lines == 1
    e = ms.find(p, NFS41_MOUNT)
    assert e is not None and e.ops["NULL"] == ms.OpStats(1, 1, 0, 44, 24, 0, 0, 0, 0)


def test_truncated_text_keeps_what_came_whole():
    text = NFS41.read_text()
    cut = text[: text.index("GETATTR: 52480") + len("GETATTR: 524")]
    p = ms.parse(cut)
    e = ms.find(p, NFS41_MOUNT)
    assert e is not None and "ACCESS" in e.ops and "LOOKUP" not in e.ops
    assert "GETATTR" not in e.ops and p.bad_lines == 1  # the torn line is skipped, not half taken


LINES = st.sampled_from(NFS41.read_text().splitlines())
NOISE = st.text(st.characters(codec="utf-8"), max_size=80)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(LINES, NOISE, LINES.map(lambda s: s[: len(s) // 2])), max_size=60))
def test_hostile_text_never_raises(lines):
    text = "\n".join(lines)
    p = ms.parse(text)
    assert 0 <= p.bad_lines <= len(text.splitlines())
    for e in p.entries:
        for s in e.ops.values():
            assert len(s) == ms.FIELDS and all(0 <= n < 2**64 for n in s)
    found = ms.find(p, NFS41_MOUNT)
    if found is not None:
        assert ms.delta(found, found) == {}
