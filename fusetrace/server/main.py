"""Run a fusetrace mount in this process: check, mount, serve, flush, unmount."""

import faulthandler
import logging
import math
import os
import platform
import re
import resource
import signal
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyfuse3
import trio

from .. import __version__
from ..errors import BadValue, UserError
from ..shaping import exporter, roundtrip
from . import fusectl, fuseread, inline, mounts, nfssampler, runstate
from .control import serve as serve_control
from .durable import crash_events
from .handlers import Operations
from .inline import InlinePolicy
from .status import NO_FAULTS_FILE, FaultsFile, Json, Status
from .workers import Workers

if TYPE_CHECKING:  # a mount that does not emulate never imports the emulator
    from ..shaping.emulation import Emulation
    from ..shaping.opmetrics import OpCounts
    from ..trace.capture import Capture
    from ..trace.writer import TraceWriter

log = logging.getLogger(__name__)

INLINE_THRESHOLD_US = 100.0  # a syscall quicker than this runs on the loop (see inline.py)
# pyfuse3 has no lock operations: the kernel keeps flock and fcntl locks itself, per mount.
CACHE_TIMEOUT = 1.0  # seconds the kernel may trust attributes and names, unless told otherwise
LOCKS = (
    "local: flock and fcntl locks taken through the mount are kept by this machine's kernel "
    "and do not reach the source or other clients"
)


@dataclass
class MountOptions:
    source: str
    mountpoint: str
    trace_dir: str | None = None
    attr_timeout: float | None = None  # None: CACHE_TIMEOUT, or the emulated NFS client's
    entry_timeout: float | None = None
    negative_timeout: float | None = None  # None: 0 (absent names not cached), or the emulated NFS client's
    fuse_options: list[str] = field(default_factory=list)
    threads: int = 64
    max_requests: int = 1024
    emulate: str | None = None  # profile name or .toml path
    overrides: list[str] = field(default_factory=list)  # --set key=value
    metrics_port: int | None = None
    metrics_addr: str | None = None  # an IP address (with metrics_port) or unix:/PATH
    inline: str = "auto"  # auto, always or never: see fusetrace/server/inline.py
    xattrs: bool = True  # False: answer ENOSYS to extended attribute requests
    # FUSE's write-back cache: see mount_cli.py's help; None: on when emulated and not shared;
    # asked for on a trace-only mount, not over a network source
    writeback_cache: bool | None = None
    crashable: bool = False  # armed for the crash fault (server/durable.py)
    debug_fuse: bool = False  # libfuse logs every request and reply (its "debug" option)
    faults: str | None = None  # a TOML file of fault rules and model events (docs/FAULTS.md)
    shared: str | None = None  # a Redis URL: the emulated file system's state shared (docs/SCALE.md)
    fs_id: str | None = None  # which shared file system
    host: str | None = None  # --host: the host the trace names (trace_host)
    trace_only: list[str] = field(default_factory=list)  # --trace-only KEY=V[,V...] (trace/capture.py)
    trace_sample: list[str] = field(default_factory=list)  # --trace-sample OP=N
    trace_max: int | None = None  # --trace-max, bytes (fusetrace/trace/limits.py)
    trace_max_age: int | None = None  # --trace-max-age, ns
    trace_full: str | None = None  # --trace-full: rotate (None: the default) or stop

    def __post_init__(self) -> None:
        self.source = os.path.realpath(self.source)
        self.mountpoint = mounts.canonical(self.mountpoint)
        if self.writeback_cache is None:
            self.writeback_cache = self.emulate is not None and self.shared is None


MAX_THREADS = 1024  # worker threads; each may hold a blocking syscall on the source
MAX_REQUESTS = 65536  # FUSE requests served at once (pyfuse3 takes a C int; the kernel queues ~1000)
OWN_FUSE_OPTIONS = {  # set by fusetrace itself; another value would hide what the mount is
    "subtype": "fusetrace umount and stats recognise their mounts by it",
    "fsname": "it names the source in the mount table",
}


# --host NAME: a short token that is safe in a path, a hive partition (host=NAME) and a shell
HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
HOST_RULE = "1 to 64 letters, digits, '.', '_' or '-', the first a letter or digit"


def trace_host(opts: MountOptions) -> str:
    """The host the trace names (_metadata.json's `host`, every record's host column):
    --host, else NAME when the trace directory is called host=NAME (readers that take such
    directories as a column, as DuckDB, pandas and Spark do, then agree), else this
    machine's host name."""
    return opts.host or _host_of_directory(opts.trace_dir) or socket.gethostname()


