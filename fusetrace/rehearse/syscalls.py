"""`fusetrace fit` of a syscall trace (`fusetrace capture`): the NFS RPCs behind each system call.

A FUSE trace holds what the kernel asked the mount: its lookups, the reads its page cache
missed, a flush per close(2).  A syscall trace holds what processes asked the kernel,
before any cache.  The model's NFS client (emulator/nfsclient.py) is written against the
first: on an emulated mount the kernel's FUSE path sits in front of it, told by
`NfsClient.trusted` how long to keep each name and attribute, and keeping file pages
across opens unless the file changed (server/files.py, keep_cache), so that the two
together send the RPCs a Linux NFS client sends.  `Syscalls` plays that front half from
the system calls, and hands what it would have asked the mount, as FUSE records, to the
same Rebuilder and client `fusetrace fit` uses for a trace-mode FUSE trace (fit_infer.py);
`fusetrace simulate` hands the same requests (`requests`) to its own model (simulate_fleet.py):

- **Path walks.**  A call that takes a path walks it one name at a time; a name whose
  dentry is trusted (the time `trusted` gave, which is how long the Linux client trusts
  it: nfs_lookup_revalidate accepts a dentry while its directory's attributes are fresh
  and unchanged, else asks the server) costs nothing, any other is a `lookup` (LOOKUP;
  an ACCESS at a directory's first search, nfs_permission; a GETATTR of the directory
  to revalidate a name it knows).  The last name is not looked up where the Linux
  client does not: an open of a file (nfs_atomic_open sends OPEN by name, and
  nfs4_do_lookup_revalidate leaves an open's last name to it while its directory is
  unchanged; a name it knows but no longer trusts it revalidates first), a name being made
  (LOOKUP_EXCL: nfs_is_exclusive_create) and a rename's target (LOOKUP_RENAME_TARGET).
  A stat answered from a LOOKUP's attributes sends nothing more (nfs_getattr trusts
  them); after acregmin it is a GETATTR.  An open(O_CREAT) is a create unless the name
  is known to exist and O_EXCL is not set (a positive dentry is opened, lookup_open).
  A failed open without O_CREAT is a lookup of an absent name (the OPEN's NFS4ERR_NOENT
  leaves the negative dentry a LOOKUP would).
- **Pages.**  A read(2) sends a READ only for the pages of the range it returned that
  are not cached: read or written through any handle of the file since (the kernel's
  page cache; a trace is one client's, so nothing else changes the file and
  close-to-open keeps the pages: nfs_revalidate_mapping drops them only on a change
  attribute it did not make).  O_DIRECT reads always go.  Read-ahead is not modelled:
  pages it fetched show as later misses, whose short `dur_ns` the server-bound floor
  (fit.py) leaves out.
- **Writes** go to the page cache (no RPC); Linux holds them dirty until a flush (or
  30 s, vm.dirty_expire_centisecs): the close, fsync or setattr that follows sends them,
  one stable WRITE for what fits one, else the WRITEs and a COMMIT, and a stat the
  WRITEs (the model's client writes back as data comes, a FUSE trace's flush then
  waiting for it: `_written_by_flush`, `_stat`); `requests` passes the data on then (or at
  the first call 30 s after it was first dirtied), as one buffered write of it all.  A
  write on an O_SYNC/O_DSYNC file sends its data then and there (generic_write_sync
  calls nfs_file_fsync from write(2)).  A close(2) is FUSE's flush: the first of its open file sends CLOSE
  (close-to-open: nfs_file_flush writes back and waits, and the open's CLOSE is its
  last release, which the trace does not show); a later close(2) of a duplicate (dup,
  fork) sends only what was written since.  Every open sends OPEN, which brings fresh
  attributes (nfs_file_open, close-to-open).
- **Objects.**  A record names its object by path and, where the probe knew it, by its
  real inode number: both map to one node id of this replay (a path named before its
  inode keeps its id when the inode shows up), directory ids moving with a rename.
  Symbolic links in a path are not followed (the capture's path is what was asked).

What it counts as unknown (records of no system call it knows) is in `unknown`.
"""

