"""Where a running server says who it is: one small JSON file per mountpoint.

`fusetrace umount`, `stats` and `set` find the server (pid, control socket,
trace directory) of a mountpoint here.  Private to the user (0700 directory).
"""

import hashlib
import json
import os

from .mounts import canonical


def state_dir() -> str:
    if os.geteuid() == 0:
        return "/run/fusetrace"
    base = os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/fusetrace-{os.geteuid()}"
    return os.path.join(base, "fusetrace") if "XDG_RUNTIME_DIR" in os.environ else base


def _base(mountpoint: str) -> str:
    digest = hashlib.sha1(canonical(mountpoint).encode()).hexdigest()[:16]
    return os.path.join(state_dir(), digest)


def path_for(mountpoint: str, suffix: str) -> str:
    """A private file for this mountpoint's server: .json, .log, .sock."""
    os.makedirs(state_dir(), mode=0o700, exist_ok=True)
    return _base(mountpoint) + suffix


def write(mountpoint: str, **state) -> None:
    path = path_for(mountpoint, ".json")
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(state, f)
    os.replace(tmp, path)


def read(mountpoint: str) -> dict | None:
    try:
        with open(_base(mountpoint) + ".json") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def remove(mountpoint: str) -> None:
    try:
        os.unlink(_base(mountpoint) + ".json")
    except FileNotFoundError:
        pass