def _host_of_directory(trace_dir: str | None) -> str | None:
    name = os.path.basename(os.path.normpath(trace_dir)) if trace_dir else ""
    return name[len("host=") :] if name.startswith("host=") else None


def _check_host(opts: MountOptions) -> None:
    named = _host_of_directory(opts.trace_dir)
    if opts.host is not None:
        if not HOST_NAME.fullmatch(opts.host):
            raise BadValue(f"--host {opts.host!r}: not a host name ({HOST_RULE})")
        if opts.trace_dir is None:
            raise BadValue(f"--host {opts.host}: names the host in the trace; give --trace DIR with it")
    if named is not None and not HOST_NAME.fullmatch(named):
        raise BadValue(f"--trace {opts.trace_dir}: host={named!r} is not a host name ({HOST_RULE})")
    if named is not None and opts.host not in (None, named):
        raise BadValue(
            f"--host {opts.host}: the trace directory {opts.trace_dir} is named for host {named}, "
            f"which DuckDB, pandas and Spark would read as its host; give --host {named}, or "
            f"another directory"
        )


def _check_limits(opts: MountOptions) -> None:
    given = [f for f, v in (("--trace-max", opts.trace_max), ("--trace-max-age", opts.trace_max_age)) if v]
    if given and opts.trace_dir is None:
        raise BadValue(f"{given[0]}: limits the trace; give --trace DIR with it")
    if opts.trace_full is not None and not given:
        raise BadValue(f"--trace-full {opts.trace_full}: says what happens at --trace-max or --trace-max-age; give one")


def check_values(opts: MountOptions) -> None:
    """Every option's value within its range, each refused as one line naming the option."""
    _check_host(opts)
    _capture(opts)
    _check_limits(opts)
    if not 1 <= opts.threads <= MAX_THREADS:
        raise BadValue(f"--threads {opts.threads}: must be from 1 to {MAX_THREADS}")
    if not 1 <= opts.max_requests <= MAX_REQUESTS:
        raise BadValue(f"--max-requests {opts.max_requests}: must be from 1 to {MAX_REQUESTS}")
    for name in ("attr_timeout", "entry_timeout", "negative_timeout"):
        value = getattr(opts, name)
        if value is None:
            continue
        flag = f"--{name.replace('_', '-')} {value:g}"
        if not math.isfinite(value) or value < 0:
            raise BadValue(f"{flag}: must be a finite number of seconds, 0 or more")
        if opts.emulate is not None:
            raise BadValue(
                f"{flag}: an emulated mount gives the kernel the NFS client's cache timeouts "
                f"(--set nfs_acregmin_s=S for a file's attributes, nfs_acdirmin_s=S for "
                f"directories and names)"
            )
    if opts.writeback_cache and opts.emulate is None and inline.is_network(mounts.fstype_of(opts.source)):
        raise BadValue(
            f"--writeback-cache: not over {mounts.fstype_of(opts.source)} without --emulate (other "
            "clients change files beside the mount: the kernel would keep its own file sizes, "
            "and appends through the mount would land at its stale end of file)"
        )
    if (place := exporter.where(opts.metrics_port, opts.metrics_addr)) is not None:
        exporter.check(place)  # taken, or privileged: said now, not by the server once mounted
    for item in opts.fuse_options:
        for option in item.split(","):
            name = option.partition("=")[0].strip()
            if name in OWN_FUSE_OPTIONS:
                raise BadValue(f"-o {option}: fusetrace sets {name} itself ({OWN_FUSE_OPTIONS[name]})")


