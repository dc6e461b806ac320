"""`fusetrace capture MOUNTPOINT --trace DIR [--for D] [-- COMMAND ...]`: every file
system call processes make on the mount, recorded by eBPF with nothing in their path.

bpftrace (Debian's package) runs the program program.py writes, in a session of its own
so that a Ctrl-C at the terminal reaches the command being captured and this process,
never bpftrace directly: it is stopped with SIGINT once the command has ended (or at
--for, or at the capture's own Ctrl-C or SIGTERM), so that its END prints the last
records and the counts.  A thread reads its output as it comes (bpftrace must never
wait on a full pipe, or the timer's prints fall behind the slots) and hands the records
to the trace writer, as the mount's loop does.  What the probes counted and this did
not read is written in the trace's metadata (`capture.lost`, by operation) and said.
"""

import contextlib
import ctypes
import fcntl
import os
import platform
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator

from .. import __version__
from ..errors import UserError
from ..trace.writer import TraceWriter
from .calls import OPS
from .events import BadOutput, Events, Started
from .program import MAP_KEYS, STRLEN, Above, program
from .records import Rebuilder

BTF = "/sys/kernel/btf/vmlinux"
PIPE_BYTES = 1 << 20  # bpftrace's output pipe (Linux's pipe-max-size, 1 MiB by default)
QUEUE_BYTES = 1 << 30  # bpftrace's output read but not yet turned into records
_F_SETPIPE_SZ = 1031
_MAP, _COUNTS = b'{"type": "map"', b'{"type": "map", "data": {"@n"'

START_TIMEOUT_S = 180.0  # bpftrace compiles the program with LLVM: seconds, more on a busy host
STOP_TIMEOUT_S = 60.0


class CaptureError(UserError):
    exit_code = 2


def kernel_dev(st_dev: int) -> int:
    """A device number as the kernel's superblocks hold it (MAJOR << 20 | MINOR), which
    is not stat(2)'s encoding of the same device."""
    return (os.major(st_dev) << 20) | os.minor(st_dev)


def check(mountpoint: str) -> str:
    """The mount point, absolute and resolved, once capture can work here; else one line."""
    if os.geteuid() != 0:
        raise CaptureError("capture: needs root (it loads eBPF programs into the kernel)")
    if shutil.which("bpftrace") is None:
        raise CaptureError("capture: bpftrace is not installed (Debian: apt install bpftrace; ./run.sh installs it)")
    if not os.path.exists(BTF):
        raise CaptureError(f"capture: this kernel has no BTF ({BTF}), which the probes read kernel structures with")
    path = os.path.realpath(mountpoint)
    if not os.path.exists(path):
        raise CaptureError(f"capture: {mountpoint}: no such directory")
    if not os.path.isdir(path):
        raise CaptureError(f"capture: {mountpoint}: not a directory")
    if not os.path.ismount(path):
        raise CaptureError(f"capture: {mountpoint}: not a mount point (give the directory a file system is mounted on)")
    if _mounted(path)[1] == "overlay":
        raise CaptureError(
            f"capture: {mountpoint}: an overlay file system, whose open files are the layers' below it: "
            f"capture the layer's mount instead"
        )
    return path


def _mounted(path: str) -> tuple[int, str]:
    """The device (the kernel's encoding) and type of the file system mounted at `path`,
    as /proc/self/mountinfo says: its major:minor is the superblock's own, which stat(2)
    does not give on every file system (a btrfs subvolume's st_dev is one of its own)."""
    found = (kernel_dev(os.stat(path).st_dev), "")
    for fields in _mountinfo():
        if len(fields) > 9 and _unescape(fields[4]) == path:
            major, minor = fields[2].split(b":")
            fstype = fields[fields.index(b"-") + 1] if b"-" in fields[6:] else b""
            found = (int(major) << 20 | int(minor), os.fsdecode(fstype))  # (the last mount there is the one seen)
    return found


def _mountinfo() -> list[list[bytes]]:
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            return [line.split() for line in f.read().splitlines()]
    except OSError:
        return []


