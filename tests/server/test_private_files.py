"""A hostile local user cannot make fusetrace write where they choose: the state directory
(/tmp/fusetrace-<uid> without XDG_RUNTIME_DIR) and the trace directory are private, and
refused with one line when someone else owns them, may write in them or made them links;
files in them are never opened through a planted symlink.

The non-root runs are real: `fusetrace mount` as uid 65534 (nobody) through the setuid
fusermount3, in a private mount namespace where /dev/fuse is readable by all (here the
device is root's only; on a desktop it is 0666 already)."""

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest
from support import fusetrace, is_mounted, one_line_error, unshared

from fusetrace.errors import UserError
from fusetrace.server import runstate
from fusetrace.server.mounts import canonical
from fusetrace.trace.directory import TraceDirError
from fusetrace.trace.writer import TraceWriter

NOBODY = 65534
STATE = Path(f"/tmp/fusetrace-{NOBODY}")
OTHER = 12345  # another user, squatting: no account needed
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs things as other users")

# nobody runs fusetrace as a user would: the same packages, an interpreter it may execute
_DRIVER = """
import json, subprocess, sys
out = []
for args in json.loads(sys.argv[1]):
    if args[0] == "fusetrace":
        args = [sys.executable, "-m", "fusetrace", *args[1:]]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    out.append([done.returncode, done.stdout, done.stderr])
print(json.dumps(out))
"""
_SETUP = """set -e
mount -t tmpfs -o mode=755,size=64k none "$1"
mknod -m 666 "$1/fuse" c 10 229
mount --bind "$1/fuse" /dev/fuse
shift
exec setpriv --reuid=65534 --regid=65534 --clear-groups "$@"
"""


_SITE: list[Path] = []  # made at first use, removed after the module's tests


@pytest.fixture(scope="module", autouse=True)
def _site_removed():
    yield
    for folder in _SITE:
        shutil.rmtree(folder, ignore_errors=True)


def _site() -> str:
    """A folder nobody may read whose sitecustomize adds this environment's packages as a
    site directory: their .pth files run, so the editable install's finder maps
    fusetrace.emulator and fusetrace.scenarios as it does for us."""
    if not _SITE:
        _SITE.append(Path(tempfile.mkdtemp(prefix="fusetrace-site-")))
        _SITE[0].chmod(0o755)
    folder = _SITE[0]
    (folder / "sitecustomize.py").write_text(f"import site\nsite.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    return str(folder)


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "HOME")}
    env["PYTHONPATH"] = _site()
    env["HOME"] = "/nonexistent"
    return env


def _interpreter() -> str | None:
    """A Python nobody may execute, and its children again (the background server),
    that imports fusetrace's dependencies (a venv under /root is not one)."""
    versioned = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    probe = (
        "import subprocess, sys; "
        "subprocess.run([sys.executable, '-c', 'import pyfuse3, trio, fusetrace.scenarios.children'], check=True)"
    )
    for exe in dict.fromkeys([sys.executable, versioned]):
        done = subprocess.run(
            ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", exe, "-c", probe],
            capture_output=True,
            text=True,
            env=_env(),
            timeout=60,
        )
        if done.returncode == 0:
            return exe
    return None


@pytest.fixture(scope="module")
def python():
    exe = _interpreter()
    if exe is None:
        pytest.skip("no Python that uid 65534 may run with fusetrace's packages")
    return exe


def as_nobody(python: str, dev: Path, *commands: list[str]) -> list[tuple[int, str, str]]:
    """Run commands as uid 65534 without XDG_RUNTIME_DIR, one after another, in a private
    mount namespace ("fusetrace", ARGS... runs the command line): their (code, out, err)."""
    dev.mkdir(exist_ok=True)
    done = subprocess.run(
        unshared(_SETUP, "setup", str(dev), python, "-c", _DRIVER, json.dumps(commands)),
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return [tuple(r) for r in json.loads(done.stdout)]


@pytest.fixture
def world():
    """A directory nobody may use: a victim's home (files owned by nobody), a source and
    a mountpoint; /tmp/fusetrace-65534 set aside and put back after."""
    base = Path(tempfile.mkdtemp(prefix="fusetrace-private-"))
    home, src, mnt = base / "home", base / "src", base / "mnt"
    for d in (home, src, mnt):
        d.mkdir()
    (home / ".profile").write_text("PATH=/usr/bin\n")
    (home / ".bashrc").write_text("alias ll='ls -l'\n")
    for p in (base, home, src, mnt, home / ".profile", home / ".bashrc"):
        os.chown(p, NOBODY, NOBODY)
    aside = None
    if os.path.lexists(STATE):
        aside = Path(tempfile.mkdtemp(prefix="fusetrace-state-aside-")) / "state"
        os.rename(STATE, aside)
    try:
        yield base
    finally:
        if is_mounted(mnt):
            subprocess.run(["umount", "-l", str(mnt)], check=False)
        _remove(STATE)
        if aside is not None:
            os.rename(aside, STATE)
            os.rmdir(aside.parent)
        shutil.rmtree(base, ignore_errors=True)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def snapshot(home: Path) -> dict:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(home.iterdir())}