def preflight(opts: MountOptions) -> None:
    """Every check that can fail before mounting, each as one clear line."""
    check_values(opts)
    mounts.reachable(opts.source, "source")  # a hung FUSE mount there is named, not waited on
    if not os.path.exists(opts.source):
        raise UserError(f"source {opts.source}: no such directory")
    if not os.path.isdir(opts.source):
        raise UserError(f"source {opts.source}: not a directory")
    # busy, stale or hung (a bounded probe), missing, not a directory, the source or inside
    # it; a trace directory inside it
    mounts.check_mountpoint(opts.source, opts.mountpoint, opts.trace_dir)
    if not os.path.exists("/dev/fuse"):
        raise UserError(
            "/dev/fuse: no such device; load the fuse module (modprobe fuse) or give the container the device"
        )
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        raise UserError("/dev/fuse: permission denied")
    if opts.overrides and opts.emulate is None:
        raise BadValue("--set needs --emulate PROFILE")
    if opts.emulate is not None:
        from ..shaping.profile import load_params

        load_params(opts.emulate, opts.overrides)
    if (opts.shared is None) != (opts.fs_id is None):
        raise BadValue("--shared URL and --fs-id ID go together (which Redis, and which file system in it)")
    if opts.shared is not None:
        from ..shaping.redis_hub import check_url, shown

        if opts.writeback_cache:
            raise BadValue(
                f"--shared {shown(opts.shared)}: not with --writeback-cache (the kernel would keep "
                f"each mount's file sizes and pages as its own, and the mounts would not see one "
                f"another's writes)"
            )
        if opts.emulate is None:
            raise BadValue(
                f"--shared {shown(opts.shared)}: needs --emulate PROFILE (what is shared is the "
                f"emulated file system's state)"
            )
        from ..shaping.sharing import check_fs_id

        check_url(opts.shared)
        check_fs_id(opts.fs_id or "")
    if opts.faults is not None:
        _check_faults(opts)


def _check_faults(opts: MountOptions) -> None:
    """Every rule of the faults file checked, each mistake one line naming the file and the
    rule; model events only where there is a model (the emulation checks them as it opens)."""
    from ..faults.injector import Injector
    from ..faults.rules import load_file

    rules, events = load_file(opts.faults or "")
    trial = Injector(write_back=bool(opts.writeback_cache))
    for i, raw in enumerate(rules, 1):
        trial.add(raw, 0, f"--faults {opts.faults}: rule {i}", trial=True)
    try:
        crashes, model_events = crash_events(events, f"--faults {opts.faults}")
    except ValueError as exc:
        raise BadValue(str(exc)) from None
    if crashes and not opts.crashable:
        raise BadValue(f"--faults {opts.faults}: a crash event needs --crashable (docs/FAULTS.md)")
    if model_events and opts.emulate is None:
        raise BadValue(
            f"--faults {opts.faults}: [[event]] tables need --emulate PROFILE (they script the "
            f"emulated file system's timeline; a crash event does not)"
        )


def _inline_threshold_us(opts: MountOptions) -> float:
    """0 (nothing inline) on network file systems unless asked for."""
    if opts.inline == "never":
        return 0.0
    if opts.inline == "auto" and inline.is_network(mounts.fstype_of(opts.source)):
        return 0.0
    return INLINE_THRESHOLD_US


def _fuse_options(opts: MountOptions) -> set[str]:
    out = {"fsname=" + opts.source.replace(",", "\\,"), "subtype=fusetrace", "default_permissions"}
    if opts.debug_fuse:
        out.add("debug")
    for item in opts.fuse_options:
        out.update(o for o in item.split(",") if o)
    return out


def _metadata(opts: MountOptions) -> Json:
    return {
        "source": opts.source,
        "mountpoint": opts.mountpoint,
        "host": trace_host(opts),
        "hostname": socket.gethostname(),
        "versions": {
            "fusetrace": __version__,
            "pyfuse3": pyfuse3.__version__,
            "trio": trio.__version__,
            "python": platform.python_version(),
            "kernel": platform.release(),
        },
        "options": {
            "attr_timeout": opts.attr_timeout,
            "entry_timeout": opts.entry_timeout,
            "negative_timeout": opts.negative_timeout,
            "fuse_options": sorted(_fuse_options(opts)),
            "threads": opts.threads,
            "max_requests": opts.max_requests,
            "inline": opts.inline,
            "inline_threshold_us": _inline_threshold_us(opts),
            "xattrs": opts.xattrs,
            "writeback_cache": opts.writeback_cache,
            "crashable": opts.crashable,
            "emulate": opts.emulate,
            "overrides": opts.overrides,
            "faults": opts.faults,
        },
        "pid": os.getpid(),
        "locks": LOCKS,
    }


