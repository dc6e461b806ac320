"""The `fusetrace` command line: one command for every job."""

import argparse
import io
import os
import select
import signal
import subprocess
import sys
import time

from . import __version__, fault_cli, logs
from .client import ask
from .errors import UserError
from .private import open_own_log

READY_TIMEOUT = 30.0


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (what is wrong, and where to read more), exit code 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: {message} (see: {self.prog} --help)\n")


class _BadValue(UserError):
    exit_code = 2


def _mount_parser(sub) -> None:
    p = sub.add_parser("mount", help="mount SOURCE on MOUNTPOINT, tracing and/or emulating",
                       description="Mount a passthrough of SOURCE on MOUNTPOINT. Returns once the "
                                   "mount is live; the server runs on in the background.")
    p.add_argument("source")
    p.add_argument("mountpoint")
    p.add_argument("--trace", metavar="DIR", dest="trace_dir",
                   help="write a trace of every operation to DIR (Parquet files)")
    p.add_argument("--host", metavar="NAME",
                   help="the host the trace names, in every record and its _metadata.json (default: "
                        "NAME of a trace directory called host=NAME, else this machine's host name; "
                        "1 to 64 letters, digits, '.', '_' or '-')")
    p.add_argument("--foreground", action="store_true", help="serve in this process until unmounted")
    p.add_argument("--attr-timeout", type=float, metavar="S",
                   help="seconds the kernel may cache attributes (default 1.0; 0 sends every "
                        "stat to the file system and the trace; with --emulate, the profile's "
                        "NFS client timeouts apply instead)")
    p.add_argument("--entry-timeout", type=float, metavar="S",
                   help="seconds the kernel may cache name lookups (default 1.0; with --emulate, "
                        "the profile's)")
    p.add_argument("--negative-timeout", type=float, metavar="S",
                   help="seconds the kernel may remember that a name is absent (default 0: every "
                        "lookup of a missing name reaches the file system; with --emulate, the profile's)")
    p.add_argument("-o", dest="fuse_options", action="append", default=[], metavar="OPT[,OPT]",
                   help="mount options, as in /etc/fstab: FUSE's (e.g. allow_other: permissions are "
                        "then enforced by the kernel, default_permissions is always on; ro; not "
                        "fsname or subtype, which fusetrace sets) and fusetrace's own, each by its "
                        "long name, dashes as underscores (trace=DIR, emulate=PROFILE, "
                        "set=KEY=VALUE, no_xattrs, debug, ...)")
    p.add_argument("--threads", type=int, default=64, metavar="N",
                   help="worker threads for blocking syscalls below (default 64; 1 to 1024)")
    p.add_argument("--max-requests", type=int, default=1024, metavar="N",
                   help="FUSE requests served at once (default 1024; 1 to 65536)")
    p.add_argument("--log", metavar="FILE", help="server log when running in the background")
    p.add_argument("--emulate", metavar="PROFILE",
                   help="make every operation take as long as on the profile's system "
                        "(a name from `fusetrace profiles`, or a .toml file)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a profile parameter (repeatable)")
    p.add_argument("--faults", metavar="FILE",
                   help="fault rules ([[rule]]) and, with --emulate, model events ([[event]]) from this "
                        "TOML file, in force from the mount on (docs/FAULTS.md; change them live with "
                        "`fusetrace fault`)")
    p.add_argument("--shared", metavar="URL",
                   help="with --emulate and --fs-id: one emulated file system shared with every mount of "
                        "the same --fs-id through Redis at URL (redis://HOST:PORT/DB; docs/SCALE.md)")
    p.add_argument("--fs-id", metavar="ID", help="the shared file system's name (letters, digits, . _ -)")
    p.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="serve the emulator's metrics for Prometheus on 127.0.0.1:PORT (1 to 65535)")
    p.add_argument("--inline", choices=("auto", "always", "never"), default="auto",
                   help="run quick system calls (under 100 us, measured) on the event loop instead "
                        "of handing them to a worker thread; auto (default): not on network or "
                        "FUSE file systems, where a hung server would stall the mount")
    p.add_argument("--no-xattrs", dest="xattrs", action="store_false",
                   help="answer extended attribute requests as unsupported, so the kernel stops "
                        "sending them (one per buffered write, two per file in ls -l); automatic "
                        "when the source has no extended attributes (NFS, so EFS)")
    p.add_argument("--writeback-cache", dest="writeback_cache", action="store_const", const=True,
                   help="FUSE's write-back cache, on by default with --emulate (not with --shared): "
                        "buffered writes gather in the kernel's page cache and reach the mount as "
                        "write-back, as an NFS client's do, not one request per write(2); a write's "
                        "error then shows at fsync or close, as on NFS, and the trace records the "
                        "write-back. The kernel then keeps file sizes as its own: a file resized beside "
                        "the mount keeps the size the kernel holds (docs/EMULATOR.md)")
    p.add_argument("--no-writeback-cache", dest="writeback_cache", action="store_const", const=False,
                   help="with --emulate: one request per write(2), and changes made beside the mount "
                        "show through it as on NFS; small buffered writes then cost a FUSE round trip "
                        "each, more than the model charges")
    p.add_argument("--debug", action="store_true",
                   help="log fusetrace's (and pyfuse3's) debug messages to the server's log")
    p.add_argument("--debug-fuse", action="store_true",
                   help="have libfuse log every request and reply to the server's log (very verbose)")
    p.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)


