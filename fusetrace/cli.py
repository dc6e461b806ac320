"""The `fusetrace` command line: one command for every job."""

import argparse
import io
import os
import select
import signal
import sys
from typing import Any

from . import __version__, fault_cli, logs, mount_cli, umount_cli
from .client import ask
from .errors import BadValue, UserError


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (what is wrong, and where to read more), exit code 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: {message} (see: {self.prog} --help)\n")


class _Commands:
    """The subcommands' parsers as add_subparsers() makes them, each one's help kept for
    the summary `fusetrace` alone prints (argparse keeps its own list private)."""

    def __init__(self, sub: Any):
        self.sub = sub
        self.helps: dict[str, str] = {}

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        self.helps[name] = kwargs.get("help", "")
        parser: argparse.ArgumentParser = self.sub.add_parser(name, **kwargs)
        return parser


START = (
    "start with: fusetrace mount SOURCE MOUNTPOINT --trace DIR, run the workload in MOUNTPOINT, "
    'fusetrace umount MOUNTPOINT, fusetrace report DIR (README.md, "Tracing a workload")'
)


def usage_summary(helps: dict[str, str]) -> str:
    """What `fusetrace` with no arguments prints: the commands, a line each, and where to start."""
    width = max(map(len, helps))
    return "\n".join(
        [
            "usage: fusetrace COMMAND [ARGS...]  (fusetrace COMMAND --help: its options)",
            "",
            *(f"  {name:<{width}}  {text}" for name, text in helps.items()),
            "",
            START,
        ]
    )


