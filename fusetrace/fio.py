"""Run one fio job against a directory and read its JSON result."""

import json
import os
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass

from .errors import UserError


@dataclass
class FioResult:
    iops: float
    mbps: float  # MB/s (10^6 bytes), as fio and the published figures print it
    lat_ms: float  # mean completion latency


def parse_size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    text = text.strip().lower()
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


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
    """Make the job's file at full size (sparse) below the mount, so fio does not lay it out
    through the emulator first."""
    size = next((parse_size(a.split("=", 1)[1]) for a in args if a.startswith("--size=")), 1 << 30)
    path = os.path.join(directory, name)
    with open(path, "ab") as f:
        f.truncate(size)
    return name


def run(mountpoint: str, args: list[str], runtime: float, filename: str = "fio.dat",
        on_tick=None) -> FioResult:
    """Run fio time-based for `runtime` seconds on MOUNTPOINT/filename; on_tick(elapsed) is
    called about every 0.2 s while it runs (for progress displays)."""
    if shutil.which("fio") is None:
        raise UserError("fio: not installed (Debian: apt-get install fio)")
    cmd = ["fio", "--name=job", f"--filename={os.path.join(mountpoint, filename)}",
           *args, f"--runtime={runtime:g}", "--time_based", "--output-format=json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    start = time.monotonic()
    while True:
        try:
            out, err = proc.communicate(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            if on_tick:
                on_tick(time.monotonic() - start)
    if proc.returncode != 0:
        raise UserError(f"fio {' '.join(args)}: failed ({err.strip().splitlines()[-1] if err.strip() else proc.returncode})")
    job = json.loads(out[out.index("{"):])["jobs"][0]
    side = job["write"] if job["write"]["io_bytes"] > job["read"]["io_bytes"] else job["read"]
    lat = side.get("clat_ns") or side.get("lat_ns") or {"mean": 0}
    return FioResult(iops=side["iops"], mbps=side["bw_bytes"] / 1e6, lat_ms=lat["mean"] / 1e6)
