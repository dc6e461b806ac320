"""The request the emulated NFS client is asked about: one VFS operation, as a value.

The mount's handlers (through fusetrace/request.py's `Request.call`), the trace's
rebuilt records (fusetrace/rehearse/requests.py) and the tests all hand the client
this one type; what each field means is said here and nowhere else.
"""

from dataclasses import dataclass


# A plain slotted dataclass, made only for a shaped or simulated request: a frozen one
# costs more to make (docs/BENCHMARKS.md, "Figures behind design choices: emulator/,
# shaping/ and request.py").  Treat it as a value all the same.
@dataclass(slots=True)
class Call:
    """One VFS operation (NfsClient's VFS_OPS), made by user `uid`.

    `file`: the inode it is on (the directory, for opendir, readdir, fsyncdir; 0 for a
    namespace change whose object is not known yet); `directory` and `name`: the entry
    a lookup or namespace change is about (rename: where the entry leaves); `size`:
    bytes (readdir: entries asked for, from index `offset`; open: the bytes an O_TRUNC
    cuts); `write_mode`: for a write, buffered (None too), sync (O_SYNC/O_DSYNC) or
    direct; `is_dir`: whether `file` is a directory; for a flush (close(2)), `closes`:
    whether it ends its open file's NFS open, and so sends CLOSE (FUSE flushes at every
    close(2) of every duplicate; NFS sends one CLOSE per open file), and `writable`:
    whether the file was opened for writing (a read-only close flushes nothing); for
    readdir, `handle`: the open directory, whose pass it continues; for rename,
    `new_directory` and `new_name`: where the entry goes; for unlink and rename, `busy`:
    the node id of the regular file the name removed (rename: replaced) while it is open
    here, which NFS renames to a hidden name instead ("silly rename"; 0: none); for
    release, `directory`: that hidden name's, which the file's last release removes;
    `kernel_only`: the kernel's FUSE path sent it for its own write-back cache (a page
    filled before part of it is written through a write-only handle, a file's times
    handed over) and an NFS client would send nothing for the call; `uid`: the caller's
    user, whose ACCESS answers the client keeps apart from other users'
    (nfs_access_get_cached keys them by credential); `host`: in a fleet simulated together,
    which client (host) made it (tracesim.py hands it to that host's NfsClient)."""

    op: str
    file: int = 0
    directory: int = 0
    name: str = ""
    size: int = 0
    offset: int = 0
    write_mode: str | None = None
    is_dir: bool = False
    closes: bool = True
    writable: bool = True
    handle: int = 0
    new_directory: int = 0
    new_name: str = ""
    kernel_only: bool = False
    busy: int = 0
    uid: int = 0
    host: int = 0
