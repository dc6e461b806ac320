"""`fusetrace mount`: the mount's options (and their -o form, which mount(8) and /etc/fstab
use), starting a server and waiting for its mount (`fusetrace umount` is umount_cli.py)."""

import argparse
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from . import logs
from .errors import BadValue, UserError
from .private import open_own_log
from .trace import limits

READY_TIMEOUT = 30.0


class Options:
    """A parser's options as add_argument returns them: what -o and the check for an option
    given twice read (argparse keeps its own list private)."""

    def __init__(self, parser: argparse.ArgumentParser):
        self.parser = parser
        self.actions: list[argparse.Action] = []
        self.repeatable: set[str] = set()  # dests of action="append": -o may give them again

    def add_argument(self, *names: str, **kwargs: Any) -> argparse.Action:
        action = self.parser.add_argument(*names, **kwargs)
        self.actions.append(action)
        if kwargs.get("action") == "append":
            self.repeatable.add(action.dest)
        return action


def _limit(parse: Callable[[str], int]) -> Callable[[str], int]:
    """argparse's type for a limit: its value, or a usage error saying why not (exit 2)."""

    def value(text: str) -> int:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None

    return value


def add_mount_parser(sub: Any) -> Options:
    """`fusetrace mount`'s parser, in `sub` (add_subparsers()), and its options."""
    p = Options(
        sub.add_parser(
            "mount",
            help="mount SOURCE on MOUNTPOINT, tracing and/or emulating",
            description="Mount a passthrough of SOURCE on MOUNTPOINT. Returns once the "
            "mount is live; the server runs on in the background.",
            add_help=False,
        )
    )
    p.add_argument("-h", "--help", action="help", default=argparse.SUPPRESS, help="show this help message and exit")
    p.add_argument("source")
    p.add_argument("mountpoint")
    p.add_argument(
        "--trace", metavar="DIR", dest="trace_dir", help="write a trace of every operation to DIR (Parquet files)"
    )
    p.add_argument(
        "--trace-max",
        metavar="SIZE",
        type=_limit(limits.parse_size),
        help="keep the trace's parts within SIZE (e.g. 10G, 500M; at least 256K); see --trace-full",
    )
    p.add_argument(
        "--trace-max-age",
        metavar="AGE",
        type=_limit(limits.parse_age),
        help="keep the trace's records for AGE (e.g. 7d, 12h, 30m; at least 10s); see --trace-full",
    )
    p.add_argument(
        "--trace-full",
        choices=limits.FULL,
        help="at --trace-max or --trace-max-age: rotate the oldest parts out (default), or stop recording",
    )
    p.add_argument(
        "--host",
        metavar="NAME",
        help="the host the trace names, in every record and its _metadata.json (default: "
        "NAME of a trace directory called host=NAME, else this machine's host name; "
        "1 to 64 letters, digits, '.', '_' or '-')",
    )
    p.add_argument(
        "--trace-only",
        metavar="KEY=V[,V...]",
        action="append",
        default=[],
        help="record only the operations that match (repeatable; values of one key: any of them, "
        "keys: all of them): op=NAME or class (meta_read, meta_write, metadata, read, write, "
        "commit), path=GLOB (as report --path), comm=NAME, uid=N. Every operation is still "
        "served; those left out are counted per operation in _metadata.json (left_out)",
    )
    p.add_argument(
        "--trace-sample",
        metavar="OP=N",
        action="append",
        default=[],
        help="record 1 in N of the operation OP, at random (repeatable; e.g. getattr=100); "
        "each record's sample column says N. Not for operations that change state",
    )
    p.add_argument("--foreground", action="store_true", help="serve in this process until unmounted")
    p.add_argument(
        "--attr-timeout",
        type=float,
        metavar="S",
        help="seconds the kernel may cache attributes (default 1.0; 0 sends every "
        "stat to the file system and the trace; with --emulate, the profile's "
        "NFS client timeouts apply instead)",
    )
    p.add_argument(
        "--entry-timeout",
        type=float,
        metavar="S",
        help="seconds the kernel may cache name lookups (default 1.0; with --emulate, the profile's)",
    )
    p.add_argument(
        "--negative-timeout",
        type=float,
        metavar="S",
        help="seconds the kernel may remember that a name is absent (default 0: every "
        "lookup of a missing name reaches the file system; with --emulate, the profile's)",
    )
    p.add_argument(
        "-o",
        dest="fuse_options",
        action="append",
        default=[],
        metavar="OPT[,OPT]",
        help="mount options, as in /etc/fstab: FUSE's (e.g. allow_other: permissions are "
        "then enforced by the kernel, default_permissions is always on; ro; not "
        "fsname or subtype, which fusetrace sets) and fusetrace's own, each by its "
        "long name, dashes as underscores (trace=DIR, emulate=PROFILE, "
        "set=KEY=VALUE, no_xattrs, debug, ...)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=64,
        metavar="N",
        help="worker threads for blocking syscalls below (default 64; 1 to 1024)",
    )
    p.add_argument(
        "--max-requests",
        type=int,
        default=1024,
        metavar="N",
        help="FUSE requests served at once (default 1024; 1 to 65536)",
    )
    p.add_argument("--log", metavar="FILE", help="server log when running in the background")
    p.add_argument(
        "--emulate",
        metavar="PROFILE",
        help="make every operation take as long as on the profile's system "
        "(a name from `fusetrace profiles`, or a .toml file)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a profile parameter (repeatable)",
    )
    p.add_argument(
        "--faults",
        metavar="FILE",
        help="fault rules ([[rule]]) and, with --emulate, model events ([[event]]) from this "
        "TOML file, in force from the mount on (docs/FAULTS.md; change them live with "
        "`fusetrace fault`)",
    )
    p.add_argument(
        "--shared",
        metavar="URL",
        help="with --emulate and --fs-id: one emulated file system shared with every mount of "
        "the same --fs-id through Redis at URL (redis://HOST:PORT/DB; docs/SCALE.md)",
    )
    p.add_argument("--fs-id", metavar="ID", help="the shared file system's name (letters, digits, . _ -)")
    p.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve metrics for Prometheus on 127.0.0.1:PORT (1 to 65535): requests, errors, "
        "bytes and latency by operation, and the emulator's with --emulate (docs/METRICS.md)",
    )
    p.add_argument(
        "--metrics-addr",
        metavar="ADDR",
        help="the address --metrics-port listens on (default 127.0.0.1; 0.0.0.0 or :: for "
        "every interface), or unix:/PATH: a Unix socket, mode 0600, without --metrics-port",
    )
    p.add_argument(
        "--inline",
        choices=("auto", "always", "never"),
        default="auto",
        help="run quick system calls (under 100 us, measured) on the event loop instead "
        "of handing them to a worker thread; auto (default): not on network or "
        "FUSE file systems, where a hung server would stall the mount",
    )
    p.add_argument(
        "--no-xattrs",
        dest="xattrs",
        action="store_false",
        help="answer extended attribute requests as unsupported, so the kernel stops "
        "sending them (one per buffered write, two per file in ls -l); automatic "
        "when the source has no extended attributes (NFS, so EFS)",
    )
    p.add_argument(
        "--writeback-cache",
        dest="writeback_cache",
        action="store_const",
        const=True,
        help="FUSE's write-back cache, on by default with --emulate (not with --shared), "
        "and the faster way to trace small writes: buffered writes gather in the kernel's "
        "page cache and reach the mount as write-back, as an NFS client's do, not as "
        "the write(2) calls; a write's error then shows at fsync or close, as on NFS, "
        "and the trace records the write-back. The kernel then keeps file sizes as its "
        "own: a file resized beside the mount (another NFS client) keeps the size the "
        "kernel holds (docs/EMULATOR.md)",
    )
    p.add_argument(
        "--no-writeback-cache",
        dest="writeback_cache",
        action="store_const",
        const=False,
        help="with --emulate: the write(2) calls reach the mount as the kernel splits them "
        "(at most max_write each, and an unaligned one at a page boundary), and changes "
        "made beside the mount show through it as on NFS; small buffered writes then cost "
        "a FUSE round trip each, more than the model charges",
    )
    p.add_argument(
        "--crashable",
        action="store_true",
        help="arm the crash fault (`fusetrace fault MNT crash`): keep what each page held "
        "when its file was last made durable (fsync, close, a synchronous write), so that a "
        "crash can put it back. Costs a read of each page before its first write after a "
        "commit, and memory for what it keeps (docs/FAULTS.md)",
    )
    p.add_argument(
        "--debug", action="store_true", help="log fusetrace's (and pyfuse3's) debug messages to the server's log"
    )
    p.add_argument(
        "--debug-fuse",
        action="store_true",
        help="have libfuse log every request and reply to the server's log (very verbose)",
    )
    p.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)
    return p