def digest(mnt: Path, suffix: str) -> str:
    return hashlib.sha1(canonical(str(mnt)).encode()).hexdigest()[:16] + suffix


def plant_links(state: Path, mnt: Path, home: Path) -> None:
    """What the attacker planted: the log onto ~/.bashrc, the state file and its old fixed
    temporary name onto ~/.profile."""
    os.symlink(home / ".bashrc", state / digest(mnt, ".log"))
    os.symlink(home / ".profile", state / digest(mnt, ".json.tmp"))
    os.symlink(home / ".profile", state / digest(mnt, ".json"))


def one_line(code: int, err: str, *needles: str) -> None:
    """one_line_error for an exit code and stderr got from a non-root run."""
    one_line_error(subprocess.CompletedProcess([], code, "", err), *needles)


@pytest.mark.parametrize("squat", ["another user's", "writable by all", "a symlink", "a file"])
def test_a_squatted_state_directory_is_refused(python, world, squat):
    home, src, mnt = world / "home", world / "src", world / "mnt"
    if squat == "a symlink":  # to a directory of the victim's, where the links wait
        planted = world / "planted"
        planted.mkdir()
        os.chown(planted, NOBODY, NOBODY)
        os.chmod(planted, 0o700)
        os.symlink(planted, STATE)
        plant_links(planted, mnt, home)
        why = "is a symbolic link"
    elif squat == "a file":
        STATE.write_text("")
        os.chown(STATE, OTHER, OTHER)
        why = "not a directory"
    else:
        STATE.mkdir()
        plant_links(STATE, mnt, home)
        if squat == "another user's":
            os.chmod(STATE, 0o755)
            os.chown(STATE, OTHER, OTHER)
            why = f"belongs to uid {OTHER}"
        else:  # the victim's own, but left open: anyone could have planted the links
            os.chmod(STATE, 0o777)
            os.chown(STATE, NOBODY, NOBODY)
            why = "writable by group and others (mode 0777)"
    before = snapshot(home)
    [(code, _out, err)] = as_nobody(python, world / "dev", ["fusetrace", "mount", str(src), str(mnt)])
    one_line(code, err, str(STATE), why)
    assert snapshot(home) == before
    assert not is_mounted(mnt)


def test_links_planted_in_the_own_directory_are_not_followed(python, world):
    """The victim's own private directory with links in it (planted while it was open,
    say): the default log is refused with one line; with --log the mount works, and the
    state file replaces its link instead of writing through it."""
    home, src, mnt = world / "home", world / "src", world / "mnt"
    STATE.mkdir(mode=0o700)
    os.chown(STATE, NOBODY, NOBODY)
    plant_links(STATE, mnt, home)
    before = snapshot(home)
    log = world / "server.log"
    (code, _, err), (mounted, _, merr), (wrote, _, _), (unmounted, _, uerr) = as_nobody(
        python,
        world / "dev",
        ["fusetrace", "mount", str(src), str(mnt)],
        ["fusetrace", "mount", str(src), str(mnt), "--log", str(log)],
        ["sh", "-c", f"echo hello > {mnt}/f"],
        ["fusetrace", "umount", str(mnt)],
    )
    one_line(code, err, str(STATE / digest(mnt, ".log")), "symbolic link")
    assert mounted == 0, merr
    assert wrote == 0 and (src / "f").read_text() == "hello\n"
    assert unmounted == 0, uerr
    assert snapshot(home) == before
    assert (STATE / digest(mnt, ".log")).is_symlink()  # refused, left alone
    assert not os.path.lexists(STATE / digest(mnt, ".json"))  # the link was replaced, then removed
    assert not [n for n in os.listdir(STATE) if n.startswith(".") and n.endswith(".tmp")]