class _Version(argparse.Action):
    """--version: fusetrace's, then what it runs on (read only when asked: pyfuse3 is slow to import)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(
            option_strings, dest, nargs=0, help="print the versions of fusetrace, python, pyfuse3 and libfuse, and exit"
        )

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
        print(
            f"fusetrace {__version__}\npython {platform.python_version()}, pyfuse3 {pyfuse3.__version__}, "
            f"libfuse {libfuse}"
        )
        parser.exit()


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
            raise BadValue(f"{args.mountpoint}: set {item}: expected KEY=VALUE")
        key, value = key.strip(), value.strip()
        try:
            coerce(key, value, from_text=True)
        except ValueError as exc:
            raise BadValue(f"{args.mountpoint}: set {exc}") from None
        changes.append((key, value))
    for key, value in changes:
        try:
            answer = ask(args.mountpoint, cmd="set", key=key, value=value)
        except UserError as exc:
            if exc.args[0].startswith(f"{args.mountpoint}: set "):  # refused by the model: a bad value
                raise BadValue(exc.args[0]) from None
            raise
        print(f"{key} = {answer['value']}")
    return 0


def _reset(args) -> int:
    answer = ask(args.mountpoint, cmd="reset")
    profile, again = answer["profile"], answer["rules_again"] + answer["events_again"]
    print(f"{profile} as mounted: model, NFS client's caches and events afresh" if profile else "trace only: no model")
    print(f"fault rules cleared: {', '.join(answer['rules_cleared']) or 'none'}")
    print(f"events called off: {', '.join(answer['events_called_off']) or 'none'}")
    if again:
        print(f"from the faults file again: {', '.join(again)}")
    return 0


def _list(args) -> int:
    import json

    from .client import list_mounts, render_list

    rows = list_mounts()
    print(json.dumps(rows, indent=2) if args.json else render_list(rows, everyone=os.geteuid() == 0))
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
    r = scs.add_parser(
        "run",
        help="run scenarios on fresh emulated mounts; table, plots, HTML report",
        description="Run each named scenario on a fresh emulated mount over a temporary "
        "directory and print its figures beside the published ones.",
    )
    r.add_argument("names", nargs="*", metavar="NAME")
    r.add_argument("--all", action="store_true", help="every scenario")
    r.add_argument("--profile", help="emulate this profile instead of the scenario's own")
    r.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a profile parameter, after the scenario's own (repeatable)",
    )
    r.add_argument(
        "--out",
        default="scenario-results",
        metavar="DIR",
        help="where results, traces, plots and HTML go (default ./scenario-results)",
    )
    r.add_argument(
        "--fast", action="store_true", help="small sizes and short runs (what CI runs); each scenario says what changes"
    )
    r.add_argument(
        "--clients",
        type=_clients,
        metavar="N",
        help="run every fio step from N clients, each its own mount of one emulated file system "
        "shared through a private redis-server (1 to 64; docs/SCALE.md)",
    )


def _report_parser(sub) -> None:
    r = sub.add_parser(
        "report",
        help="who did what on a trace, how long it took, and what to change",
        description="Report on a trace directory, or on several read as one (a fleet's: one "
        "per host), with a line per host.",
    )
    r.add_argument(
        "trace_dir",
        metavar="DIR",
        nargs="+",
        help="a trace directory, or a glob of them in quotes ('traces/*'); several are read as one",
    )
    r.add_argument(
        "--by",
        choices=("comm", "pid", "path", "dir", "host"),
        help="one table per process name, process, path, directory or host",
    )
    r.add_argument(
        "--top",
        type=_positive_int,
        default=20,
        metavar="N",
        help="with --by: the N groups with most time (default 20; --json has all)",
    )
    r.add_argument("--op", action="append", metavar="OP", help="only these operations (repeat, or a,b,c)")
    r.add_argument("--pid", action="append", type=_positive_int, metavar="PID", help="only this process (repeat)")
    r.add_argument("--comm", action="append", metavar="NAME", help="only processes of this name (repeat)")
    r.add_argument("--path", metavar="GLOB", help="only paths matching this glob (* stops at /, ** does not)")
    r.add_argument(
        "--since",
        metavar="T",
        help="only operations from T: seconds since the trace's first record (12.5) "
        "or a wall-clock time (14:03:07, 2026-11-23T14:03:07)",
    )
    r.add_argument("--until", metavar="T", help="only operations started before T (as --since)")
    r.add_argument("--timeline", action="store_true", help="operations and MB per second over time")
    r.add_argument("--plot", metavar="FILE.png", help="draw the timeline into this PNG (implies --timeline)")
    r.add_argument("--histogram", action="store_true", help="log2 latency histogram per operation")
    r.add_argument("--json", action="store_true", help="machine-readable output")
    r.add_argument(
        "--nfs",
        action="store_true",
        help="per interval, the FUSE operations beside the NFS RPCs the source received "
        "(the mount's mountstats samples, or an emulated mount's model)",
    )
    r.add_argument(
        "--interval", type=_positive_float, metavar="S", help="with --nfs: intervals of S seconds (default 1)"
    )


def _capture_parser(sub) -> None:
    c = sub.add_parser(
        "capture",
        help="record every file system call on a mount through eBPF, with no server in the path",
        usage="fusetrace capture MOUNTPOINT --trace DIR [--for DURATION] [-- COMMAND ARGS...]",
        description="Record every file system call processes make on files of the file system "
        "mounted at MOUNTPOINT (the real mount, untouched), into a trace DIR that report, fit, "
        "replay, compare, simulate and export read: while COMMAND runs (its exit status is the "
        "capture's), else until Ctrl-C, SIGTERM or --for.  Needs root, bpftrace and a kernel with BTF.",
    )
    c.add_argument("mountpoint", metavar="MOUNTPOINT")
    c.add_argument("--trace", required=True, metavar="DIR", dest="trace_dir", help="write the trace to DIR")
    c.add_argument(
        "--for", dest="duration", type=_duration, metavar="DURATION", help="stop after DURATION (30s, 5m, 2h)"
    )
    c.set_defaults(command_line=[])  # what follows "--": _command takes it off before parsing


def _duration(text: str) -> float:
    from .emulator.events import seconds

    try:
        value = seconds(float(text) if text.replace(".", "", 1).isdigit() else text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not 0 < value <= _LONGEST:
        raise argparse.ArgumentTypeError(f"must be above 0 and at most a year: {text!r}")
    return value


_LONGEST = 366 * 86400.0  # --for: what a sleep takes (a longer one overflows the C timer)


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
    pace.add_argument(
        "--speed",
        type=_positive_float,
        default=1.0,
        metavar="X",
        help="replay X times as fast as recorded (default 1: the recorded timing)",
    )
    pace.add_argument(
        "--as-fast-as-possible",
        action="store_true",
        help="no waiting between operations; each stream still in its order",
    )
    rp.add_argument(
        "--prepare",
        action="store_true",
        help="first make, in TARGET (empty), the tree the trace started from: the directories and files "
        "it found, files of the sizes it read",
    )
    rp.add_argument(
        "--prepare-into",
        metavar="DIR",
        help="--prepare, into DIR (empty) instead of TARGET: a traced TARGET mount's source, so that its "
        "trace holds the replay alone",
    )
    rp.add_argument("--json", action="store_true", help="machine-readable summary")
    rp.add_argument("--partial", action="store_true", help="replay a filtered or sampled trace (else refused)")
    f = sub.add_parser("fit", help="a profile fitted to what a trace saw")
    f.add_argument("trace_dir", metavar="DIR")
    f.add_argument("-o", "--output", required=True, metavar="PROFILE.toml")
    f.add_argument(
        "--base",
        help="the profile whose values stand where the trace says nothing "
        "(default: the trace's own profile when its metadata names one that loads, else efs-bursting)",
    )
    c = sub.add_parser(
        "compare",
        help="two traces side by side, per operation, with a verdict",
        description="Set trace A beside trace B, per operation. Either side may be several "
        "trace directories read as one (a fleet's): a glob in quotes ('prod/*'), "
        "or, with --against, every directory before it is A and those after it B.",
    )
    c.add_argument(
        "traces",
        metavar="A",
        nargs="+",
        help="A then B, each a trace directory or a glob in quotes; with --against, A's directories",
    )
    c.add_argument(
        "--against",
        metavar="B",
        nargs="+",
        help="B's trace directories or globs; every argument before --against is then A's",
    )
    c.add_argument("--out", metavar="DIR", help="also write CDF plots (PNG) and a self-contained HTML page here")
    c.add_argument(
        "--tolerance",
        type=_positive_float,
        default=10.0,
        metavar="PCT",
        help="p50s within this many per cent pass (default 10)",
    )
    c.add_argument(
        "--tail-tolerance",
        type=_positive_float,
        default=15.0,
        metavar="PCT",
        help="p99s within this many per cent pass (default 15)",
    )
    c.add_argument("--json", action="store_true", help="machine-readable output")
    s = sub.add_parser(
        "simulate", help="a trace's operations through the model in virtual time: credits, throughput, waits"
    )
    s.add_argument(
        "trace_dirs",
        nargs="+",
        metavar="DIR",
        help="a trace, or several or a glob (quoted): a fleet's, through one file system",
    )
    s.add_argument("--profile", required=True, help="a profile's name or a .toml file")
    s.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE")
    s.add_argument(
        "--days",
        type=_positive_float,
        metavar="N",
        help="repeat the trace back to back until N days have passed (default: once)",
    )
    s.add_argument(
        "--open-loop",
        action="store_true",
        help="make every operation at its recorded time (default: each process waits for its own, as it did)",
    )
    s.add_argument("--plot", metavar="FILE.png", help="also draw the credits and throughput into this PNG")
    s.add_argument("--partial", action="store_true", help="simulate a filtered or sampled trace (else refused)")
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


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, str], mount_cli.Options]:
    """The parser, its commands (name: help) and `fusetrace mount`'s options (read by the
    mount(8) form, `fusetrace SOURCE MOUNTPOINT -o OPTIONS`)."""
    parser = _Parser(
        prog="fusetrace",
        description=__doc__,
        epilog="fusetrace SOURCE MOUNTPOINT -o OPTIONS is `fusetrace mount`, in the form "
        "mount(8) and /etc/fstab use (type fuse.fusetrace): see `fusetrace mount "
        "--help` for -o",
    )
    parser.add_argument("--version", action=_Version)
    sub = _Commands(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    mount = mount_cli.add_mount_parser(sub)
    u = sub.add_parser("umount", help="unmount, after the server has flushed its trace")
    u.add_argument("mountpoint")
    u.add_argument(
        "--lazy",
        action="store_true",
        help="detach a mount in use now (umount -l): files open in it stay served and traced; the "
        "server flushes its trace and exits when the last is closed",
    )
    ls = sub.add_parser("list", help="the running mounts of this user (root: every user's), with their traces")
    ls.add_argument("--json", action="store_true")
    st = sub.add_parser("stats", help="current figures of a running mount (emulator metrics)")
    st.add_argument("mountpoint")
    st.add_argument("--json", action="store_true")
    se = sub.add_parser("set", help="change emulator parameters of a running mount, now")
    se.add_argument("mountpoint")
    se.add_argument("assignments", nargs="+", metavar="KEY=VALUE")
    sub.add_parser(
        "reset", help="a running mount as it was mounted: model, fault rules and events (not its files)"
    ).add_argument("mountpoint")
    sub.add_parser("profiles", help="the systems that can be emulated")
    d = sub.add_parser("demo", help="mount an emulated EFS, run fio through it, print the table")
    d.add_argument(
        "--profile", help="emulate this profile instead of efs-2016 (the figures stay those published for EFS in 2016)"
    )
    d.add_argument("--quick", action="store_true", help="short runs (for tests)")
    c = sub.add_parser("compact", help="merge a finished trace's parts into a few large files")
    c.add_argument("trace_dir", metavar="DIR")
    _capture_parser(sub)
    _scenario_parser(sub)
    _report_parser(sub)
    _rehearse_parsers(sub)
    fault_cli.add_parser(sub)
    return parser, sub.helps, mount


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
    parser, commands, mount = build_parser()
    if not argv:
        print(usage_summary(commands), file=sys.stderr)
        return 2
    try:
        if argv[:1] == ["mount"] or mount_cli.is_mount_form(argv, set(commands)):
            argv = mount_cli.mount_argv(argv, mount)
        command_line: list[str] = []
        if argv[:1] == ["capture"] and "--" in argv:
            argv, command_line = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
        args = parser.parse_args(argv)
        if command_line:
            args.command_line = command_line
        if args.command in ("demo", "scenario"):
            _unwind_on_signals()
        if args.command == "mount":
            mount_cli.reachable(args)
            return mount_cli.mount(args, argv)
        if args.command == "umount":
            return umount_cli.umount(args)
        if args.command == "report":
            from .report.command import run

            return run(args)
        if args.command in REHEARSE:
            import importlib

            return importlib.import_module(f"fusetrace.rehearse.{args.command}").run(args)
        if args.command == "capture":
            from .capture.runner import run as capture

            return capture(args)
        if args.command == "compact":
            from .trace.compact import compact_trace

            print(compact_trace(args.trace_dir))
            return 0
        if args.command == "demo":
            from .scenarios.demo import run

            return run(args)
        if args.command == "scenario":
            from fusetrace.scenarios import command

            return (command.list_scenarios if args.scenario_command == "list" else command.run_scenarios)(args)
        if args.command == "list":
            return _list(args)
        return {"stats": _stats, "set": _set, "reset": _reset, "profiles": _profiles, "fault": fault_cli.run}[
            args.command
        ](args)
    except UserError as exc:
        print(f"fusetrace: {exc}", file=sys.stderr)
        return exc.exit_code
    except Terminated as exc:
        _say_quietly(f"fusetrace: stopped by {signal.Signals(exc.signum).name}; mounts and scratch directories removed")
        return 128 + exc.signum
    except KeyboardInterrupt:
        return 130


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