# mount(8) runs /sbin/mount.fuse3, which runs `fusetrace SOURCE MOUNTPOINT -o OPTIONS`: every
# option of `fusetrace mount` is an -o option by its long name, dashes as underscores, except
# these (mount(8) waits for its helper to return, so --foreground would hold it until unmounted)
NOT_MOUNT_OPTIONS = ("--foreground", "--help")
# what libfuse 3 takes as -o (lib/mount.c, lib/fuse_lowlevel.c), besides "debug", which is ours, and
# blkdev, blksize and user=, for block devices and fusermount's mtab
FUSE_MOUNT_OPTIONS = frozenset((
    "allow_other", "allow_root", "auto_unmount", "default_permissions", "fsname", "subtype", "max_read",
    "context", "fscontext", "defcontext", "rootcontext",
    "ro", "rw", "suid", "nosuid", "dev", "nodev", "exec", "noexec", "async", "sync", "dirsync",
    "atime", "noatime"))
SET_BY_FUSETRACE = frozenset(("fsname", "subtype"))  # FUSE's, but refused: fusetrace sets them
# for mount(8) or other programs, not the file system: ignored, as mount.fuse3 ignores them
NOT_FOR_US = frozenset(("", "defaults", "user", "nouser", "users", "auto", "noauto", "nofail", "_netdev"))


