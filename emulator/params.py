"""The emulator's parameters: names, units, defaults and how a value is checked.

One flat namespace, so that every parameter can be named the same way in a
profile (`key = value`), on the command line (`--set key=value`) and at run
time (`fusetrace set MNT key=value`, `Model.set`).  A key's suffix names its
unit (`_ms`, `_s`, `_mibps`, `_mbps`, `_gibps`, `_iops`); keys without one
are byte sizes, given as a number of bytes or as text with a unit
("2.1 TiB", "4 KiB", "15 GB").  The defaults are today's General Purpose
bursting EFS (see emulator/profiles/efs-bursting.toml for the sources).
Every number has bounds (below, `_param`), checked by `coerce` wherever a
value comes from: a profile, `--set` or `fusetrace set`.
"""

import dataclasses
import difflib
import math
import re
from dataclasses import dataclass, field
from typing import Any, TypeVar

_T = TypeVar("_T")

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40
MB = 1_000_000

MODES = ("bursting", "provisioned", "elastic")
LATENCY_CLASSES = ("read", "write", "meta_read", "meta_write", "commit")  # keys <class>_latency_ms, _p99_ms
# RPCs whose round trip differs from the rest of their class's (mountstats shows OPEN at twice
# LOOKUP's, CLOSE at half GETATTR's): key <name>_latency_ms, its class, the RPCs it times.
# 0 leaves them at their class's latency; a set one keeps its class's spread (p99 / median).
RPC_LATENCIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "lookup": ("meta_read", ("LOOKUP",)),
    "access": ("meta_read", ("ACCESS",)),
    "open": ("meta_read", ("OPEN",)),
    "close": ("meta_read", ("CLOSE",)),
    "readdir": ("meta_read", ("READDIRPLUS",)),
    "setattr": ("meta_write", ("SETATTR",)),
    "create": ("meta_write", ("OPEN(create)", "CREATE")),
    "remove": ("meta_write", ("REMOVE",)),
    "rename": ("meta_write", ("RENAME",)),
}


ParamValue = str | int | float | bool  # a parameter's value, as Params holds it


class ProfileError(Exception):
    """A bad parameter; str() is one line naming the key and where it came from."""


# Bounds.  Generous for any storage system, and tight enough that the model keeps
# working: its deadlines are float seconds that the timer turns into int64
# nanoseconds (so no single operation may be modelled to take centuries), and a
# file's write slots are a list the model keeps for every file written.
HOUR_MS = 3_600_000.0  # a latency or hold beyond an hour is an outage, not a latency
YEAR_S = 365 * 86400.0
MAX_MIBPS = 1e7  # about 10 TiB/s; EFS elastic throughput tops out at 20-60 GiB/s
MAX_GIBPS = 1e4  # the same, in GiB/s
MAX_MBPS = 1e8  # 100 Tbit/s of client network
MAX_IOPS = 1e9  # a billion operations per second; EFS documents up to 2.5 million
MAX_BYTES = float(1 << 60)  # 1 EiB: sizes, balances, limits (EFS's largest file is 47.9 TiB)
MAX_SLOTS = 1024  # per file or directory; each slot is a list entry kept per file (1e8 took 780 MB a file)
MAX_SEED = 1 << 53  # the largest integer a typed value (parsed as a float) gives exactly
MAX_TEXT = 500  # characters of a description, one line
MAX_LATENCY_SPREAD = 1000.0  # p99 / median: beyond this a lognormal sample can overflow the timer
# The least rate above 0 of every rate key, from the bound on latencies: at it, one
# request (one operation, or 1 MiB: the most data one FUSE request or NFS READ/WRITE of
# the default rsize/wsize carries) is modelled to take at most about 1,000 s, within
# HOUR_MS, as throughput.MIN_RATE (1 KiB/s) keeps every limit; a slower rate would
# model one request taking longer than any latency a profile may give (1e-300 MiB/s:
# ~1e294 years; the model, given it, ran at MIN_RATE instead, silently).  A rate per
# stored size counts from 1 GiB (baseline) or 1 TiB (burst) stored, where its least
# gives about MIN_RATE.
LEAST_MIBPS, LEAST_GIBPS, LEAST_MBPS, LEAST_IOPS = 1e-3, 1e-6, 1e-2, 1e-3
LEAST_KIBPS = 1.0  # KiB/s per GiB: MIN_RATE at 1 GiB stored
LEAST_WHY = "slower, one request would be modelled to take longer than the hour a latency may"


