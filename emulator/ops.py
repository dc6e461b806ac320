"""What the model is asked about (an operation) and what it answers (an admission)."""

import enum
from dataclasses import dataclass

WRITE_MODES = ("buffered", "direct")


class OpClass(enum.Enum):
    DATA_READ = "data_read"
    DATA_WRITE = "data_write"
    META_READ = "meta_read"
    META_WRITE = "meta_write"
    COMMIT = "commit"


# Op and Admission are made for every RPC, so they are plain slotted dataclasses: a frozen one
# costs far more to make (docs/BENCHMARKS.md, "Figures behind design choices: emulator/,
# shaping/ and request.py").  Treat them as values all the same.


@dataclass(slots=True)
class Op:
    cls: OpClass
    nbytes: int = 0  # data bytes of a read or write
    file: int = 0  # inode of the file: per-file write slots, dirty data, commits
    directory: int = 0  # parent inode of a namespace change: per-directory slots
    # DATA_WRITE only: "buffered" (into the client's page cache, written back as UNSTABLE
    # WRITEs) or "direct" (one WRITE as sent, stable); a synchronous write is the client's
    # flush of buffered data (emulator/nfsclient.py)
    write_mode: str = "buffered"
    offset: int = 0  # DATA_WRITE: where in the file it starts (which stripe its bytes go to)
    rpc: str = ""  # the NFS request it is (nfsclient.py), whose latency may be its own

    def __post_init__(self) -> None:
        if self.nbytes < 0:
            raise ValueError(f"Op.nbytes must not be negative, got {self.nbytes}")
        if self.write_mode not in WRITE_MODES:
            raise ValueError(f"Op.write_mode must be one of {', '.join(WRITE_MODES)}, got {self.write_mode!r}")


class Gate(enum.StrEnum):
    """What set an operation's completion time."""

    LATENCY = "latency"  # its own latency and transfer: nothing held it
    IOPS = "iops"  # waited for an operations-per-second token
    FILE = "file"  # waited for a write slot of its file
    DIRECTORY = "directory"  # waited for a namespace slot of its directory
    THROUGHPUT = "throughput"  # the file system's throughput limit (credits, provisioned, elastic)
    CLIENT = "client"  # the client's own throughput limit (network, per-client)
    BUFFERED = "buffered"  # a buffered write, acknowledged by the client at once
    DIRTY = "dirty"  # a buffered write that waited for the client's dirty data to drain
    WRITEBACK = "writeback"  # waited for the file's dirty data to reach the server (a flush, a stat)
    CACHE = "cache"  # the NFS client answered alone (its caches, nothing to send, or sent without waiting)
    # the kernel's FUSE path sent it for its own write-back cache (a page fill, a hand-over of a
    # file's times), where an NFS client sends nothing for the call: it costs nothing
    KERNEL = "kernel"
    STALL = "stall"  # the server answered nothing for a while (a scheduled stall: emulator/events.py)


@dataclass(slots=True)
class Admission:
    """The model's answer: reply at done_at.  done_at - now = wait + latency + transfer."""

    done_at: float  # absolute time (s) the reply may be sent
    gate: Gate  # what set done_at
    latency: float  # sampled latency (s); for a buffered write, the client's cost
    transfer: float  # bytes / per-operation stream rate (s)
    wait: float  # time held by limits, slots and queues (s)
    rpcs: str = ""  # what the NFS client sent for it (nfsclient.py); "" from the model alone or when nothing