class Capture:
    """bpftrace running the program for one mount, its records going to `writer`."""

    def __init__(self, mountpoint: str, writer: TraceWriter):
        self.mountpoint = mountpoint
        self.writer = writer
        st = os.stat(mountpoint)
        self.dev = _mounted(mountpoint)[0]
        above = _above(mountpoint)
        self.rebuilder = Rebuilder(
            mountpoint,
            st.st_ino,
            dev=st.st_dev,
            above=tuple(os.fsdecode(a.rest) for a in above),
            submounts=_submounts(mountpoint),
        )
        self.rebuilder.seed()
        self.events = Events()
        self.read: Counter[int] = Counter()  # records read, by operation number
        self.error: str | None = None
        self.dropped_prints = 0  # bpftrace's prints left unread: the capture's own queue was full
        self._ready = threading.Event()
        self._stderr: list[str] = []
        self._lines: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._queued = 0  # bytes in _lines (approximate: two threads count it)
        self._dir = tempfile.mkdtemp(prefix="fusetrace-capture-")  # 0700: the program's text is ours
        script = os.path.join(self._dir, "capture.bt")
        with open(script, "w") as f:
            f.write(program(self.dev, os.fsencode(mountpoint), os.getpid(), above))
        env = {**os.environ, "BPFTRACE_STRLEN": str(STRLEN), "BPFTRACE_MAP_KEYS_MAX": str(MAP_KEYS)}
        self._proc = subprocess.Popen(
            ["bpftrace", "--no-warnings", "-f", "json", script],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        with contextlib.suppress(OSError):  # a larger pipe: bpftrace's prints come in bursts
            fcntl.fcntl(self._proc.stdout.fileno(), _F_SETPIPE_SZ, PIPE_BYTES)  # type: ignore[union-attr]
        self._threads = [
            threading.Thread(target=self._read_out, name="capture-out", daemon=True),
            threading.Thread(target=self._take, name="capture-records", daemon=True),
            threading.Thread(target=self._read_err, name="capture-err", daemon=True),
        ]
        for t in self._threads:
            t.start()

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.1):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise CaptureError(f"capture: bpftrace did not start: {self._why()}")

    def _why(self) -> str:
        self._threads[2].join(5)
        lines = [ln for ln in self._stderr if "RLIMIT_MEMLOCK" not in ln and ln.strip()]
        errors = [ln for ln in lines if "ERROR" in ln] or lines
        return errors[0].strip() if errors else f"it exited with status {self._proc.returncode}"

    def _read_out(self) -> None:
        """bpftrace's output as it comes, never making it wait (its timer's prints would
        fall behind the slots): the lines are queued for _take.  Past QUEUE_BYTES queued,
        a print of records is dropped (their calls then count as lost); the lines that end
        a slot, and the counts, never are."""
        for line in self._proc.stdout or ():
            if self._queued > QUEUE_BYTES and line.startswith(_MAP) and not line.startswith(_COUNTS):
                self.dropped_prints += 1
                continue
            self._queued += len(line)
            self._lines.put(line)
        self._lines.put(None)

    def _take(self) -> None:
        add, rebuild = self.writer.record, self.rebuilder.record
        try:
            while (line := self._lines.get()) is not None:
                self._queued -= len(line)
                for call in self.events.feed(line):
                    if isinstance(call, Started):
                        self.rebuilder.cwd(call.pid)
                        continue
                    self.read[call.op] += 1
                    rec = rebuild(call)
                    if rec is not None:
                        add(rec)
                if self.events.ready:
                    self._ready.set()
        except BadOutput as exc:
            self.error = str(exc)
            while self._lines.get() is not None:  # (read on, so that bpftrace can end)
                pass

    def _read_err(self) -> None:
        for line in self._proc.stderr or ():
            self._stderr.append(line.decode(errors="replace"))

    def stop(self) -> None:
        """bpftrace's END, then its records read to the last.  A second Ctrl-C or SIGTERM
        does not cut this short (each wait is bounded): the losses must be counted."""
        previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            if self._proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    self._proc.send_signal(signal.SIGINT)
                try:
                    self._proc.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
            for t in self._threads:
                t.join(STOP_TIMEOUT_S)
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)
            for s, handler in previous.items():
                signal.signal(s, handler)

    def lost(self) -> dict[str, int]:
        """By operation: calls the probes counted whose records were not read."""
        counts = self.events.counts
        if counts is None:  # (bpftrace ended without its END: killed, or never started)
            return {} if not self.events.ready else {"unknown": -1}
        return {OPS[op - 1]: n - self.read[op] for op, n in sorted(counts.items()) if n > self.read[op]}


def _above(mountpoint: str) -> tuple[Above, ...]:
    """The directories above the mount point, nearest first, each with the rest of the
    mount point's path below it: a name relative to one of them may lead into the mount."""
    out = []
    path = mountpoint
    while path != "/":
        parent = os.path.dirname(path)
        try:
            st = os.stat(parent)
        except OSError:
            break
        out.append(Above(kernel_dev(st.st_dev), st.st_ino, os.fsencode(os.path.relpath(mountpoint, parent))))
        path = parent
    return tuple(out)


def _submounts(mountpoint: str) -> tuple[str, ...]:
    """The mount points below the mount point, as a trace names paths ("/sub"): another
    file system's, whose named calls a path prefix would otherwise take for the mount's."""
    root = mountpoint.rstrip("/")
    points = (_unescape(fields[4]) for fields in _mountinfo() if len(fields) > 4)
    return tuple(p[len(root) :] for p in points if p.startswith(root + "/") and p.rstrip("/") != root)