# mount(8) runs /sbin/mount.fuse3, which runs `fusetrace SOURCE MOUNTPOINT -o OPTIONS`: every
# option of `fusetrace mount` is an -o option by its long name, dashes as underscores, except
# these (mount(8) waits for its helper to return, so --foreground would hold it until unmounted)
NOT_MOUNT_OPTIONS = ("--foreground", "--help")
# what libfuse 3 takes as -o (lib/mount.c, lib/fuse_lowlevel.c), besides "debug", which is ours, and
# blkdev, blksize and user=, for block devices and fusermount's mtab
FUSE_MOUNT_OPTIONS = frozenset(
    (
        "allow_other",
        "allow_root",
        "auto_unmount",
        "default_permissions",
        "fsname",
        "subtype",
        "max_read",
        "context",
        "fscontext",
        "defcontext",
        "rootcontext",
        "ro",
        "rw",
        "suid",
        "nosuid",
        "dev",
        "nodev",
        "exec",
        "noexec",
        "async",
        "sync",
        "dirsync",
        "atime",
        "noatime",
    )
)
SET_BY_FUSETRACE = frozenset(("fsname", "subtype"))  # FUSE's, but refused: fusetrace sets them
# for mount(8) or other programs, not the file system: ignored, as mount.fuse3 ignores them
NOT_FOR_US = frozenset(("", "defaults", "user", "nouser", "users", "auto", "noauto", "nofail", "_netdev"))


