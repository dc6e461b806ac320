"""The EFS emulator: a pure model of Amazon EFS (model.py and its parts), the
profiles it is configured from (profiles/*.toml), and the async shaper that
applies it to a mount (shaper.py).  See docs/EMULATOR.md."""

from .model import Admission, Gate, Model, Op, OpClass
from .params import Params, ProfileError
from .profiles import apply_overrides, list_profiles, load_profile

__all__ = ["Admission", "Gate", "Model", "Op", "OpClass", "Params", "ProfileError",
           "apply_overrides", "list_profiles", "load_profile"]
