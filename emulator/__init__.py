"""The EFS emulator: a pure model of Amazon EFS (model.py and its parts) and the
profiles it is configured from (profiles/*.toml), installed as fusetrace.emulator.
Whoever holds the clock drives it: the shaper on a mount (fusetrace/shaping/) or
simulate.py in virtual time.  See docs/EMULATOR.md."""

from .model import Admission, Gate, Model, Op, OpClass
from .params import Params, ProfileError
from .profiles import apply_overrides, list_profiles, load_profile

__all__ = [
    "Admission",
    "Gate",
    "Model",
    "Op",
    "OpClass",
    "Params",
    "ProfileError",
    "apply_overrides",
    "list_profiles",
    "load_profile",
]