def _cache_timeouts(opts: MountOptions, emulation: "Emulation | None") -> dict[str, float]:
    """How long the kernel trusts what the mount told it.  Emulating, each reply carries
    the time the emulated NFS client trusts that name and those attributes from then
    (Shaper.trusted: acregmin growing to acregmax while a file is unchanged, names while
    their directory's attributes are), so that the kernel asks again when that client
    would send an RPC; these, the least of its periods (the profile's nfs_acregmin_s for
    files, nfs_acdirmin_s for directories and names, found or absent: NFS caches both),
    are what the trace's metadata shows.  The emulated client models what FUSE still asks
    where NFS would not (listings it keeps, attributes FUSE drops after a write)."""
    if emulation is None:
        return {
            "attr_timeout": CACHE_TIMEOUT if opts.attr_timeout is None else opts.attr_timeout,
            "entry_timeout": CACHE_TIMEOUT if opts.entry_timeout is None else opts.entry_timeout,
            "negative_timeout": opts.negative_timeout or 0.0,
        }
    p = emulation.model.params
    return {
        "attr_timeout": p.nfs_acregmin_s,
        "dir_attr_timeout": p.nfs_acdirmin_s,
        "entry_timeout": p.nfs_acdirmin_s,
        "negative_timeout": p.nfs_acdirmin_s,
    }


def _raise_fd_limit() -> None:
    """As libfuse's passthrough_hp does; the limit is then split between a reserve for the
    server's own descriptors, the inode table and open files, a share a user
    (fusetrace/server/fdbudget.py)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def serve(opts: MountOptions, ready_fd: int | None = None) -> int:
    """Mount and serve until unmounted or signalled.  Reports readiness (or the one-line
    reason it failed) on ready_fd, for the `fusetrace mount` that started it.  A fatal
    signal, or SIGUSR1 (`kill -USR1 PID`, to see where a hung server is), writes every
    thread's Python traceback to standard error: the log."""
    faulthandler.enable(all_threads=True)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    emulation = listener = None
    try:
        preflight(opts)
        if (place := exporter.where(opts.metrics_port, opts.metrics_addr)) is not None:
            listener = exporter.Listener(place)  # before any thread starts (exporter._bind_own)
        emulation = _open_emulation(opts)
        faults_file = _scheduled_faults(opts, emulation)
        tracer = _open_tracer(opts, emulation)
    except UserError as exc:
        _leave(emulation)
        if listener is not None:
            listener.close()
        _say(ready_fd, f"error: {exc}")
        raise
    os.umask(0)  # modes arrive with the caller's umask applied already
    _raise_fd_limit()
    workers = Workers(opts.threads)
    ops = Operations(
        opts.source,
        workers=workers,
        inline=InlinePolicy(
            _inline_threshold_us(opts), closes_inline=not inline.is_network(mounts.fstype_of(opts.source))
        ),
        tracer=tracer,
        shaper=emulation.shaper if emulation else None,
        **_cache_timeouts(opts, emulation),
        xattrs=opts.xattrs and (emulation is None or emulation.model.params.xattrs),
        writeback_cache=bool(opts.writeback_cache),
        counts=_op_counts(listener),
        crashable=opts.crashable,
    )
    faults_file.add_rules(ops.pipeline.fault_stage)  # checked by preflight; their windows count from the mount
    try:
        pyfuse3.init(ops, opts.mountpoint, _fuse_options(opts))
    except RuntimeError as exc:
        _close(ops, workers, tracer)
        _leave(emulation)
        if listener is not None:
            listener.close()
        msg = f"cannot mount {opts.source} on {opts.mountpoint}: {exc}"
        _say(ready_fd, f"error: {msg}")
        raise UserError(msg) from None
    info = mounts.mounted_at(opts.mountpoint)
    warning = fusectl.raise_limits(info.dev_minor, max_background=1000) if info else "mount not found"
    if warning:
        log.warning("%s", warning)
    fuse_fd = fusectl.session_fd()
    if fuse_fd is None:
        log.warning("this server's /dev/fuse descriptor not found: its reader waits in trio for every request")
    else:
        queued = fuseread.queued_check(fuse_fd)
        ops.pipeline.alone = lambda: ops.serving == 1 and not queued()
    if emulation is not None and info is not None:
        why = emulation.watch_kernel_queue(
            fusectl.connection(info.dev_minor),
            None if fuse_fd is None else fuseread.queued_check(fuse_fd),
            lambda: ops.serving,
            opts.max_requests,
        )
        if why:
            log.warning("%s", why)
    control = runstate.path_for(opts.mountpoint, ".sock")
    # absolute: umount, run from anywhere, names it and reads its loss summary
    trace = os.path.abspath(opts.trace_dir) if opts.trace_dir else None
    runstate.write(
        opts.mountpoint, pid=os.getpid(), source=opts.source, trace=trace, control=control, emulate=opts.emulate
    )
    log.debug(
        "FUSE options %s, inline threshold %g us, descriptor limit %d",
        sorted(_fuse_options(opts)),
        _inline_threshold_us(opts),
        resource.getrlimit(resource.RLIMIT_NOFILE)[0],
    )
    try:
        with fuseread.unparked_when_queued(fuse_fd) as reads:
            trio.run(_main, opts, ready_fd, Status(ops, tracer, emulation, reads, faults_file), control, listener)
    finally:
        still_mounted = (m := mounts.mounted_at(opts.mountpoint)) is not None and m.fstype == mounts.FSTYPE
        pyfuse3.close(unmount=still_mounted)
        if emulation is not None and tracer is not None:
            tracer.update_metadata(**emulation.final_metadata())
        if emulation is not None and emulation.sharing is not None:
            emulation.sharing.close()
        if tracer is not None and (ops.pipeline.faults.fired or ops.pipeline.faults.rules):
            tracer.update_metadata(faults=ops.pipeline.faults.listing())
        if tracer is not None and ops.durability is not None and ops.durability.crashes:
            tracer.update_metadata(crashes=ops.durability.crashes)
        _close(ops, workers, tracer)
        if listener is not None:
            listener.close()
        runstate.remove(opts.mountpoint)
        log.info("%s: server (pid %d) stopped", opts.mountpoint, os.getpid())
    return 0


