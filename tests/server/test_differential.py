"""Differential test: the mount behaves like a plain directory.

Hypothesis drives random sequences of file-system operations against two
trees at once: a directory inside a fusetrace mount (attribute and entry
timeouts 0, so the kernel caches nothing and every check reaches the server)
and a plain directory on the same local file system.  Every operation must
give the same result on both sides: the same errno on failure, the same
return value on success.  After every step the two trees are walked and must
hold the same names, file types, modes, sizes, link counts and owners, and
hard links (and open descriptors) must show one st_ino through the mount
exactly where they do in the plain tree, an object keeping its st_ino for as
long as it lives.  At the end of each example the walk also compares every
file's bytes, every link's target and every user xattr (through the mount a
full walk costs a dozen requests per file, too slow for every step; the
read/readlink/getxattr rules compare those along the way).

One mount serves the whole module; each Hypothesis example works in fresh
subdirectories (ex<N>/w on both sides).  The namespace is a handful of names
and two subdirectories, so collisions and errors are frequent.  The machine
runs twice: as root, and with the effective uid/gid of an ordinary user
(the server still runs as root and must make what that user would make).
"""

import collections
import ctypes
import ctypes.util
import errno
import itertools
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    rule,
    run_state_machine_as_test,
)
from support import Mount, fusetrace, is_mounted

# ---- libc calls os does not offer (written here, not taken from fusetrace) ------------

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW = 0x100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
UTIME_OMIT = (1 << 30) - 2


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _check(ret: int) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def renameat2(old: str, new: str, flags: int) -> None:
    _check(_libc.renameat2(AT_FDCWD, os.fsencode(old), AT_FDCWD, os.fsencode(new), ctypes.c_uint(flags)))


def utimensat(path: str, atime_ns, mtime_ns, nofollow: bool) -> None:
    """None for a timestamp leaves it alone (UTIME_OMIT)."""
    times = (_Timespec * 2)()
    for i, ns in enumerate((atime_ns, mtime_ns)):
        times[i].tv_sec, times[i].tv_nsec = (0, UTIME_OMIT) if ns is None else divmod(ns, 10**9)
    _check(_libc.utimensat(AT_FDCWD, os.fsencode(path), times, AT_SYMLINK_NOFOLLOW if nofollow else 0))


# ---- the namespace and the values operations take ------------------------------------

# Paths below each example's work directory.  "a/x" sits under what is usually
# a file (ENOTDIR); "d" and "e" are the usual directories.
NAMES = ["a", "b", "c", "d", "e", "d/a", "d/b", "d/e", "e/a", "a/x"]
names = st.sampled_from(NAMES)


def _live_or_any(machine, bias):
    """Mostly a name that exists (in the plain tree), so that operations on
    existing objects are not drowned by ENOENT."""
    live = [n for n in NAMES if os.path.lexists(machine.path(1, n))]
    return st.one_of(*[st.sampled_from(live)] * bias, names) if live else names


some_names = st.runner().flatmap(lambda m: _live_or_any(m, 3))  # 3 in 4 existing
other_names = st.runner().flatmap(lambda m: _live_or_any(m, 1))  # 1 in 2: second names
# Relative targets only: both trees must resolve them alike.  "../a" from the
# top level reaches ex<N>/a, still inside the example.
targets = st.sampled_from(["a", "b", "d", "d/a", "../a", "e/a", "nowhere", "a/"])
modes = st.sampled_from([0o644, 0o600, 0o755, 0o700, 0o444, 0o000, 0o777, 0o4755, 0o2755, 0o1777, 0o2775])
xattr_names = st.sampled_from(["user.x", "user.y", "user.long_attribute_name"])
xattr_values = st.sampled_from([b"", b"1", b"value", b"\0bin\xff" * 30])
offsets = st.sampled_from([0, 1, 7, 4095, 4096, 5000, 70000])
sizes = st.sampled_from([0, 1, 10, 100, 4096, 5000, 70000, 200000])
data = st.one_of(
    st.binary(max_size=40),
    st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=3), st.integers(1, 3000)),
)
times_ns = st.sampled_from([0, 1_000_000_000, 1_234_567_891_234_567_891, 1_700_000_000_123_456_789, 999_999_999])
ACCESS = {"r": os.O_RDONLY, "w": os.O_WRONLY, "rw": os.O_RDWR}
EXTRA = {
    "creat": os.O_CREAT,
    "excl": os.O_EXCL,
    "trunc": os.O_TRUNC,
    "append": os.O_APPEND,
    "directory": os.O_DIRECTORY,
    "nofollow": os.O_NOFOLLOW,
}
open_flags = st.tuples(st.sampled_from(sorted(ACCESS)), st.sets(st.sampled_from(sorted(EXTRA)), max_size=2))
creat_flags = st.tuples(
    st.sampled_from(["w", "rw"]), st.sets(st.sampled_from(["excl", "trunc", "append"])).map(lambda s: s | {"creat"})
)

