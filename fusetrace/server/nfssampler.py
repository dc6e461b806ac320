"""The NFS view of a traced mount whose source is on NFS: the source's mount entry in
/proc/self/mountstats read once a second, each difference (the RPCs that moved) appended
to `_nfs.jsonl` in the trace directory, and a summary in _metadata.json's `nfs` key
(docs/TRACE_FORMAT.md, "The NFS sidecar").

Each reading is a file read and a parse, done in a worker thread: never on the trio loop.

Test hook (this machine has no NFS client): FUSETRACE_TEST_MOUNTSTATS=FILE makes the
sampler read FILE instead of /proc/self/mountstats, and FUSETRACE_TEST_NFS_MOUNT=PATH
sample the entry mounted on PATH there, whatever the source's file system.  The server
may run as root, so FILE is opened without following a link or blocking on a FIFO, and
refused unless it is a regular file of the user the server runs as, of at most MAX_BYTES.
"""

import errno
import json
import logging
import os
import stat
import time
from typing import TYPE_CHECKING, Any

import trio

from ..private import open_private_dir
from ..trace import mountstats
from . import mounts

if TYPE_CHECKING:
    from ..trace.writer import TraceWriter

log = logging.getLogger(__name__)

PROC = "/proc/self/mountstats"
ENV_FILE = "FUSETRACE_TEST_MOUNTSTATS"
ENV_MOUNT = "FUSETRACE_TEST_NFS_MOUNT"
SIDECAR = "_nfs.jsonl"  # "_": pyarrow, pandas and DuckDB globs of *.parquet never take it
INTERVAL_S = 1.0
MAX_BYTES = 16 << 20  # a host with hundreds of NFS mounts has a few MB of mountstats
NFS_TYPES = ("nfs", "nfs4")


class Sampler:
    """One mount's readings, each compared with the one before."""

    def __init__(self, path: str, mountpoint: str, device: str | None, hook: bool) -> None:
        self.path, self.mountpoint, self.device, self.hook = path, mountpoint, device, hook
        self.before: mountstats.Entry | None = None
        self.fd = -1
        self.counts = {"samples": 0, "rows": 0, "restarts": 0, "bad_lines": 0, "missed": 0}
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        self.error: str | None = None

    def read(self) -> str:
        """The text, bounded; OSError or ValueError (words naming why) when refused."""
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_NOFOLLOW if self.hook else 0)
        fd = os.open(self.path, flags)
        with open(fd, "rb") as f:
            if self.hook:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise ValueError("not a regular file")
                if st.st_uid != os.getuid():
                    raise ValueError(f"belongs to uid {st.st_uid}, not to the mount's owner (uid {os.getuid()})")
            data = f.read(MAX_BYTES + 1)  # /proc files say size 0: read to the bound
        if len(data) > MAX_BYTES:
            raise ValueError(f"over {MAX_BYTES:,} bytes")
        return data.decode("utf-8", "surrogateescape")

    def start(self, directory: str) -> dict[str, Any]:
        """The first reading (the series' base) and the sidecar's header; what the
        metadata says of the view."""
        entry = self.sample_entry()
        if entry is None:
            raise ValueError(f"no NFS entry mounted on {self.mountpoint} in {self.path}")
        dirfd = open_private_dir(directory, create=False)
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
            self.fd = os.open(SIDECAR, flags, 0o600, dir_fd=dirfd)
        finally:
            os.close(dirfd)
        self.before = entry
        self.first_ns = self.last_ns = time.monotonic_ns()
        head = {
            "device": entry.device,
            "mountpoint": entry.mountpoint,
            "fstype": entry.fstype,
            "statvers": entry.statvers,
            "opts": entry.opts,
            "interval_s": INTERVAL_S,
            "start_ns": self.first_ns,
        }
        self._write(head)
        return {**head, "sidecar": SIDECAR, "test_hook": self.hook}

    def sample_entry(self) -> mountstats.Entry | None:
        parsed = mountstats.parse(self.read())
        self.counts["bad_lines"] += parsed.bad_lines
        return mountstats.find(parsed, self.mountpoint, self.device)

    def sample(self) -> None:
        """One reading, its difference from the last appended when an RPC moved."""
        try:
            entry = self.sample_entry()
        except (OSError, ValueError) as exc:
            self.counts["missed"] += 1
            self.error = f"{self.path}: {getattr(exc, 'strerror', None) or exc}"
            return
        now = time.monotonic_ns()
        if entry is None:  # unmounted under us, or a stand-in rewritten without it
            self.counts["missed"] += 1
            return
        self.counts["samples"] += 1
        assert self.before is not None
        moved = mountstats.delta(self.before, entry)
        row: dict[str, Any] = {"t_ns": now, "dt_ns": now - (self.last_ns or now)}
        self.before, self.last_ns = entry, now
        if moved is None:
            self.counts["restarts"] += 1
            self._write({**row, "restart": True})
        elif moved:
            self._write({**row, "rpcs": {name: list(s) for name, s in moved.items()}})

    def _write(self, row: dict[str, Any]) -> None:
        data = (json.dumps(row, separators=(",", ":")) + "\n").encode()
        try:
            os.write(self.fd, data)  # one write: a killed server leaves at most a torn last line
            self.counts["rows"] += 1
        except OSError as exc:
            self.counts["missed"] += 1
            self.error = f"{SIDECAR}: {exc.strerror}"

    def close(self) -> dict[str, Any]:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        return {**self.counts, "first_ns": self.first_ns, "last_ns": self.last_ns, "error": self.error}


def for_source(source: str) -> Sampler | None:
    """The sampler of the NFS mount holding `source` (or of the test hook's stand-in);
    None when the source is not on NFS."""
    hook = os.environ.get(ENV_FILE)
    if hook:
        return Sampler(hook, os.environ.get(ENV_MOUNT, ""), None, hook=True)
    info = mounts.holder(source, mounts.table())
    if info.fstype not in NFS_TYPES:
        return None
    return Sampler(PROC, info.mountpoint, info.source, hook=False)


async def run(source: str, tracer: "TraceWriter | None") -> None:
    """Sample the source's NFS mount every INTERVAL_S until cancelled (the unmount), then
    write the summary into the trace's metadata.  Nothing without a trace or NFS."""
    if tracer is None:
        return
    sampler = await trio.to_thread.run_sync(for_source, source)
    if sampler is None:
        return
    try:
        described = await trio.to_thread.run_sync(sampler.start, tracer.directory)
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.errno != errno.EEXIST else str(exc)
        log.warning("NFS view: %s: %s; the trace has no NFS samples", sampler.path, why)
        tracer.update_metadata(nfs={"error": f"{sampler.path}: {why}", "test_hook": sampler.hook})
        return
    log.info("NFS view: sampling %s on %s every %g s", described["device"], described["mountpoint"], INTERVAL_S)
    tracer.update_metadata(nfs=described)
    try:
        deadline = trio.current_time()
        while True:
            deadline = max(deadline + INTERVAL_S, trio.current_time())  # a slow reading skips, never bunches
            await trio.sleep_until(deadline)
            await trio.to_thread.run_sync(sampler.sample)
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(sampler.sample)  # the last, partial second
            tracer.update_metadata(nfs={**described, **await trio.to_thread.run_sync(sampler.close)})