def _param(
    default: ParamValue,
    kind: str,
    doc: str,
    most: float | None = None,
    unit: str = "",
    *,
    least: float | None = None,
    floor: float | None = None,
) -> Any:
    """A parameter.  A number must lie within [0, most]; with `least`, be 0 (no
    limit, or instant) or at least `least`; with `floor`, be at least `floor`.
    `unit` is shown with the bounds (sizes in bytes)."""
    return field(
        default=default, metadata={"kind": kind, "doc": doc, "most": most, "unit": unit, "least": least, "floor": floor}
    )


@dataclass(frozen=True, slots=True)
class Params:
    description: str = _param("", "text", "one line saying what the profile emulates")
    seed: int = _param(0, "int", "seed of the latency sampler: runs are reproducible", MAX_SEED)

    # throughput mode and the size that sets bursting throughput
    throughput_mode: str = _param("bursting", "mode", "bursting, provisioned or elastic")
    stored_size: float = _param(5 * GiB, "bytes", "data already on the file system (Standard class)", MAX_BYTES)
    storage_remeasure_s: float = _param(
        3600.0, "number", "period at which the stored size is re-measured", YEAR_S, "s", least=1.0
    )
    baseline_kibps_per_gib: float = _param(
        50.0, "number", "baseline throughput per GiB stored", MAX_MIBPS, "KiB/s per GiB", least=LEAST_KIBPS
    )
    baseline_floor_mibps: float = _param(
        1.0, "number", "least baseline throughput (0: none)", MAX_MIBPS, "MiB/s", least=LEAST_MIBPS
    )
    burst_mibps: float = _param(
        100.0, "number", "burst throughput of a file system up to 1 TiB", MAX_MIBPS, "MiB/s", least=LEAST_MIBPS
    )
    burst_mibps_per_tib: float = _param(
        100.0, "number", "burst throughput per TiB stored, above 1 TiB", MAX_MIBPS, "MiB/s per TiB", least=LEAST_MIBPS
    )
    burst_credit_balance: float = _param(2.1 * TiB, "bytes", "burst credits (metered bytes above baseline)", MAX_BYTES)
    burst_credit_cap_min: float = _param(2.1 * TiB, "bytes", "least cap on the credit balance", MAX_BYTES)
    burst_credit_cap_per_tib: float = _param(2.1 * TiB, "bytes", "cap on the credit balance per TiB stored", MAX_BYTES)
    provisioned_mibps: float = _param(
        0.0, "number", "provisioned throughput (provisioned mode)", MAX_MIBPS, "MiB/s", least=LEAST_MIBPS
    )
    elastic_read_gibps: float = _param(
        20.0, "number", "file-system read limit (elastic mode)", MAX_GIBPS, "GiB/s", least=LEAST_GIBPS
    )
    elastic_write_gibps: float = _param(
        1.0, "number", "file-system write limit (elastic mode)", MAX_GIBPS, "GiB/s", least=LEAST_GIBPS
    )
    read_factor: float = _param(1 / 3, "fraction", "metered bytes per byte read (reads and metadata reads)")
    metadata_io_size: float = _param(4 * KiB, "bytes", "metered size of a metadata operation or commit", MAX_BYTES)

    # operations per second (0: no limit)
    read_iops: float = _param(
        35000.0, "number", "read operations per second (data and metadata)", MAX_IOPS, "ops/s", least=LEAST_IOPS
    )
    write_iops: float = _param(
        7000.0, "number", "write operations per second (data, metadata, commit)", MAX_IOPS, "ops/s", least=LEAST_IOPS
    )
    total_iops: float = _param(0.0, "number", "operations per second of any kind", MAX_IOPS, "ops/s", least=LEAST_IOPS)
    iops_burst_ms: float = _param(
        10.0, "number", "burst allowance of the IOPS limits, in ms of the limit", HOUR_MS, "ms"
    )

    # latency: a lognormal per class from its median and 99th percentile, plus transfer
    read_latency_ms: float = _param(0.9, "number", "median latency of a data read", HOUR_MS, "ms")
    read_latency_p99_ms: float = _param(2.7, "number", "99th-percentile latency of a data read", HOUR_MS, "ms")
    write_latency_ms: float = _param(4.3, "number", "median latency of a data write round trip", HOUR_MS, "ms")
    write_latency_p99_ms: float = _param(9.5, "number", "99th-percentile latency of a data write", HOUR_MS, "ms")
    meta_read_latency_ms: float = _param(0.9, "number", "median latency of a metadata read", HOUR_MS, "ms")
    meta_read_latency_p99_ms: float = _param(2.7, "number", "99th-percentile latency of a metadata read", HOUR_MS, "ms")
    meta_write_latency_ms: float = _param(4.35, "number", "median latency of a metadata change", HOUR_MS, "ms")
    meta_write_latency_p99_ms: float = _param(
        9.6, "number", "99th-percentile latency of a metadata change", HOUR_MS, "ms"
    )
    commit_latency_ms: float = _param(4.3, "number", "median latency of a COMMIT round trip", HOUR_MS, "ms")
    commit_latency_p99_ms: float = _param(9.5, "number", "99th-percentile latency of a COMMIT", HOUR_MS, "ms")
    lookup_latency_ms: float = _param(0.0, "number", "median latency of a LOOKUP (0: meta_read's)", HOUR_MS, "ms")
    access_latency_ms: float = _param(0.0, "number", "median latency of an ACCESS (0: meta_read's)", HOUR_MS, "ms")
    open_latency_ms: float = _param(0.57, "number", "median latency of an OPEN (0: meta_read's)", HOUR_MS, "ms")
    close_latency_ms: float = _param(0.15, "number", "median latency of a CLOSE (0: meta_read's)", HOUR_MS, "ms")
    readdir_latency_ms: float = _param(0.0, "number", "median latency of a READDIRPLUS (0: meta_read's)", HOUR_MS, "ms")
    setattr_latency_ms: float = _param(0.0, "number", "median latency of a SETATTR (0: meta_write's)", HOUR_MS, "ms")
    create_latency_ms: float = _param(
        4.35, "number", "median latency of an OPEN that creates, or a CREATE (0: meta_write's)", HOUR_MS, "ms"
    )
    remove_latency_ms: float = _param(0.0, "number", "median latency of a REMOVE (0: meta_write's)", HOUR_MS, "ms")
    rename_latency_ms: float = _param(0.0, "number", "median latency of a RENAME (0: meta_write's)", HOUR_MS, "ms")
    stream_mibps: float = _param(
        100.0, "number", "transfer rate of one operation's bytes (0: instant)", MAX_MIBPS, "MiB/s", least=LEAST_MIBPS
    )
    nfs_io_size: float = _param(
        1 * MiB, "bytes", "NFS rsize/wsize: larger I/O counts as several operations", MAX_BYTES, floor=float(KiB)
    )  # Linux's least rsize/wsize

    # serialisation points on the server (0 slots: no limit)
    file_stripe_size: float = _param(
        4 * MiB,
        "bytes",
        "a file's data lies in stripes this large; writes to one go one after another (0: none)",
        MAX_BYTES,
        least=64 * KiB,
    )
    stripe_write_mibps: float = _param(
        32.0,
        "number",
        "rate at which a stripe takes written bytes (0: as stream_mibps)",
        MAX_MIBPS,
        "MiB/s",
        least=LEAST_MIBPS,
    )
    file_write_slots: int = _param(3, "int", "writes to one file in service at once", MAX_SLOTS)
    file_write_hold_ms: float = _param(4.3, "number", "how long a write keeps its file slot", HOUR_MS, "ms")
    dir_write_slots: int = _param(1, "int", "namespace changes in one directory in service at once", MAX_SLOTS)
    dir_write_hold_ms: float = _param(
        4.35, "number", "how long a namespace change keeps its directory slot", HOUR_MS, "ms"
    )

    # the client
    per_client_mibps: float = _param(
        500.0, "number", "EFS's limit on one client's throughput (0: none)", MAX_MIBPS, "MiB/s", least=LEAST_MIBPS
    )
    client_network_mbps: float = _param(
        0.0, "number", "the client's network rate, or its burst rate (0: none)", MAX_MBPS, "Mbit/s", least=LEAST_MBPS
    )
    client_network_baseline_mbps: float = _param(
        0.0,
        "number",
        "client network rate once its credits are spent (0: no credits)",
        MAX_MBPS,
        "Mbit/s",
        least=LEAST_MBPS,
    )
    client_network_credit: float = _param(0.0, "bytes", "the client's network credits, and their cap", MAX_BYTES)
    client_dirty_limit: float = _param(
        256 * MiB, "bytes", "buffered-write data the client holds before writers wait", MAX_BYTES
    )
    buffered_write_ms: float = _param(
        0.01, "number", "client cost of a buffered write (copy into the page cache)", HOUR_MS, "ms"
    )
    # the NFS client's caches (nfs(5) defaults); the mount gives FUSE's own caches the same timeouts
    nfs_acregmin_s: float = _param(3.0, "number", "least time a file's cached attributes are trusted", YEAR_S, "s")
    nfs_acregmax_s: float = _param(60.0, "number", "most time a file's cached attributes are trusted", YEAR_S, "s")
    nfs_acdirmin_s: float = _param(
        30.0, "number", "least time a directory's cached attributes are trusted", YEAR_S, "s"
    )
    nfs_acdirmax_s: float = _param(60.0, "number", "most time a directory's cached attributes are trusted", YEAR_S, "s")
    nfs_readdir_entries: int = _param(256, "int", "directory entries in the first READDIRPLUS reply", 1 << 20, floor=1)

    # What the file system supports (the mount, not the model, acts on these).
    xattrs: bool = _param(False, "bool", "extended attributes (NFS 4.0/4.1, so EFS, has none)")


