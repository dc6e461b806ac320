"""Renames and links through an allow_other mount are made as the caller, as natively.

Root serves the mount; `nobody` renames (with each renameat2 flag) and links files in
a world-writable sticky directory through it.  The same calls are made natively, as
the same user, in a sibling sticky directory of the source, and everything a user can
tell apart is compared: the errno, and the owner, group, type and mode of what each
name holds afterwards (for RENAME_WHITEOUT, the whiteout left at the source), and
whether the caller can then remove it.  The server used to rename and link as root:
a whiteout made through the mount belonged to root, and in a sticky directory only
root could remove it (docs/SECURITY.md, rule 3).
"""

import errno
import os
import subprocess
from pathlib import Path

import pytest
from support import served

NOBODY = 65534
PYTHON = "/usr/bin/python3"  # the caller's: the test's own may sit where nobody cannot reach
NOREPLACE, EXCHANGE, WHITEOUT = 1, 2, 4  # renameat2's flags (linux/fs.h)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to serve an allow_other mount")
_PROTECTED = Path("/proc/sys/fs/protected_hardlinks").read_text().strip() == "1"
_UNLESS_PROTECTED = pytest.mark.skipif(not _PROTECTED, reason="fs.protected_hardlinks is off")

# As the caller, in DIR: make the files named after "--" (the caller's own), then one
# call: renameat2(DIR/OLD, DIR/NEW, FLAGS), or with FLAGS "link" os.link(DIR/OLD, DIR/NEW)
# (the link itself, not its target, for a symbolic link); print its errno (0: done).
# With FLAGS "unlink", os.unlink(DIR/OLD).
_CALL = r"""
import ctypes, os, sys
directory, old, new, flags = sys.argv[1:5]
os.umask(0o022)
for name in sys.argv[6:]:
    open(os.path.join(directory, name), "w").close()
old, new = os.path.join(directory, old), os.path.join(directory, new)
def renameat2():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(-100, os.fsencode(old), -100, os.fsencode(new), ctypes.c_uint(int(flags))):
        raise OSError(ctypes.get_errno(), "renameat2")
try:
    os.link(old, new, follow_symlinks=False) if flags == "link" else os.unlink(old) if flags == "unlink" else renameat2()
    print(0)
except OSError as exc:
    print(exc.errno)
"""


