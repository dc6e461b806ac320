"""A fusetrace mount over a fresh temporary directory, made and removed through the
command line as a user would: what the demo, the scenarios and the calibration use."""

import os
import subprocess
import sys
import tempfile
from typing import Any

from ..control_client import request
from ..errors import UserError
from ..server import mounts, runstate

SCRATCH_MIN_FREE = 4 << 30  # bytes a memory file system must have free to be used


def scratch_root() -> str | None:
    """Where scratch directories go: /dev/shm when it is a memory file system with room,
    so that the local disk (its write-back throttling, a real fsync of gigabytes) never
    sets the pace of an emulated run; else the system's temporary directory (None)."""
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    if mounts.fstype_of("/dev/shm") != "tmpfs" or st.f_bavail * st.f_frsize < SCRATCH_MIN_FREE:
        return None
    return "/dev/shm"


def cli(*args: str) -> str:
    """Run a fusetrace command; its standard output, or its one-line error raised.
    Interrupted (Ctrl-C, SIGTERM), it lets the command finish before the interruption
    goes on: a mount or unmount cut in half is what leaves a mount behind (both are
    bounded)."""
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", "fusetrace", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate()
    except BaseException:
        proc.communicate()
        raise
    if proc.returncode != 0:
        raise UserError(err.strip().removeprefix("fusetrace: ") or f"fusetrace {args[0]} failed")
    return out


class ScratchMount:
    """`with ScratchMount(*mount options) as m:` m.src (the directory below, in
    scratch_root(), or `source`: another mount's, for a second client of its file
    system), m.mnt (the mount point); unmounted and removed at the end of the block,
    however it ends."""

    def __init__(self, *options: str, prefix: str = "fusetrace-", source: str | None = None):
        self.options = options
        self.prefix = prefix
        self.source = source

    def __enter__(self):
        self._tmp = tempfile.TemporaryDirectory(prefix=self.prefix, dir=scratch_root())
        self.src, self.mnt = self.source or os.path.join(self._tmp.name, "src"), os.path.join(self._tmp.name, "mnt")
        if self.source is None:
            os.mkdir(self.src)
        os.mkdir(self.mnt)
        try:
            cli("mount", self.src, self.mnt, *self.options)
        except BaseException:  # interrupted, the mount may have come up all the same
            self._remove()
            raise
        return self

    def ask(self, **req) -> dict[str, Any]:
        """One control request to the server ({"cmd": ..., ...}), straight from its socket."""
        answer = request(self._control(), **req)
        if "error" in answer:
            raise UserError(f"{self.mnt}: {answer['error']}")
        return answer

    def stats(self) -> dict[str, Any]:
        """The server's `fusetrace stats --json`."""
        return self.ask(cmd="stats")

    def host(self) -> dict[str, Any]:
        """How the emulating server keeps up: its counters (hostload.host_load() compares two)."""
        return self.stats()["host"]

    def set(self, key: str, value) -> None:
        self.ask(cmd="set", key=key, value=str(value))

    def _control(self) -> str:
        return runstate.path_for(mounts.canonical(self.mnt), ".sock")

    def __exit__(self, *exc):
        self._remove()

    def _remove(self) -> None:
        """Unmount if mounted, then remove the directory; but never remove through a mount
        that would not go (the unmount's error says why)."""
        try:
            if self._mounted():
                cli("umount", self.mnt)
        finally:
            if not self._mounted():
                self._tmp.cleanup()

    def _mounted(self) -> bool:
        return mounts.mounted_at(mounts.canonical(self.mnt)) is not None