SPECS = {f.name: f.metadata for f in dataclasses.fields(Params)}

_BOOLS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
_SIZE_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "pb": 10**15,
    "eb": 10**18,
    "kib": KiB,
    "mib": MiB,
    "gib": GiB,
    "tib": TiB,
    "pib": 1 << 50,
    "eib": 1 << 60,
}
_SIZE = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z]*)\s*")


def check_key(key: str) -> None:
    if key not in SPECS:
        near = difflib.get_close_matches(key, SPECS, n=1)
        raise ValueError(f"{key}: unknown parameter" + (f" (did you mean {near[0]}?)" if near else ""))


def coerce(key: str, value: object, *, from_text: bool = False) -> ParamValue:
    """The checked value of parameter `key`; ValueError with a one-line message
    (starting with the key) if it will not do.  With from_text, `value` is text
    typed by a user (--set, `fusetrace set`) and is parsed by the key's kind."""
    check_key(key)
    kind = SPECS[key]["kind"]
    if kind == "text":
        text = str(value) if from_text else _expect(key, value, str, "text")
        if "\n" in text or len(text) > MAX_TEXT:
            raise ValueError(f"{key}: must be one line of at most {MAX_TEXT} characters")
        return text
    if kind == "bool":
        if from_text and isinstance(value, str) and value.lower() in _BOOLS:
            return _BOOLS[value.lower()]
        return _expect(key, value, bool, "true or false")
    if kind == "mode":
        if value not in MODES:
            raise ValueError(f"{key}: expected one of {', '.join(MODES)}, got {value!r}")
        return value
    if kind == "bytes":
        number = _size(key, value)
    elif from_text and isinstance(value, str):
        number = _number_text(key, value)
    else:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{key}: expected a number, got {value!r}")
        number = value
    if not isinstance(number, int) and not math.isfinite(number):  # ints of any size are finite
        raise ValueError(f"{key}: expected a finite number, got {value!r}")
    if number < 0:
        raise ValueError(f"{key}: must not be negative")
    _check_bounds(key, number, value)
    if kind == "int":
        if number != int(number):
            raise ValueError(f"{key}: expected a whole number, got {value!r}")
        return int(number)
    if kind == "fraction" and not 0 < number <= 1:
        raise ValueError(f"{key}: must be above 0 and at most 1")
    return float(number)


