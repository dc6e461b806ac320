"""The published fio figures, reproduced through an emulated mount within 15 %.

Rows above what this host can drive through FUSE are reported as host-bound with the
ceiling measured beside them, never tuned around; rows whose published figures
contradict each other are shown but not matched (see scenarios/alinas-2016-fio.toml).
"""

import pytest

from fusetrace.scenarios import spec
from fusetrace.scenarios.command import table
from fusetrace.scenarios.runner import run_checked

RUNTIME = 3.0


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["efs-2016-fio", "alinas-2016-fio"])
def test_published_fio_figures_within_15_percent(scenario):
    rows = run_checked(spec.load(scenario), runtime=RUNTIME)["rows"]
    print(table(rows))
    assert len(rows) >= 8
    off = _off(rows)
    if off:  # a shared VM can stall for seconds; what is off must be off twice
        again = {(r["step"], r["metric"]): r for r in run_checked(spec.load(scenario), runtime=RUNTIME)["rows"]}
        print(table(list(again.values())))
        off = _off([again[(r["step"], r["metric"])] for r in off])
    assert not off, "\n" + table(off)
    assert sum(r["checked"] for r in rows) >= 6


def _off(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["checked"] and not 0.85 <= r["emulated"] / r["published"] <= 1.15]
