"""Talking to a running server from another process: `fusetrace stats`, `set`, `fault`,
and the pytest plugin ask it through its control socket (fusetrace/control_client.py)."""

import os
from typing import Any

from .control_client import request
from .errors import UserError


def server_of(mountpoint: str) -> dict[str, Any]:
    """The run state of the fusetrace server mounted at `mountpoint` (pid, control socket,
    trace directory...), as runstate.read has it: JSON from another process, checked by
    its users; UserError when there is none."""
    from .server import mounts, runstate

    mnt = mounts.canonical(mountpoint)
    state = runstate.read(mnt)
    # A server still running without its mount (lazily unmounted, `fusermount3 -uz`, while
    # a request waits in it) is still reached: `fault clear` is then the way to free it.
    if state is None or (mounts.mounted_at(mnt) is None and not _running(state.get("pid"))):
        raise UserError(f"{mnt}: no fusetrace mount here")
    return state


def _running(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def ask(mountpoint: str, **req: Any) -> dict[str, Any]:
    """Send one control request ({"cmd": ..., ...}) to the server at `mountpoint` and return
    its answer; an answer with an error, or a server that cannot be reached, is a UserError
    naming the mount."""
    state = server_of(mountpoint)
    try:
        answer = request(state["control"], **req)
    except OSError as exc:
        raise UserError(f"{mountpoint}: cannot reach the server ({exc.strerror or exc})") from None
    if "error" in answer:
        raise UserError(f"{mountpoint}: {answer['error']}")
    return answer
