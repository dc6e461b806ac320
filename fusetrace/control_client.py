"""The control socket's client side: one JSON request, one JSON answer, blocking (the
server side, trio, is fusetrace/server/control.py).  Apart from the server so that the CLI,
the pytest plugin and the scenarios ask a server without importing it."""

import json
import socket
from typing import Any


def request(path: str, *, timeout: float = 10.0, **req: object) -> dict[str, Any]:
    """Send one request to the server at `path` and return its answer (blocking, each
    step at most `timeout` seconds).  Any command's answer, so JSON as it came: the
    shapes are the server's handlers' (fusetrace/server/status.py, `Status`)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(json.dumps(req).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    answer: dict[str, Any] = json.loads(data)
    return answer
