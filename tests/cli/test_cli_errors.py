"""Bad input gets one clear line, a non-zero exit, and leaves no mount behind."""

import os
import re
import signal
import subprocess
import sys

from support import fusetrace, is_mounted, one_line_error, poll, stats_json

from fusetrace import cli, mount_cli


def test_missing_source(tmp_path):
    (tmp_path / "mnt").mkdir()
    done = fusetrace("mount", str(tmp_path / "nope"), str(tmp_path / "mnt"), check=False)
    one_line_error(done, "source", "nope", "no such directory")
    assert not is_mounted(tmp_path / "mnt")


def test_mountpoint_not_a_directory(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "file").write_text("x")
    done = fusetrace("mount", str(tmp_path / "src"), str(tmp_path / "file"), check=False)
    one_line_error(done, "mountpoint", "file", "not a directory")


def test_busy_mountpoint(mount, tmp_path):
    m = mount()
    done = fusetrace("mount", str(m.source), str(m.mountpoint), check=False)
    one_line_error(done, str(m.mountpoint), "busy")


def test_mountpoint_inside_source(tmp_path):
    (tmp_path / "src" / "mnt").mkdir(parents=True)
    done = fusetrace("mount", str(tmp_path / "src"), str(tmp_path / "src" / "mnt"), check=False)
    one_line_error(done, "inside the source")


def test_unwritable_trace_dir(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "mnt").mkdir()
    (tmp_path / "afile").write_text("x")
    done = fusetrace(
        "mount", str(tmp_path / "src"), str(tmp_path / "mnt"), "--trace", str(tmp_path / "afile" / "trace"), check=False
    )
    one_line_error(done, "afile")
    assert not is_mounted(tmp_path / "mnt")


def test_no_dev_fuse(tmp_path):
    """In a mount namespace whose /dev has no fuse device."""
    (tmp_path / "src").mkdir()
    (tmp_path / "mnt").mkdir()
    script = f"mount -t tmpfs none /dev && {sys.executable} -m fusetrace mount {tmp_path}/src {tmp_path}/mnt"
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script], capture_output=True, text=True, timeout=60
    )
    one_line_error(done, "/dev/fuse")


def test_stale_mount_is_named_and_cleared(mount):
    m = mount()
    state = [p for p in os.listdir("/run/fusetrace") if p.endswith(".json")]
    assert state
    pid = m.server_pid()
    os.kill(pid, signal.SIGKILL)
    poll(lambda: _stat_errno(m.mountpoint) == 107)  # ENOTCONN
    done = fusetrace("mount", str(m.source), str(m.mountpoint), check=False)
    one_line_error(done, "stale", "fusetrace umount")
    fusetrace("umount", str(m.mountpoint))
    assert not is_mounted(m.mountpoint)


def _stat_errno(path):
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno
    return 0


def test_sigterm_unmounts_cleanly(mount):
    m = mount()
    (m.mountpoint / "x").write_text("y")
    pid = m.server_pid()
    os.kill(pid, signal.SIGTERM)
    poll(lambda: not is_mounted(m.mountpoint))
    assert (m.source / "x").read_text() == "y"


def test_umount_of_what_is_not_mounted(tmp_path):
    done = fusetrace("umount", str(tmp_path), check=False)
    one_line_error(done, "not mounted")


def test_umount_of_busy_mount(mount):
    m = mount()
    os.mkdir(m.mountpoint / "d")
    cwd = os.getcwd()
    fd = os.open(m.mountpoint / "d", os.O_RDONLY)
    try:
        done = fusetrace("umount", str(m.mountpoint), check=False)
        one_line_error(done, "cannot unmount", "busy")
        assert is_mounted(m.mountpoint)
    finally:
        os.close(fd)
    assert os.getcwd() == cwd


def test_unknown_mount_option(tmp_path):
    """In both forms (`fusetrace mount` and mount(8)'s `fusetrace SRC MNT -o ...`): one
    line naming the option, exit code 2, nothing mounted."""
    (tmp_path / "src").mkdir()
    (tmp_path / "mnt").mkdir()
    for form in (["mount"], []):
        done = fusetrace(*form, str(tmp_path / "src"), str(tmp_path / "mnt"), "-o", "allow_other,bogus=1", check=False)
        line = one_line_error(done, "-o bogus", "unknown mount option", "trace", "allow_other", code=2)
        assert "fsname" not in line and "subtype" not in line  # FUSE's, but fusetrace sets them
        assert not is_mounted(tmp_path / "mnt")