def check_consistent(params: Params) -> None:
    """Checks that involve two keys; ValueError naming the key to fix."""
    for cls in LATENCY_CLASSES:
        median = getattr(params, f"{cls}_latency_ms")
        p99 = getattr(params, f"{cls}_latency_p99_ms")
        if p99 < median:
            raise ValueError(f"{cls}_latency_p99_ms: must not be below {cls}_latency_ms ({median:g})")
        if median > 0 and p99 > MAX_LATENCY_SPREAD * median:
            raise ValueError(
                f"{cls}_latency_p99_ms: must be at most {MAX_LATENCY_SPREAD:,.0f} times "
                f"{cls}_latency_ms ({median:g}), got {p99:g}"
            )
    if params.nfs_io_size <= 0:
        raise ValueError("nfs_io_size: must be above 0")
    for kind in ("reg", "dir"):
        least, most = getattr(params, f"nfs_ac{kind}min_s"), getattr(params, f"nfs_ac{kind}max_s")
        if most < least:
            raise ValueError(f"nfs_ac{kind}max_s: must not be below nfs_ac{kind}min_s ({least:g})")
    if params.throughput_mode == "provisioned" and params.provisioned_mibps <= 0:
        raise ValueError("provisioned_mibps: provisioned mode needs a rate above 0")


