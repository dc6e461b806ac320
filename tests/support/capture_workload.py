"""The workload tests/capture/test_capture_follows.py captures (run as a program: python3 THIS MNT OTHER
OUT): each part in its own directory of MNT, what the test needs to know (pids, inodes)
written to OUT as JSON.  Writes of WIDTHS' sizes mark each part's records; OTHER (another
mount) and OUT's directory get writes of ELSEWHERE bytes, which must not be recorded."""

import json
import os
import socket
import subprocess
import sys

ELSEWHERE = 777
WIDTHS = {"dup": 100, "fork_child": 200, "fork_parent": 300, "scm": 400, "names": 50}
HOSTILE = b'nl\nx\ttab"q\'{"type": "map", "data": {"@ta": {}}}\xff\xfe'  # JSON that could forge a slot


def _new(path: str | bytes) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)


def main(m: str, other: str, out: str) -> None:
    facts: dict = {"pid": os.getpid()}
    for d in ("dup", "fork", "scm", "paths", "paths/d", "paths/s", "names"):
        os.mkdir(f"{m}/{d}")

    fd = _new(f"{m}/dup/f")  # dup, dup2: one open file, three descriptors
    facts["dup_ino"] = os.fstat(fd).st_ino
    copies = [fd, os.dup(fd), os.dup2(fd, 57)]
    for f in copies:
        os.write(f, b"d" * WIDTHS["dup"])
    for f in copies:
        os.close(f)

    fd = _new(f"{m}/fork/f")  # a child writing through the descriptor it inherited
    child = os.fork()
    if child == 0:
        os.write(fd, b"c" * WIDTHS["fork_child"])
        os._exit(0)
    os.waitpid(child, 0)
    os.write(fd, b"p" * WIDTHS["fork_parent"])
    os.close(fd)
    facts["fork_child"] = child

    ours, theirs = socket.socketpair()  # a descriptor passed to another process (SCM_RIGHTS)
    child = os.fork()
    if child == 0:
        ours.close()
        _, fds, _, _ = socket.recv_fds(theirs, 1, 1)
        os.write(fds[0], b"s" * WIDTHS["scm"])
        os.close(fds[0])
        os._exit(0)
    theirs.close()
    fd = _new(f"{m}/scm/f")
    socket.send_fds(ours, [b"x"], [fd])
    os.close(fd)  # before the child writes, perhaps: its copy is its own
    os.waitpid(child, 0)
    facts["scm_child"] = child

    for elsewhere in (f"{other}/elsewhere", os.path.join(os.path.dirname(out), "elsewhere")):
        fd = _new(elsewhere)
        os.write(fd, b"e" * ELSEWHERE)
        os.close(fd)

    dfd = os.open(f"{m}/paths/d", os.O_RDONLY | os.O_DIRECTORY)  # names below a directory descriptor
    os.close(_new_at("by-dirfd", dfd))
    os.chdir(f"{m}/paths")  # into the mount after the capture began
    os.close(_new("by-cwd"))
    os.rename("by-cwd", "renamed")
    fd = os.open("renamed", os.O_RDONLY)
    os.read(fd, 10)
    os.close(fd)
    os.rename("d", "e")  # the descriptor's directory, renamed
    os.close(_new_at("after-rename", dfd))
    os.close(dfd)
    subprocess.run(["sh", "-c", "echo x > started-here"], cwd=f"{m}/paths/s", check=True)  # a program started there
    os.chdir("/")

    hostile = os.fsencode(m) + b"/names/" + HOSTILE
    fd = _new(hostile)
    os.write(fd, b"n" * WIDTHS["names"])
    os.close(fd)
    os.rename(hostile, hostile + b".2")
    os.unlink(hostile + b".2")

    with open(out, "w") as f:
        json.dump(facts, f)


def _new_at(name: str, dirfd: int) -> int:
    return os.open(name, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=dirfd)


if __name__ == "__main__":
    main(*sys.argv[1:4])