USER = (65534, 65534)  # nobody:nogroup, the uid of the unprivileged run


class Fds:
    """An open file on both sides."""

    _ids = itertools.count()

    def __init__(self, fds, label):
        self.fds = fds
        self.label = f"fd{next(self._ids)}:{label}"
        self.open = True

    def __repr__(self):
        return self.label


def _outcome(fn, errnos_seen: collections.Counter):
    try:
        return "ok", fn()
    except OSError as exc:
        name = errno.errorcode.get(exc.errno, exc.errno)
        errnos_seen[name] += 1
        return "err", name


def norm_stat(st_: os.stat_result) -> dict:
    return {
        "type": stat.S_IFMT(st_.st_mode),
        "mode": oct(stat.S_IMODE(st_.st_mode)),
        "size": st_.st_size,
        "nlink": st_.st_nlink,
        "uid": st_.st_uid,
        "gid": st_.st_gid,
    }


class Differential(RuleBasedStateMachine):
    """Subclassed per run with: mnt_base, plain_base (Paths), user ((uid, gid) or None),
    and its own counter and errnos_seen (the errors of every example of the run)."""

    mnt_base: Path
    plain_base: Path
    source_base: Path  # the mount's source below mnt_base
    user = None
    counter = itertools.count()
    errnos_seen: ClassVar[collections.Counter] = collections.Counter()

    fds = Bundle("fds")

    def __init__(self):
        super().__init__()
        n = next(self.counter)
        self.roots = (self.mnt_base / f"ex{n}", self.plain_base / f"ex{n}")
        for r in self.roots:
            os.mkdir(r)
            os.mkdir(r / "w")
            if self.user:
                os.chown(r, *self.user)
                os.chown(r / "w", *self.user)
        # Operations reach the work directories through descriptors held on them
        # (/proc/self/fd/N/...): with entry timeout 0 every path component costs a
        # lookup through the mount, and the way down to ex<N>/w is not under test.
        self.wfds = tuple(os.open(r / "w", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC) for r in self.roots)
        self.open_fds: list[Fds] = []
        self.ino_map: dict[int, int] = {}  # plain st_ino -> mount st_ino, of live objects

    # ---- running one operation on both sides ---------------------------------------

    def path(self, side: int, rel: str) -> str:
        return f"/proc/self/fd/{self.wfds[side]}/{rel}"

    def _as_user(self, fn):
        if not self.user:
            return _outcome(fn, self.errnos_seen)
        uid, gid = self.user
        groups = os.getgroups()
        os.setgroups([gid])
        os.setegid(gid)
        os.seteuid(uid)
        try:
            return _outcome(fn, self.errnos_seen)
        finally:
            os.seteuid(0)
            os.setegid(0)
            os.setgroups(groups)

    def both(self, fn, what=""):
        """fn(side) on the mount (side 0) and on the plain directory (side 1): same outcome."""
        got = [self._as_user(lambda side=side: fn(side)) for side in (0, 1)]
        assert got[0] == got[1], f"{what}: mount gave {got[0]!r}, plain directory {got[1]!r}"
        return got[1]

    def both_raw(self, fn):
        """Like both() for operations whose successful results (descriptors) differ."""
        return [self._as_user(lambda side=side: fn(side)) for side in (0, 1)]

    # ---- setup ----------------------------------------------------------------------

    @initialize(populate=st.sets(st.sampled_from(["a", "b", "d", "d/a", "e", "c->a"])))
    def start(self, populate):
        """Some objects to work on from the first step (made through the mount too)."""
        if "d/a" in populate:
            populate = populate | {"d"}
        for item in sorted(populate):
            if item in ("d", "e"):
                self.both(lambda s, item=item: os.mkdir(self.path(s, item), 0o755), f"mkdir {item}")
            elif "->" in item:
                name, to = item.split("->")
                self.both(lambda s, to=to, name=name: os.symlink(to, self.path(s, name)), f"symlink {to} {name}")
            else:

                def make(s, item=item):
                    fd = os.open(self.path(s, item), os.O_CREAT | os.O_WRONLY, 0o644)
                    os.write(fd, item.encode() * 10)
                    os.close(fd)

                self.both(make, f"create {item}")

    # ---- open files -------------------------------------------------------------------

    def _open(self, rel, flags, mode):
        acc, extra = flags
        bits = ACCESS[acc]
        for e in extra:
            bits |= EXTRA[e]
        got = self.both_raw(lambda s: os.open(self.path(s, rel), bits | os.O_CLOEXEC, mode))
        kinds = [g[0] for g in got]
        if kinds == ["ok", "ok"]:
            fds = Fds((got[0][1], got[1][1]), f"{rel}:{acc}+{'+'.join(sorted(extra))}")
            self.open_fds.append(fds)
            return fds
        for kind, fd in got:
            if kind == "ok":
                os.close(fd)
        assert got[0] == got[1], f"open({rel}, {flags}): mount gave {got[0]!r}, plain directory {got[1]!r}"
        return multiple()

    @rule(target=fds, rel=some_names, flags=open_flags, mode=modes)
    def open_any(self, rel, flags, mode):
        return self._open(rel, flags, mode)

    @rule(target=fds, rel=names, flags=creat_flags, mode=modes)
    def create(self, rel, flags, mode):
        return self._open(rel, flags, mode)

    @rule(fds=consumes(fds))
    def close(self, fds):
        fds.open = False
        self.both(lambda s: os.close(fds.fds[s]), f"close {fds}")

    @rule(fds=fds, off=offsets, buf=data)
    def pwrite(self, fds, off, buf):
        self.both(lambda s: os.pwrite(fds.fds[s], buf, off), f"pwrite {fds} @{off} len {len(buf)}")

    @rule(fds=fds, buf=data)
    def write(self, fds, buf):
        self.both(lambda s: os.write(fds.fds[s], buf), f"write {fds} len {len(buf)}")

    @rule(fds=fds, size=sizes, off=offsets)
    def pread(self, fds, size, off):
        self.both(lambda s: os.pread(fds.fds[s], size, off), f"pread {fds} @{off} size {size}")

    @rule(fds=fds, size=sizes)
    def read(self, fds, size):
        self.both(lambda s: os.read(fds.fds[s], size), f"read {fds} size {size}")

    @rule(fds=fds, off=offsets, whence=st.sampled_from([os.SEEK_SET, os.SEEK_END, os.SEEK_CUR]))
    def lseek(self, fds, off, whence):
        if whence == os.SEEK_END and stat.S_ISDIR(os.fstat(fds.fds[1]).st_mode):
            # Inherent: SEEK_END on a directory is answered by each kernel file system
            # itself (ext4's hashed directories put the end at 2**63-1, so any positive
            # offset is EINVAL; FUSE at the directory's st_size); nothing of it reaches
            # the server.  Not compared.
            return
        self.both(lambda s: os.lseek(fds.fds[s], off, whence), f"lseek {fds} {off} {whence}")

    @rule(fds=fds, size=sizes)
    def ftruncate(self, fds, size):
        self.both(lambda s: os.ftruncate(fds.fds[s], size), f"ftruncate {fds} {size}")

    @rule(fds=fds)
    def fstat(self, fds):
        self.both(lambda s: norm_stat(os.fstat(fds.fds[s])), f"fstat {fds}")

    @rule(fds=fds, datasync=st.booleans())
    def fsync(self, fds, datasync):
        self.both(lambda s: (os.fdatasync if datasync else os.fsync)(fds.fds[s]), f"fsync {fds}")

    @rule(fds=fds, mode=modes)
    def fchmod(self, fds, mode):
        self.both(lambda s: os.fchmod(fds.fds[s], mode), f"fchmod {fds} {mode:o}")

    # ---- names --------------------------------------------------------------------

    @rule(rel=some_names, size=sizes)
    def truncate(self, rel, size):
        self.both(lambda s: os.truncate(self.path(s, rel), size), f"truncate {rel} {size}")

    @rule(old=some_names, new=other_names, flags=st.sampled_from([0, RENAME_NOREPLACE, RENAME_EXCHANGE]))
    def rename(self, old, new, flags):
        if flags:
            fn = lambda s: renameat2(self.path(s, old), self.path(s, new), flags)  # noqa: E731
        else:
            fn = lambda s: os.rename(self.path(s, old), self.path(s, new))  # noqa: E731
        self.both(fn, f"rename {old} {new} flags {flags}")

    @rule(src=some_names, dst=names, follow=st.booleans())
    def link(self, src, dst, follow):
        self.both(
            lambda s: os.link(self.path(s, src), self.path(s, dst), follow_symlinks=follow),
            f"link {src} {dst} follow={follow}",
        )

    @rule(to=targets, rel=names)
    def symlink(self, to, rel):
        self.both(lambda s: os.symlink(to, self.path(s, rel)), f"symlink {to} {rel}")

    @rule(rel=some_names)
    def readlink(self, rel):
        self.both(lambda s: os.readlink(self.path(s, rel)), f"readlink {rel}")

    @rule(rel=some_names)
    def unlink(self, rel):
        self.both(lambda s: os.unlink(self.path(s, rel)), f"unlink {rel}")

    @rule(rel=names, mode=modes)
    def mkdir(self, rel, mode):
        self.both(lambda s: os.mkdir(self.path(s, rel), mode), f"mkdir {rel} {mode:o}")

    @rule(rel=some_names)
    def rmdir(self, rel):
        self.both(lambda s: os.rmdir(self.path(s, rel)), f"rmdir {rel}")

    @rule(rel=some_names, mode=modes)
    def chmod(self, rel, mode):
        self.both(lambda s: os.chmod(self.path(s, rel), mode), f"chmod {rel} {mode:o}")

    @rule(
        rel=some_names,
        uid=st.sampled_from([-1, 0, 1000, USER[0]]),
        gid=st.sampled_from([-1, 0, 1000, USER[1]]),
        follow=st.booleans(),
    )
    def chown(self, rel, uid, gid, follow):
        self.both(
            lambda s: os.chown(self.path(s, rel), uid, gid, follow_symlinks=follow),
            f"chown {rel} {uid}:{gid} follow={follow}",
        )

    @rule(rel=some_names, atime=st.none() | times_ns, mtime=st.none() | times_ns, nofollow=st.booleans())
    def utimens(self, rel, atime, mtime, nofollow):
        """Explicit times (either may be UTIME_OMIT): the very times must show on both sides."""
        what = f"utimens {rel} {atime} {mtime} nofollow={nofollow}"

        def set_and_stat(s):
            p = self.path(s, rel)
            before = os.stat(p, follow_symlinks=not nofollow)
            utimensat(p, atime, mtime, nofollow)
            after = os.stat(p, follow_symlinks=not nofollow)
            # a time given must show as given; a time omitted must not move
            return tuple(
                getattr(after, f) if t is not None else getattr(after, f) == getattr(before, f)
                for t, f in ((atime, "st_atime_ns"), (mtime, "st_mtime_ns"))
            )

        self.both(set_and_stat, what)

    @rule(rel=some_names)
    def utime_now(self, rel):
        self.both(lambda s: os.utime(self.path(s, rel)), f"utime {rel} now")

    @rule(
        rel=some_names,
        name=xattr_names,
        value=xattr_values,
        flags=st.sampled_from([0, os.XATTR_CREATE, os.XATTR_REPLACE]),
        follow=st.booleans(),
    )
    def setxattr(self, rel, name, value, flags, follow):
        self.both(
            lambda s: os.setxattr(self.path(s, rel), name, value, flags, follow_symlinks=follow),
            f"setxattr {rel} {name} flags {flags} follow={follow}",
        )

    @rule(rel=some_names, name=xattr_names, follow=st.booleans())
    def getxattr(self, rel, name, follow):
        self.both(
            lambda s: os.getxattr(self.path(s, rel), name, follow_symlinks=follow),
            f"getxattr {rel} {name} follow={follow}",
        )

    @rule(rel=some_names, follow=st.booleans())
    def listxattr(self, rel, follow):
        self.both(
            lambda s: sorted(os.listxattr(self.path(s, rel), follow_symlinks=follow)),
            f"listxattr {rel} follow={follow}",
        )

    @rule(rel=some_names, name=xattr_names, follow=st.booleans())
    def removexattr(self, rel, name, follow):
        self.both(
            lambda s: os.removexattr(self.path(s, rel), name, follow_symlinks=follow),
            f"removexattr {rel} {name} follow={follow}",
        )

    @rule(rel=st.sampled_from(["", "d", "e", "a", "d/e", "nowhere"]))
    def listdir(self, rel):
        self.both(lambda s: sorted(os.listdir(self.path(s, rel))), f"listdir {rel!r}")

    @rule(rel=some_names, follow=st.booleans())
    def stat(self, rel, follow):
        self.both(
            lambda s: norm_stat(os.stat(self.path(s, rel), follow_symlinks=follow)), f"stat {rel} follow={follow}"
        )

    @rule(rel=some_names, mode=st.sampled_from([os.F_OK, os.R_OK, os.W_OK, os.X_OK, os.R_OK | os.W_OK]))
    def access(self, rel, mode):
        self.both(lambda s: os.access(self.path(s, rel), mode, effective_ids=True), f"access {rel} {mode}")

    @rule(rel=some_names)
    def read_whole(self, rel):
        def slurp(s):
            with open(self.path(s, rel), "rb") as f:
                return f.read()

        self.both(slurp, f"read {rel}")

    # ---- after every step: the two trees are alike ----------------------------------------

    def _walk(self, side: int, full: bool, top: str | None = None):
        """{relpath: facts} of everything in the work directory (read as root), or
        below `top`, and {relpath: st_ino} of every object, open descriptors included.
        Contents, link targets and xattrs only when `full`: through the mount they cost
        a dozen requests per file, too many for every step."""
        facts, inos = {}, {}
        descriptors = self.open_fds if top is None else []
        top = top or self.path(side, "")

        def visit(rel):
            p = os.path.join(top, rel)
            st_ = os.lstat(p)
            f = norm_stat(st_)
            inos[rel] = st_.st_ino
            if stat.S_ISDIR(st_.st_mode):
                f["entries"] = sorted(os.listdir(p))
                for name in f["entries"]:
                    visit(os.path.join(rel, name))
            if not full:
                pass
            elif stat.S_ISLNK(st_.st_mode):
                f["target"] = os.readlink(p)
            else:
                f["xattrs"] = {n: os.getxattr(p, n) for n in sorted(os.listxattr(p))}
                if stat.S_ISREG(st_.st_mode):
                    with open(p, "rb") as fh:
                        f["data"] = fh.read()
            facts[rel] = f

        visit("")
        for fds in descriptors:
            if fds.open:
                inos[repr(fds)] = os.fstat(fds.fds[side]).st_ino
        return facts, inos

    def _compare(self, full: bool):
        (mf, mi), (pf, pi) = self._walk(0, full), self._walk(1, full)
        assert mf == pf
        # Same names on one object on both sides: hard links (and descriptors) of
        # one file share a st_ino through the mount exactly where they do below.
        assert mi.keys() == pi.keys()
        pairs = {(pi[k], mi[k]) for k in pi}
        assert len({p for p, _ in pairs}) == len(pairs) == len({m for _, m in pairs}), (
            f"st_ino does not follow objects: plain {pi}, mount {mi}"
        )
        # An object keeps its st_ino through the mount while it lives.
        for p, m in pairs:
            assert self.ino_map.get(p, m) == m, f"st_ino of one object changed from {self.ino_map[p]} to {m}"
        self.ino_map = dict(pairs)

    @invariant()
    def trees_alike(self):
        self._compare(full=False)

    def teardown(self):
        try:
            self._compare(full=True)
        finally:
            for fds in self.open_fds:
                if fds.open:
                    for fd in fds.fds:
                        os.close(fd)
            for fd in self.wfds:
                os.close(fd)
        # What reached the source, every descriptor closed: with a write-back cache the
        # mount's side above may be the kernel's pages, not the source's bytes.
        below = self._walk(0, True, str(self.source_base / self.roots[0].name / "w"))[0]
        assert below == self._walk(1, True, str(self.roots[1] / "w"))[0]