def _own_mount_options(mount: Options) -> dict[str, argparse.Action]:
    """`fusetrace mount`'s options by their -o name."""
    return {
        a.option_strings[-1][2:].replace("-", "_"): a
        for a in mount.actions
        if a.option_strings
        and a.option_strings[-1].startswith("--")
        and a.option_strings[-1] not in NOT_MOUNT_OPTIONS
        and a.help != argparse.SUPPRESS
    }


def mount_argv(argv: list[str], known: Options) -> list[str]:
    """`fusetrace SOURCE MOUNTPOINT -o OPTIONS` (the form mount.fuse3 runs) as `fusetrace mount
    ...`, and in either form, fusetrace's own -o options as their long options: `-o
    trace=DIR,allow_other` is `--trace DIR -o allow_other`.  An unknown option is refused
    here, before anything is mounted.  `known`: add_mount_parser's options."""
    if argv[0] != "mount":
        if argv[1].startswith("/dev/fd/"):
            raise BadValue(f"{argv[1]}: -o drop_privileges is not supported (fusetrace mounts by itself)")
        argv = ["mount", *argv]
    own = _own_mount_options(known)
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
                        raise BadValue(f"-o {option}: {name} takes no value")
                    out.append(action.option_strings[-1])
                    from_o[action.dest] = (action.option_strings[-1], option)
                elif action is not None:
                    if not value:
                        raise BadValue(f"-o {option}: give a value, {name}={action.metavar or 'VALUE'}")
                    out += [action.option_strings[-1], value]
                    if action.dest not in known.repeatable:
                        from_o[action.dest] = (action.option_strings[-1], option)
                elif name in FUSE_MOUNT_OPTIONS:
                    fuse.append(option)
                elif name not in NOT_FOR_US and not name.startswith("x-") and name != "comment":
                    raise BadValue(
                        f"-o {name}: unknown mount option (fusetrace's: {', '.join(own)}; "
                        f"FUSE's: {', '.join(sorted(FUSE_MOUNT_OPTIONS - SET_BY_FUSETRACE))})"
                    )
            if fuse:
                out += ["-o", ",".join(fuse)]
        else:
            out.append(item)
    given = _dests_given(out, known)
    for dest, (option, item) in from_o.items():  # given as -o and on its own (or twice): which one was meant?
        if given.count(dest) > 1:
            raise BadValue(f"-o {item}: {option} is given another way too; give it once")
    return out