import math
import os
import posixpath
import stat
from bisect import bisect_left, bisect_right
from errno import ENOENT
from typing import TypeVar

from ..emulator.model import Model
from ..emulator.nfsclient import NfsClient
from ..emulator.ops import Admission
from ..emulator.params import Params
from ..request import Kind, Request, WriteMode
from .requests import ROOT, Rebuilder

# The columns a Syscalls reads, in the order rpcs() takes them.
COLUMNS = ["dur_ns", "op", "inode", "path", "path2", "fh", "offset", "size", "result", "errno", "kind", "flags", "mode"]

PAGE = 4096  # the page cache's unit
# getdents64's bytes to entries: a linux_dirent64 of a name of 5-12 bytes (19 + name + NUL, 8-aligned)
DIRENT_BYTES = 32
DIRTY_EXPIRE_S = 30.0  # vm.dirty_expire_centisecs' default: dirty pages older than this are written back
_CAP = 1 << 17  # entries a cache keeps before it starts afresh (as nfsclient's)
_MAKES = {"mkdir": stat.S_IFDIR, "mknod": stat.S_IFREG, "symlink": stat.S_IFLNK}
# calls on an object named by a path (fh 0) or an open file (fh): walked to their object
_ON_OBJECT = frozenset(("getattr", "access", "readlink", "statfs", "getxattr", "listxattr", "setxattr", "removexattr"))
_ON_HANDLE = frozenset(("read", "write", "flush", "fsync", "fsyncdir", "readdir", "releasedir", "setattr", *_ON_OBJECT))
_SYNC = os.O_SYNC | os.O_DSYNC
_WRITE_MODES = frozenset(m.value for m in WriteMode)
_K = TypeVar("_K")
_V = TypeVar("_V")


def _write_mode(flags: int) -> WriteMode:
    """A write's mode by its file's open flags (as requests.py, for a handle it no longer holds)."""
    if flags & os.O_DIRECT:
        return WriteMode.DIRECT
    return WriteMode.SYNC if flags & _SYNC else WriteMode.BUFFERED


def _room(cache: dict[_K, _V]) -> dict[_K, _V]:
    if len(cache) >= _CAP:
        cache.clear()
    return cache


