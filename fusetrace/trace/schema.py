"""Columns of a trace record, each defined once: a field of `TraceRecord`, with its
Python type, its Arrow type and the value a record leaves it at.  `RECORD_SCHEMA`, its
Arrow schema, is read from those fields; the Parquet schema `SCHEMA` is those and, after
them, the columns that hold one value for a whole trace (`host`), which the writer adds
from its metadata rather than every record carrying them, and the exact bytes of the
names that are not UTF-8 (`path_raw`, `path2_raw`), which the writer derives from `path`
and `path2` (fusetrace/trace/names.py), and the two it derives at conversion: `time` (from
`start_ns`) and `sample` (from `op` and the capture's rates, fusetrace/trace/capture.py).

docs/TRACE_FORMAT.md documents every column; keep them in step.
"""

from typing import Annotated, NamedTuple, get_type_hints

import pyarrow as pa

_LABEL = pa.dictionary(pa.int8(), pa.string())  # a few distinct values: operations, gates, kinds
_NAME = pa.dictionary(pa.int32(), pa.string())  # more of them: RPC lists, process names, rules


class TraceRecord(NamedTuple):
    """One operation's row.  The model's account (gate to nfs) may be left out: an
    operation that was not shaped has none; so may the request's details (comm to
    entry), which tests writing synthetic traces rarely need."""

    start_ns: Annotated[int, pa.int64()]  # CLOCK_MONOTONIC at admission; metadata maps it to wall time
    dur_ns: Annotated[int, pa.int64()]  # admission to reply, shaping included
    op: Annotated[str, _LABEL]
    inode: Annotated[int, pa.uint64()]  # FUSE inode number (1 is the mount's root)
    path: Annotated[str, pa.string()]  # best known path below the mount root, "/"-rooted; not UTF-8: see path_raw
    path2: Annotated[str | None, pa.string()]  # second name: rename/link target, symlink target, xattr name; else null
    fh: Annotated[int, pa.uint64()]  # file handle, 0 where the op has none
    offset: Annotated[int, pa.int64()]
    size: Annotated[int, pa.int64()]  # bytes requested (read, write, getxattr, readdir entries...)
    result: Annotated[int, pa.int64()]  # bytes transferred or entries returned, else 0
    errno: Annotated[int, pa.int32()]  # 0 on success
    pid: Annotated[int, pa.uint32()]  # calling process; for ops on a handle, the one that opened it (tid: its thread)
    uid: Annotated[int, pa.uint32()]
    gid: Annotated[int, pa.uint32()]
    shaped_ns: Annotated[int, pa.int64()]  # time the emulator held the op; 0 in trace mode
    # The model's account of a shaped op (Shaper.admit's Ticket); null and 0 when not shaped
    gate: Annotated[str | None, _LABEL] = None  # what set its time: iops, file, throughput...
    wait_ns: Annotated[int, pa.int64()] = 0  # modelled time held by limits, slots and queues
    latency_ns: Annotated[int, pa.int64()] = 0  # modelled latency
    transfer_ns: Annotated[int, pa.int64()] = 0  # modelled transfer of its bytes
    nfs: Annotated[str | None, _NAME] = None  # the NFS RPCs the emulated client sent ("" none)
    # Format 3: who, and enough of the request to rebuild it (fusetrace/rehearse/requests.py)
    comm: Annotated[str, _NAME] = ""  # the process's name (/proc/PID/comm); "" unknown
    kind: Annotated[str | None, _LABEL] = None  # the request's kind; a write's: its mode
    flags: Annotated[int, pa.int32()] = 0  # open, create, opendir: the open(2) flags; else 0
    mode: Annotated[int, pa.uint32()] = 0  # st_mode of the object a reply described (lookup, getattr, create...)
    # the node id lookup, create, mknod, mkdir, symlink, link answered; unlink, rename: the
    # open file whose name went (NFS renames it away); else 0
    entry: Annotated[int, pa.uint64()] = 0
    # Format 4: the fault rule that fired on the operation, held it or whose error it returned; else null
    fault: Annotated[str | None, _NAME] = None
    # Format 8: the thread that made the request (a FUSE trace's: the caller id the kernel sent,
    # the opener's for ops on a handle, as pid; a capture's: the thread that made the system call)
    tid: Annotated[int, pa.uint32()] = 0


RECORD_SCHEMA = pa.schema(
    [(name, hint.__metadata__[0]) for name, hint in get_type_hints(TraceRecord, include_extras=True).items()]
)
# Format 5: the host the trace was taken on (the mount's --host, else its host name), for
# reading a fleet's traces as one; int32 indices, so that a fleet of thousands unifies
HOST = pa.field("host", pa.dictionary(pa.int32(), pa.string()))
# Format 6: the exact bytes of `path` and `path2` when they are not UTF-8 (their text then
# has U+FFFD in place of those bytes); null for every name that is UTF-8
RAW_NAMES = [pa.field("path_raw", pa.binary()), pa.field("path2_raw", pa.binary())]
# Format 7: the record's wall-clock time (its start_ns through the metadata's clock pair), so
# that DuckDB and Spark need no join with _metadata.json; and how many operations the record
# stands for, N when 1 in N of its operation was kept (`--trace-sample`), else 1
TIME = pa.field("time", pa.timestamp("ns", tz="UTC"))
SAMPLE = pa.field("sample", pa.uint32())
SCHEMA = pa.schema([*RECORD_SCHEMA, HOST, *RAW_NAMES, TIME, SAMPLE])

COLUMNS = SCHEMA.names