def _leave(emulation: "Emulation | None") -> None:
    """A mount that failed after joining a shared file system leaves it (Sharing.join
    counted it live), rather than staying a client for CLIENT_TTL."""
    if emulation is not None and emulation.sharing is not None:
        emulation.sharing.close()


def _open_emulation(opts: MountOptions) -> "Emulation | None":
    if opts.emulate is None:
        return None
    from ..shaping.emulation import Emulation

    emulation = Emulation.open(opts.emulate, opts.overrides, opts.source)
    if opts.shared is not None and opts.fs_id is not None:
        emulation.share(opts.shared, opts.fs_id)
    return emulation


async def _crash_after(ops: Operations, seconds: float) -> None:
    await trio.sleep(seconds)
    await ops.crash()


def _scheduled_faults(opts: MountOptions, emulation: "Emulation | None") -> FaultsFile:
    """The faults file (its rules for the handlers, its crash events for the server), its
    other events scheduled on the emulation's timeline from now."""
    if opts.faults is None:
        return NO_FAULTS_FILE
    from ..faults.rules import load_file

    rules, events = load_file(opts.faults)
    crashes, model_events = crash_events(events, f"--faults {opts.faults}")  # checked by preflight
    faults_file = FaultsFile(opts.faults, rules, model_events, crashes)
    if emulation is not None:
        faults_file.schedule_events(emulation)
    return faults_file


def _capture(opts: MountOptions) -> "Capture | None":
    """The --trace-only and --trace-sample settings (BadValue for a bad one); None when
    every record is kept."""
    if not (opts.trace_only or opts.trace_sample):
        return None
    from ..trace.capture import Capture, parse_only, parse_sample

    only, sample = parse_only(opts.trace_only), parse_sample(opts.trace_sample)
    if opts.trace_dir is None:
        given = "--trace-only" if opts.trace_only else "--trace-sample"
        raise BadValue(f"{given}: chooses what the trace records; give --trace DIR with it")
    seed = int.from_bytes(os.urandom(4), "little")
    return Capture(only, sample, roots=(opts.mountpoint, opts.source), seed=seed)


def _open_tracer(opts: MountOptions, emulation: "Emulation | None") -> "TraceWriter | None":
    if opts.trace_dir is None:
        return None
    from ..trace.directory import TraceDirError
    from ..trace.limits import Limits
    from ..trace.writer import TraceWriter

    meta = _metadata(opts)
    meta["options"].update(_cache_timeouts(opts, emulation))  # the kernel's (emulating: the least)
    if emulation is not None:
        meta["emulation"] = emulation.describe()
    capture = _capture(opts)
    if capture is not None:
        meta["options"].update(capture.settings())
    try:
        return TraceWriter(
            opts.trace_dir,
            meta,
            capture=capture,
            limits=Limits(opts.trace_max, opts.trace_max_age, opts.trace_full or "rotate"),
        )
    except TraceDirError as exc:
        raise UserError(str(exc)) from None


