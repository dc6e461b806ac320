"""Where a running server says who it is: one small JSON file per mountpoint.

`fusetrace umount`, `stats` and `set` find the server (pid, control socket,
trace directory) of a mountpoint here; the background server's log and control
socket live beside it.  The directory is private to the user: created 0700, and
refused when it is a symlink, belongs to someone else or others may write in it
(so nobody can plant a symlink in it, or a file for us to trust).  Every file in
it is opened relative to a descriptor of the checked directory, never following
a symlink, created exclusively where new and checked to be ours.
"""

import contextlib
import hashlib
import json
import os
import secrets
from collections.abc import Iterator
from typing import Any

from ..errors import UserError
from ..private import NotPrivate, check_own_file, open_own_log, open_private_dir
from .mounts import canonical


def state_dir() -> str:
    if os.geteuid() == 0:
        return "/run/fusetrace"
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return os.path.join(runtime, "fusetrace") if runtime else f"/tmp/fusetrace-{os.geteuid()}"


def state_dirs_of(uid: int) -> list[str]:
    """Where user `uid`'s servers may have written their state, for root's `fusetrace list`:
    state_dir() as that user would have it, with or without the usual XDG_RUNTIME_DIR."""
    if uid == 0:
        return ["/run/fusetrace"]
    return [f"/run/user/{uid}/fusetrace", f"/tmp/fusetrace-{uid}"]


@contextlib.contextmanager
def _state(create: bool = True, path: str | None = None, owner: int | None = None) -> Iterator[int | None]:
    """The checked state directory's descriptor (None when it is missing and not `create`):
    this user's, or `path`, which must be `owner`'s."""
    path = path or state_dir()
    try:
        fd = open_private_dir(path, create, owner)
    except FileNotFoundError:
        if not create:
            yield None
            return
        raise UserError(f"state directory {path}: its parent does not exist") from None
    except NotPrivate as exc:
        raise UserError(f"state directory {path}: {exc}") from None
    except OSError as exc:
        raise UserError(f"state directory {path}: {(exc.strerror or str(exc)).lower()}") from None
    try:
        yield fd
    finally:
        os.close(fd)


def _name(mountpoint: str, suffix: str) -> str:
    return hashlib.sha1(os.fsencode(canonical(mountpoint))).hexdigest()[:16] + suffix  # UTF-8 or not


def path_for(mountpoint: str, suffix: str) -> str:
    """A private file for this mountpoint's server: .json, .log, .sock.  Makes and
    checks the state directory (UserError, one line, when it is not private)."""
    with _state():
        pass
    return os.path.join(state_dir(), _name(mountpoint, suffix))


def open_log(mountpoint: str) -> tuple[str, int]:
    """The default server log, opened for appending: (path, descriptor).  Never
    follows a symlink; refused (UserError) unless it is a regular file of ours."""
    name = _name(mountpoint, ".log")
    path = os.path.join(state_dir(), name)
    with _state() as d:
        return path, open_own_log(name, f"log {path}", dir_fd=d)


def write(mountpoint: str, **state: Any) -> None:
    """Write this mountpoint's state, atomically: a new file under a unique name
    (O_EXCL, never following a link), renamed over the old one."""
    name = _name(mountpoint, ".json")
    data = json.dumps(state).encode()
    with _state() as d:
        tmp = f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=d)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, name, src_dir_fd=d, dst_dir_fd=d)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=d)
            raise


def read(mountpoint: str, owner: int | None = None) -> dict[str, Any] | None:
    """The state a server wrote, or None (none, unreadable, or not a file of ours).
    UserError when the state directory exists but is not private.  `owner`: another
    user's server (root only), its state looked for where that user's would be."""
    for path in [None] if owner is None or owner == os.geteuid() else state_dirs_of(owner):
        with _state(create=False, path=path, owner=owner) as d:
            if d is None:
                continue
            try:
                fd = os.open(
                    _name(mountpoint, ".json"), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=d
                )
            except OSError:
                continue
            with os.fdopen(fd, "rb") as f:
                try:
                    check_own_file(f.fileno(), "state", owner)
                    state: dict[str, Any] = json.load(f)
                    return state
                except (OSError, ValueError, NotPrivate):
                    return None
    return None


def remove(mountpoint: str) -> None:
    """Forget this mountpoint's server: its state and its control socket (a server that
    stops removes the socket itself; one killed with SIGKILL left both behind)."""
    try:
        with _state(create=False) as d:
            if d is not None:
                for suffix in (".json", ".sock"):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(_name(mountpoint, suffix), dir_fd=d)
    except UserError:
        pass
