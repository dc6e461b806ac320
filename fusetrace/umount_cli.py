"""`fusetrace umount`: unmount (or detach, `--lazy`), then wait for the server to flush its
trace and exit, every wait bounded."""

import argparse
import subprocess
import sys
import time

from .errors import UserError

UMOUNT_TIMEOUT = 10.0  # seconds fusermount3 may take (the kernel does not wait on the server)
STALL_TIMEOUT = 10.0  # seconds an unmounted server may go without progress before it is called hung
FLUSH_LIMIT = 300.0  # seconds an unmounted server may take to flush its trace and exit, at most


def umount(args: argparse.Namespace) -> int:
    """Unmount, then wait for the server to flush its trace and exit; every wait bounded.
    Nothing here touches the mount itself: it is found in the mount table, and the
    kernel aborts the connection at unmount without asking the server."""
    from . import processes
    from .server import mounts, runstate

    mnt = mounts.canonical(args.mountpoint)
    info = mounts.mounted_at(mnt)
    state = runstate.read(mnt) or {}
    if info is None:
        _forget_dead(mnt, state)
        raise UserError(f"{mnt}: not mounted")
    if info.fstype != mounts.FSTYPE:
        raise UserError(f"{mnt}: not a fusetrace mount ({info.fstype} from {info.source})")
    pid = state.get("pid") if processes.is_fusetrace(state.get("pid")) else None
    if args.lazy:
        return _detach(mnt, pid, state)
    stopped = (
        f"; its server (pid {pid}) is stopped: resume it with kill -CONT {pid}, or detach the "
        f"mount now with fusermount3 -uz {mnt}"
    )
    try:
        done = _fusermount(mnt, "-u")
    except subprocess.TimeoutExpired:
        hint = stopped if pid and processes.stopped(pid) else f"; detach it with fusermount3 -uz {mnt}"
        raise UserError(
            f"cannot unmount {mnt}: fusermount3 did not return within {UMOUNT_TIMEOUT:.0f} s{hint}"
        ) from None
    if done.returncode != 0:
        reason = _failure(done)
        hint = stopped if pid and processes.stopped(pid) else ""
        if not hint and "busy" in reason:
            from .stats_view import held_words

            inside = mounts.users(mnt)
            held = _held(state["control"]) if pid and state.get("control") else []
            by_rule = any(h.get("rule") for h in held)
            held = held[:5]
            hint = (
                (f"; in use by {', '.join(inside)}" if inside else "" if held else "; in use")
                + (f"; waiting in the server: {'; '.join(map(held_words, held))}" if held else "")
                + (f" (fusetrace fault {mnt} clear lets go what a stall rule holds)" if by_rule else "")
                + f"; or detach it now with fusetrace umount --lazy {mnt}"
            )
        raise UserError(f"cannot unmount {mnt}: {reason}{hint}")
    return _unmounted(mnt, pid, state)


def _fusermount(mnt: str, flag: str) -> "subprocess.CompletedProcess[str]":
    """fusermount3 FLAG MNT (-u, or -uz to detach), within UMOUNT_TIMEOUT: past it the child
    is killed and TimeoutExpired raised."""
    return subprocess.run(
        ["fusermount3", flag, mnt],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=UMOUNT_TIMEOUT,
    )


def _failure(done: "subprocess.CompletedProcess[str]") -> str:
    """Why fusermount3 failed: its last line on stderr, or its exit code."""
    err = done.stderr.strip()
    return err.splitlines()[-1] if err else f"exit {done.returncode}"


def _unmounted(mnt: str, pid: int | None, state: dict) -> int:
    """Once the kernel has let go of the mount: wait for its server to flush its trace and
    exit, and say where the trace is and what it lost."""
    if pid:
        _wait_server(mnt, pid, state.get("trace"))
    _forget_dead(mnt, state)
    trace = f"; trace in {state['trace']}" if state.get("trace") else ""
    print(f"fusetrace: unmounted {mnt}{trace}")
    if state.get("trace"):
        from .trace.metadata import loss_summary

        loss = loss_summary(state["trace"])
        if loss:
            print(f"fusetrace: warning: {loss}", file=sys.stderr)
    return 0


def _detach(mnt: str, pid: int | None, state: dict) -> int:
    """`umount --lazy`: the mount leaves the tree now (fusermount3 -uz, as umount -l), and
    the kernel keeps the connection while anything holds a file, directory or working
    directory in it; those go on being served, and traced, and the server flushes its
    trace and exits once the last lets go.  Nothing in use: as a plain umount, waited for."""
    from .server import mounts

    inside = mounts.users(mnt)  # before the detach: after it /proc names them from the detached root
    try:
        done = _fusermount(mnt, "-uz")
    except subprocess.TimeoutExpired:
        raise UserError(f"cannot detach {mnt}: fusermount3 did not return within {UMOUNT_TIMEOUT:.0f} s") from None
    if done.returncode != 0:
        raise UserError(f"cannot detach {mnt}: {_failure(done)}")
    trace = state.get("trace")
    if inside:
        then = f"flushes its trace to {trace} and exits" if trace else "exits"
        print(
            f"fusetrace: detached {mnt}; in use by {', '.join(inside)}: what they hold open stays served"
            f"{' and traced' if trace else ''}, new paths under {mnt} no longer reach it, and the server"
            f"{f' (pid {pid})' if pid else ''} {then} when the last lets go"
        )
        return 0
    return _unmounted(mnt, pid, state)


def _forget_dead(mnt: str, state: dict) -> None:
    """A server that is gone without removing its run state and control socket (killed
    with SIGKILL) has them removed: unless a new server wrote the state since."""
    from . import processes
    from .server import runstate

    if state and not processes.is_fusetrace(state.get("pid")) and runstate.read(mnt) == state:
        runstate.remove(mnt)


def _held(control: str) -> list[dict]:
    """The callers the server holds long in a request (Holds.held_long, server/holds.py): each keeps
    the mount busy with no descriptor in it.  [] when the server does not answer within a
    second (umount goes on without them)."""
    from .control_client import request

    try:
        return request(control, cmd="held", timeout=1.0).get("held", [])
    except (OSError, ValueError):
        return []


def _wait_server(mnt: str, pid: int, trace: str | None) -> None:
    """Wait for an unmounted server to flush and exit, as long as it makes progress (CPU
    time or I/O): a stopped server is said at once, one that stalls after STALL_TIMEOUT."""
    from . import processes

    what = "flush its trace" if trace else "exit"
    begin = last_change = time.monotonic()
    last = None
    while True:
        state = processes.proc_state(pid)
        if state is None:
            return
        now = time.monotonic()
        if state in ("T", "t"):
            raise UserError(
                f"{mnt}: unmounted, but its server (pid {pid}) is stopped and cannot {what}: "
                f"resume it with kill -CONT {pid}"
            )
        progress = processes.progress(pid)
        if progress != last:
            last, last_change = progress, now
        elif now - last_change > STALL_TIMEOUT:
            raise UserError(
                f"{mnt}: unmounted, but its server (pid {pid}) has made no progress for "
                f"{STALL_TIMEOUT:g} s (state {state}); it may be hung: end it with kill {pid}"
            )
        if now - begin > FLUSH_LIMIT:
            raise UserError(
                f"{mnt}: unmounted, but its server (pid {pid}) is still working after "
                f"{FLUSH_LIMIT:.0f} s: see its log, or end it with kill {pid}"
            )
        time.sleep(0.02)
