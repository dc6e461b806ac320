"""Check 3 of issue 39: a trace recorded on each shipped profile, fitted with another profile
as base, gives back the recorded profile's latencies, every class and every RPC.

Each trace is recorded in virtual time (tests/support/emulated_trace.py: a workload that
sends every RPC the emulated NFS client sends, through that client over the model of the
profile, written as an emulated mount writes its trace), then fitted as `fusetrace fit
--base` does, on the next shipped profile in the list.  Prints a Markdown table: per class
and RPC key, the fitted median over the profile's own (its RPC key, or its class's where
the key is 0).  Every shipped profile has the sampler's seed 0; each trace gets a seed of
its own, so that the errors are not the same draws nine times.

    .venv/bin/python bench/fit_profiles.py [--cycles N]
"""

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from support import emulated_trace  # type: ignore[import-not-found]  # noqa: E402

from fusetrace.emulator.params import LATENCY_CLASSES, RPC_LATENCIES, Params  # noqa: E402
from fusetrace.emulator.profiles import list_profiles, load_profile  # noqa: E402
from fusetrace.rehearse.fit import Fitter, render  # noqa: E402


def medians(params: Params) -> dict[str, float]:
    out = {cls: getattr(params, f"{cls}_latency_ms") for cls in LATENCY_CLASSES}
    for key, (cls, _) in RPC_LATENCIES.items():
        out[key] = getattr(params, f"{key}_latency_ms") or out[cls]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=1000, help="workload cycles per trace (each sends every RPC)")
    args = parser.parse_args()
    names = [n for n, _ in list_profiles()]
    ratios: dict[str, dict[str, float]] = {}
    unshown: dict[str, list[str]] = {}
    for i, name in enumerate(names):
        base = names[(i + 1) % len(names)]
        truth = dataclasses.replace(load_profile(name), seed=i + 1)  # each its own draws: all ship seed 0
        with tempfile.TemporaryDirectory() as d:
            trace = Path(d) / "t"
            emulated_trace.record(trace, truth, args.cycles, profile=name)
            keys = Fitter(str(trace), load_profile(base)).fit()
            (Path(d) / "fitted.toml").write_text(render(str(trace), base, keys))
            fitted = load_profile(Path(d) / "fitted.toml")
        set_keys = {k.key for k in keys}
        want, got = medians(truth), medians(fitted)
        ratios[f"{name} (base {base})"] = {k: got[k] / want[k] for k in want}
        unshown[name] = [k for k in want if f"{k}_latency_ms" not in set_keys]
    columns = list(ratios)
    print("| fitted / true | " + " | ".join(c.replace(" (base", "<br>(base") for c in columns) + " |")
    print("|---|" + "---:|" * len(columns))
    rows = list(medians(load_profile(names[0])))
    for key in rows:
        print(f"| {key} | " + " | ".join(f"{ratios[c][key]:.3f}" for c in columns) + " |")
    worst = max(abs(r - 1) for row in ratios.values() for r in row.values())
    print(f"\nworst: {100 * worst:.1f} % off, over {len(columns)} profiles x {len(rows)} keys")
    for name, missing in unshown.items():
        if missing:
            print(f"{name}: not fitted (the base's stands): {', '.join(missing)}")


if __name__ == "__main__":
    main()
