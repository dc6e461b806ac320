"""`fusetrace replay --prepare`: the tree a trace started from, made before the replay
issues anything, so that each operation meets what it met when it was recorded: an open
finds its file, a create finds none (and stays a create), a mkdir finds no directory.

A name's first record that says whether it existed decides (DuckDB groups the records by
name, in bounded memory, spilling past reader.MEMORY_LIMIT):

- found: an operation succeeded on it without making it (a lookup, an open without
  create, a read, a getattr, an unlink, the old name of a rename...), or one that makes
  a name failed with EEXIST, or another failed as only on a name that is there (rmdir
  ENOTEMPTY, getxattr ENODATA, ...): it existed before the trace, so it is made;
- made: a create, mkdir, mknod, symlink, or the new name of a rename or link: it did not
  exist, so it is not made (nor anything below it);
- missing: an operation on it failed with ENOENT: not made either.

What a found name is comes from its records before the first one that changed it (a
write, a truncate, an open with O_TRUNC, its removal or replacement): the type its
lookup or getattr replied (else what the operations on it say: a readdir is of a
directory, a read of a file; a name with names below it is a directory), the permission
bits they replied, a file's size (the end of the furthest read that returned data, or
what an open with O_TRUNC cut, whichever is larger) and a symbolic link's target length
(readlink's result).  Every directory above a found name is made too.

The names come back sorted by their components, so each one's directories come before
it and everything below a directory follows it at once: the walk keeps only the chain of
directories above the current name (a directory's mode is set when the walk leaves it,
after what it holds is made).  Every name is made below INTO through Target's walk
(openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), never replacing or following anything
(files O_EXCL, no directory or link made over a name): a name that would leave INTO is
refused and counted, as the replay refuses it.
"""

import os
import shutil
import stat
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypedDict

import duckdb

from ..errors import BadValue
from ..texttable import printable
from ..trace import names, reader
from .replay_calls import REFUSED_DEVICE, Refused, Target, split_path
from .replay_syscalls import RESOLVE_BENEATH, RESOLVE_NO_SYMLINKS, openat2

FOUND, MADE, MISSING = "found", "made", "missing"
PLACEHOLDER = "#"  # a prepared link's target: its recorded length of these (the target is not traced)
DIRECTORY_MODE, FILE_MODE = 0o755, 0o644  # when no reply recorded a mode
BATCH_ROWS = 4096
BENEATH = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS  # as the replay walks: below INTO, through no link

UNDER_MADE = "below a name the trace makes or found missing: its records are of what the trace put there"
NOT_A_DIRECTORY = "below a name the trace shows is not a directory"

# One row per name: its first classifying record, and what its records before the first
# change say of it.  `ev` holds each record once under `path`, and a rename's or link's
# again under its new name (path2); `second` says which.
_QUERY = """
with ev as (
    select path as p, {path_raw} as raw, start_ns as t, op, errno as e, "offset" as o, size, result,
           flags, mode, path2 as attrs, false as second
    from trace where path is not null and path <> '/'
    union all
    select path2, {path2_raw}, start_ns, op, errno, "offset", size, result, flags, mode, null, true
    from trace where op in ('rename', 'link') and path2 is not null and path2 <> '/'
), classified as (
    select *,
        case
            when e = 0 and second and op = 'rename' and (flags & 2) <> 0 then 'found'  -- RENAME_EXCHANGE
            when e = 0 and (second or op in ('create', 'mkdir', 'mknod', 'symlink')) then 'made'
            when e = 0 then 'found'
            when e = 17 and (second or op in ('create', 'mkdir', 'mknod', 'symlink')) then 'found'  -- EEXIST
            -- ENOTEMPTY, ENODATA (no such attribute), ERANGE, EISDIR, EOPNOTSUPP: said of a name that is there
            when not second and e in (39, 61, 34, 21, 95) then 'found'
            when e = 2 and not second then 'missing'
        end as cls,
        e = 0 and (
            op in ('write', 'create', 'mkdir', 'mknod', 'symlink', 'unlink', 'rmdir', 'rename')
            or (op = 'link' and second)  -- a link's old name keeps its file
            or (op = 'setattr' and list_contains(string_split(attrs, ','), 'size'))
            or (op = 'open' and (flags & 512) <> 0)  -- O_TRUNC
        ) as changes,
        case
            when mode <> 0 then mode & 61440  -- S_IFMT
            when second then null
            when op in ('opendir', 'readdir', 'releasedir', 'fsyncdir', 'rmdir') then 16384
            when op in ('open', 'read', 'write', 'flush', 'release', 'fsync') then 32768
            when op = 'readlink' then 40960
        end as kind
    from ev
), names as (
    select p, raw, arg_min(cls, t) filter (where cls is not null) as cls,
           coalesce(min(t) filter (where changes), 9223372036854775807) as changed
    from classified group by p, raw
)
select c.p, c.raw, any_value(n.cls) as cls,
    arg_min(c.kind, c.t) filter (where c.kind is not null and c.e = 0 and c.t <= n.changed) as kind,
    arg_min(c.mode & 4095, c.t)
        filter (where c.mode <> 0 and c.op in ('lookup', 'getattr') and c.t <= n.changed) as perm,
    greatest(
        max(c.o + c.result) filter (where c.op = 'read' and c.e = 0 and c.result > 0 and c.t < n.changed),
        max(c.size) filter (where c.op = 'open' and c.e = 0 and (c.flags & 512) <> 0 and c.t <= n.changed)
    ) as size,
    max(c.result) filter (where c.op = 'readlink' and c.e = 0 and c.t < n.changed) as link_length
from classified c join names n on c.p = n.p and c.raw is not distinct from n.raw
group by c.p, c.raw
order by string_split(c.p, '/'), c.raw
"""