async def _main(
    opts: MountOptions,
    ready_fd: int | None,
    status: Status,
    control: str,
    listener: exporter.Listener | None,
) -> None:
    async with trio.open_nursery() as nursery:
        for at in status.faults_file.crashes:  # a faults file's crash events, from the mount
            nursery.start_soon(_crash_after, status.ops, at)
        nursery.start_soon(_stop_on_signals, status.ops)
        await nursery.start(serve_control, control, status.handlers())  # listening before "ok"
        nursery.start_soon(status.ops.pipeline.holds.kills.run)  # held requests of killed callers go at once
        if status.emulation is not None:
            await status.emulation.start(nursery, status.tracer, status.counters)
        if listener is not None:
            _serve_metrics(listener, status)
        nursery.start_soon(_serve_fuse, opts, nursery.cancel_scope)
        nursery.start_soon(nfssampler.run, opts.source, status.tracer)  # when the source is on NFS
        await _measure_round_trip(opts.mountpoint, status)
        _say(ready_fd, "ok")
        log.info(
            "%s mounted on %s (pid %d; fusetrace %s, pyfuse3 %s, python %s)",
            opts.source,
            opts.mountpoint,
            os.getpid(),
            __version__,
            pyfuse3.__version__,
            platform.python_version(),
        )


def _op_counts(listener: exporter.Listener | None) -> "OpCounts | None":
    """The per-operation counters, where metrics are served (prometheus_client is
    imported only then)."""
    if listener is None:
        return None
    from ..shaping.opmetrics import OpCounts

    return OpCounts()


def _serve_metrics(listener: exporter.Listener, status: Status) -> None:
    """Every mount's per-operation figures, and the emulation's beside them; on the loop's
    thread, whose token the emulation's collector needs."""
    from ..shaping.opmetrics import OpCollector

    assert status.ops.pipeline.counts is not None  # made with the listener (_op_counts)
    collectors: list[object] = [OpCollector(status.ops.pipeline.counts)]
    if status.emulation is not None:
        from ..shaping.prometheus import EmulationCollector

        token = trio.lowlevel.current_trio_token()
        collectors.append(EmulationCollector(status.emulation.prometheus_metrics, token))
    listener.serve(*collectors)


async def _measure_round_trip(mountpoint: str, status: Status) -> None:
    """FUSE's round trip on this mount, measured before it is announced: the emulator
    replies that much early, and the trace keeps it.  The probe is not traced."""
    if status.emulation is None and status.tracer is None:
        return

    def started(pid: int) -> None:
        status.ops.pipeline.untraced_pid = pid

    try:
        if status.emulation is not None:
            whole = await status.emulation.calibrate(mountpoint, started)
        else:
            whole = roundtrip.typical(await roundtrip.probe(mountpoint, 40, started))
    finally:
        status.ops.pipeline.untraced_pid = -1
    if whole is None:
        log.warning(
            "%s: FUSE's round trip could not be measured (statfs through the mount failed): "
            "the trace does not record it, and the emulator does not reply early by it",
            mountpoint,
        )
    elif status.tracer is not None:
        status.tracer.update_metadata(fuse_round_trip_ns=whole)


async def _serve_fuse(opts: MountOptions, scope: trio.CancelScope) -> None:
    await pyfuse3.main(min_tasks=_kept_tasks(opts), max_tasks=opts.max_requests)
    scope.cancel()  # unmounted or terminated: stop the other tasks too


def _kept_tasks(opts: MountOptions) -> int:
    """How many idle request tasks pyfuse3 keeps.  It starts a task whenever a request
    arrives with none waiting to read, and ends one that finds more than this many
    waiting.  Requests an emulated mount holds come and go in bursts, so with a few kept
    it starts and ends a task per request, a sixth of the server's CPU per operation at
    high queue depths, which an emulation pays in fidelity once the host binds.  But each
    task keeps libfuse's request buffer (up to 1 MiB as written into), so a mount that
    keeps them all keeps the memory of its busiest moment (figures: see
    docs/BENCHMARKS.md, "Figures behind design choices: server/").  So an emulated mount keeps them all (a
    rehearsal on a test machine, whose figures are the point), any other a few (a
    production client, whose memory is the point: its requests wait milliseconds on the
    network, where a task's start is noise)."""
    return opts.max_requests if opts.emulate is not None else 4


async def _stop_on_signals(ops: Operations) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        async for _ in signals:
            ops.pipeline.end_stalls()
            pyfuse3.terminate()
            return


def _say(fd: int | None, line: str) -> None:
    if fd is None:
        return
    try:
        os.write(fd, (line + "\n").encode())
        os.close(fd)
    except OSError:
        pass


def _close(ops: Operations, workers: Workers, tracer: "TraceWriter | None") -> None:
    ops.close()
    workers.close()
    if tracer is not None:
        tracer.close()
