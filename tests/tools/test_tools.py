"""Real tools through the mount: fio, dd, tar, rsync and cp -a.

Each test mounts its own fusetrace (default cache timeouts, as a user would),
runs a real tool into it, and checks what landed: through the mount, in the
source directory below, and as read back out by the tool itself.
"""

import hashlib
import json
import os
import random
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

TOOLS = ("fio", "dd", "tar", "rsync", "cp")


def run(*cmd, cwd=None, timeout=300) -> subprocess.CompletedProcess:
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, cwd=cwd, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))} failed ({done.returncode}):\n{done.stderr}"
    return done


def sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---- a tree of the kinds of things real trees hold ------------------------------------

ODD_NAMES = [
    "with space",
    "two  spaces ",
    "ünïcödé-ß",
    "日本語のファイル",
    "emoji-🙂",
    "-leading-dash",
    "#hash",
    "quote'single",
    'quote"double',
    "back\\slash",
    "semi;colon",
    "star*",
    "question?",
    "tab\tname",
    "new\nline",
    "x" * 200,
    ".hidden",
    "..dots",
    "percent%20",
    "amp&er",
]


def make_tree(root: Path, seed: int = 1) -> None:
    """Nested directories, a few hundred small files (some empty, one sparse),
    hard links (within and across directories), relative, dangling and absolute
    symbolic links, an empty directory, a FIFO, odd names, assorted modes, user
    xattrs, and fixed nanosecond timestamps on everything."""
    rnd = random.Random(seed)
    root.mkdir()
    dirs = [root]
    for path in ("a", "a/b", "a/b/c", "a/b/c/d", "e", "e/f", "with space", "ünïcödé dir", "e/f/deep "):
        (root / path).mkdir(parents=True, exist_ok=True)
        dirs.append(root / path)
    (root / "empty").mkdir()
    (root / "empty-too" / "inner-empty").mkdir(parents=True)
    files = []
    for i in range(300):
        d = rnd.choice(dirs)
        name = ODD_NAMES[i] if i < len(ODD_NAMES) else f"file{i:03d}.{rnd.choice(['txt', 'bin', 'dat'])}"
        p = d / name
        if p.exists():
            continue
        size = rnd.choice([0, 1, 17, 100, 511, 4096, 4097, 20000])
        p.write_bytes(rnd.randbytes(size))
        os.chmod(p, rnd.choice([0o644, 0o600, 0o755, 0o444, 0o640, 0o4755, 0o2755, 0o1644]))
        files.append(p)
    sparse = root / "a" / "sparse"
    with open(sparse, "wb") as f:
        f.seek(3 << 20)
        f.write(b"end of a sparse file")
    files.append(sparse)
    for i in range(25):  # hard links, some to one file from several directories
        src = rnd.choice(files[:40])
        dst = rnd.choice(dirs) / f"hardlink{i}"
        os.link(src, dst)
    for i, target in enumerate(["../file-not-here", "/etc/hostname", "a/b", "a/b/c/d/../../..", "with space"]):
        os.symlink(target, root / f"symlink{i}")
    for i in range(15):
        f = rnd.choice(files)
        link = rnd.choice(dirs) / f"rel-symlink{i}"
        os.symlink(os.path.relpath(f, link.parent), link)
    os.mkfifo(root / "e" / "fifo", 0o640)
    for f in files[:10]:
        os.setxattr(f, "user.origin", f.name.encode()[:50])
    os.setxattr(root / "a", "user.dir", b"yes")
    # fixed times, deepest first so setting them does not disturb a parent's
    everything = sorted(root.rglob("*"), key=lambda p: -len(p.parts))
    for n, p in enumerate(everything):
        ns = 1_600_000_000_000_000_000 + n * 1_000_003_007
        os.utime(p, ns=(ns - 17, ns), follow_symlinks=False)


