"""Run one fio job against a directory and read its JSON result."""

import json
import os
import shlex
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from ..emulator.simulate import parse_size
from ..errors import UserError
from . import children


@dataclass
class Side:
    iops: float
    mbps: float  # MB/s (10^6 bytes), as fio and the published figures print it
    lat_ms: float  # mean completion latency (0 when fio measured none: gtod_reduce)


@dataclass
class FioResult:
    read: Side
    write: Side


def job_args(args: str) -> list[str]:
    """fio arguments as published ('-direct=1 -iodepth 16 ...') in --key=value form."""
    out, words = [], shlex.split(args)
    i = 0
    while i < len(words):
        word = words[i].lstrip("-")
        if "=" not in word and i + 1 < len(words) and not words[i + 1].startswith("-"):
            word, i = f"{word}={words[i + 1]}", i + 1
        out.append("--" + word)
        i += 1
    return out


def prepare_file(directory: str, args: list[str], name: str = "fio.dat") -> str:
    """Make the job's file at full size (sparse) in `directory`, the mount (one setattr of
    its size, so that the kernel, whose write-back cache keeps a file's size as its own,
    knows it: else its writes past the size it knew go one at a time, as extending ones
    do), so fio does not lay it out through the emulator first."""
    size = next((parse_size(a.split("=", 1)[1]) for a in args if a.startswith("--size=")), 1 << 30)
    path = os.path.join(directory, name)
    with open(path, "ab") as f:
        f.truncate(size)
    return name


def start(mountpoint: str, args: list[str], runtime: float, filename: str = "fio.dat") -> subprocess.Popen:
    """Start fio time-based for `runtime` seconds on MOUNTPOINT/filename."""
    if shutil.which("fio") is None:
        raise UserError("fio: not installed (Debian: apt-get install fio)")
    cmd = [
        "fio",
        "--name=job",
        f"--filename={os.path.join(mountpoint, filename)}",
        *args,
        f"--runtime={runtime:g}",
        "--time_based",
        "--output-format=json",
    ]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def collect(proc: subprocess.Popen, args: list[str], on_tick: Callable[[float], None] | None = None) -> FioResult:
    """Wait for a started fio; on_tick(elapsed) about every 0.2 s meanwhile.  However
    the wait ends (an error, Ctrl-C), fio does not outlive it."""
    out, err = children.wait(proc, on_tick)
    if proc.returncode != 0:
        why = err.strip().splitlines()[-1] if err.strip() else proc.returncode
        raise UserError(f"fio {' '.join(args)}: failed ({why})")
    job = json.loads(out[out.index("{") :])["jobs"][0]
    return FioResult(read=_side(job["read"]), write=_side(job["write"]))


def _side(side: dict) -> Side:
    lat = side.get("clat_ns") or side.get("lat_ns") or {"mean": 0}
    return Side(iops=side["iops"], mbps=side["bw_bytes"] / 1e6, lat_ms=lat["mean"] / 1e6)
