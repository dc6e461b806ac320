"""A hostile writer of the source races the server: nothing outside the source changes.

The set-up is the production one: root serves an `allow_other` mount of a source
in which an unprivileged user (here `nobody`) can write.  That user swaps the names
the server is working on for symbolic links to root-owned files outside the source,
directly in the source, while operations run through the mount (as that user, or as
root through names the kernel has cached).  Each test then checks the victims outside
the source are exactly as they were: owner, mode, times, size, extended attributes.
docs/SECURITY.md lists each system call and why it cannot follow such a link.
"""

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from support import Mount, fusetrace

NOBODY = 65534
RACE_S = 2.0  # each race runs this long (the reported one was won in 0.2 s)
PYTHON = "/usr/bin/python3"  # the attacker's: the test's own may sit where nobody cannot reach

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to serve an allow_other mount")

# Swaps, as the attacker, every NAME in a directory for a link to TARGET and back.
_SWAPPER = r"""
import os, sys, time
directory, target, deadline = sys.argv[1], sys.argv[2], time.monotonic() + float(sys.argv[3])
names = sys.argv[4:]
tmp = os.path.join(directory, ".swap")
while time.monotonic() < deadline:
    for name in names:
        try:
            os.symlink(target, tmp)
            os.rename(tmp, os.path.join(directory, name))
        except OSError:
            pass
        try:
            os.unlink(tmp)
        except OSError:
            pass
"""

# Swaps, as the attacker, a directory for a link to another directory and back.
_DIR_SWAPPER = r"""
import os, sys, time
path, target, deadline = sys.argv[1], sys.argv[2], time.monotonic() + float(sys.argv[3])
while time.monotonic() < deadline:
    try:
        os.rename(path, path + ".away")
        os.symlink(target, path)
        os.unlink(path)
        os.rename(path + ".away", path)
    except OSError:
        pass
"""

# As the attacker, through the mount: make NAME (file, setuid file, directory, fifo,
# symlink) again and again; errors (lost races) are expected.
_MAKER = r"""
import os, sys, time
directory, deadline = sys.argv[1], time.monotonic() + float(sys.argv[2])
makers = {"f": lambda p: os.close(os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o6755)),
          "d": lambda p: os.mkdir(p, 0o2777), "p": lambda p: os.mkfifo(p, 0o4777),
          "l": lambda p: os.symlink("x", p)}
made = 0
# race until the deadline; then, if every try lost its race, go on (the swapper has stopped)
# until one goes through, for at most 10 s more: a working mount lets the user's calls through
while time.monotonic() < deadline or (made == 0 and time.monotonic() < deadline + 10):
    for name in sys.argv[3:]:
        make = makers[name]
        p = os.path.join(directory, name)
        try:
            make(p)
            made += 1
        except OSError:
            pass
        try:
            (os.rmdir if name == "d" else os.unlink)(p)
        except OSError:
            pass
print(made)
"""


def _spawn(script: str, *args) -> subprocess.Popen:
    return subprocess.Popen(
        [PYTHON, "-c", script, *map(str, args)],
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
        stdout=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen) -> str:
    out, _ = proc.communicate(timeout=RACE_S + 30)
    assert proc.returncode == 0
    return out


def _snapshot(path) -> tuple:
    st = os.lstat(path)
    return (
        st.st_uid,
        st.st_gid,
        st.st_mode,
        st.st_size,
        st.st_mtime_ns,
        st.st_atime_ns,
        sorted((n, os.getxattr(path, n, follow_symlinks=False)) for n in os.listxattr(path, follow_symlinks=False)),
    )