class Syscalls:
    """Feed it a syscall trace's records in start order (COLUMNS of each); it says what
    the emulated Linux NFS client sends for each (module docstring)."""

    def __init__(self, base: Params, origin_ns: int):
        self.client = NfsClient(Model(base, origin_ns / 1e9))
        self.rebuilder = Rebuilder()
        self.unknown = 0  # records of no system call this knows
        self._ids: dict[str, int] = {"/": ROOT}  # path known to exist: node id
        self._real: dict[int, int] = {}  # real inode number: node id
        self._next = ROOT
        self._dirs: set[int] = {ROOT}
        self._entries: dict[tuple[int, str], float] = {}  # dentry: trusted until (s)
        self._attrs: dict[int, float] = {}  # node: its attributes trusted until (s)
        self._handles: dict[int, tuple[int, int]] = {}  # fh: (node, open flags)
        self._open: dict[int, int] = {}  # node: its open files not closed yet
        self._closed: dict[int, tuple[int, int]] = {}  # fh whose open ended, still in use by a duplicate
        self._searched: dict[tuple[int, int], None] = {}  # (directory, user): its search asked ACCESS
        self._listing: dict[int, int] = {}  # open directory: entries its pass has read
        # node: (first dirtied at, bytes, least offset) of its buffered data, oldest first
        self._dirty: dict[int, tuple[float, int, int]] = {}
        self._pages: dict[int, tuple[list[int], list[int]]] = {}  # node: its cached byte ranges (starts, ends)
        self._now = self._end = 0.0
        self._uid = 0
        self._sent: list[Admission] = []
        self.requests: list[Request] = []  # what the kernel passed on to the client for the record (rpcs)

    def rpcs(self, start_ns: int, uid: int, record: tuple) -> tuple[str, int, int]:
        """The RPCs the client sends for the record ("" none), their latency and their
        wait (ns), as fit_infer.Inference.rpcs says them.  `requests` is then what the
        kernel passed on to the client for it, in the order it did."""
        dur, op, inode, path, path2, fh, offset, size, result, errno, kind, flags, mode = record
        self._now, self._end, self._uid, self._sent = start_ns / 1e9, (start_ns + max(dur, 0)) / 1e9, uid, []
        self.requests = []
        self._expire()
        path = posixpath.normpath(path) if path else ""
        if path.startswith("//"):
            path = path[1:]
        path2 = posixpath.normpath(path2) if path2 and op in ("rename", "link") else path2
        sync = self._call(op, inode, path, path2, fh, offset, size, result, errno, kind, flags, mode)
        nfs = ",".join(a.rpcs for a in self._sent if a.rpcs)
        if sync and nfs == "WRITE(FILE_SYNC)":
            nfs = "WRITE"  # sent by write(2) itself: a stable WRITE with a time of its own
        latency = sum(a.latency for a in self._sent)
        wait = sum(a.wait for a in self._sent)
        return nfs, int(latency * 1e9), int(wait * 1e9)

    # ---- one system call ---------------------------------------------------------------

    def _call(self, op, inode, path, path2, fh, offset, size, result, errno, kind, flags, mode) -> bool:
        """Send what the call makes the client send; True for a write on an O_SYNC file."""
        if fh and op in _ON_HANDLE:
            node, oflags = self._handles.get(fh) or self._closed.get(fh) or (self._node(path, inode), 0)
            return self._on_handle(op, node, oflags, path, fh, offset, size, result, errno, kind, flags, mode)
        if op in ("open", "create", "opendir"):
            self._open_path(op, inode, path, fh, size, errno, kind, flags, mode)
        elif op in _ON_OBJECT or op == "setattr":
            _, node = self._walk(path, inode, errno, mode)
            if node and op == "getattr":
                self._stat(node, path, mode)
            elif node:
                self._send(op, node, path, path2, size=size, errno=errno, kind=kind, mode=mode)
                if op == "setattr":
                    self._attributes(node)
        elif op in _MAKES:
            directory, _ = self._walk(path, inode, errno, mode, last=False)
            node = 0 if errno else self._node(path, inode, made=True)
            mode = mode or _MAKES[op]
            self._send(op, directory, path, path2, errno=errno, kind=kind, mode=mode, entry=node)
            self._made(directory, path, node, mode, errno)
        elif op in ("unlink", "rmdir"):
            self._remove(op, inode, path, errno, kind, mode)
        elif op == "rename":
            self._rename(inode, path, path2 or "", errno, kind, mode)
        elif op == "link":
            _, node = self._walk(path, inode, errno, mode)
            new_directory, _ = self._walk(path2 or "", 0, 0, 0, last=False)
            self._send("link", node, path, path2, errno=errno, kind=kind, mode=mode)
            self._made(new_directory, path2 or "", node, mode or stat.S_IFREG, errno)
        else:
            self.unknown += 1
        return False

    def _on_handle(self, op, node, oflags, path, fh, offset, size, result, errno, kind, flags, mode) -> bool:
        if op == "read":
            start, nbytes = offset, max(result, 0)
            if not oflags & os.O_DIRECT:
                start, nbytes = self._uncached(node, offset, offset + nbytes)
            if nbytes:
                self._send("read", node, path, fh=fh, offset=start, size=nbytes, kind=kind)
            self._cache(node, offset, offset + max(result, 0))
            return False
        late = fh in self._closed  # the handle's NFS open ended: the Rebuilder no longer holds it
        if op == "write":
            if errno:  # refused before any page was written (EBADF, EFBIG, ENOSPC...)
                return False
            # its mode by its label, else its file's flags (the write's own, else its open's), which the
            # Rebuilder is then given: one decision for what this and the client do with it
            write_mode = WriteMode(kind) if kind in _WRITE_MODES else _write_mode(flags or oflags)
            sync = write_mode is WriteMode.SYNC
            if late:
                written = Request("write", Kind.WRITE, node, size=max(result, 0), write_mode=write_mode, offset=offset)
                self._admit(written)
            else:
                self._send("write", node, path, fh=fh, offset=offset, size=max(result, 0), kind=write_mode.value)
            if write_mode is WriteMode.BUFFERED:  # held dirty: the flush that follows sends it
                since, nbytes, least = self._dirty.get(node, (self._now, 0, offset))
                _room(self._dirty)[node] = (since, nbytes + max(result, 0), min(least, offset))
                if self._sent:
                    self._sent[-1].rpcs = ""
            self._attrs.pop(node, None)  # the WRITE replies bring them (the client's), or a stat waits for them
            self._cache(node, offset, offset + max(result, 0))
            if sync and late:
                self._admit(Request("fsync", Kind.COMMIT, node))
            elif sync:
                self._send("fsync", node, path, fh=fh, kind="commit")
            return sync
        first = len(self._sent)
        dirty = self._write_back(node) if op in ("flush", "fsync", "setattr") else None
        if late and op in ("flush", "fsync"):  # a duplicate's: its data, no CLOSE (nfs_file_flush)
            self._admit(Request(op, Kind.COMMIT, node, closes=False, writable=True))
            if dirty is not None:
                self._written_by_flush(dirty, first)
            return False
        if op == "getattr":
            self._stat(node, path, mode)
            return False
        if op == "readdir":
            entries = max(result, 0) // DIRENT_BYTES
            at = 0 if offset == 0 else self._listing.get(fh, 0)
            _room(self._listing)[fh] = at + entries
            self._send("readdir", node, path, fh=fh, offset=at, size=entries, kind=kind)
            return False
        if op == "releasedir":
            self._listing.pop(fh, None)
            self._handles.pop(fh, None)
        self._send(op, node, path, fh=fh, size=size, errno=errno, kind=kind, mode=mode)
        if dirty is not None:
            self._written_by_flush(dirty, first)
        if op == "setattr":
            self._attributes(node)
        elif op == "flush" and fh in self._handles:
            # The first close(2) of the open file ends its NFS open (as requests.py reads a
            # FUSE trace: the trace cannot tell which close is the last), and releases it: a
            # hidden name of it goes when no other open file holds it (nfs_complete_unlink).
            _room(self._closed)[fh] = self._handles.pop(fh)
            left = self._open.pop(node, 1) - 1
            if left > 0:
                self._open[node] = left
            self._send("release", node, path, fh=fh, kind="none")
        return False

    def _written_by_flush(self, dirty: tuple[float, int, int], first: int) -> None:
        """The RPCs a flush (close, fsync, a setattr's) sent for the file's buffered data.
        The model's client writes it back as it comes (a FUSE trace's flush waits for
        that); Linux holds it dirty until the flush, or dirty_expire_centisecs (30 s), so
        that a system call's flush sends it itself, and its `dur_ns` holds those WRITEs:
        one stable WRITE for what fits one (FLUSH_COND_STABLE), else the WRITEs and a
        COMMIT (which fit_rpcs leaves out: their time is not the COMMIT's)."""
        if first >= len(self._sent):
            return
        a = self._sent[first]
        head, _, rest = a.rpcs.partition(",")
        if head not in ("WRITE(FILE_SYNC)", "COMMIT"):
            return
        wsize = int(self.client.model.params.nfs_io_size)
        head = "WRITE" if dirty[1] <= wsize else f"WRITE x{-(-dirty[1] // wsize)},COMMIT"
        a.rpcs = f"{head},{rest}" if rest else head

    def _open_path(self, op, inode, path, fh, size, errno, kind, flags, mode) -> None:
        exclusive = flags & os.O_CREAT and flags & os.O_EXCL
        if op == "create" and not exclusive and path in self._ids:
            op = "open"  # a positive dentry: opened, not made (lookup_open)
        if op == "opendir" or (errno and op == "open"):  # a directory's name is revalidated in full
            _, node = self._walk(path, inode, errno, mode or (stat.S_IFDIR if op == "opendir" else 0))
            if errno or not node:
                return
            self._send(op, node, path, fh=fh, kind=kind, flags=flags, mode=mode or stat.S_IFDIR)
        else:
            directory, _ = self._walk(path, inode, errno, mode, last=False)
            node = 0 if errno else self._node(path, inode, made=True)
            if op == "create":
                self._send("create", directory, path, fh=fh, errno=errno, kind=kind, flags=flags, entry=node)
                self._made(directory, path, node, mode or stat.S_IFREG, errno)
            else:
                key = (directory, posixpath.basename(path))
                if self._entries.get(key, math.inf) <= self._now:
                    # a dentry known but no longer trusted: nfs4_do_lookup_revalidate revalidates
                    # it before the OPEN (nfs_lookup_revalidate_dentry); one not cached is not
                    self._look(directory, path, node, mode or stat.S_IFREG)
                self._send("open", node, path, fh=fh, size=size, kind=kind, flags=flags, mode=mode)
                self._entries_until(key, self.client.trusted(directory, True, self._now)[1])
                self._attributes(node)
        if flags & os.O_TRUNC and not errno:
            self._pages.pop(node, None)
        if fh and not errno:
            self._handles[fh] = (node, flags)
            if op == "opendir":
                self._listing[fh] = 0
            else:  # an open regular file, which an unlink or a rename over it renames away
                self._open[node] = self._open.get(node, 0) + 1

    def _remove(self, op, inode, path, errno, kind, mode) -> None:
        directory, node = self._walk(path, inode, errno, mode)
        busy = node if op == "unlink" and node in self._open else 0
        self._send(op, directory, path, errno=errno, kind=kind, entry=busy)
        if not errno:
            self._forget(path)
            self._entries.pop((directory, posixpath.basename(path)), None)
            self._attrs.pop(directory, None)
            if not busy:
                self._pages.pop(node, None)

    def _rename(self, inode, path, path2, errno, kind, mode) -> None:
        directory, node = self._walk(path, inode, errno, mode)
        new_directory, _ = self._walk(path2, 0, 0, 0, last=False)  # LOOKUP_RENAME_TARGET: not looked up
        target = self._ids.get(path2, 0)
        busy = target if target in self._open else 0
        self._send("rename", directory, path, path2, errno=errno, kind=kind, entry=busy)
        if errno:
            return
        self._entries.pop((directory, posixpath.basename(path)), None)
        self._attrs.pop(directory, None)
        self._forget(path2)
        prefix = path + "/"
        for old in [p for p in self._ids if p.startswith(prefix)] if node in self._dirs else []:
            self._ids[path2 + old[len(path) :]] = self._ids.pop(old)
        self._ids[path2] = self._ids.pop(path, node)
        self._made(new_directory, path2, node, stat.S_IFDIR if node in self._dirs else stat.S_IFREG, 0)

    # ---- the kernel's caches -------------------------------------------------------------

    def _walk(self, path: str, inode: int, errno: int, mode: int, last: bool = True) -> tuple[int, int]:
        """Look up each name of `path` the dentry cache does not trust, the last one too
        when `last` (its real inode `inode`, 0 unknown): (the last name's directory, its
        node; 0 when absent).  A path the capture could not rebuild ("") walks nothing:
        its object is its inode's, if known."""
        if not path:
            return ROOT, self._node("", inode) if inode and last else 0
        names = [n for n in path.split("/") if n]
        directory, at = ROOT, ""
        for i, name in enumerate(names if last else names[:-1]):
            final = i == len(names) - 1
            child = f"{at}/{name}"
            absent = final and errno == ENOENT
            is_dir = not final or stat.S_ISDIR(mode)
            node = 0 if absent else self._node(child, inode if final else 0, made=not final or not errno, is_dir=is_dir)
            if self._entries.get((directory, name), -math.inf) <= self._now:
                self._look(
                    directory, child, node, 0 if absent else (stat.S_IFDIR if is_dir else (mode or stat.S_IFREG))
                )
            if final:
                return directory, node
            directory, at = node, child
        if not last:
            self._search(directory)
        return directory, (directory if last else 0)

    def _look(self, directory: int, path: str, node: int, mode: int) -> None:
        """A lookup of the last name of `path` in `directory` (node 0 and mode 0: absent),
        and the dentry and attributes its reply gives, for as long as the client trusts them."""
        name = posixpath.basename(path)
        _room(self._searched)[(directory, self._uid)] = None  # the client's lookup asks ACCESS first
        self._send("lookup", directory, path, mode=mode, entry=node)
        named, attrs = self.client.trusted(node, stat.S_ISDIR(mode), self._now, directory, name)
        self._entries_until((directory, name), named)
        if node:
            _room(self._attrs)[node] = max(self._attrs.get(node, -math.inf), self._now + attrs)

    def _search(self, directory: int) -> None:
        """The search of the directory of a name not looked up (an open's, a make's): its
        ACCESS at the user's first search (may_lookup checks MAY_EXEC on each directory of
        a walk, nfs_permission asks the server once), which a lookup would have sent."""
        if (directory, self._uid) in self._searched:
            return
        _room(self._searched)[(directory, self._uid)] = None
        self._send("access", directory, "", mode=stat.S_IFDIR)

    def _stat(self, node: int, path: str, mode: int) -> None:
        """A stat: from the attributes the kernel holds, else a getattr the client answers.
        nfs_getattr first writes the file's dirty pages (filemap_write_and_wait: one stable
        WRITE, or unstable ones a later flush commits), which the stat's `dur_ns` holds; the
        model's client waits instead for its write-back under way, or for one a flush that
        has returned already sent, which is nothing the stat sent."""
        if self._attrs.get(node, -math.inf) > self._now:
            return
        first = len(self._sent)
        dirty = self._write_back(node)
        self._send("getattr", node, path, mode=mode or (stat.S_IFDIR if node in self._dirs else stat.S_IFREG))
        self._attributes(node)
        if first >= len(self._sent):
            return
        a = self._sent[first]
        rest = "" if a.rpcs == "WRITE(FILE_SYNC)" else a.rpcs
        if dirty is not None:
            wsize = int(self.client.model.params.nfs_io_size)
            written = "WRITE" if dirty[1] <= wsize else f"WRITE x{-(-dirty[1] // wsize)}"
            a.rpcs = f"{written},{rest}" if rest else written
        else:
            a.rpcs = rest

    def _attributes(self, node: int) -> None:
        """The attributes a reply just brought: trusted for as long as the client trusts them."""
        left = self.client.trusted(node, node in self._dirs, self._now)[1]
        _room(self._attrs)[node] = self._now + left

    def _entries_until(self, key: tuple[int, str], left: float) -> None:
        _room(self._entries)[key] = self._now + left

    def _made(self, directory: int, path: str, node: int, mode: int, errno: int) -> None:
        """A name made (or moved there): its dentry and attributes, as the reply gave them."""
        self._attrs.pop(directory, None)  # its change is the directory's (fuse_dir_changed)
        if errno or not node:
            return
        if stat.S_ISDIR(mode):
            self._dirs.add(node)
        named, attrs = self.client.trusted(node, stat.S_ISDIR(mode), self._now, directory, posixpath.basename(path))
        self._entries_until((directory, posixpath.basename(path)), named)
        _room(self._attrs)[node] = self._now + attrs

    def _node(self, path: str, inode: int, made: bool = True, is_dir: bool = False) -> int:
        """The node id of the object at `path` (real inode `inode`, 0 unknown); `made`:
        it exists, so that a path named later finds it."""
        if path == "/":
            node = ROOT
        else:
            node = self._real.get(inode, 0) if inode else 0
            node = node or self._ids.get(path, 0)
            if not node:
                self._next += 1
                node = self._next
        if inode:
            _room(self._real)[inode] = node
        if made and path:
            _room(self._ids)[path] = node
        if is_dir:
            self._dirs.add(node)
        return node

    def _forget(self, path: str) -> None:
        node = self._ids.pop(path, 0)
        if node in self._dirs:
            prefix = path + "/"
            for p in [p for p in self._ids if p.startswith(prefix)]:
                del self._ids[p]

    def _uncached(self, node: int, start: int, end: int) -> tuple[int, int]:
        """The first byte of [start, end) not in the page cache, and the bytes from it to
        the end of the last page missing (0: all cached)."""
        if end <= start:
            return start, 0
        first, last = start // PAGE * PAGE, -(-end // PAGE) * PAGE
        starts, ends = self._pages.get(node, ([], []))
        i = bisect_right(ends, first)  # the first range that ends after `first`
        gaps: list[tuple[int, int]] = []
        at = first
        while at < last:
            if i < len(starts) and starts[i] <= at:
                at = ends[i]
                i += 1
                continue
            upto = min(last, starts[i]) if i < len(starts) else last
            gaps.append((at, upto))
            at = upto
        if not gaps:
            return start, 0
        return max(gaps[0][0], start), gaps[-1][1] - max(gaps[0][0], start)

    def _cache(self, node: int, start: int, end: int) -> None:
        """Pages [start, end) are in the page cache now (read or written)."""
        if end <= start:
            return
        first, last = start // PAGE * PAGE, -(-end // PAGE) * PAGE
        starts, ends = _room(self._pages).setdefault(node, ([], []))
        i, j = bisect_left(ends, first), bisect_right(starts, last)  # ranges [i, j) touch the new one
        if i < j:
            first, last = min(first, starts[i]), max(last, ends[j - 1])
        starts[i:j], ends[i:j] = [first], [last]

    # ---- what reaches the client ---------------------------------------------------------

    def _send(
        self,
        op: str,
        inode: int,
        path: str,
        path2: str | None = None,
        *,
        fh: int = 0,
        offset: int = 0,
        size: int = 0,
        errno: int = 0,
        kind: str | None = None,
        flags: int = 0,
        mode: int = 0,
        entry: int = 0,
    ) -> None:
        """The request the kernel's FUSE path would have made, as a FUSE record
        (requests.COLUMNS), to the client; the next one starts at its reply (within the
        record's own time)."""
        # Only a write's label says something the call does not (its mode): the other
        # requests' kinds follow from what they are, whatever a record's label claims.
        label = kind if op == "write" else None
        request = self.rebuilder.rebuild(
            op, inode, path, path2, fh, offset, size, errno, label, flags, mode, entry, None
        )
        if request is not None:
            self._admit(request)

    def _admit(self, request: Request) -> None:
        """Hand `request` to the client (a buffered write's data is passed on by _write_back)."""
        a = self.client.admit(request.call(self._uid), self._now)
        self._sent.append(a)
        self._now = min(max(self._now, a.done_at), self._end)
        if request.write_mode is not WriteMode.BUFFERED:
            self.requests.append(request)

    def _write_back(self, node: int) -> tuple[float, int, int] | None:
        """The file's dirty data, written back now (a flush, a stat, or 30 s after it was
        first dirtied): passed on as one buffered write of it all, which the client then
        writes back in wsize WRITEs (the model's client had it as it came: `rpcs`' account
        of it is _written_by_flush's).  Its (first dirtied at, bytes, least offset); None:
        nothing to write."""
        dirty = self._dirty.pop(node, None)
        if dirty is None or dirty[1] <= 0:
            return None
        written = Request("write", Kind.WRITE, node, size=dirty[1], write_mode=WriteMode.BUFFERED, offset=dirty[2])
        self.requests.append(written)
        return dirty

    def _expire(self) -> None:
        """Write back the data dirty for DIRTY_EXPIRE_S or more (the flusher thread's), at
        the first call after: no flush that follows sends it."""
        while self._dirty:
            node, (since, _, _) = next(iter(self._dirty.items()))
            if self._now - since < DIRTY_EXPIRE_S:
                return
            self._write_back(node)
