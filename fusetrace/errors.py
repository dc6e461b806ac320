"""Errors a user can act on: the CLI prints the message as one line and exits non-zero."""


class UserError(Exception):
    """Bad input or a broken environment, said in one line naming what and where."""

    exit_code = 1