def test_a_non_root_mount_makes_a_private_state_directory(python, world):
    src, mnt = world / "src", world / "mnt"
    results = as_nobody(
        python,
        world / "dev",
        ["fusetrace", "mount", str(src), str(mnt)],
        ["sh", "-c", f"ls -ln {STATE}; stat -c '%a %u' {STATE}"],
        ["fusetrace", "stats", str(mnt)],
        ["fusetrace", "umount", str(mnt)],
    )
    assert [r[0] for r in results] == [0, 0, 0, 0], results
    listing, mode = results[1][1].strip().rsplit("\n", 1)
    assert mode == f"700 {NOBODY}"
    for line in listing.splitlines()[1:]:  # the log, the state file and the control socket
        assert line.split()[0] in ("-rw-------", "srw-------") and line.split()[2] == str(NOBODY), line
    assert "inodes known" in results[2][1]


def test_list_as_a_user_shows_theirs_alone(python, world, mount):
    """nobody's `fusetrace list` shows the mount nobody made, found by the kernel's user_id=,
    and not root's (in the mount table nobody reads too); its text has no user column."""
    roots = mount()
    src, mnt = world / "src", world / "mnt"
    (mounted, _, merr), (listed, out, lerr), (shown, text, _), (unmounted, _, _), (_, after, _) = as_nobody(
        python,
        world / "dev",
        ["fusetrace", "mount", str(src), str(mnt), "--trace", str(world / "trace")],
        ["fusetrace", "list", "--json"],
        ["fusetrace", "list"],
        ["fusetrace", "umount", str(mnt)],
        ["fusetrace", "list"],
    )
    assert mounted == 0 and listed == 0 and shown == 0 and unmounted == 0, (merr, lerr)
    [row] = json.loads(out)
    assert (row["mountpoint"], row["uid"], row["user"], row["server"]) == (str(mnt), NOBODY, "nobody", "running")
    assert row["trace"] == str(world / "trace") and row["records"] is not None
    assert str(roots.mountpoint) not in out + text
    assert text.splitlines()[0].split()[:2] == ["mountpoint", "source"] and "trace only" in text
    assert after == "no fusetrace mounts of yours\n"


def test_root_reads_another_users_run_state_only_where_it_is_theirs(world):
    """runstate.read(owner=): root finds nobody's state where nobody's servers write it,
    and takes it only from a private directory and a file that are nobody's."""
    mnt = world / "mnt"
    STATE.mkdir(mode=0o700)
    os.chown(STATE, NOBODY, NOBODY)
    state = STATE / digest(mnt, ".json")
    state.write_text('{"pid": 7}')
    os.chown(state, NOBODY, NOBODY)
    assert runstate.read(str(mnt), owner=NOBODY) == {"pid": 7}
    os.chown(state, OTHER, OTHER)  # planted by another user
    assert runstate.read(str(mnt), owner=NOBODY) is None
    os.chown(state, NOBODY, NOBODY)
    os.chmod(STATE, 0o777)  # anyone could have planted it
    with pytest.raises(UserError, match="writable by group and others"):
        runstate.read(str(mnt), owner=NOBODY)


# ---- the state directory's functions, against planted files (in-process, as root) ------


@pytest.fixture
def state(tmp_path, monkeypatch):
    d = tmp_path / "state"
    monkeypatch.setattr(runstate, "state_dir", lambda: str(d))
    return d


