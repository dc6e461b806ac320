"""Talking to a running server from another process: `fusetrace stats`, `set`, `fault`,
`list` and the pytest plugin ask it through its control socket (fusetrace/control_client.py)."""

import os
from typing import Any, TypedDict

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


class Listed(TypedDict):
    """One running mount as `fusetrace list` shows it (--json prints these)."""

    mountpoint: str
    source: str
    uid: int | None  # who mounted it (the kernel's user_id=)
    user: str | None
    pid: int | None
    trace: str | None
    profile: str | None  # None: the mount traces or passes through only
    uptime_s: float | None
    records: int | None  # written to the trace so far
    server: str  # running, not answering, gone, unknown


LIST_TIMEOUT = 1.0  # seconds a server has to answer `list` before it is called not answering


def list_mounts() -> list[Listed]:
    """The fusetrace mounts in this mount namespace that this user mounted (root: every
    user's), from /proc/self/mountinfo (the kernel's word for who mounted each, never a
    file another user could write), each with what its server says; a server that does
    not answer within LIST_TIMEOUT is listed as such."""
    from . import processes
    from .server import mounts, runstate

    me = os.geteuid()
    out: list[Listed] = []
    for info in sorted(mounts.table().values(), key=lambda m: m.mountpoint):
        if info.fstype != mounts.FSTYPE or (me != 0 and info.owner != me):
            continue
        try:
            state = runstate.read(info.mountpoint, info.owner) or {}
        except UserError:  # that user's state directory is not private: nothing in it is trusted
            state = {}
        pid = state.get("pid") if processes.is_fusetrace(state.get("pid")) else None
        row = Listed(
            mountpoint=info.mountpoint,
            source=info.source,
            uid=info.owner,
            user=_user(info.owner),
            pid=pid,
            trace=state.get("trace") if pid else None,
            profile=state.get("emulate") if pid else None,
            uptime_s=processes.age(pid) if pid else None,
            records=None,
            server="unknown" if not state else "gone" if pid is None else "running",
        )
        if pid is not None:
            try:
                answer = request(state["control"], cmd="stats", timeout=LIST_TIMEOUT)
                row["records"] = answer["trace"]["records"] if answer.get("trace") else None
            except (OSError, ValueError, KeyError, TypeError):
                row["server"] = "not answering"
        out.append(row)
    return out


def _user(uid: int | None) -> str | None:
    import pwd

    try:
        return None if uid is None else pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


SERVER_WORDS = {
    "running": "ok",
    "not answering": "server not answering (hung or stopped)",
    "gone": "server gone: fusetrace umount it",
    "unknown": "no run state found",
}


def render_list(rows: list[Listed], everyone: bool) -> str:
    """`fusetrace list` for a terminal: one line a mount (`everyone`: with its user)."""
    from .texttable import duration_text, int_text, printable, table

    if not rows:
        return "no fusetrace mounts" + ("" if everyone else " of yours")
    head = ["mountpoint", *(["user"] if everyone else []), "source", "trace", "profile", "up", "records", "server"]
    lines = [
        [
            printable(r["mountpoint"]),
            *([r["user"] or str(r["uid"])] if everyone else []),
            printable(r["source"]),
            printable(r["trace"] or "-"),
            r["profile"] or ("-" if r["server"] != "running" else "trace only" if r["trace"] else "passthrough"),
            duration_text(r["uptime_s"]) if r["uptime_s"] is not None else "-",
            int_text(r["records"]) if r["records"] is not None else "-",
            SERVER_WORDS[r["server"]],
        ]
        for r in rows
    ]
    return table(head, lines, "l" * (len(head) - 3) + "rrl")
