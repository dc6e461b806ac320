"""The control socket's server side: `fusetrace stats` and `fusetrace set` talk to a running
server (their side: fusetrace/control_client.py).

One JSON request per connection, one JSON answer.  The socket lives in the
user's private state directory, is mode 0600, and the server also checks the
peer's uid (SO_PEERCRED), so only the mounting user (or root) can use it.
"""

import inspect
import json
import logging
import os
import socket
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from ..errors import ControlError
from ..private import open_private_dir

log = logging.getLogger(__name__)

# a control command's name: its answer (awaited when it waits)
Handlers = dict[str, Callable[[dict[str, Any]], dict[str, Any] | Awaitable[dict[str, Any]]]]

MAX_REQUEST = 64 * 1024


async def serve(
    path: str, handlers: Handlers, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Answer requests {"cmd": NAME, ...} with handlers[NAME](request) -> dict; started
    (nursery.start) once the socket listens, so that a mount said ready answers at once.

    The socket's directory is checked private (fusetrace/private.py) and the
    socket made relative to that descriptor (bound through /proc/self/fd/N/NAME), so
    a path swapped after the check cannot move it elsewhere."""
    directory, name = os.path.split(path)
    dfd = open_private_dir(directory, create=False)
    try:
        try:
            os.unlink(name, dir_fd=dfd)  # a stale socket (unlink never follows a symlink)
        except FileNotFoundError:
            pass
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # Linux makes the socket file with the socket's own mode (less the umask): set on the
        # descriptor, it is 0600 from the start, with no call by path and no umask change (a
        # umask is the whole process's: files created through the mount meanwhile took it).
        os.fchmod(sock.fileno(), 0o600)
        await sock.bind(f"/proc/self/fd/{dfd}/{name}")
        sock.listen(16)
        listeners = [trio.SocketListener(sock)]
        task_status.started()

        async def answer(stream: trio.SocketStream) -> None:
            await _answer(stream, handlers)

        try:
            await trio.serve_listeners(answer, listeners)
        finally:
            try:
                os.unlink(name, dir_fd=dfd)
            except FileNotFoundError:
                pass
    finally:
        os.close(dfd)


def _peer_uid(stream: trio.SocketStream) -> int:
    creds = stream.socket.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    uid: int = struct.unpack("3i", creds)[1]
    return uid


async def _answer(stream: trio.SocketStream, handlers: Handlers) -> None:
    """One connection's request and answer.  A client gone before its answer (a command
    timed out or interrupted) ends its connection only: trio would end the server."""
    try:
        await _answer_one(stream, handlers)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        log.debug("a control client left before its answer")


async def _answer_one(stream: trio.SocketStream, handlers: Handlers) -> None:
    async with stream:
        uid = _peer_uid(stream)
        if uid not in (0, os.geteuid()):
            await stream.send_all(b'{"error": "permission denied"}\n')
            return
        data = b""
        with trio.move_on_after(5):
            while not data.endswith(b"\n") and len(data) < MAX_REQUEST:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    break
                data += chunk
        try:
            request = json.loads(data)
            handler = handlers[request["cmd"]]
            answer = handler(request)
            if inspect.isawaitable(answer):  # a command that waits (crash: its undo runs in a thread)
                answer = await answer
        except (ValueError, KeyError, TypeError) as exc:
            answer = {"error": f"bad request: {exc}"}
        except ControlError as exc:
            answer = {"error": str(exc)}
        except Exception as exc:  # a bug answering one request must not end the server (trio would)
            log.exception("control request %.200r failed", data)
            answer = {"error": f"internal error: {exc!r} (see the server's log)"}
        await stream.send_all(json.dumps(answer).encode() + b"\n")