def test_state_write_never_writes_through_a_link(state, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    runstate.write("/mnt/x", pid=1)  # makes the directory
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    name = digest(Path("/mnt/x"), ".json")
    (state / name).unlink()
    os.symlink(victim, state / name)
    os.symlink(victim, state / (name + ".tmp"))
    assert runstate.read("/mnt/x") is None  # not read through the link either
    runstate.write("/mnt/x", pid=2)
    assert victim.read_text() == "keep"
    assert not (state / name).is_symlink() and runstate.read("/mnt/x") == {"pid": 2}
    assert stat.S_IMODE((state / name).stat().st_mode) == 0o600
    runstate.remove("/mnt/x")
    assert sorted(os.listdir(state)) == [name + ".tmp"]  # the planted link, untouched


def test_default_log_is_opened_without_following_and_checked(state, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    path, fd = runstate.open_log("/mnt/x")
    os.write(fd, b"line\n")
    os.close(fd)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    os.unlink(path)
    os.symlink(victim, path)
    with pytest.raises(UserError, match="symbolic link"):
        runstate.open_log("/mnt/x")
    os.unlink(path)
    os.mkfifo(path)  # nothing but a regular file of ours
    with pytest.raises(UserError, match="not a regular file"):
        runstate.open_log("/mnt/x")
    assert victim.read_text() == "keep"


@pytest.mark.parametrize(
    "mode, owner, why",
    [
        (0o755, OTHER, f"belongs to uid {OTHER}"),
        (0o770, 0, "writable by group (mode 0770)"),
        (0o1777, 0, "writable by group and others (mode 1777)"),
    ],
)
def test_state_directory_checks(state, mode, owner, why):
    state.mkdir()
    os.chmod(state, mode)
    os.chown(state, owner, owner)
    for call in (
        lambda: runstate.path_for("/mnt/x", ".sock"),
        lambda: runstate.read("/mnt/x"),
        lambda: runstate.write("/mnt/x", pid=1),
    ):
        with pytest.raises(UserError) as err:
            call()
        assert str(err.value) == f"state directory {state}: " + str(err.value).split(": ", 1)[1]
        assert why in str(err.value) and "\n" not in str(err.value)
    assert os.listdir(state) == []


# ---- the trace directory -------------------------------------------------------------


@pytest.mark.parametrize(
    "make, why",
    [
        ("another user's", f"belongs to uid {NOBODY} (nobody), not to you"),
        ("mode 0777", "writable by group and others (mode 0777)"),
        ("mode 1777", "writable by group and others (mode 1777)"),
        ("group-writable", "writable by group (mode 0770)"),
        ("a symlink", "is a symbolic link"),
    ],
)
def test_a_trace_directory_others_control_is_refused(tmp_path, make, why):
    d = tmp_path / "t"
    if make == "a symlink":
        (tmp_path / "real").mkdir(mode=0o700)
        os.symlink(tmp_path / "real", d)
    else:
        d.mkdir()
        os.chmod(d, {"mode 0777": 0o777, "mode 1777": 0o1777, "group-writable": 0o770}.get(make, 0o700))
        if make == "another user's":
            os.chown(d, NOBODY, NOBODY)
    with pytest.raises(TraceDirError) as err:
        TraceWriter(d, {})
    text = str(err.value)
    assert text.startswith(f"trace directory {d}: ") and why in text and "\n" not in text, text
    target = tmp_path / "real" if make == "a symlink" else d
    assert os.listdir(target) == []


def test_mount_refuses_another_users_trace_directory_in_one_line(tmp_path):
    src, mnt, trace = tmp_path / "src", tmp_path / "mnt", tmp_path / "trace"
    for d in (src, mnt, trace):
        d.mkdir()
    os.chown(trace, NOBODY, NOBODY)
    (trace / ".part-000000.parquet.tmp").write_bytes(b"hidden by its owner")
    done = fusetrace("mount", str(src), str(mnt), "--trace", str(trace), check=False)
    one_line_error(done, f"trace directory {trace}", f"belongs to uid {NOBODY}")
    assert not is_mounted(mnt)
    assert os.listdir(trace) == [".part-000000.parquet.tmp"]


def test_a_trace_directory_is_made_private(tmp_path):
    d = tmp_path / "new" / "t"
    old = os.umask(0)
    try:
        TraceWriter(d, {}).close()
    finally:
        os.umask(old)
    st = d.stat()
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()
    assert os.listdir(d) == ["_metadata.json"]  # the reserve is given back at close


@pytest.mark.parametrize("where", ["missing directory", "a directory"])
def test_an_unusable_log_file_is_one_line(tmp_path, where):
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    log = tmp_path / "no" / "such.log" if where == "missing directory" else tmp_path
    done = fusetrace("mount", str(src), str(mnt), "--log", str(log), check=False)
    one_line_error(done, str(log))
    assert "Traceback" not in done.stderr and not is_mounted(mnt)