def test_mount_option_values(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "mnt").mkdir()
    src, mnt = str(tmp_path / "src"), str(tmp_path / "mnt")
    one_line_error(
        fusetrace(src, mnt, "-o", "no_xattrs=yes", check=False), "-o no_xattrs=yes", "takes no value", code=2
    )
    one_line_error(fusetrace(src, mnt, "-o", "trace", check=False), "-o trace", "trace=DIR", code=2)
    one_line_error(fusetrace(src, mnt, "-o", "threads=0", check=False), "--threads 0", code=2)
    one_line_error(fusetrace(src, mnt, "-o", "fsname=x", check=False), "-o fsname=x", "fusetrace sets", code=2)
    one_line_error(fusetrace(src, "/dev/fd/3", "-o", "rw", check=False), "drop_privileges", code=2)
    # one option given two ways: which was meant is not guessed
    one_line_error(
        fusetrace(src, mnt, "-o", "emulate=efs-2016", "--emulate", "efs-bursting", check=False),
        "-o emulate=efs-2016",
        "--emulate",
        "give it once",
        code=2,
    )
    one_line_error(
        fusetrace("mount", src, mnt, "-o", "trace=a,trace=b", check=False), "--trace", "give it once", code=2
    )
    for other in (["--emulate=efs-2018"], ["--emul", "efs-2018"]):  # argparse's other spellings of it
        one_line_error(fusetrace(src, mnt, "-o", "emulate=efs-2016", *other, check=False), "give it once", code=2)
    one_line_error(
        fusetrace(src, mnt, "-o", "writeback_cache", "--no-writeback-cache", check=False),
        "-o writeback_cache",
        "give it once",
        code=2,
    )  # one setting, two options
    # options that only begin alike are not one given twice
    assert mount_cli.mount_argv([src, mnt, "-o", "debug,debug_fuse"], cli.build_parser()[2]) == [
        "mount",
        src,
        mnt,
        "--debug",
        "--debug-fuse",
    ]
    assert not is_mounted(tmp_path / "mnt")


def test_a_mistyped_command_is_not_taken_for_a_source(tmp_path):
    done = fusetrace("stas", str(tmp_path), check=False)
    one_line_error(done, "invalid choice: 'stas'", code=2)


def test_a_reader_gone_ends_the_output_quietly(tmp_path, mount):
    # `fusetrace stats MNT | head`: the pipe's reader is gone before the command writes
    m = mount()
    for args in (["scenario", "list"], ["profiles"], ["stats", str(m.mountpoint)]):
        read, write = os.pipe()
        os.close(read)
        try:
            done = subprocess.run(
                [sys.executable, "-m", "fusetrace", *args], stdout=write, stderr=subprocess.PIPE, text=True, timeout=60
            )
        finally:
            os.close(write)
        assert done.returncode == 128 + signal.SIGPIPE and done.stderr == "", (args, done.stderr)