@pytest.fixture
def world():
    """A directory every user can reach (pytest's own temporary directories are 0700)."""
    path = Path(tempfile.mkdtemp(prefix="fusetrace-race-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


class Victims:
    """Root-owned 0600 files (and the directory holding them) outside the source."""

    def __init__(self, outside: Path):
        self.dir = outside
        outside.mkdir(mode=0o700)
        files = [outside / n for n in ("secret", "f", "g", "link", "h")]
        for f in files:
            f.write_text("root's\n")
            os.chmod(f, 0o600)
            os.utime(f, ns=(1_000_000_000, 1_000_000_000))
        self.before = {f: _snapshot(f) for f in [outside, *files]}

    def assert_untouched(self) -> None:
        changed = [str(f) for f, snap in self.before.items() if _snapshot(f) != snap]
        assert not changed, f"changed outside the source: {changed}"


@pytest.fixture
def victims(world) -> Victims:
    return Victims(world / "outside")


@pytest.fixture
def public(world):
    """make(*options) -> (source's public directory, the same through the mount): an
    allow_other mount whose source has a directory the attacker owns."""
    made = []

    def make(*options):
        src, mnt = world / "src", world / "mnt"
        src.mkdir(mode=0o755)
        mnt.mkdir(mode=0o755)
        pub = src / "pub"
        pub.mkdir()
        os.chown(pub, NOBODY, NOBODY)
        fusetrace("mount", str(src), str(mnt), "-o", "allow_other", *options)
        made.append(Mount(src, mnt, None))
        return pub, mnt / "pub"

    yield make
    for m in made:
        m.unmount()


def test_files_made_for_a_user_never_give_a_planted_link_their_owner_or_mode(public, victims):
    """The reported escalation: a setuid file made through the mount by a user, whose
    name that user swaps for a link to a root-owned file in the source meanwhile."""
    pub, through = public("--entry-timeout", "0", "--attr-timeout", "0")
    for names in (["f"], ["d", "p", "l"]):  # the setuid file alone first: the tightest race
        swapper = _spawn(_SWAPPER, pub, victims.dir / "secret", RACE_S, *names)
        maker = _spawn(_MAKER, through, RACE_S, *names)
        made = int(_finish(maker))
        _finish(swapper)
        assert made > 0  # the user's operations go through (some lose their race, as they should)
    victims.assert_untouched()


def test_changes_by_root_through_cached_names_stay_in_the_source(public, victims):
    """root changes owner, times, size and mode of names the kernel has cached while
    the attacker swaps them for links below: the server acts on the objects the
    kernel means, never on what the names lead to now."""
    pub, through = public("--entry-timeout", "3600", "--attr-timeout", "3600")
    for name in ("f", "g", "h"):
        (pub / name).write_text("user's\n")
        os.chown(pub / name, NOBODY, NOBODY)
    paths = [through / n for n in ("f", "g", "h")]
    for p in paths:
        os.lstat(p)  # the kernel caches these entries for an hour
    swapper = _spawn(_SWAPPER, pub, victims.dir / "secret", RACE_S, "f", "g", "h")
    done = 0
    deadline = time.monotonic() + RACE_S
    while time.monotonic() < deadline:
        for p in paths:
            for change, args in ((os.lchown, (p, 0, 0)), (os.truncate, (p, 3)), (os.chmod, (p, 0o4777))):
                try:
                    change(*args)
                    done += 1
                except OSError:
                    pass
            try:
                os.utime(p, ns=(7, 7), follow_symlinks=False)
            except OSError:
                pass
    _finish(swapper)
    assert done > 0
    victims.assert_untouched()


def test_link_attributes_by_root_stay_on_the_link(public, victims):
    """Owner, times and extended attributes of a symbolic link the kernel has cached,
    while the attacker moves its directory away and puts a link to a directory
    outside the source in its place."""
    pub, through = public("--entry-timeout", "3600", "--attr-timeout", "3600")
    (pub / "d").mkdir()
    os.symlink("anywhere", pub / "d" / "link")
    os.chown(pub / "d", NOBODY, NOBODY)
    link = through / "d" / "link"
    os.lstat(link)
    swapper = _spawn(_DIR_SWAPPER, pub / "d", victims.dir, RACE_S)
    done = 0
    deadline = time.monotonic() + RACE_S
    while time.monotonic() < deadline:
        for change in (
            lambda: os.setxattr(link, "trusted.planted", b"1", follow_symlinks=False),
            lambda: os.removexattr(link, "trusted.planted", follow_symlinks=False),
            lambda: os.listxattr(link, follow_symlinks=False),
            lambda: os.chown(link, 0, 0, follow_symlinks=False),
            lambda: os.utime(link, ns=(7, 7), follow_symlinks=False),
        ):
            try:
                change()
                done += 1
            except OSError:
                pass
    _finish(swapper)
    assert done > 0
    victims.assert_untouched()