class Prepared(TypedDict):
    """What --prepare made, for the replay's summary."""

    into: str
    directories: int
    files: int
    symlinks: int
    bytes: int
    not_made: dict[str, int]  # reason: count


@dataclass
class Name:
    """A name on the walk's chain: a row of the query, or a directory only implied by
    the names below it (cls None)."""

    path: str  # as recorded, exact
    cls: str | None = None
    kind: int | None = None
    perm: int | None = None
    size: int = 0
    link_length: int | None = None
    made: bool = False  # made here (a directory: its mode is set when the walk leaves it)
    pending: bool = False  # to be made when the walk leaves it, unless a name below made it a directory
    blocked: bool = False  # not made, nor anything below it

    @property
    def parts(self) -> list[str]:
        return self.path[1:].split("/")


def check_empty(directory: str) -> None:
    """--prepare makes a trace's starting tree in an empty directory only: what is there
    already would turn the trace's creates into opens, and its sizes are unknown."""
    try:
        with os.scandir(directory) as entries:
            there = next(entries, None)
    except OSError as exc:
        raise BadValue(f"{printable(directory)}: cannot prepare it: {(exc.strerror or str(exc)).lower()}") from None
    if there is not None:
        raise BadValue(
            f"{printable(directory)}: not empty ({printable(there.name)}, ...): --prepare makes the trace's "
            f"starting tree in an empty directory only"
        )


def prepare(trace_dir: str, into: str) -> Prepared:
    """Make, below the empty directory `into`, the tree the trace started from."""
    check_empty(into)
    target = Target(into)
    tree = _Tree(target)
    try:
        for row in _names(trace_dir):
            tree.add(row)
        tree.leave(0)
    finally:
        target.close()
    return {
        "into": into,
        "directories": tree.directories,
        "files": tree.files,
        "symlinks": tree.symlinks,
        "bytes": tree.bytes,
        "not_made": dict(tree.not_made.most_common()),
    }


def _names(trace_dir: str) -> Iterator[Name]:
    """The query's rows, as Names, sorted by their components."""
    files = reader.checked_parts(trace_dir)
    scratch = tempfile.mkdtemp(prefix="fusetrace-prepare-")  # 0700, ours
    try:
        db = duckdb.connect(
            config={"memory_limit": reader.MEMORY_LIMIT, "temp_directory": scratch, "preserve_insertion_order": False}
        )
        try:
            db.read_parquet(files, union_by_name=True, hive_partitioning=False).create_view("trace")
            have = {row[0] for row in db.execute("describe trace").fetchall()}
            raw = {c: c if c in have else "null::blob" for c in ("path_raw", "path2_raw")}  # format 6
            query = _QUERY.format(path_raw=raw["path_raw"], path2_raw=raw["path2_raw"])
            for batch in db.sql(query).to_arrow_reader(BATCH_ROWS):
                for p, raw_name, cls, kind, perm, size, link_length in zip(*batch.to_pydict().values()):
                    yield Name(names.exact(p, raw_name), cls, kind, perm, size or 0, link_length)
        finally:
            db.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