def _dests_given(argv: list[str], options: Options) -> list[str]:
    """The dest of each long option in `argv` as argparse reads it: `--opt`, `--opt=value`
    and an unambiguous abbreviation `--op`; values and what follows `--` are not options."""
    strings = {s: a for a in options.actions for s in a.option_strings if s.startswith("--")}
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


def is_mount_form(argv: list[str], commands: set[str]) -> bool:
    """`fusetrace SOURCE MOUNTPOINT ...`: a first word that is no command but a path."""
    return (
        len(argv) >= 2
        and argv[0] not in commands
        and not argv[0].startswith("-")
        and ("/" in argv[0] or os.path.exists(argv[0]))
    )


def mount(args: argparse.Namespace, argv: list[str]) -> int:
    """`fusetrace mount`: serve here (--foreground), or start a server and return once its mount is live."""
    from .server import runstate
    from .server.main import LOCKS, MountOptions, preflight, serve

    opts = MountOptions(
        source=args.source,
        mountpoint=args.mountpoint,
        trace_dir=args.trace_dir,
        attr_timeout=args.attr_timeout,
        entry_timeout=args.entry_timeout,
        negative_timeout=args.negative_timeout,
        fuse_options=args.fuse_options,
        threads=args.threads,
        max_requests=args.max_requests,
        emulate=args.emulate,
        overrides=args.overrides,
        metrics_port=args.metrics_port,
        metrics_addr=args.metrics_addr,
        inline=args.inline,
        xattrs=args.xattrs,
        writeback_cache=args.writeback_cache,
        crashable=args.crashable,
        debug_fuse=args.debug_fuse,
        faults=args.faults,
        shared=args.shared,
        fs_id=args.fs_id,
        host=args.host,
        trace_only=args.trace_only,
        trace_sample=args.trace_sample,
        trace_max=args.trace_max,
        trace_max_age=args.trace_max_age,
        trace_full=args.trace_full,
    )
    if args.foreground:
        logs.configure(server=True, debug=args.debug)
        return serve(opts, ready_fd=args.ready_fd)
    preflight(opts)
    _say_if_hidden(opts.mountpoint)
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
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=logf,
            pass_fds=(w,),
            start_new_session=True,
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
        raise UserError(answer[len("error: ") :])
    raise UserError(f"server for {opts.mountpoint} {answer}: {_last_line(log)} (log: {log})")


def _say_if_hidden(mountpoint: str) -> None:
    """A mount point with files in it: the mount hides them until it is unmounted (as any
    mount does), which is no error but surprises; said in one line."""
    try:
        with os.scandir(mountpoint) as entries:
            n = sum(1 for _, _ in zip(range(HIDDEN_COUNTED), entries))
    except OSError:
        return
    if n:
        what = f"{n:,}{'+' if n == HIDDEN_COUNTED else ''} {'entry stays' if n == 1 else 'entries stay'}"
        print(f"fusetrace: note: {mountpoint} is not empty: its {what} hidden while it is mounted", file=sys.stderr)


HIDDEN_COUNTED = 1000  # entries of a non-empty mount point counted, at most


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


def reachable(args: argparse.Namespace) -> None:
    """The paths a mount will use answer, or their hung FUSE mount is named: checked
    before anything resolves or stats them (the mount point itself is checked, with a
    bounded probe, in preflight)."""
    from .server import mounts

    mounts.reachable(args.source, "source")
    for what, path in (("--trace", args.trace_dir), ("--log", args.log)):
        if path is not None:
            mounts.reachable(path, what)
