"""The emulator's parameters: names, units, defaults and how a value is checked.

One flat namespace, so that every parameter can be named the same way in a
profile (`key = value`), on the command line (`--set key=value`) and at run
time (`fusetrace set MNT key=value`, `Model.set`).  A key's suffix names its
unit (`_ms`, `_s`, `_mibps`, `_mbps`, `_gibps`, `_iops`); keys without one
are byte sizes, given as a number of bytes or as text with a unit
("2.1 TiB", "4 KiB", "15 GB").  The defaults are today's General Purpose
bursting EFS (see emulator/profiles/efs-bursting.toml for the sources).
"""

import dataclasses
import difflib
import math
import re
from dataclasses import dataclass, field

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40
MB = 1_000_000

MODES = ("bursting", "provisioned", "elastic")
LATENCY_CLASSES = ("read", "write", "meta_read", "meta_write", "commit")  # keys <class>_latency_ms, _p99_ms


class ProfileError(Exception):
    """A bad parameter; str() is one line naming the key and where it came from."""


def _param(default, kind: str, doc: str):
    return field(default=default, metadata={"kind": kind, "doc": doc})


@dataclass(frozen=True, slots=True)
class Params:
    description: str = _param("", "text", "one line saying what the profile emulates")
    seed: int = _param(0, "int", "seed of the latency sampler: runs are reproducible")

    # throughput mode and the size that sets bursting throughput
    throughput_mode: str = _param("bursting", "mode", "bursting, provisioned or elastic")
    stored_size: float = _param(5 * GiB, "bytes", "data already on the file system (Standard class)")
    storage_remeasure_s: float = _param(3600.0, "number", "period at which the stored size is re-measured")
    baseline_kibps_per_gib: float = _param(50.0, "number", "baseline throughput per GiB stored")
    baseline_floor_mibps: float = _param(1.0, "number", "least baseline throughput (0: none)")
    burst_mibps: float = _param(100.0, "number", "burst throughput of a file system up to 1 TiB")
    burst_mibps_per_tib: float = _param(100.0, "number", "burst throughput per TiB stored, above 1 TiB")
    burst_credit_balance: float = _param(2.1 * TiB, "bytes", "burst credits (metered bytes above baseline)")
    burst_credit_cap_min: float = _param(2.1 * TiB, "bytes", "least cap on the credit balance")
    burst_credit_cap_per_tib: float = _param(2.1 * TiB, "bytes", "cap on the credit balance per TiB stored")
    provisioned_mibps: float = _param(0.0, "number", "provisioned throughput (provisioned mode)")
    elastic_read_gibps: float = _param(20.0, "number", "file-system read limit (elastic mode)")
    elastic_write_gibps: float = _param(1.0, "number", "file-system write limit (elastic mode)")
    read_factor: float = _param(1 / 3, "fraction", "metered bytes per byte read (reads and metadata reads)")
    metadata_io_size: float = _param(4 * KiB, "bytes", "metered size of a metadata operation or commit")

    # operations per second (0: no limit)
    read_iops: float = _param(35000.0, "number", "read operations per second (data and metadata)")
    write_iops: float = _param(7000.0, "number", "write operations per second (data, metadata, commit)")
    total_iops: float = _param(0.0, "number", "operations per second of any kind")
    iops_burst_ms: float = _param(10.0, "number", "burst allowance of the IOPS limits, in ms of the limit")

    # latency: a lognormal per class from its median and 99th percentile, plus transfer
    read_latency_ms: float = _param(0.4, "number", "median latency of a data read")
    read_latency_p99_ms: float = _param(1.2, "number", "99th-percentile latency of a data read")
    write_latency_ms: float = _param(2.7, "number", "median latency of a data write round trip")
    write_latency_p99_ms: float = _param(6.0, "number", "99th-percentile latency of a data write")
    meta_read_latency_ms: float = _param(0.4, "number", "median latency of a metadata read")
    meta_read_latency_p99_ms: float = _param(1.2, "number", "99th-percentile latency of a metadata read")
    meta_write_latency_ms: float = _param(2.7, "number", "median latency of a metadata change")
    meta_write_latency_p99_ms: float = _param(6.0, "number", "99th-percentile latency of a metadata change")
    commit_latency_ms: float = _param(2.7, "number", "median latency of a COMMIT round trip")
    commit_latency_p99_ms: float = _param(6.0, "number", "99th-percentile latency of a COMMIT")
    stream_mibps: float = _param(100.0, "number", "transfer rate of one operation's bytes (0: instant)")
    nfs_io_size: float = _param(1 * MiB, "bytes", "NFS rsize/wsize: larger I/O counts as several operations")

    # serialisation points on the server (0 slots: no limit)
    file_write_slots: int = _param(3, "int", "writes to one file in service at once")
    file_write_hold_ms: float = _param(2.7, "number", "how long a write keeps its file slot")
    dir_write_slots: int = _param(1, "int", "namespace changes in one directory in service at once")
    dir_write_hold_ms: float = _param(2.7, "number", "how long a namespace change keeps its directory slot")

    # the client
    per_client_mibps: float = _param(500.0, "number", "EFS's limit on one client's throughput (0: none)")
    client_network_mbps: float = _param(0.0, "number", "the client's network rate, or its burst rate (0: none)")
    client_network_baseline_mbps: float = _param(0.0, "number", "client network rate once its credits are spent (0: no credits)")
    client_network_credit: float = _param(0.0, "bytes", "the client's network credits, and their cap")
    client_dirty_limit: float = _param(256 * MiB, "bytes", "buffered-write data the client holds before writers wait")
    buffered_write_ms: float = _param(0.01, "number", "client cost of a buffered write (copy into the page cache)")

    # What the file system supports (the mount, not the model, acts on these).
    xattrs: bool = _param(False, "bool", "extended attributes (NFS 4.0/4.1, so EFS, has none)")


