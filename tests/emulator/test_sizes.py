"""The one parse_size (emulator/simulate.py) reads what each of its callers is given:
fio's --size and --bs in scenario files (scenarios/fio.py), the model's fio jobs, fault
rules' sizes (fusetrace/faults/rules.py)."""

import pytest

from fusetrace.emulator.simulate import parse_size
from fusetrace.scenarios import fio

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


@pytest.mark.parametrize(
    "text, size",
    [
        # scenarios/fio.py's --size= values, as scenario files give them
        ("4g", 4 * GiB),
        ("1G", GiB),
        ("512K", 512 * KiB),
        ("16M", 16 * MiB),
        ("1048576", MiB),
        (" 8m ", 8 * MiB),
        # the model's fio jobs and fault rules: fractions and the forms with a B or an iB
        ("4k", 4 * KiB),
        ("1.5m", 3 * MiB // 2),
        ("4KiB", 4 * KiB),
        ("64kb", 64 * KiB),
        ("2MB", 2 * MiB),
        ("0", 0),
    ],
)
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "k", "lots", "4x"])
def test_parse_size_refuses(text):
    with pytest.raises((ValueError, IndexError)):  # what fault rules catch (faults/rules.py)
        parse_size(text)


def test_fio_prepare_file_reads_size(tmp_path):
    """scenarios/fio.py sizes the job's file with the same parser."""
    name = fio.prepare_file(str(tmp_path), ["--rw=read", "--size=1.5k"])
    assert (tmp_path / name).stat().st_size == 1536