# ---- the mount, once per module ---------------------------------------------------------


def _trees(prefix: str, *options: str):
    """A mount over a fresh directory, and a plain directory beside it, for the module."""
    # Not under pytest's tmp_path: that is private to root, and the unprivileged
    # run must reach its example directories on both sides.
    base = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(base, 0o755)
    src, mnt, plain = base / "src", base / "mnt", base / "plain"
    for d in (src, mnt, plain):
        d.mkdir()
    fusetrace("mount", str(src), str(mnt), *options)
    m = Mount(src, mnt, None)
    try:
        yield m, plain
    finally:
        m.unmount()
        if not is_mounted(mnt):
            shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def trees():
    # allow_other: users other than the one who mounted (root) may use the mount.
    yield from _trees("fusetrace-diff-", "--attr-timeout", "0", "--entry-timeout", "0", "-o", "allow_other")


# An emulated mount, as it comes (FUSE's write-back cache, the NFS client's cache timeouts),
# with the profile's latencies cut to tens of microseconds and extended attributes on, as the
# plain directory has them: everything the kernel keeps for itself must still add up to what
# a plain directory shows.
FAST = [
    f"--set={key}={ms}"
    for kind in ("read", "write", "meta_read", "meta_write", "commit")
    for key, ms in ((f"{kind}_latency_ms", 0.02), (f"{kind}_latency_p99_ms", 0.05))
] + ["--set=xattrs=true"]