class _Tree:
    """The walk over the sorted names: the chain of names above the current one, and
    what was made."""

    def __init__(self, target: Target):
        self.target = target
        self.chain: list[Name] = []
        self.directories = self.files = self.symlinks = self.bytes = 0
        self.not_made: Counter[str] = Counter()

    def add(self, name: Name) -> None:
        try:
            split_path(name.path)
        except Refused as refused:
            if name.cls == FOUND:
                self.not_made[str(refused)] += 1
            return
        parts = name.parts
        depth = 0
        while depth < min(len(self.chain), len(parts) - 1) and self.chain[depth].parts[-1] == parts[depth]:
            depth += 1
        self.leave(depth)
        self.chain += [Name("/" + "/".join(parts[: i + 1])) for i in range(depth, len(parts) - 1)]
        self.chain.append(name)
        if name.cls != FOUND:
            name.blocked = name.cls is not None  # made or missing; a name no record told of blocks nothing
            return
        above = self.chain[:-1]
        if any(a.blocked for a in above):
            self._not_made(name, UNDER_MADE)
        elif any(a.kind not in (None, stat.S_IFDIR) for a in above):
            self._not_made(name, NOT_A_DIRECTORY)
        elif all(a.made or self._mkdir(a) for a in above):
            if name.kind == stat.S_IFDIR:
                self._mkdir(name)
            else:
                name.pending = True
        else:
            name.blocked = True  # a directory above it could not be made (counted)

    def leave(self, depth: int) -> None:
        """Leave the names of the chain below `depth`, deepest first: make those that
        waited for it, and give each directory made its mode, now that what it holds is made."""
        while len(self.chain) > depth:
            name = self.chain.pop()
            if name.made:
                self._chmod(name)
            elif name.pending:
                self._make(name)

    def _not_made(self, name: Name, why: str) -> None:
        self.not_made[why] += 1
        name.blocked = True

    def _at(self, name: Name, what: str, make: Callable[[int, str], None]) -> bool:
        """make(directory descriptor, last name) for a name below INTO; False (counted)
        when it failed."""
        try:
            dirfd, last = self.target.parent(name.path)
        except OSError as exc:
            self._not_made(name, f"{what}: the walk to it failed ({(exc.strerror or str(exc)).lower()})")
            return False
        try:
            make(dirfd, last)
        except OSError as exc:
            self._not_made(name, f"{what}: {(exc.strerror or str(exc)).lower()}")
            return False
        finally:
            self.target.release_parent(dirfd)
        return True

    def _mkdir(self, name: Name) -> bool:
        """A directory, writable while what it holds is made (its mode comes on leaving it)."""
        name.made = self._at(name, "mkdir", lambda d, n: os.mkdir(n, 0o700, dir_fd=d))
        self.directories += name.made
        return name.made

    def _chmod(self, name: Name) -> None:
        def chmod(dirfd: int, last: str) -> None:
            fd = openat2(dirfd, last, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, BENEATH)
            try:
                os.fchmod(fd, DIRECTORY_MODE if name.perm is None else name.perm)
            finally:
                os.close(fd)

        self._at(name, "chmod", chmod)

    def _make(self, name: Name) -> None:
        """A file of its size, a symbolic link, a FIFO or a socket."""
        kind = name.kind or stat.S_IFREG
        perm = FILE_MODE if name.perm is None else name.perm
        if kind == stat.S_IFLNK:
            target = PLACEHOLDER * max(name.link_length or 1, 1)
            self.symlinks += self._at(name, "symlink", lambda d, n: os.symlink(target, n, dir_fd=d))
        elif kind in (stat.S_IFIFO, stat.S_IFSOCK):
            self.files += self._at(name, "mknod", lambda d, n: os.mknod(n, kind | perm, dir_fd=d))
        elif kind != stat.S_IFREG:
            self._not_made(name, REFUSED_DEVICE)
        elif self._at(name, "create", lambda d, n: self._file(d, n, name.size, perm)):
            self.files += 1
            self.bytes += name.size

    def _file(self, dirfd: int, last: str, size: int, perm: int) -> None:
        """A new file (O_EXCL: nothing there is replaced or followed) of `size` bytes: a
        hole, which reads as zeros and costs no disk however large a trace says it was."""
        fd = openat2(dirfd, last, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, BENEATH, 0o600)
        try:
            os.ftruncate(fd, size)
            os.fchmod(fd, perm)
        finally:
            os.close(fd)
