"""A profile named on the command line, with its --set overrides: checked before anything
is mounted, by the CLI, the server and the scenario runner alike."""

from ..emulator.params import Params, ProfileError
from ..emulator.profiles import apply_overrides, load_profile
from ..errors import UserError


class ProfileUserError(UserError):
    exit_code = 2


def load_params(profile: str, overrides: list[str]) -> Params:
    """The profile's parameters with --set overrides applied; a bad one is one line, exit 2."""
    try:
        return apply_overrides(load_profile(profile), overrides)
    except ProfileError as exc:
        raise ProfileUserError(str(exc)) from None