def test_umount_of_a_busy_mount_names_what_uses_it(mount):
    m = mount()
    fd = os.open(m.mountpoint / "held", os.O_CREAT | os.O_WRONLY, 0o644)
    # another user's process may name itself with a terminal's escape sequences: not printed as such
    named = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import ctypes, sys, time; ctypes.CDLL(None).prctl(15, "
            "b'\\x1b[2Jevil', 0, 0, 0); f = open(sys.argv[1]); print(flush=True); time.sleep(60)",
            str(m.mountpoint / "held"),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert named.stdout is not None and named.stdout.readline() == b"\n"
        done = fusetrace("umount", str(m.mountpoint), check=False)
        line = one_line_error(
            done,
            "cannot unmount",
            "busy",
            f"(pid {os.getpid()})",
            "fusetrace umount --lazy",
            f"?[2Jevil (pid {named.pid})",
        )
        # (nothing held in the server: no word of fault rules, which could not help)
        assert "fault" not in line and "\x1b" not in line and is_mounted(m.mountpoint)
    finally:
        os.close(fd)
        named.kill()
        named.wait()
    fusetrace("umount", str(m.mountpoint))


def test_umount_of_a_busy_mount_names_a_process_that_only_maps_a_file_in_it(mount):
    m = mount()
    (m.mountpoint / "mapped").write_bytes(b"m" * 4096)
    # (ctypes: Python's mmap keeps a descriptor of its own)
    mapper = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import ctypes, os, sys, time; libc = ctypes.CDLL(None); "
            "libc.mmap.restype = ctypes.c_void_p; fd = os.open(sys.argv[1], os.O_RDONLY); "
            "assert libc.mmap(None, 4096, 1, 1, fd, ctypes.c_long(0)) not in (None, 2**64 - 1); "
            "os.close(fd); print(flush=True); time.sleep(60)",
            str(m.mountpoint / "mapped"),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert mapper.stdout is not None and mapper.stdout.readline() == b"\n"
        done = fusetrace("umount", str(m.mountpoint), check=False)
        one_line_error(done, "cannot unmount", "busy", f"(pid {mapper.pid})")
    finally:
        mapper.kill()
        mapper.wait()
    fusetrace("umount", str(m.mountpoint))


def _held(m) -> list[dict]:
    return stats_json(m.mountpoint)["held_long"]


def test_umount_of_a_busy_mount_names_a_process_waiting_in_a_request_the_server_holds(mount):
    # a caller held in its open has no descriptor in the mount yet, and its path walk keeps it busy
    m = mount()
    (m.source / "f").write_text("data")
    fusetrace("fault", str(m.mountpoint), "add", "--op", "open", "--path", "/f", "--stall", "1h", "--id", "outage")
    cat = subprocess.Popen(["cat", str(m.mountpoint / "f")], stdout=subprocess.PIPE, text=True)
    try:
        held = poll(lambda: _held(m))
        assert [(h["pid"], h["name"], h["op"], h["path"]) for h in held] == [(cat.pid, "cat", "open", "/f")]
        assert "waiting in the server: cat (pid" in fusetrace("stats", str(m.mountpoint)).stdout
        done = fusetrace("umount", str(m.mountpoint), check=False)
        line = one_line_error(
            done,
            "cannot unmount",
            "busy",
            f"waiting in the server: cat (pid {cat.pid}) in open of '/f'",
            "held by fault rule outage (a stall), ",
            "clear lets go what a stall rule holds",
        )
        left = re.search(r"\(a stall\), ([\d.]+) s left", line)
        assert left is not None and 3000 < float(left[1]) < 3600, line  # an hour's stall, however slow the host
        assert is_mounted(m.mountpoint)
    finally:
        fusetrace("fault", str(m.mountpoint), "clear")
        assert cat.communicate(timeout=30)[0] == "data"
    assert _held(m) == []
    fusetrace("umount", str(m.mountpoint))


def test_a_caller_the_emulated_file_system_holds_over_a_second_is_named(mount):
    m = mount("--emulate", "efs-bursting")
    # (what a model stall holds keeps the completion it was given, even once called off: a short one)
    fusetrace("fault", str(m.mountpoint), "event", "--at", "0", "--stall", "5s")
    toucher = subprocess.Popen(["touch", str(m.mountpoint / "new")])
    try:
        held = poll(lambda: _held(m))
        assert [(h["pid"], h["name"], h["why"], h["rule"]) for h in held] == [
            (toucher.pid, "touch", "the emulated file system (stall)", False)
        ]
        assert 0 < held[0]["left_s"] <= 5
        # fault clear could not let it go: not offered
        line = one_line_error(fusetrace("umount", str(m.mountpoint), check=False), "busy", "touch", "s left")
        assert "fault" not in line
    finally:
        assert toucher.wait(timeout=60) == 0
    assert _held(m) == []


def test_only_the_outputs_own_broken_pipe_is_taken_for_a_reader_gone(tmp_path):
    from fusetrace.cli import _reader_gone

    read, write = os.pipe()
    try:
        assert not _reader_gone(write)  # its reader is there: another pipe's EPIPE is a real error
        os.close(read)
        assert _reader_gone(write)
    finally:
        os.close(write)
    with open(tmp_path / "out", "w") as f:
        assert not _reader_gone(f.fileno())


def test_a_command_started_with_its_output_closed_says_nothing_wrong():
    done = subprocess.run(
        f"{sys.executable} -m fusetrace profiles >&-", shell=True, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
