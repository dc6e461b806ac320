"""A trace as `fusetrace capture` writes it (docs/TRACE_FORMAT.md, "A captured trace"): one
record per system call, in the trace's own op names, `source` "syscalls" in its metadata; no
lookup, forget or release; fh a number per open file description (0 for path calls), inode
the object's real inode number where the call knew it (0 for path calls), a close(2) a
flush with no release after it."""

import errno as E
import os
from pathlib import Path

from fusetrace.trace.schema import TraceRecord
from fusetrace.trace.writer import TraceWriter

MOUNTPOINT = "/mnt/efs"
PID, TID, WORKER = 4100, 4100, 4102  # the process, its main thread, another of its threads
FILE, DIRECTORY, LINK = 0o100644, 0o040755, 0o120777
INO_D, INO_F, INO_G = 70001, 70002, 70003  # real inode numbers, as a probe reads them
WRITTEN = 3 * 4096  # bytes written to /d/f, then read back

# (op, inode, path, path2, fh, offset, size, result, errno, flags, mode, kind, tid)
CALLS: list[tuple] = [
    ("mkdir", 0, "/d", None, 0, 0, 0, 0, 0, 0, DIRECTORY, "meta_write", TID),
    ("getattr", 0, "/d", None, 0, 0, 0, 0, 0, 0, DIRECTORY, "meta_read", TID),
    ("create", INO_F, "/d/f", None, 1, 0, 0, 0, 0, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE, "meta_write", TID),
    *(
        ("write", INO_F, "/d/f", None, 1, i * 4096, 4096, 4096, 0, os.O_WRONLY, FILE, "buffered", TID)
        for i in range(WRITTEN // 4096)
    ),
    ("fsync", INO_F, "/d/f", None, 1, 0, 0, 0, 0, 0, FILE, "commit", TID),
    ("flush", INO_F, "/d/f", None, 1, 0, 0, 0, 0, 0, FILE, "commit", TID),
    ("getattr", 0, "/d/f", None, 0, 0, 0, 0, 0, 0, FILE, "meta_read", WORKER),
    ("access", 0, "/d/f", None, 0, 0, 0, 0, 0, 0, 0, "meta_read", WORKER),
    ("getxattr", 0, "/d/f", "security.selinux", 0, 0, 255, 0, E.ENODATA, 0, 0, "meta_read", WORKER),
    ("getxattr", 0, "/d/f", "system.posix_acl_access", 0, 0, 132, 0, E.ENODATA, 0, 0, "meta_read", WORKER),
    ("open", INO_F, "/d/f", None, 2, 0, 0, 0, 0, os.O_RDONLY, FILE, "meta_read", TID),
    ("read", INO_F, "/d/f", None, 2, 0, 65536, WRITTEN, 0, 0, FILE, "read", TID),
    ("read", INO_F, "/d/f", None, 2, WRITTEN, 65536, 0, 0, 0, FILE, "read", TID),
    ("getattr", INO_F, "/d/f", None, 2, 0, 0, 0, 0, 0, FILE, "meta_read", TID),
    ("flush", INO_F, "/d/f", None, 2, 0, 0, 0, 0, 0, FILE, "none", TID),
    ("getattr", 0, "/d/missing", None, 0, 0, 0, 0, E.ENOENT, 0, 0, "meta_read", TID),
    ("setattr", 0, "/d/f", "mode", 0, 0, 0, 0, 0, 0, FILE, "meta_write", TID),
    ("symlink", 0, "/d/l", "f", 0, 0, 0, 0, 0, 0, LINK, "meta_write", TID),
    ("readlink", 0, "/d/l", None, 0, 0, 4096, 1, 0, 0, LINK, "meta_read", TID),
    ("opendir", INO_D, "/d", None, 3, 0, 0, 0, 0, os.O_RDONLY | os.O_DIRECTORY, DIRECTORY, "meta_read", TID),
    ("readdir", INO_D, "/d", None, 3, 0, 32768, 96, 0, 0, DIRECTORY, "meta_read", TID),
    ("readdir", INO_D, "/d", None, 3, 96, 32768, 0, 0, 0, DIRECTORY, "meta_read", TID),
    ("releasedir", INO_D, "/d", None, 3, 0, 0, 0, 0, 0, DIRECTORY, "none", TID),
    ("statfs", 0, "/", None, 0, 0, 0, 0, 0, 0, 0, "meta_read", TID),
    ("rename", 0, "/d/f", "/d/g", 0, 0, 0, 0, 0, 0, 0, "meta_write", TID),
    ("create", INO_G, "/d/h", None, 4, 0, 0, 0, 0, os.O_RDWR | os.O_CREAT, FILE, "meta_write", WORKER),
    ("write", INO_G, "/d/h", None, 4, 0, 100, 100, 0, os.O_RDWR, FILE, "buffered", WORKER),
    ("flush", INO_G, "/d/h", None, 4, 0, 0, 0, 0, 0, FILE, "commit", WORKER),
    ("unlink", 0, "/d/l", None, 0, 0, 0, 0, 0, 0, 0, "meta_write", TID),
    ("unlink", 0, "/d/g", None, 0, 0, 0, 0, 0, 0, 0, "meta_write", TID),
]
STEP_NS = 50_000  # between one call's start and the next's
DUR_NS = 20_000


def write_syscall_trace(
    directory: Path, calls: list[tuple] = CALLS, start_ns: int = 10**12, step_ns: int = STEP_NS
) -> Path:
    """A captured trace of `calls` (CALLS' layout), one every `step_ns`, made by TraceWriter as
    the capture makes it: metadata {"source": "syscalls", "mountpoint": MOUNTPOINT}."""
    with TraceWriter(directory, {"source": "syscalls", "mountpoint": MOUNTPOINT}, flush_interval=3600) as w:
        for i, (op, inode, path, path2, fh, offset, size, result, err, flags, mode, kind, tid) in enumerate(calls):
            w.record(
                TraceRecord(
                    start_ns + i * step_ns,
                    DUR_NS,
                    op,
                    inode,
                    path,
                    path2,
                    fh,
                    offset,
                    size,
                    result,
                    err,
                    PID,
                    1000,
                    1000,
                    0,
                    comm="app",
                    kind=kind,
                    flags=flags,
                    mode=mode,
                    tid=tid,
                )
            )
    return directory