@pytest.fixture(scope="module")
def cached_trees():
    yield from _trees("fusetrace-diff-wb-", "--emulate", "efs-bursting", *FAST)


SETTINGS = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def _machine(trees, user, tag):
    m, plain = trees
    for side in (m.mountpoint, plain):
        (side / tag).mkdir()
    return type(
        f"Differential_{tag}",
        (Differential,),
        {
            "mnt_base": m.mountpoint / tag,
            "plain_base": plain / tag,
            "source_base": m.source / tag,
            "user": user,
            "counter": itertools.count(),
            "errnos_seen": collections.Counter(),
        },
    )


def _run_and_check_errors(machine) -> None:
    """Run the machine; then check that its random run met the common errors: the
    namespace is small enough that they happen often (the rarer ENOTEMPTY, EACCES,
    EBADF, ELOOP have their scripted cases below)."""
    run_state_machine_as_test(machine, settings=SETTINGS)
    seen = machine.errnos_seen
    for name in ("ENOENT", "EEXIST", "ENOTDIR", "EISDIR", "ENODATA", "EINVAL"):
        assert seen[name] > 0, f"no {name} in {dict(seen)}"


@pytest.mark.slow
def test_same_as_plain_directory_as_root(trees):
    _run_and_check_errors(_machine(trees, None, "root"))


