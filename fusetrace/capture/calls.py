"""The system calls a capture follows, as data: for each, the trace operation it records
and where its arguments are (the names of its tracepoint's fields, in
/sys/kernel/tracing/events/syscalls/sys_enter_NAME/format, which are the kernel's own
parameter names and have not changed since syscall tracepoints began).

Two shapes.  A call on a descriptor (`Fd`) is matched at entry by the superblock of the
file behind the descriptor, so a descriptor passed by dup, fork or SCM_RIGHTS is followed.
A call that names a path (`Named`, up to two of them, each below a directory descriptor
or the working directory) is matched at exit: by its result when it opens a file (the
superblock of the file it opened), else by the path: an absolute path below the mount
point, or a relative one whose starting directory is on the mount.

What a call is when its flags or its object decide (an open that creates, an open of a
directory, unlinkat of a directory, a close or fsync of a directory) is worked out in the
probe, so that the per-operation counts the probe keeps, against which losses are
counted, are by the operation the record names.
"""

from typing import NamedTuple

AT_FDCWD = -100


class Fd(NamedTuple):
    """A call on a descriptor.  offset: where it reads or writes (an expression of the
    tracepoint's `args` and the open file `$f`), size: the bytes it asks for (None: the
    result, for the vector calls whose sizes are in user memory)."""

    name: str
    op: str
    offset: str = "0"
    size: str | None = "0"
    fd: str = "args->fd"


class Named(NamedTuple):
    """A call that names a path (or two), each below a directory descriptor.  dirfd is
    None when the call takes none (AT_FDCWD); name2 is a second name that is not a path
    (an extended attribute's); path2 a second path (rename, link: its target; symlink:
    `target` is the link's contents and `path` the link).  x: flags (open, unlinkat,
    statx...), y: a mode or a size."""

    name: str
    op: str
    path: str
    dirfd: str | None = None
    path2: str | None = None
    dirfd2: str | None = None
    target: str | None = None
    xname: str | None = None
    x: str = "0"
    y: str = "0"


_F_POS = "$f->f_pos"  # the file's position as the call starts: where read(2) and write(2) act
_PREADV = "(args->pos_l == -1 ? $f->f_pos : args->pos_l)"  # preadv2(pos -1): at the file position

FD_CALLS: tuple[Fd, ...] = (
    Fd("read", "read", _F_POS, "args->count"),
    Fd("pread64", "read", "args->pos", "args->count"),
    Fd("readv", "read", _F_POS, None),
    Fd("preadv", "read", "args->pos_l", None),
    Fd("preadv2", "read", _PREADV, None),
    Fd("write", "write", _F_POS, "args->count"),
    Fd("pwrite64", "write", "args->pos", "args->count"),
    Fd("writev", "write", _F_POS, None),
    Fd("pwritev", "write", "args->pos_l", None),
    Fd("pwritev2", "write", _PREADV, None),
    Fd("close", "flush"),  # releasedir for a directory
    Fd("fsync", "fsync"),  # fsyncdir for a directory
    Fd("fdatasync", "fsync"),
    Fd("getdents64", "readdir", _F_POS, "args->count"),
    Fd("newfstat", "getattr"),
    Fd("fstatfs", "statfs"),
    Fd("ftruncate", "setattr", "0", "args->length"),
    Fd("fchmod", "setattr"),
    Fd("fchown", "setattr"),
    Fd("flistxattr", "listxattr", "0", "args->size"),
    Fd("fchdir", "chdir"),  # not recorded (below)
)