def _as_nobody(directory: Path, old: str, new: str, flags: str, *mine: str) -> int:
    """The errno of _CALL run as nobody (0: done)."""
    done = subprocess.run(
        [PYTHON, "-c", _CALL, str(directory), old, new, flags, "--", *mine],
        user=NOBODY,
        group=NOBODY,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


@pytest.fixture(scope="module")
def shared():
    """(source, mountpoint): an allow_other mount served by root, its attributes never
    cached (each call checks what the source holds)."""
    yield from served("fusetrace-creds-", "--attr-timeout", "0", "--entry-timeout", "0")


def _state(path: Path) -> tuple | None:
    """What a name holds, as a user can tell: owner, group, mode with type, device, links."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return st.st_uid, st.st_gid, st.st_mode, st.st_rdev, st.st_nlink


def _both_ways(
    shared, name: str, flags: str, mine: tuple[str, ...], roots: dict[str, int], old: str = "a", new: str = "b"
) -> tuple[tuple, tuple]:
    """Run the call natively in one fresh sticky directory and through the mount in
    another, each set up alike: `roots` are root's files (name: mode; a mode of 0 a
    symbolic link), `mine` the caller's, made by the caller.  Returns, for each, (errno
    of the call, the states of `old` and `new` in the source then, errno of the caller's
    removing `old` after that)."""
    src, mnt = shared
    results = []
    for where in ("native", "through"):
        directory = src / f"{name}-{where}"
        directory.mkdir()
        os.chmod(directory, 0o1777)
        for root_name, mode in roots.items():
            if mode:
                (directory / root_name).write_text("root's")
                os.chmod(directory / root_name, mode)
            else:
                os.symlink("target", directory / root_name)
        caller_dir = directory if where == "native" else mnt / directory.name
        call = _as_nobody(caller_dir, old, new, flags, *mine)
        states = _state(directory / old), _state(directory / new)
        results.append((call, *states, _as_nobody(caller_dir, old, new, "unlink")))
    return results[0], results[1]


_MINE = (NOBODY, NOBODY, 0o100644, 0, 1)  # (owner, group, mode, device, links)
_ROOTS = (0, 0, 0o100666, 0, 1)
_MINE_TWICE, _ROOTS_TWICE = (*_MINE[:4], 2), (*_ROOTS[:4], 2)  # with a second link
_WHITEOUT = (NOBODY, NOBODY, 0o020000, 0, 1)  # a 0,0 character device, mode 000


@pytest.mark.parametrize(
    "flags, mine, roots, expected",
    [
        # (errno of the call, then what a and b hold, then errno of the caller's removing a)
        # the reported case: the whiteout is the caller's, and the caller can remove it
        (WHITEOUT, ("a",), {}, (0, _WHITEOUT, _MINE, 0)),
        (WHITEOUT, ("a", "b"), {}, (0, _WHITEOUT, _MINE, 0)),  # over the caller's own b
        (WHITEOUT, (), {"a": 0o666}, (errno.EPERM, _ROOTS, None, errno.EPERM)),  # root's a: sticky
        (EXCHANGE, ("a", "b"), {}, (0, _MINE, _MINE, 0)),
        (EXCHANGE, ("a",), {"b": 0o666}, (errno.EPERM, _MINE, _ROOTS, 0)),  # root's b cannot leave its name
        (NOREPLACE, ("a",), {}, (0, None, _MINE, errno.ENOENT)),
        (NOREPLACE, ("a", "b"), {}, (errno.EEXIST, _MINE, _MINE, 0)),
        (NOREPLACE, (), {"a": 0o666}, (errno.EPERM, _ROOTS, None, errno.EPERM)),
        (0, ("a",), {"b": 0o666}, (errno.EPERM, _MINE, _ROOTS, 0)),  # onto root's file: sticky
    ],
    ids=[
        "whiteout",
        "whiteout-over-own",
        "whiteout-roots",
        "exchange",
        "exchange-roots",
        "noreplace",
        "noreplace-exists",
        "noreplace-roots",
        "over-roots",
    ],
)
def test_a_rename_by_a_user_in_a_sticky_directory_is_as_native(shared, request, flags, mine, roots, expected):
    native, through = _both_ways(shared, request.node.callspec.id, str(flags), mine, roots)
    assert through == native
    assert native == expected


@pytest.mark.parametrize(
    "mine, roots, old, expected",
    [
        # (errno of linking OLD as g, what OLD and g hold then, errno of the caller's removing OLD)
        (("f",), {}, "f", (0, _MINE_TWICE, _MINE_TWICE, 0)),
        ((), {"f": 0o666}, "f", (0, _ROOTS_TWICE, _ROOTS_TWICE, errno.EPERM)),  # readable, writable: linkable
        pytest.param(
            (), {"f": 0o644}, "f", (errno.EPERM, (0, 0, 0o100644, 0, 1), None, errno.EPERM), marks=_UNLESS_PROTECTED
        ),  # not writable by the caller: protected_hardlinks
        pytest.param(
            (), {"f": 0o4777}, "f", (errno.EPERM, (0, 0, 0o104777, 0, 1), None, errno.EPERM), marks=_UNLESS_PROTECTED
        ),  # set-user-ID
        pytest.param(
            (), {"l": 0}, "l", (errno.EPERM, (0, 0, 0o120777, 0, 1), None, errno.EPERM), marks=_UNLESS_PROTECTED
        ),  # root's symbolic link
    ],
    ids=["own", "roots-rw", "roots-ro", "roots-setuid", "roots-symlink"],
)
def test_a_link_by_a_user_is_as_native(shared, request, mine, roots, old, expected):
    native, through = _both_ways(shared, "link-" + request.node.callspec.id, "link", mine, roots, old=old, new="g")
    assert through == native
    assert native == expected


@pytest.fixture(scope="module")
def cached():
    """(source, mountpoint): as `shared`, but the kernel keeps attributes for a minute."""
    yield from served("fusetrace-creds-", "--attr-timeout", "60", "--entry-timeout", "60")


@pytest.mark.parametrize(
    "flags, owner, change",
    [
        ("0", NOBODY, lambda p: os.chown(p, 0, 0)),  # the kernel still holds a as the caller's
        ("unlink", NOBODY, lambda p: os.chown(p, 0, 0)),
        pytest.param(
            "link",
            0,
            lambda p: os.chmod(p, 0o644),  # ... root's a as writable by the caller
            marks=_UNLESS_PROTECTED,
        ),
    ],
    ids=["rename", "unlink", "link"],
)
def test_the_source_decides_with_the_callers_credentials(cached, request, flags, owner, change):
    """What the kernel checks are the attributes it holds; the source below changed since,
    and refuses the caller natively: it refuses them through the mount too (as root the
    server did what the caller may not)."""
    src, mnt = cached
    directory = src / request.node.callspec.id
    directory.mkdir()
    os.chmod(directory, 0o1777)
    (directory / "a").write_text("")
    os.chown(directory / "a", owner, owner)
    os.chmod(directory / "a", 0o666)
    os.stat(mnt / directory.name / "a")  # looked up: the kernel keeps this for a minute
    change(directory / "a")
    assert _as_nobody(directory, "a", "b", flags) == errno.EPERM  # natively
    assert _as_nobody(mnt / directory.name, "a", "b", flags) == errno.EPERM
    assert not (directory / "b").exists() and (directory / "a").exists()


def test_a_user_cannot_remove_a_directory_chowned_below_the_mount(cached):
    """As above, for rmdir in a sticky directory."""
    src, mnt = cached
    (src / "rmdir").mkdir()
    os.chmod(src / "rmdir", 0o1777)
    (src / "rmdir" / "d").mkdir()
    os.chown(src / "rmdir" / "d", NOBODY, NOBODY)
    os.stat(mnt / "rmdir" / "d")
    os.chown(src / "rmdir" / "d", 0, 0)
    code = "import os, sys\ntry:\n    os.rmdir(sys.argv[1])\nexcept OSError as e:\n    print(e.errno)"
    for base in (src, mnt):
        done = subprocess.run(
            [PYTHON, "-c", code, str(base / "rmdir" / "d")],
            user=NOBODY,
            group=NOBODY,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.stdout.strip() == str(errno.EPERM), (base, done.stdout, done.stderr)
    assert (src / "rmdir" / "d").is_dir()


def test_a_user_links_their_own_symbolic_link_itself(shared):
    src, mnt = shared
    (src / "ownlink").mkdir()
    os.chmod(src / "ownlink", 0o1777)
    make = (
        "import os, sys; d = sys.argv[1]; os.symlink('target', d + '/l');"
        " os.link(d + '/l', d + '/g', follow_symlinks=False)"
    )
    done = subprocess.run(
        [PYTHON, "-c", make, str(mnt / "ownlink")],
        user=NOBODY,
        group=NOBODY,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    st = os.lstat(src / "ownlink" / "g")
    assert (st.st_uid, st.st_nlink, os.readlink(src / "ownlink" / "g")) == (NOBODY, 2, "target")
    assert os.path.samestat(st, os.lstat(src / "ownlink" / "l"))


def test_a_link_into_a_directory_the_user_cannot_write_is_refused(shared):
    src, mnt = shared
    (src / "closed").mkdir(mode=0o755)  # root's, not writable by others
    (src / "open").mkdir()
    os.chmod(src / "open", 0o1777)
    make = (
        "import os, sys\nopen(sys.argv[1] + '/f', 'w').close()\n"
        "try:\n    os.link(sys.argv[1] + '/f', sys.argv[2] + '/g')\nexcept OSError as e:\n    print(e.errno)"
    )
    for base in (src, mnt):
        done = subprocess.run(
            [PYTHON, "-c", make, str(base / "open"), str(base / "closed")],
            user=NOBODY,
            group=NOBODY,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.stdout.strip() == str(errno.EACCES), (base, done.stdout, done.stderr)
        os.unlink(src / "open" / "f")
    assert not (src / "closed" / "g").exists()