@pytest.mark.slow
def test_same_as_plain_directory_as_user(trees):
    _run_and_check_errors(_machine(trees, USER, "user"))


@pytest.mark.slow
def test_same_as_plain_directory_through_an_emulated_mounts_write_back_cache(cached_trees):
    _run_and_check_errors(_machine(cached_trees, None, "cached"))


def _script(m, as_root, fd):
    """(what, fn(side), the outcome expected on both sides), in order, for the
    cases this test must cover whatever Hypothesis draws.  Descriptors go to fd."""
    P = m.path

    def opened(rel, flags, key, mode=0o644):
        def go(s):
            fd[key, s] = os.open(P(s, rel), flags | os.O_CLOEXEC, mode)
            return "open"

        return go

    def read_all(rel):
        def go(s):
            with open(P(s, rel), "rb") as f:
                return f.read()

        return go

    def ino_pair(r1, r2):
        return lambda s: os.stat(P(s, r1)).st_ino == os.stat(P(s, r2)).st_ino

    ok = "ok"
    return [
        ("rmdir non-empty", lambda s: os.rmdir(P(s, "d")), ("err", "ENOTEMPTY")),
        ("mkdir e", lambda s: os.mkdir(P(s, "e")), (ok, None)),
        ("rmdir empty", lambda s: os.rmdir(P(s, "e")), (ok, None)),
        ("rmdir a file", lambda s: os.rmdir(P(s, "a")), ("err", "ENOTDIR")),
        ("unlink a directory", lambda s: os.unlink(P(s, "d")), ("err", "EISDIR")),
        ("open missing", lambda s: os.open(P(s, "c"), os.O_RDONLY), ("err", "ENOENT")),
        ("open missing below a file", lambda s: os.open(P(s, "a/x"), os.O_RDONLY), ("err", "ENOTDIR")),
        ("O_DIRECTORY on a file", lambda s: os.open(P(s, "a"), os.O_RDONLY | os.O_DIRECTORY), ("err", "ENOTDIR")),
        ("write-open a directory", lambda s: os.open(P(s, "d"), os.O_WRONLY), ("err", "EISDIR")),
        ("O_EXCL on existing", lambda s: os.open(P(s, "a"), os.O_CREAT | os.O_EXCL | os.O_WRONLY), ("err", "EEXIST")),
        ("getxattr missing", lambda s: os.getxattr(P(s, "a"), "user.x"), ("err", "ENODATA")),
        (
            "setxattr REPLACE missing",
            lambda s: os.setxattr(P(s, "a"), "user.x", b"1", os.XATTR_REPLACE),
            ("err", "ENODATA"),
        ),
        ("setxattr CREATE", lambda s: os.setxattr(P(s, "a"), "user.x", b"1", os.XATTR_CREATE), (ok, None)),
        ("setxattr CREATE again", lambda s: os.setxattr(P(s, "a"), "user.x", b"2", os.XATTR_CREATE), ("err", "EEXIST")),
        ("setxattr on a directory", lambda s: os.setxattr(P(s, "d"), "user.y", b"dir"), (ok, None)),
        ("listxattr", lambda s: sorted(os.listxattr(P(s, "a"))), (ok, ["user.x"])),
        ("getxattr", lambda s: os.getxattr(P(s, "a"), "user.x"), (ok, b"1")),
        ("removexattr", lambda s: os.removexattr(P(s, "a"), "user.x"), (ok, None)),
        ("removexattr missing", lambda s: os.removexattr(P(s, "a"), "user.x"), ("err", "ENODATA")),
        (
            "RENAME_NOREPLACE onto existing",
            lambda s: renameat2(P(s, "a"), P(s, "b"), RENAME_NOREPLACE),
            ("err", "EEXIST"),
        ),
        ("RENAME_NOREPLACE", lambda s: renameat2(P(s, "b"), P(s, "c"), RENAME_NOREPLACE), (ok, None)),
        ("RENAME_EXCHANGE", lambda s: renameat2(P(s, "a"), P(s, "c"), RENAME_EXCHANGE), (ok, None)),
        ("contents exchanged", read_all("a"), (ok, b"b" * 10)),
        (
            "RENAME_EXCHANGE with a missing name",
            lambda s: renameat2(P(s, "a"), P(s, "b"), RENAME_EXCHANGE),
            ("err", "ENOENT"),
        ),
        ("RENAME_EXCHANGE file and directory", lambda s: renameat2(P(s, "a"), P(s, "d"), RENAME_EXCHANGE), (ok, None)),
        ("rename a directory into itself", lambda s: os.rename(P(s, "a"), P(s, "a/x")), ("err", "EINVAL")),
        ("rename a file over a directory", lambda s: os.rename(P(s, "c"), P(s, "a")), ("err", "EISDIR")),
        ("hard link", lambda s: os.link(P(s, "c"), P(s, "b")), (ok, None)),
        ("hard links share st_ino", ino_pair("b", "c"), (ok, True)),
        ("hard link count", lambda s: os.stat(P(s, "b")).st_nlink, (ok, 2)),
        ("link a directory", lambda s: os.link(P(s, "a"), P(s, "e")), ("err", "EPERM")),
        ("open for append", opened("b", os.O_WRONLY | os.O_APPEND, "app"), (ok, "open")),
        ("pwrite at 0 appends", lambda s: os.pwrite(fd["app", s], b"tail", 0), (ok, 4)),
        ("read from a write-only descriptor", lambda s: os.read(fd["app", s], 10), ("err", "EBADF")),
        ("appended", read_all("c"), (ok, b"a" * 10 + b"tail")),
        ("utimens mtime only", lambda s: utimensat(P(s, "c"), None, 1_500_000_000_000_000_001, False), (ok, None)),
        ("utimens atime only", lambda s: utimensat(P(s, "c"), 1_400_000_000_000_000_002, None, False), (ok, None)),
        (
            "both times kept",
            lambda s: (os.stat(P(s, "c")).st_atime_ns, os.stat(P(s, "c")).st_mtime_ns),
            (ok, (1_400_000_000_000_000_002, 1_500_000_000_000_000_001)),
        ),
        (
            "utimens symlink itself",
            lambda s: (
                os.symlink("nowhere", P(s, "e")),
                utimensat(P(s, "e"), 5, 7, True),
                os.lstat(P(s, "e")).st_mtime_ns,
            )[-1],
            (ok, 7),
        ),
        ("O_NOFOLLOW on a symlink", lambda s: os.open(P(s, "e"), os.O_RDONLY | os.O_NOFOLLOW), ("err", "ELOOP")),
        ("O_CREAT through a dangling symlink", opened("e", os.O_CREAT | os.O_WRONLY, "dangle"), (ok, "open")),
        ("made its target", lambda s: os.path.isfile(P(s, "nowhere")), (ok, True)),
        ("unlink an open file", lambda s: os.unlink(P(s, "b")), (ok, None)),
        ("open after unlink: the other name", lambda s: os.fstat(fd["app", s]).st_nlink, (ok, 1)),
        ("unlink the last name", lambda s: os.unlink(P(s, "c")), (ok, None)),
        ("unlinked file still written", lambda s: os.write(fd["app", s], b"more"), (ok, 4)),
        ("unlinked file nlink", lambda s: os.fstat(fd["app", s]).st_nlink, (ok, 0)),
        ("chmod 000", lambda s: os.chmod(P(s, "nowhere"), 0), (ok, None)),
        ("open mode 000", opened("nowhere", os.O_RDONLY, "zero"), (ok, "open") if as_root else ("err", "EACCES")),
        (
            "create in a read-only directory",
            lambda s: (os.chmod(P(s, "a"), 0o555), os.mkdir(P(s, "a/q")))[1],
            (ok, None) if as_root else ("err", "EACCES"),
        ),
        (
            "set-user-ID kept on create",
            lambda s: (os.close(os.open(P(s, "s"), os.O_CREAT | os.O_WRONLY, 0o4755)), oct(os.stat(P(s, "s")).st_mode))[
                1
            ],
            (ok, "0o104755"),
        ),
    ]


@pytest.mark.parametrize("who", ["root", "user"])
def test_scripted_cases(trees, who):
    m = _machine(trees, None if who == "root" else USER, f"script-{who}")()
    fds = {}
    try:
        m.start({"a", "b", "d", "d/a"})
        for what, fn, expected in _script(m, who == "root", fds):
            got = m.both(fn, what)
            assert got == expected, f"{what}: both sides gave {got!r}, the case needs {expected!r}"
            m.trees_alike()
    finally:
        for fd in fds.values():
            os.close(fd)
        m.teardown()