def _check_bounds(key: str, number: float, value: object) -> None:
    spec = SPECS[key]
    most, least, floor = spec.get("most"), spec.get("least"), spec.get("floor")
    got = repr(value) if len(repr(value)) <= 40 else repr(value)[:36] + "..."
    if most is not None and number > most:
        raise ValueError(f"{key}: must be at most {_show(key, most)}, got {got}")
    if least is not None and 0 < number < least:
        why = f" ({LEAST_WHY})" if "/s" in spec["unit"] else ""  # a rate
        raise ValueError(f"{key}: must be 0 or at least {_show(key, least)}{why}, got {got}")
    if floor is not None and number < floor:
        raise ValueError(f"{key}: must be at least {_show(key, floor)}, got {got}")


def _show(key: str, bound: float) -> str:
    """A bound as a user would type it: '1 EiB', '3,600,000 ms', '0.001 MiB/s'."""
    spec = SPECS[key]
    if spec["kind"] == "bytes":
        for name, size in (("EiB", 1 << 60), ("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
            if bound >= size and bound % size == 0:
                return f"{bound / size:g} {name}"
        return f"{bound:g} bytes"
    text = f"{bound:,.0f}" if bound == int(bound) else f"{bound:g}"
    return f"{text} {spec['unit']}".rstrip()


def _expect(key: str, value: object, typ: type[_T], what: str) -> _T:
    if not isinstance(value, typ):
        raise ValueError(f"{key}: expected {what}, got {value!r}")
    return value


def _number_text(key: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{key}: expected a number, got {text!r}") from None


def _size(key: str, value: object) -> float:
    """Bytes from a number or from text such as "2.1 TiB" or "40MB"."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{key}: expected a size (bytes, or text such as '4 KiB'), got {value!r}")
    if not isinstance(value, str):
        return value
    m = _SIZE.fullmatch(value)
    unit = m and _SIZE_UNITS.get(m.group(2).lower() or "b")
    if m is None or not unit:
        raise ValueError(f"{key}: expected a size such as '300 MiB' or '15 GB', got {value!r}")
    return float(m.group(1)) * unit
