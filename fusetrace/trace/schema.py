"""Columns of a trace record: `TraceRecord`, what `TraceWriter.record` takes, and its
Arrow type `RECORD_SCHEMA`, field for field in the same order (tests/trace/test_trace_writer.py
checks); the Parquet schema `SCHEMA` is those and, after them, the columns that hold one
value for a whole trace (`host`), which the writer adds from its metadata rather than
every record carrying them, and the exact bytes of the names that are not UTF-8
(`path_raw`, `path2_raw`), which the writer derives from `path` and `path2`
(fusetrace/trace/names.py).

docs/TRACE_FORMAT.md documents every column; keep them in step.
"""

from typing import NamedTuple

import pyarrow as pa

RECORD_SCHEMA = pa.schema(
    [
        ("start_ns", pa.int64()),  # CLOCK_MONOTONIC at admission; metadata maps it to wall time
        ("dur_ns", pa.int64()),  # admission to reply, shaping included
        ("op", pa.dictionary(pa.int8(), pa.string())),
        ("inode", pa.uint64()),  # FUSE inode number (1 is the mount's root)
        ("path", pa.string()),  # best known path below the mount root, "/"-rooted; not UTF-8: see path_raw
        ("path2", pa.string()),  # second name: rename/link target, symlink target, xattr name; else null
        ("fh", pa.uint64()),  # file handle, 0 where the op has none
        ("offset", pa.int64()),
        ("size", pa.int64()),  # bytes requested (read, write, getxattr, readdir entries...)
        ("result", pa.int64()),  # bytes transferred or entries returned, else 0
        ("errno", pa.int32()),  # 0 on success
        ("pid", pa.uint32()),  # calling process; for ops on a handle, the one that opened it
        ("uid", pa.uint32()),
        ("gid", pa.uint32()),
        ("shaped_ns", pa.int64()),  # time the emulator held the op; 0 in trace mode
        # The model's account of a shaped op (Shaper.admit's Ticket); null and 0 when not shaped
        ("gate", pa.dictionary(pa.int8(), pa.string())),  # what set its time: iops, file, throughput...
        ("wait_ns", pa.int64()),  # modelled time held by limits, slots and queues
        ("latency_ns", pa.int64()),  # modelled latency
        ("transfer_ns", pa.int64()),  # modelled transfer of its bytes
        ("nfs", pa.dictionary(pa.int32(), pa.string())),  # the NFS RPCs the emulated client sent ("" none)
        # Format 3: who, and enough of the request to rebuild it (fusetrace/rehearse/requests.py)
        ("comm", pa.dictionary(pa.int32(), pa.string())),  # the process's name (/proc/PID/comm); "" unknown
        ("kind", pa.dictionary(pa.int8(), pa.string())),  # the request's kind; a write's: its mode
        ("flags", pa.int32()),  # open, create, opendir: the open(2) flags; else 0
        ("mode", pa.uint32()),  # st_mode of the object a reply described (lookup, getattr, create...); else 0
        ("entry", pa.uint64()),  # the node id lookup, create, mknod, mkdir, symlink, link answered; unlink,
        # rename: the open file whose name went (NFS renames it away); else 0
        # Format 4: the fault rule that fired on the operation, held it or whose error it returned; else null
        ("fault", pa.dictionary(pa.int32(), pa.string())),
    ]
)
# Format 5: the host the trace was taken on (the mount's --host, else its host name), for
# reading a fleet's traces as one; int32 indices, so that a fleet of thousands unifies
HOST = pa.field("host", pa.dictionary(pa.int32(), pa.string()))
# Format 6: the exact bytes of `path` and `path2` when they are not UTF-8 (their text then
# has U+FFFD in place of those bytes); null for every name that is UTF-8
RAW_NAMES = [pa.field("path_raw", pa.binary()), pa.field("path2_raw", pa.binary())]
SCHEMA = pa.schema([*RECORD_SCHEMA, HOST, *RAW_NAMES])

COLUMNS = SCHEMA.names


class TraceRecord(NamedTuple):
    """One operation's row; see SCHEMA for what each field holds.  The model's account
    (gate to nfs) may be left out: an operation that was not shaped has none; so may the
    request's details (comm to entry), which tests writing synthetic traces rarely need."""

    start_ns: int
    dur_ns: int
    op: str
    inode: int
    path: str
    path2: str | None
    fh: int
    offset: int
    size: int
    result: int
    errno: int
    pid: int
    uid: int
    gid: int
    shaped_ns: int
    gate: str | None = None
    wait_ns: int = 0
    latency_ns: int = 0
    transfer_ns: int = 0
    nfs: str | None = None
    comm: str = ""
    kind: str | None = None
    flags: int = 0
    mode: int = 0
    entry: int = 0
    fault: str | None = None
