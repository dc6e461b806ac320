"""Errors a user can act on: the CLI prints the message as one line and exits non-zero."""


class UserError(Exception):
    """Bad input or a broken environment, said in one line naming what and where."""

    exit_code = 1


class BadValue(UserError):
    """A value given on the command line that is refused: exit 2, as argparse's usage errors."""

    exit_code = 2


class ControlError(Exception):
    """A control request (`fusetrace stats`, `fusetrace set`) the server refuses: the
    message goes back to the client as the answer's error."""
