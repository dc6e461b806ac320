"""Nobody gains a permission through an allow_other mount that the source would not give.

The server runs as root, so the kernel's checks are all that stand between a user and
the source: POSIX ACLs are enforced by the kernel too (a mode-bits check alone let a
user read a file whose ACL denied them), and files are made with the caller's own
uid, gid and supplementary groups, so a group that grants access below grants it
through the mount, and one the caller lacks does not.
"""

import os
import shutil
import subprocess

import pytest
from support import served

NOBODY = 65534
GROUP = 4242  # a supplementary group given to the caller in one test
PYTHON = "/usr/bin/python3"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setfacl"), reason="needs root (allow_other) and setfacl (package acl)"
)


@pytest.fixture
def shared():
    """(source, mountpoint) of an allow_other mount in a directory every user can reach."""
    yield from served("fusetrace-perm-", "--attr-timeout", "0", "--entry-timeout", "0")


def _as_nobody(code: str, *args, groups=()) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, "-c", code, *map(str, args)],
        user=NOBODY,
        group=NOBODY,
        extra_groups=list(groups),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_an_acl_that_denies_a_user_denies_them_through_the_mount(shared):
    src, mnt = shared
    (src / "f").write_text("secret")
    os.chmod(src / "f", 0o644)
    subprocess.run(["setfacl", "-m", f"u:{NOBODY}:---", str(src / "f")], check=True)
    read = "import sys; print(open(sys.argv[1]).read())"
    assert _as_nobody(read, src / "f").returncode != 0  # natively
    done = _as_nobody(read, mnt / "f")
    assert done.returncode != 0 and "Permission denied" in done.stderr
    assert (mnt / "f").read_text() == "secret"  # root still reads it


def test_files_are_made_with_the_callers_groups(shared):
    src, mnt = shared
    (src / "team").mkdir(mode=0o775)
    os.chown(src / "team", 0, GROUP)
    os.chmod(src / "team", 0o775)
    make = "import os, sys; os.close(os.open(sys.argv[1], os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o640))"
    assert _as_nobody(make, mnt / "team" / "mine", groups=[GROUP]).returncode == 0
    st = os.stat(src / "team" / "mine")
    assert (st.st_uid, st.st_gid) == (NOBODY, NOBODY)
    denied = _as_nobody(make, mnt / "team" / "not-mine")
    assert denied.returncode != 0 and "Permission denied" in denied.stderr
    assert not (src / "team" / "not-mine").exists()


@pytest.mark.parametrize("mode, left", [(0o4755, 0o755), (0o2755, 0o755), (0o2745, 0o2745)])
def test_a_truncating_open_by_a_user_drops_set_id_bits_as_natively(shared, mode, left):
    """The kernel hands O_TRUNC to the server, which truncates as root: the bits a
    truncation by an unprivileged caller drops must go all the same."""
    src, mnt = shared
    (src / "own").mkdir()
    os.chmod(src / "own", 0o777)  # seen through the mount as the same directory
    code = (
        "import os, sys; p = sys.argv[1]; open(p, 'w').close(); os.chmod(p, int(sys.argv[2]));"
        " os.close(os.open(p, os.O_RDONLY | os.O_TRUNC)); print(oct(os.stat(p).st_mode & 0o7777))"
    )
    native = _as_nobody(code, src / "own" / "native", mode)  # the source, natively
    through = _as_nobody(code, mnt / "own" / "through", mode)
    assert native.stdout.strip() == through.stdout.strip() == oct(left), (native, through)