def _unescape(field: bytes) -> str:
    """A mount point as /proc/self/mountinfo writes it (space, tab, newline and backslash
    as octal escapes)."""
    return os.fsdecode(re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m[1], 8)]), field))


def _die_with_parent() -> None:
    """bpftrace, in a session of its own, is killed with this process, however it ends:
    its probes go with it (the kernel detaches a program whose last holder is gone)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


_PR_SET_PDEATHSIG = 1


def run(args) -> int:
    mountpoint = check(args.mountpoint)
    command: list[str] = args.command_line
    if args.duration is not None and command:
        raise CaptureError("capture: give a command or --for, not both")
    if command and shutil.which(command[0]) is None:
        raise CaptureError(f"capture: {command[0]}: command not found")
    meta = {
        "source": "syscalls",
        "mountpoint": mountpoint,
        "host": socket.gethostname(),
        "hostname": socket.gethostname(),
        "versions": {"fusetrace": __version__, "bpftrace": _bpftrace_version(), "kernel": platform.release()},
        "command": command or None,
    }
    try:
        writer = TraceWriter(args.trace_dir, meta)
    except UserError as exc:  # (the trace directory: not ours, not empty, not writable ...)
        raise CaptureError(str(exc)) from None
    status = 0
    with _closing(writer) as summary, _stopping_on(signal.SIGTERM):
        capture = Capture(mountpoint, writer)
        try:
            capture.wait_ready()
            print(f"fusetrace: capturing {mountpoint} into {writer.directory}", file=sys.stderr)
            status = _run_for(command, args.duration)
        except KeyboardInterrupt:
            status = 0 if not command else 130
        finally:
            capture.stop()
            summary.update(_figures(capture))
            writer.update_metadata(capture=summary)
    _say(writer, summary)
    return status


class _Stop(KeyboardInterrupt):
    """SIGTERM, ending a capture as Ctrl-C does."""


@contextlib.contextmanager
def _stopping_on(signum: int) -> Iterator[None]:
    def stop(*_: object) -> None:
        raise _Stop

    previous = signal.signal(signum, stop)
    try:
        yield
    finally:
        signal.signal(signum, previous)


def _run_for(command: list[str], duration: float | None) -> int:
    """Until the command ends (its status), --for has passed, or a Ctrl-C or SIGTERM (to
    the capture; with a command, a SIGTERM is passed on to it and the capture ends with it)."""
    if not command:
        if duration is None:
            signal.pause()
        else:
            time.sleep(duration)
        return 0
    try:
        child = subprocess.Popen(command)
    except OSError as exc:  # (not executable, not a program this machine runs ...)
        raise CaptureError(f"capture: {command[0]}: {exc.strerror}") from None
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal's Ctrl-C is the command's
    signal.signal(signal.SIGTERM, lambda *_: child.terminate())
    try:
        code = child.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
    return code if code >= 0 else 128 - code


@contextlib.contextmanager
def _closing(writer: TraceWriter) -> Iterator[dict]:
    summary: dict = {}
    try:
        yield summary
    finally:
        writer.close()


def _figures(capture: Capture) -> dict:
    return {
        "device": f"{capture.dev >> 20}:{capture.dev & 0xFFFFF}",
        "calls": sum(capture.read.values()),
        "lost": capture.lost(),
        "bpftrace_lost_events": capture.events.lost_events,
        "unnamed": capture.events.unnamed,
        "dropped_prints": capture.dropped_prints,
        "elsewhere": capture.rebuilder.elsewhere,
        "unknown_paths": capture.rebuilder.unknown_paths,
        "cut_names": capture.rebuilder.cut_names,
        "error": capture.error if capture.events.ready else "stopped before the probes were attached",
    }


def _say(writer: TraceWriter, s: dict) -> None:
    lost = s["lost"]
    said = f"fusetrace: captured {s['calls']:,} calls into {writer.directory}"
    if lost:
        said += (
            "; lost " + ", ".join(f"{n:,} {op}" for op, n in lost.items())
            if -1 not in lost.values()
            else ("; the probes' counts were not read: losses unknown")
        )
    if writer.dropped:
        said += f"; {writer.dropped:,} records dropped (the trace writer's queue was full)"
    if s["unknown_paths"]:
        said += f"; {s['unknown_paths']:,} paths not rebuilt"
    if s["error"]:
        said += f"; {s['error']}"
    print(said, file=sys.stderr)


def _bpftrace_version() -> str:
    try:
        out = subprocess.run(["bpftrace", "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.strip()