def snapshot(root: Path, *, xattrs: bool = True, root_times: bool = False, dir_times: bool = True) -> dict:
    """relpath -> (type, mode, size, mtime_ns, content hash | link target | None,
    xattrs), plus "<hard links>": the set of name groups that share a st_ino."""
    out, by_ino = {}, {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in ["", *dirnames, *filenames] if dirpath == str(root) else dirnames + filenames:
            p = os.path.join(dirpath, name) if name else dirpath
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            kind = stat.S_IFMT(st.st_mode)
            if stat.S_ISREG(kind):
                what = sha256(p)
                by_ino.setdefault(st.st_ino, []).append(rel)
            elif stat.S_ISLNK(kind):
                what = os.readlink(p)
            else:
                what = None
            size = st.st_size if not stat.S_ISDIR(kind) else None  # a directory's size is the file system's own
            mtime = st.st_mtime_ns if (rel != "." or root_times) and (dir_times or kind != stat.S_IFDIR) else None
            xa = None
            if xattrs and not stat.S_ISLNK(kind):
                xa = {n: os.getxattr(p, n) for n in sorted(os.listxattr(p)) if n.startswith("user.")}
            out[rel] = (kind, oct(stat.S_IMODE(st.st_mode)), size, mtime, what, xa)
    out["<hard links>"] = sorted(sorted(group) for group in by_ino.values() if len(group) > 1)
    return out


def assert_same_tree(got: dict, want: dict, where: str) -> None:
    assert got.keys() == want.keys(), (
        f"{where}: names differ: missing {sorted(want.keys() - got.keys())[:10]}, "
        f"extra {sorted(got.keys() - want.keys())[:10]}"
    )
    bad = {k: (got[k], want[k]) for k in want if got[k] != want[k]}
    assert not bad, f"{where}: {len(bad)} entries differ, e.g. {list(bad.items())[:5]}"


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "tree"
    make_tree(root)
    want = snapshot(root)
    assert len(want["<hard links>"]) >= 5 and len(want) > 300
    return root, want


# ---- fio ---------------------------------------------------------------------------------


def test_fio_direct_libaio_randrw_verifies(mount, tmp_path):
    m = mount()
    out = tmp_path / "fio.json"
    done = run(
        "fio",
        "--name=randrw",
        f"--filename={m.mountpoint / 'fio.dat'}",
        "--direct=1",
        "--ioengine=libaio",
        "--iodepth=16",
        "--rw=randrw",
        "--bs=4k",
        "--size=16M",
        "--verify=crc32c",
        "--do_verify=1",
        "--verify_fatal=1",
        "--verify_state_save=0",
        "--output-format=json",
        f"--output={out}",
        cwd=tmp_path,
    )
    assert "verify" not in done.stderr.lower(), done.stderr
    report = json.loads(out.read_text())
    (job,) = report["jobs"]
    assert job["error"] == 0, job
    # writes of half the 16 MiB at random, and reads: the random half plus the
    # verification pass reading back every block written
    assert job["write"]["io_bytes"] > 4 << 20
    assert job["read"]["io_bytes"] >= job["write"]["io_bytes"] + (4 << 20)
    assert os.path.getsize(m.source / "fio.dat") == 16 << 20
    assert sha256(m.mountpoint / "fio.dat") == sha256(m.source / "fio.dat")


# ---- dd ----------------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["conv=fsync", "oflag=sync", "oflag=direct"])
def test_dd_lands_byte_for_byte(mount, tmp_path, flag):
    m = mount()
    data = tmp_path / "random.bin"
    run("dd", "if=/dev/urandom", f"of={data}", "bs=1M", "count=32", "status=none")
    run("dd", f"if={data}", f"of={m.mountpoint / 'f'}", "bs=1M", "count=32", flag, "status=none")
    want = sha256(data)
    assert sha256(m.source / "f") == want  # what the source directory holds
    assert sha256(m.mountpoint / "f") == want  # and what the mount reads back
    run("dd", f"if={m.mountpoint / 'f'}", f"of={tmp_path / 'back.bin'}", "bs=1M", "iflag=direct", "status=none")
    assert sha256(tmp_path / "back.bin") == want
    assert os.stat(m.mountpoint / "f").st_size == 32 << 20


def test_dd_over_existing_file_notrunc(mount, tmp_path):
    """dd conv=notrunc over the middle of a file: the rest stays."""
    m = mount()
    base = os.urandom(3 << 20)
    (m.mountpoint / "f").write_bytes(base)
    patch = tmp_path / "patch"
    patch.write_bytes(os.urandom(1 << 20))
    run("dd", f"if={patch}", f"of={m.mountpoint / 'f'}", "bs=64k", "seek=16", "conv=notrunc,fsync", "status=none")
    want = base[: 1 << 20] + patch.read_bytes() + base[2 << 20 :]
    assert (m.source / "f").read_bytes() == want
    assert (m.mountpoint / "f").read_bytes() == want


# ---- tar -------------------------------------------------------------------------------


def _tar_listing(archive: Path) -> list[str]:
    return run("tar", "-tvf", archive, "--full-time", "--numeric-owner").stdout.splitlines()


def test_tar_in_and_out(mount, tmp_path, tree):
    root, want = tree
    m = mount()
    dst = m.mountpoint / "x"
    dst.mkdir()
    tar_opts = ["--sort=name", "--numeric-owner", "--format=posix", "--xattrs", "--xattrs-include=user.*"]
    original = tmp_path / "original.tar"
    run("tar", "-cf", original, "-C", root, *tar_opts, ".")
    run("tar", "-xpf", original, "-C", dst, "--xattrs", "--xattrs-include=user.*")

    assert_same_tree(snapshot(dst), want, "through the mount")
    assert_same_tree(snapshot(m.source / "x"), want, "in the source directory")

    # tar it back out of the mount: the same listing (names, modes, owners, sizes,
    # full-resolution times, which names are hard links of which), the same bytes
    again = tmp_path / "again.tar"
    run("tar", "-cf", again, "-C", dst, *tar_opts, ".")
    assert _tar_listing(again) == _tar_listing(original)
    back = tmp_path / "back"
    back.mkdir()
    run("tar", "-xpf", again, "-C", back, "--xattrs", "--xattrs-include=user.*")
    assert_same_tree(snapshot(back), want, "extracted back out")


# ---- rsync -------------------------------------------------------------------------------


def test_rsync_then_nothing_to_do(mount, tree):
    root, want = tree
    m = mount()
    dst = m.mountpoint / "r"
    # -H and -X on top of -a: hard links must be seen as such through the mount
    # (one st_ino), and user xattrs must round-trip.
    run("rsync", "-aHX", f"{root}/", f"{dst}/")
    assert_same_tree(snapshot(dst), want, "through the mount")
    assert_same_tree(snapshot(m.source / "r"), want, "in the source directory")
    again = run("rsync", "-aHX", "--checksum", "--dry-run", "--itemize-changes", f"{root}/", f"{dst}/")
    assert again.stdout == "", f"rsync still finds work to do:\n{again.stdout[:2000]}"
    # and the other way: rsync reading from the mount finds a tree equal to the original
    back = run("rsync", "-aHX", "--checksum", "--dry-run", "--itemize-changes", f"{dst}/", f"{root}/")
    assert back.stdout == "", f"rsync from the mount finds differences:\n{back.stdout[:2000]}"


def test_rsync_update_in_place(mount, tree):
    """A second rsync after changes below the tree moves only what changed."""
    root, _ = tree
    m = mount()
    dst = m.mountpoint / "r"
    run("rsync", "-aH", f"{root}/", f"{dst}/")
    (root / "a" / "new file").write_bytes(b"new")
    with open(root / "a" / "sparse", "r+b") as f:
        f.seek(1 << 20)
        f.write(b"changed in the middle")
    os.utime(root / "a" / "sparse", ns=(1, 1_650_000_000_000_000_000))
    run("rsync", "-aH", "--inplace", "--no-whole-file", f"{root}/", f"{dst}/")
    # Directory times are not compared: on an update rsync sets a directory's time
    # before it creates the new files in it (so between plain directories too).
    assert_same_tree(
        snapshot(dst, xattrs=False, dir_times=False), snapshot(root, xattrs=False, dir_times=False), "after the update"
    )
    again = run("rsync", "-aH", "--checksum", "--dry-run", "--itemize-changes", f"{root}/", f"{dst}/")
    assert again.stdout == ""


# ---- cp -a --------------------------------------------------------------------------------


def test_cp_a_preserves_everything(mount, tmp_path, tree):
    root, want = tree
    m = mount()
    dst = m.mountpoint / "c"
    run("cp", "-a", root, dst)
    # cp -a of a directory also keeps the copy's own times
    assert_same_tree(snapshot(dst, root_times=True), snapshot(root, root_times=True), "cp -a into the mount")
    assert_same_tree(snapshot(m.source / "c"), want, "in the source directory")
    back = tmp_path / "back"
    run("cp", "-a", dst, back)
    assert_same_tree(snapshot(back, root_times=True), snapshot(root, root_times=True), "cp -a out of the mount")


def test_tools_are_installed():
    missing = [t for t in TOOLS if shutil.which(t) is None]
    assert not missing, f"missing tools: {missing}"