def _own_mount_options(mount: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """`fusetrace mount`'s options by their -o name."""
    return {a.option_strings[-1][2:].replace("-", "_"): a for a in mount._actions
            if a.option_strings and a.option_strings[-1].startswith("--")
            and a.option_strings[-1] not in NOT_MOUNT_OPTIONS and a.help != argparse.SUPPRESS}


def _mount_argv(argv: list[str], mount: argparse.ArgumentParser) -> list[str]:
    """`fusetrace SOURCE MOUNTPOINT -o OPTIONS` (the form mount.fuse3 runs) as `fusetrace mount
    ...`, and in either form, fusetrace's own -o options as their long options: `-o
    trace=DIR,allow_other` is `--trace DIR -o allow_other`.  An unknown option is refused
    here, before anything is mounted."""
    if argv[0] != "mount":
        if argv[1].startswith("/dev/fd/"):
            raise _BadValue(f"{argv[1]}: -o drop_privileges is not supported (fusetrace mounts by itself)")
        argv = ["mount", *argv]
    own = _own_mount_options(mount)
    out: list[str] = []
    from_o: dict[str, tuple[str, str]] = {}  # an option's dest: its long option and the -o item it came from
    items = iter(argv)
    for item in items:
        if item == "--":
            out += [item, *items]
        elif item.startswith("-o") and (options := item[2:] or next(items, None)) is not None:
            fuse = []
            for option in options.split(","):
                name, sep, value = option.partition("=")
                action = own.get(name.replace("-", "_"))
                if action is not None and action.nargs == 0:
                    if sep:
                        raise _BadValue(f"-o {option}: {name} takes no value")
                    out.append(action.option_strings[-1])
                    from_o[action.dest] = (action.option_strings[-1], option)
                elif action is not None:
                    if not value:
                        raise _BadValue(f"-o {option}: give a value, {name}={action.metavar or 'VALUE'}")
                    out += [action.option_strings[-1], value]
                    if not isinstance(action, argparse._AppendAction):
                        from_o[action.dest] = (action.option_strings[-1], option)
                elif name in FUSE_MOUNT_OPTIONS:
                    fuse.append(option)
                elif name not in NOT_FOR_US and not name.startswith("x-") and name != "comment":
                    raise _BadValue(f"-o {name}: unknown mount option (fusetrace's: {', '.join(own)}; "
                                    f"FUSE's: {', '.join(sorted(FUSE_MOUNT_OPTIONS - SET_BY_FUSETRACE))})")
            if fuse:
                out += ["-o", ",".join(fuse)]
        else:
            out.append(item)
    given = _dests_given(out, mount)
    for dest, (option, item) in from_o.items():  # given as -o and on its own (or twice): which one was meant?
        if given.count(dest) > 1:
            raise _BadValue(f"-o {item}: {option} is given another way too; give it once")
    return out


def _dests_given(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """The dest of each long option in `argv` as argparse reads it: `--opt`, `--opt=value`
    and an unambiguous abbreviation `--op`; values and what follows `--` are not options."""
    strings = {s: a for s, a in parser._option_string_actions.items() if s.startswith("--")}
    dests = []
    items = iter(argv)
    for item in items:
        if item == "--":
            break
        if not item.startswith("--") or len(item) == 2:
            continue
        name, eq, _ = item.partition("=")
        action = strings.get(name)
        if action is None:
            found = {a for s, a in strings.items() if s.startswith(name)}
            action = found.pop() if len(found) == 1 else None
        if action is not None:
            dests.append(action.dest)
            if action.nargs != 0 and not eq:
                next(items, None)  # its value
    return dests


def _is_mount_form(argv: list[str], commands: set[str]) -> bool:
    """`fusetrace SOURCE MOUNTPOINT ...`: a first word that is no command but a path."""
    return (len(argv) >= 2 and argv[0] not in commands and not argv[0].startswith("-")
            and ("/" in argv[0] or os.path.exists(argv[0])))


class _Version(argparse.Action):
    """--version: fusetrace's, then what it runs on (read only when asked: pyfuse3 is slow to import)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, help="print the versions of fusetrace, python, "
                                                             "pyfuse3 and libfuse, and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        import ctypes
        import platform

        import pyfuse3

        try:  # the libfuse pyfuse3 was linked with, already loaded
            pkgversion = ctypes.CDLL("libfuse3.so.3").fuse_pkgversion
            pkgversion.restype = ctypes.c_char_p
            libfuse = pkgversion().decode()
        except (OSError, AttributeError):
            libfuse = "unknown"
        print(f"fusetrace {__version__}\npython {platform.python_version()}, pyfuse3 {pyfuse3.__version__}, "
              f"libfuse {libfuse}")
        parser.exit()


def _mount(args, argv) -> int:
    from .server import runstate
    from .server.main import LOCKS, MountOptions, preflight, serve

    opts = MountOptions(
        source=args.source, mountpoint=args.mountpoint, trace_dir=args.trace_dir,
        attr_timeout=args.attr_timeout, entry_timeout=args.entry_timeout, negative_timeout=args.negative_timeout,
        fuse_options=args.fuse_options, threads=args.threads, max_requests=args.max_requests,
        emulate=args.emulate, overrides=args.overrides, metrics_port=args.metrics_port,
        inline=args.inline, xattrs=args.xattrs, writeback_cache=args.writeback_cache,
        debug_fuse=args.debug_fuse, faults=args.faults, shared=args.shared, fs_id=args.fs_id,
        host=args.host,
    )
    if args.foreground:
        logs.configure(server=True, debug=args.debug)
        return serve(opts, ready_fd=args.ready_fd)
    preflight(opts)
    if args.log:  # the user's own choice of path, but not of a link planted at it or another user's file
        log = args.log
        logfd = open_own_log(log, f"--log {log}")
    else:  # in the private state directory, never through a link, ours or refused
        log, logfd = runstate.open_log(opts.mountpoint)
    r, w = os.pipe()
    with open(logfd, "ab") as logf:
        child = subprocess.Popen(
            # -P: the working directory is not put on sys.path, so a folder named fusetrace
            # there (the clone itself, run from the folder that holds it) cannot shadow us
            [sys.executable, "-P", "-m", "fusetrace", *argv, "--foreground", "--ready-fd", str(w)],
            stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, pass_fds=(w,), start_new_session=True,
        )
    os.close(w)
    answer = _read_answer(r, child)
    if answer == "ok":
        where = f", tracing to {os.path.abspath(args.trace_dir)}" if args.trace_dir else ""
        if opts.emulate is not None:
            where += f", emulating {opts.emulate}"
        if opts.shared is not None:
            from .shaping.redis_hub import shown

            where += f" as a client of file system {opts.fs_id} shared through Redis at {shown(opts.shared)}"
        print(f"fusetrace: {opts.source} mounted on {opts.mountpoint}{where}")
        print(f"fusetrace: note: locks are {LOCKS}")
        if args.debug or args.debug_fuse:
            print(f"fusetrace: debug log in {log}")
        return 0
    if answer.startswith("error: "):
        raise UserError(answer[len("error: "):])
    raise UserError(f"server for {opts.mountpoint} {answer}: {_last_line(log)} (log: {log})")


def _last_line(path: str) -> str:
    try:  # by name again: never through a link put there since it was opened
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return f"its log is unreadable ({(exc.strerror or str(exc)).lower()})"
    with open(fd, "rb") as f:
        f.seek(max(0, os.fstat(fd).st_size - 4096))
        lines = [ln for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    return lines[-1].strip() if lines else "no output"


def _read_answer(fd: int, child: subprocess.Popen) -> str:
    deadline = time.monotonic() + READY_TIMEOUT
    data = b""
    with os.fdopen(fd, "rb", buffering=0) as pipe:
        while b"\n" not in data:
            left = deadline - time.monotonic()
            if left <= 0:
                child.terminate()
                return f"did not come up within {READY_TIMEOUT:.0f} s"
            if select.select([pipe], [], [], left)[0]:
                chunk = pipe.read(4096)
                if not chunk:
                    code = child.wait()
                    return f"exited with code {code} before the mount was live"
                data += chunk
    return data.decode(errors="replace").strip()


UMOUNT_TIMEOUT = 10.0  # seconds fusermount3 may take (the kernel does not wait on the server)
STALL_TIMEOUT = 10.0  # seconds an unmounted server may go without progress before it is called hung
FLUSH_LIMIT = 300.0  # seconds an unmounted server may take to flush its trace and exit, at most


def _umount(args) -> int:
    """Unmount, then wait for the server to flush its trace and exit; every wait bounded.
    Nothing here touches the mount itself: it is found in the mount table, and the
    kernel aborts the connection at unmount without asking the server."""
    from .scenarios import children
    from .server import mounts, runstate

    mnt = mounts.canonical(args.mountpoint)
    info = mounts.mounted_at(mnt)
    state = runstate.read(mnt) or {}
    if info is None:
        _forget_dead(mnt, state)
        raise UserError(f"{mnt}: not mounted")
    if info.fstype != mounts.FSTYPE:
        raise UserError(f"{mnt}: not a fusetrace mount ({info.fstype} from {info.source})")
    pid = state.get("pid") if children.is_fusetrace(state.get("pid")) else None
    stopped = (f"; its server (pid {pid}) is stopped: resume it with kill -CONT {pid}, or detach the "
               f"mount now with fusermount3 -uz {mnt}")
    fusermount = subprocess.Popen(["fusermount3", "-u", mnt], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _, err = fusermount.communicate(timeout=UMOUNT_TIMEOUT)
    except subprocess.TimeoutExpired:
        fusermount.kill()
        hint = stopped if pid and children.stopped(pid) else f"; detach it with fusermount3 -uz {mnt}"
        raise UserError(f"cannot unmount {mnt}: fusermount3 did not return within "
                        f"{UMOUNT_TIMEOUT:.0f} s{hint}") from None
    if fusermount.returncode != 0:
        reason = err.strip().splitlines()[-1] if err.strip() else f"exit {fusermount.returncode}"
        hint = stopped if pid and children.stopped(pid) else ""
        if not hint and "busy" in reason:
            from .stats_view import held_words

            inside = mounts.users(mnt)
            held = _held(state["control"]) if pid and state.get("control") else []
            by_rule = any(h.get("rule") for h in held)
            held = held[:5]
            hint = (f"; in use by {', '.join(inside)}" if inside else "" if held else "; in use") + \
                (f"; waiting in the server: {'; '.join(map(held_words, held))}" if held else "") + \
                (f" (fusetrace fault {mnt} clear lets go what a stall rule holds)"
                 if by_rule else "") + f"; or detach it now with fusermount3 -uz {mnt}"
        raise UserError(f"cannot unmount {mnt}: {reason}{hint}")
    if pid:
        _wait_server(mnt, pid, state.get("trace"))
    _forget_dead(mnt, state)
    trace = f"; trace in {state['trace']}" if state.get("trace") else ""
    print(f"fusetrace: unmounted {mnt}{trace}")
    if state.get("trace"):
        from .trace.metadata import loss_summary

        loss = loss_summary(state["trace"])
        if loss:
            print(f"fusetrace: warning: {loss}", file=sys.stderr)
    return 0


def _forget_dead(mnt: str, state: dict) -> None:
    """A server that is gone without removing its run state and control socket (killed
    with SIGKILL) has them removed: unless a new server wrote the state since."""
    from .scenarios import children
    from .server import runstate

    if state and not children.is_fusetrace(state.get("pid")) and runstate.read(mnt) == state:
        runstate.remove(mnt)


def _held(control: str) -> list[dict]:
    """The callers the server holds long in a request (Holds.held_long, server/holds.py): each keeps
    the mount busy with no descriptor in it.  [] when the server does not answer within a
    second (umount goes on without them)."""
    from .server.control import request

    try:
        return request(control, cmd="held", timeout=1.0).get("held", [])
    except (OSError, ValueError):
        return []


def _wait_server(mnt: str, pid: int, trace: str | None) -> None:
    """Wait for an unmounted server to flush and exit, as long as it makes progress (CPU
    time or I/O): a stopped server is said at once, one that stalls after STALL_TIMEOUT."""
    from .scenarios import children

    what = "flush its trace" if trace else "exit"
    begin = last_change = time.monotonic()
    last = None
    while True:
        state = children.proc_state(pid)
        if state is None:
            return
        now = time.monotonic()
        if state in ("T", "t"):
            raise UserError(f"{mnt}: unmounted, but its server (pid {pid}) is stopped and cannot {what}: "
                            f"resume it with kill -CONT {pid}")
        progress = children.progress(pid)
        if progress != last:
            last, last_change = progress, now
        elif now - last_change > STALL_TIMEOUT:
            raise UserError(f"{mnt}: unmounted, but its server (pid {pid}) has made no progress for "
                            f"{STALL_TIMEOUT:g} s (state {state}); it may be hung: end it with kill {pid}")
        if now - begin > FLUSH_LIMIT:
            raise UserError(f"{mnt}: unmounted, but its server (pid {pid}) is still working after "
                            f"{FLUSH_LIMIT:.0f} s: see its log, or end it with kill {pid}")
        time.sleep(0.02)


def _stats(args) -> int:
    import json

    answer = ask(args.mountpoint, cmd="stats")
    if args.json:
        print(json.dumps(answer, indent=2))
    else:
        from .stats_view import render

        print(render(answer))
    return 0


def _set(args) -> int:
    from fusetrace.emulator.params import coerce

    changes = []
    for item in args.assignments:  # every value checked (key, type, bounds) before any is sent
        key, sep, value = item.partition("=")
        if not sep:
            raise _BadValue(f"{args.mountpoint}: set {item}: expected KEY=VALUE")
        key, value = key.strip(), value.strip()
        try:
            coerce(key, value, from_text=True)
        except ValueError as exc:
            raise _BadValue(f"{args.mountpoint}: set {exc}") from None
        changes.append((key, value))
    for key, value in changes:
        try:
            answer = ask(args.mountpoint, cmd="set", key=key, value=value)
        except UserError as exc:
            if exc.args[0].startswith(f"{args.mountpoint}: set "):  # refused by the model: a bad value
                raise _BadValue(exc.args[0]) from None
            raise
        print(f"{key} = {answer['value']}")
    return 0


def _profiles(args) -> int:
    from fusetrace.emulator.profiles import list_profiles

    rows = list_profiles()
    width = max(len(name) for name, _ in rows)
    for name, description in rows:
        print(f"{name:<{width}}  {description}")
    return 0


def _scenario_parser(sub) -> None:
    sc = sub.add_parser("scenario", help="published experiments, run against the emulator")
    scs = sc.add_subparsers(dest="scenario_command", required=True, metavar="list|run")
    scs.add_parser("list", help="the scenarios there are")
    r = scs.add_parser("run", help="run scenarios on fresh emulated mounts; table, plots, HTML report",
                       description="Run each named scenario on a fresh emulated mount over a temporary "
                                   "directory and print its figures beside the published ones.")
    r.add_argument("names", nargs="*", metavar="NAME")
    r.add_argument("--all", action="store_true", help="every scenario")
    r.add_argument("--profile", help="emulate this profile instead of the scenario's own")
    r.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a profile parameter, after the scenario's own (repeatable)")
    r.add_argument("--out", default="scenario-results", metavar="DIR",
                   help="where results, traces, plots and HTML go (default ./scenario-results)")
    r.add_argument("--fast", action="store_true",
                   help="small sizes and short runs (what CI runs); each scenario says what changes")
    r.add_argument("--clients", type=_clients, metavar="N",
                   help="run every fio step from N clients, each its own mount of one emulated file system "
                        "shared through a private redis-server (1 to 64; docs/SCALE.md)")


def _report_parser(sub) -> None:
    r = sub.add_parser("report", help="who did what on a trace, how long it took, and what to change",
                       description="Report on a trace directory, or on several read as one (a fleet's: one "
                                   "per host), with a line per host.")
    r.add_argument("trace_dir", metavar="DIR", nargs="+",
                   help="a trace directory, or a glob of them in quotes ('traces/*'); several are read as one")
    r.add_argument("--by", choices=("comm", "pid", "path", "dir", "host"),
                   help="one table per process name, process, path, directory or host")
    r.add_argument("--top", type=_positive_int, default=20, metavar="N",
                   help="with --by: the N groups with most time (default 20; --json has all)")
    r.add_argument("--op", action="append", metavar="OP", help="only these operations (repeat, or a,b,c)")
    r.add_argument("--pid", action="append", type=_positive_int, metavar="PID", help="only this process (repeat)")
    r.add_argument("--comm", action="append", metavar="NAME", help="only processes of this name (repeat)")
    r.add_argument("--path", metavar="GLOB", help="only paths matching this glob (* stops at /, ** does not)")
    r.add_argument("--since", metavar="T", help="only operations from T: seconds since the trace's first record (12.5) "
                                                  "or a wall-clock time (14:03:07, 2026-11-23T14:03:07)")
    r.add_argument("--until", metavar="T", help="only operations started before T (as --since)")
    r.add_argument("--timeline", action="store_true", help="operations and MB per second over time")
    r.add_argument("--plot", metavar="FILE.png", help="with --timeline: also draw it into this PNG")
    r.add_argument("--histogram", action="store_true", help="log2 latency histogram per operation")
    r.add_argument("--json", action="store_true", help="machine-readable output")


def _rehearse_parsers(sub) -> None:
    """From a trace to a rehearsal and back (fusetrace/rehearse/)."""
    e = sub.add_parser("export", help="a trace as a fio iolog, a Perfetto trace or nfsslower CSV")
    e.add_argument("trace_dir", metavar="DIR")
    e.add_argument("--format", required=True, choices=("fio-iolog", "perfetto", "csv"))
    e.add_argument("-o", "--output", required=True, metavar="FILE")
    rp = sub.add_parser("replay", help="re-issue a trace's operations against a mount or directory")
    rp.add_argument("trace_dir", metavar="DIR")
    rp.add_argument("target", metavar="TARGET", help="the directory to replay into (stands for the traced mount)")
    pace = rp.add_mutually_exclusive_group()
    pace.add_argument("--speed", type=_positive_float, default=1.0, metavar="X",
                      help="replay X times as fast as recorded (default 1: the recorded timing)")
    pace.add_argument("--as-fast-as-possible", action="store_true",
                      help="no waiting between operations; each stream still in its order")
    rp.add_argument("--json", action="store_true", help="machine-readable summary")
    f = sub.add_parser("fit", help="a profile fitted to what a trace saw")
    f.add_argument("trace_dir", metavar="DIR")
    f.add_argument("-o", "--output", required=True, metavar="PROFILE.toml")
    f.add_argument("--base", default="efs-bursting",
                   help="the profile whose values stand where the trace says nothing (default efs-bursting)")
    c = sub.add_parser("compare", help="two traces side by side, per operation, with a verdict",
                       description="Set trace A beside trace B, per operation. Either side may be several "
                                   "trace directories read as one (a fleet's): a glob in quotes ('prod/*'), "
                                   "or, with --against, every directory before it is A and those after it B.")
    c.add_argument("traces", metavar="A", nargs="+",
                   help="A then B, each a trace directory or a glob in quotes; with --against, A's directories")
    c.add_argument("--against", metavar="B", nargs="+",
                   help="B's trace directories or globs; every argument before --against is then A's")
    c.add_argument("--out", metavar="DIR", help="also write CDF plots (PNG) and a self-contained HTML page here")
    c.add_argument("--tolerance", type=_positive_float, default=10.0, metavar="PCT",
                   help="p50s within this many per cent pass (default 10)")
    c.add_argument("--tail-tolerance", type=_positive_float, default=15.0, metavar="PCT",
                   help="p99s within this many per cent pass (default 15)")
    c.add_argument("--json", action="store_true", help="machine-readable output")
    s = sub.add_parser("simulate", help="a trace's operations through the model in virtual time: credits, "
                                         "throughput, waits")
    s.add_argument("trace_dir", metavar="DIR")
    s.add_argument("--profile", required=True, help="a profile's name or a .toml file")
    s.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE")
    s.add_argument("--days", type=_positive_float, metavar="N",
                   help="repeat the trace back to back until N days have passed (default: once)")
    s.add_argument("--plot", metavar="FILE.png", help="also draw the credits and throughput into this PNG")
    s.add_argument("--json", action="store_true", help="machine-readable output")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0: {text!r}")
    return value


def _clients(text: str) -> int:
    value = _positive_int(text)
    if value > MAX_CLIENTS:
        raise argparse.ArgumentTypeError(f"at most {MAX_CLIENTS}: {text!r}")
    return value


MAX_CLIENTS = 64  # mounts a scenario makes for --clients


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be above 0: {text!r}")
    return value


REHEARSE = ("export", "replay", "fit", "compare", "simulate")  # each fusetrace/rehearse/<name>.py's run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fusetrace", description=__doc__,
                     epilog="fusetrace SOURCE MOUNTPOINT -o OPTIONS is `fusetrace mount`, in the form "
                            "mount(8) and /etc/fstab use (type fuse.fusetrace): see `fusetrace mount "
                            "--help` for -o")
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _mount_parser(sub)
    u = sub.add_parser("umount", help="unmount, after the server has flushed its trace")
    u.add_argument("mountpoint")
    st = sub.add_parser("stats", help="current figures of a running mount (emulator metrics)")
    st.add_argument("mountpoint")
    st.add_argument("--json", action="store_true")
    se = sub.add_parser("set", help="change emulator parameters of a running mount, now")
    se.add_argument("mountpoint")
    se.add_argument("assignments", nargs="+", metavar="KEY=VALUE")
    sub.add_parser("profiles", help="the systems that can be emulated")
    d = sub.add_parser("demo", help="mount an emulated EFS, run fio through it, print the table")
    d.add_argument("--profile", help="emulate this profile instead of efs-2016 (the figures stay those "
                                      "published for EFS in 2016)")
    d.add_argument("--quick", action="store_true", help="short runs (for tests)")
    _scenario_parser(sub)
    _report_parser(sub)
    _rehearse_parsers(sub)
    fault_cli.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """The command line.  A reader of its output that goes away (`fusetrace stats MNT |
    head`) ends it quietly, with the status of a command killed by SIGPIPE.  A name given
    on the command line that is not UTF-8 (a mount point, an output file) is printed back
    as its bytes, whatever the locale's strictness."""
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="surrogateescape")
    try:
        code = _command(argv)
        if sys.stdout is not None:  # (None: started with its standard output closed)
            sys.stdout.flush()  # here, not at exit, where a broken pipe would print a traceback
        return code
    except BrokenPipeError:
        if sys.stdout is None or not _reader_gone(sys.stdout.fileno()):
            raise  # another pipe's: not the reader of the output that went away
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # what is left to flush goes nowhere
        return 128 + signal.SIGPIPE


def _reader_gone(fd: int) -> bool:
    """Whether `fd` is a pipe's end whose reader has gone (poll says POLLERR)."""
    poller = select.poll()
    poller.register(fd, 0)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def _command(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    logs.configure()
    parser = build_parser()
    commands = _commands(parser)
    try:
        if argv[:1] == ["mount"] or _is_mount_form(argv, set(commands)):
            argv = _mount_argv(argv, commands["mount"])
        args = parser.parse_args(argv)
        if args.command in ("demo", "scenario"):
            _unwind_on_signals()
        if args.command == "mount":
            _reachable(args)
            return _mount(args, argv)
        if args.command == "umount":
            return _umount(args)
        if args.command == "report":
            from .report import run

            return run(args)
        if args.command in REHEARSE:
            import importlib

            return importlib.import_module(f"fusetrace.rehearse.{args.command}").run(args)
        if args.command == "demo":
            from .scenarios.demo import run

            return run(args)
        if args.command == "scenario":
            from fusetrace.scenarios import command

            return (command.list_scenarios if args.scenario_command == "list" else command.run_scenarios)(args)
        return {"stats": _stats, "set": _set, "profiles": _profiles, "fault": fault_cli.run}[args.command](args)
    except UserError as exc:
        print(f"fusetrace: {exc}", file=sys.stderr)
        return exc.exit_code
    except Terminated as exc:
        _say_quietly(f"fusetrace: stopped by {signal.Signals(exc.signum).name}; mounts and scratch "
                     f"directories removed")
        return 128 + exc.signum
    except KeyboardInterrupt:
        return 130


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parser's commands, each with its own parser."""
    return {name: sub for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name, sub in action.choices.items()}


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP to a long-running command (demo, scenario run): raised where the
    program is, like Ctrl-C's KeyboardInterrupt, so every `with ScratchMount` block and
    child-process wait unwinds (unmount, kill the children, remove scratch directories)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _unwind_on_signals() -> None:
    """SIGTERM and SIGHUP unwind as SIGINT does.  Only the first raises: a second one
    while unwinding (a supervisor repeating itself) must not cut the clean-up short,
    and every wait in it is bounded."""
    received: list[int] = []

    def handler(signum, _frame):
        if not received:
            received.append(signum)
            raise Terminated(signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, handler)


def _say_quietly(line: str) -> None:
    try:  # after SIGHUP the terminal may be gone
        print(line, file=sys.stderr)
    except OSError:
        pass


def _reachable(args) -> None:
    """The paths a mount will use answer, or their hung FUSE mount is named: checked
    before anything resolves or stats them (the mount point itself is checked, with a
    bounded probe, in preflight)."""
    from .server import mounts

    mounts.reachable(args.source, "source")
    for what, path in (("--trace", args.trace_dir), ("--log", args.log)):
        if path is not None:
            mounts.reachable(path, what)