SPECS = {f.name: f.metadata for f in dataclasses.fields(Params)}

_BOOLS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
_SIZE_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB}
_SIZE = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z]*)\s*")


def check_key(key: str) -> None:
    if key not in SPECS:
        near = difflib.get_close_matches(key, SPECS, n=1)
        raise ValueError(f"{key}: unknown parameter" + (f" (did you mean {near[0]}?)" if near else ""))


def coerce(key: str, value, *, from_text: bool = False):
    """The checked value of parameter `key`; ValueError with a one-line message
    (starting with the key) if it will not do.  With from_text, `value` is text
    typed by a user (--set, `fusetrace set`) and is parsed by the key's kind."""
    check_key(key)
    kind = SPECS[key]["kind"]
    if kind == "text":
        return str(value) if from_text else _expect(key, value, str, "text")
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
    if not math.isfinite(number):
        raise ValueError(f"{key}: expected a finite number, got {value!r}")
    if number < 0:
        raise ValueError(f"{key}: must not be negative")
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
        if getattr(params, f"{cls}_latency_p99_ms") < median:
            raise ValueError(f"{cls}_latency_p99_ms: must not be below {cls}_latency_ms ({median:g})")
    if params.nfs_io_size <= 0:
        raise ValueError("nfs_io_size: must be above 0")
    if params.throughput_mode == "provisioned" and params.provisioned_mibps <= 0:
        raise ValueError("provisioned_mibps: provisioned mode needs a rate above 0")


def _expect(key, value, typ, what):
    if not isinstance(value, typ):
        raise ValueError(f"{key}: expected {what}, got {value!r}")
    return value


def _number_text(key: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{key}: expected a number, got {text!r}") from None


def _size(key: str, value) -> float:
    """Bytes from a number or from text such as "2.1 TiB" or "40MB"."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{key}: expected a size (bytes, or text such as '4 KiB'), got {value!r}")
    if not isinstance(value, str):
        return value
    m = _SIZE.fullmatch(value)
    unit = m and _SIZE_UNITS.get(m.group(2).lower() or "b")
    if not unit:
        raise ValueError(f"{key}: expected a size such as '300 MiB' or '15 GB', got {value!r}")
    return float(m.group(1)) * unit