NAMED_CALLS: tuple[Named, ...] = (
    Named("openat", "open", "args->filename", "args->dfd", x="args->flags", y="args->mode"),
    Named("open", "open", "args->filename", x="args->flags", y="args->mode"),
    Named("creat", "create", "args->pathname", x="0x241", y="args->mode"),  # O_CREAT|O_WRONLY|O_TRUNC
    Named("openat2", "open", "args->filename", "args->dfd"),  # its flags are in user memory
    Named("newfstatat", "getattr", "args->filename", "args->dfd", x="args->flag"),
    Named("statx", "getattr", "args->filename", "args->dfd", x="args->flags"),
    Named("newstat", "getattr", "args->filename"),
    Named("newlstat", "getattr", "args->filename"),
    Named("access", "access", "args->filename", y="args->mode"),
    Named("faccessat", "access", "args->filename", "args->dfd", y="args->mode"),
    Named("faccessat2", "access", "args->filename", "args->dfd", x="args->flags", y="args->mode"),
    Named("readlinkat", "readlink", "args->pathname", "args->dfd", y="args->bufsiz"),
    Named("readlink", "readlink", "args->path", y="args->bufsiz"),
    Named("mkdirat", "mkdir", "args->pathname", "args->dfd", y="args->mode"),
    Named("mkdir", "mkdir", "args->pathname", y="args->mode"),
    Named("mknodat", "mknod", "args->filename", "args->dfd", y="args->mode"),
    Named("mknod", "mknod", "args->filename", y="args->mode"),
    Named("unlinkat", "unlink", "args->pathname", "args->dfd", x="args->flag"),  # rmdir: AT_REMOVEDIR
    Named("unlink", "unlink", "args->pathname"),
    Named("rmdir", "rmdir", "args->pathname"),
    Named("renameat", "rename", "args->oldname", "args->olddfd", "args->newname", "args->newdfd"),
    Named("renameat2", "rename", "args->oldname", "args->olddfd", "args->newname", "args->newdfd", x="args->flags"),
    Named("rename", "rename", "args->oldname", path2="args->newname"),
    Named("linkat", "link", "args->oldname", "args->olddfd", "args->newname", "args->newdfd", x="args->flags"),
    Named("link", "link", "args->oldname", path2="args->newname"),
    Named("symlinkat", "symlink", "args->newname", "args->newdfd", target="args->oldname"),
    Named("symlink", "symlink", "args->newname", target="args->oldname"),
    Named("fchmodat", "setattr", "args->filename", "args->dfd", y="args->mode"),
    Named("fchmodat2", "setattr", "args->filename", "args->dfd", x="args->flags", y="args->mode"),
    Named("chmod", "setattr", "args->filename", y="args->mode"),
    Named("fchownat", "setattr", "args->filename", "args->dfd", x="args->flag"),
    Named("chown", "setattr", "args->filename"),
    Named("lchown", "setattr", "args->filename"),
    # utimensat(fd, NULL, ...) is futimens(3): the descriptor's own file
    Named("utimensat", "setattr", "args->filename", "args->dfd", x="args->flags"),
    Named("utimes", "setattr", "args->filename"),
    Named("truncate", "setattr", "args->path", y="args->length"),
    Named("statfs", "statfs", "args->pathname"),
    Named("getxattr", "getxattr", "args->pathname", xname="args->name", y="args->size"),
    Named("lgetxattr", "getxattr", "args->pathname", xname="args->name", y="args->size"),
    Named("setxattr", "setxattr", "args->pathname", xname="args->name", y="args->size"),
    Named("lsetxattr", "setxattr", "args->pathname", xname="args->name", y="args->size"),
    Named("listxattr", "listxattr", "args->pathname", y="args->size"),
    Named("llistxattr", "listxattr", "args->pathname", y="args->size"),
    Named("removexattr", "removexattr", "args->pathname", xname="args->name"),
    Named("lremovexattr", "removexattr", "args->pathname", xname="args->name"),
    Named("fgetxattr", "getxattr", "0", "args->fd", xname="args->name", y="args->size"),
    Named("fsetxattr", "setxattr", "0", "args->fd", xname="args->name", y="args->size"),
    Named("fremovexattr", "removexattr", "0", "args->fd", xname="args->name"),
    # not recorded: followed so that the paths of later calls relative to it can be rebuilt
    Named("chdir", "chdir", "args->filename"),
)

# The operations a capture records (the trace's names), each with a number the probes use.
# The ones no table row names are those a row's flags or object turn it into.
OPS: tuple[str, ...] = tuple(
    dict.fromkeys(
        [c.op for c in FD_CALLS]
        + [c.op for c in NAMED_CALLS]
        + ["create", "opendir", "releasedir", "fsyncdir", "rmdir", "chdir"]
    )
)
OP_IDS = {op: i + 1 for i, op in enumerate(OPS)}  # 0: no entry in the probe's map
NOT_RECORDED = frozenset({"chdir"})
