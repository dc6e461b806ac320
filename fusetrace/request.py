"""The request contract: what a handler tells the shaper, the inline policy and the
trace about one FUSE request.  It sits below the server and the shaping side, which
both speak it.

`Kind` is every kind of operation the shaper, the inline policy and the trace tell
apart, in one place; `Request` is the value a handler hands the shaper (and the
inline policy keys on).  What the emulated NFS client is asked is the model's own
type, `Call` (emulator/call.py, which says what each field means): `Request.call`
builds it.
"""

import enum
import os

from .emulator.call import Call

# Every FUSE operation the server handles, in the order messages list them: the one list
# (server/handlers.py wraps a handler for each; docs/ARCHITECTURE.md, "Where to add").
FUSE_OPERATIONS = (
    "lookup",
    "forget",
    "getattr",
    "setattr",
    "readlink",
    "mknod",
    "mkdir",
    "symlink",
    "unlink",
    "rmdir",
    "rename",
    "link",
    "open",
    "create",
    "read",
    "write",
    "flush",
    "release",
    "fsync",
    "opendir",
    "readdir",
    "releasedir",
    "fsyncdir",
    "statfs",
    "access",
    "setxattr",
    "getxattr",
    "listxattr",
    "removexattr",
)
# What a trace holds: every operation but forget, which has no reply and is not traced.
TRACED_OPERATIONS = tuple(op for op in FUSE_OPERATIONS if op != "forget")


class Kind(enum.StrEnum):
    """How the remote file system would see an operation."""

    META_READ = "meta_read"  # lookup, getattr, open, readdir, access...: a metadata read
    META_WRITE = "meta_write"  # setattr, xattr changes and namespace changes (with a directory)
    READ = "read"  # a data read
    WRITE = "write"  # a data write (its WriteMode says how)
    COMMIT = "commit"  # written data made durable: fsync, fsyncdir, a flush or close after writes
    NONE = "none"  # local only (a close with nothing written): never shaped


class WriteMode(enum.StrEnum):
    """How a data write reaches the server: the open file's flags."""

    BUFFERED = "buffered"  # into the client's page cache, written back later
    DIRECT = "direct"  # O_DIRECT: one round trip, not committed
    SYNC = "sync"  # O_SYNC or O_DSYNC: a round trip and a commit

    @classmethod
    def of(cls, flags: int) -> "WriteMode":
        """The mode of a write through a file opened with these open(2) flags."""
        return cls.DIRECT if flags & os.O_DIRECT else cls.SYNC if flags & (os.O_SYNC | os.O_DSYNC) else cls.BUFFERED


class Request:
    """One operation, as the shaper sees it: its `kind` (and `label`, the kind as the
    inline policy and `fusetrace stats` name it) and the fields of the NFS client's
    `Call` (emulator/call.py says what each means; `op` is the FUSE request's name,
    which is the VFS operation's), which `call` hands on.  A handler gives `closes`
    and `writable` for a flush only, `write_mode` for a write only.

    One is built for every request on the loop (a write on a mount that neither shapes
    nor traces excepted: Operations.write), so it is cheap to make: a plain class (not a
    frozen dataclass: docs/BENCHMARKS.md, "Figures behind design choices: emulator/,
    shaping/ and request.py") whose fields default to class attributes and are set only
    when given, as most requests give three or four.
    """

    file = directory = size = offset = handle = new_directory = busy = 0
    name = new_name = ""
    write_mode: WriteMode | None = None
    is_dir = closes = writable = kernel_only = False

    def __init__(
        self,
        op: str,
        kind: Kind,
        file: int = 0,
        directory: int = 0,
        size: int = 0,
        write_mode: WriteMode | None = None,
        *,
        name: str = "",
        offset: int = 0,
        is_dir: bool = False,
        closes: bool = False,
        writable: bool = False,
        handle: int = 0,
        new_directory: int = 0,
        new_name: str = "",
        kernel_only: bool = False,
        busy: int = 0,
    ) -> None:
        if (kind is Kind.WRITE) != (write_mode is not None):
            raise ValueError(f"{op}: a write mode is given with writes, and only with them")
        if directory and kind is not Kind.META_WRITE and op not in ("lookup", "release"):
            raise ValueError(f"{op}: only a lookup, a namespace change or a release names a directory")
        self.op, self.kind = op, kind
        # The kind as the inline policy and `fusetrace stats` name it: a write by its mode
        # (set here, not a property: the loop reads it once or twice per request).
        self.label: str = kind if write_mode is None else write_mode
        if file:
            self.file = file
        if directory:
            self.directory = directory
        if size:
            self.size = size
        if write_mode is not None:
            self.write_mode = write_mode
        if name:
            self.name = name
        if offset:
            self.offset = offset
        if is_dir:
            self.is_dir = is_dir
        if closes:
            self.closes = closes
        if writable:
            self.writable = writable
        if handle:
            self.handle = handle
        if new_directory:
            self.new_directory = new_directory
        if new_name:
            self.new_name = new_name
        if kernel_only:
            self.kernel_only = kernel_only
        if busy:
            self.busy = busy

    def call(self, uid: int) -> Call:
        """What the emulated NFS client is asked for this request made by user `uid`: built
        only when it is (a shaped mount, a simulated trace), so a trace-only mount pays nothing."""
        return Call(
            self.op,
            self.file,
            self.directory,
            self.name,
            self.size,
            self.offset,
            self.write_mode,
            self.is_dir,
            self.closes,
            self.writable,
            self.handle,
            self.new_directory,
            self.new_name,
            self.kernel_only,
            self.busy,
            uid,
        )

    def __repr__(self) -> str:
        return (
            f"Request({self.op!r}, {self.kind}, file={self.file}, directory={self.directory}, "
            f"size={self.size}, write_mode={self.write_mode}, name={self.name!r}, offset={self.offset}, "
            f"is_dir={self.is_dir}, closes={self.closes}, writable={self.writable}, handle={self.handle}, "
            f"new_directory={self.new_directory}, new_name={self.new_name!r}, kernel_only={self.kernel_only}, "
            f"busy={self.busy})"
        )
