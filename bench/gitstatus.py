"""`git status` on a 4,000-file repository through an emulated mount: what the host adds.

An emulated mount charges each request what the model says and holds its reply till then;
`fusetrace stats` says how much the host added on top (hostload.py) and flags the run when
that is over a tenth.  `git status` on a repository it has seen is mostly stats of files the
NFS client still trusts (cache hits: no RPC, no modelled time), so every round trip FUSE
makes for one is host time with nothing of the model's to hide it.  This makes a committed
repository of small files in a few hundred directories, mounts it with `--emulate PROFILE`,
and runs `git status` cold (the first run), warm (again at once), after a pause longer than
the profile's acregmin (the files' attributes stale: the NFS client revalidates them), and
after a second and a third pause of acregmin: the NFS client's period for them doubles each
time they are fetched unchanged, so after the third pause it still trusts them, and a kernel
told acregmin does not.  Several rounds, on a fresh mount each.
Per run: its wall time, the host verdict over that run alone (two readings of `fusetrace
stats --json`), the emulated client's gates, the server's CPU time, and the requests the
kernel sent per kind (its fuse_request_send tracepoint, through a tracefs instance of this
script's own, filtered to the mount's connection).  The figures go between the
`<!-- gitstatus -->` markers of docs/BENCHMARKS.md.

    .venv/bin/python bench/gitstatus.py [--rounds N] [--profile P] [--label TEXT] [--docs FILE]

Run as root (it mounts and reads tracefs).  `--label` names the code measured (a second run
with another label adds its rows beside the first's: the before/after table).
"""

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from common import cpu_s, ft, server_pid, write_between  # noqa: E402

from fusetrace.hostload import host_load, load_words  # noqa: E402
from fusetrace.shaping.profile import load_params  # noqa: E402

MARK = "<!-- gitstatus -->"
FILES, DIRS = 4_000, 320  # small files, 20 top directories of 16 each
TRACEFS = Path("/sys/kernel/tracing")
_EVENT = re.compile(r"opcode \d+ \((\w+)\)")
RUNS = ("cold", "warm", "after a pause", "after a second pause", "after a third pause")


def make_repo(src: Path) -> None:
    """A committed repository of FILES small files in DIRS directories."""
    subprocess.run(["git", "init", "-q", str(src)], check=True)
    for i in range(FILES):
        d = i % DIRS
        folder = src / f"d{d // 16:02d}" / f"s{d:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{i:04d}.txt").write_text(f"file {i}\n")
    git = ["git", "-C", str(src), "-c", "user.name=bench", "-c", "user.email=bench@example.invalid"]
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "files"], check=True)


class KernelRequests:
    """The FUSE requests the kernel sends one connection, by kind: its fuse_request_send
    tracepoint in a tracefs instance of our own (no one else's tracing is touched)."""

    def __init__(self, connection: int):
        self.dir = TRACEFS / "instances" / f"gitstatus-{os.getpid()}"
        self.dir.mkdir()
        (self.dir / "buffer_size_kb").write_text("16384")
        event = self.dir / "events" / "fuse" / "fuse_request_send"
        (event / "filter").write_text(f"connection == {connection}")
        (event / "enable").write_text("1")

    def take(self) -> dict[str, int]:
        """The requests since the last take, by kind (FUSE_GETATTR: getattr), and clear."""
        text = (self.dir / "trace").read_text()
        (self.dir / "trace").write_text("")
        lost = re.search(r"entries-in-buffer/entries-written: (\d+)/(\d+)", text)
        if lost and lost.group(1) != lost.group(2):
            raise RuntimeError(f"the trace buffer lost events: {lost.group(0)}")
        return dict(Counter(m.group(1).removeprefix("FUSE_").lower() for m in _EVENT.finditer(text)))

    def close(self) -> None:
        (self.dir / "events" / "fuse" / "fuse_request_send" / "enable").write_text("0")
        self.dir.rmdir()


def slab_drops() -> int:
    """How many times anyone has dropped the kernel's dentry and inode caches (echo 2 or 3 >
    /proc/sys/vm/drop_caches; other benchmarks on a shared host do): the mount's dentries then
    go, and the kernel looks every name up again, which the emulated client, whose caches
    no one dropped, answers from them."""
    with open("/proc/vmstat") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("drop_slab "))


def _stats(mnt: Path) -> dict:
    return json.loads(ft("stats", str(mnt), "--json"))


def _gates(before: dict, after: dict) -> dict[str, int]:
    """Operations per gate of the emulated client between two readings."""
    out = {g: v["ops"] - before["gates"].get(g, {}).get("ops", 0) for g, v in after["gates"].items()}
    return {g: n for g, n in out.items() if n}


def _once(work: Path, src: Path, profile: str, pause_s: float) -> list[dict]:
    mnt = work / "mnt"
    mnt.mkdir()
    ft("mount", str(src), str(mnt), "--emulate", profile)
    runs = []
    try:
        pid = server_pid(str(mnt))
        kernel = KernelRequests(os.stat(mnt).st_dev)
        try:
            for name in RUNS:
                drops = slab_drops()  # from before the pause: a drop then counts too
                if name.startswith("after"):
                    time.sleep(pause_s if name == "after a pause" else pause_s - 1.0)
                kernel.take()
                before, cpu0 = _stats(mnt), cpu_s(pid)
                t0 = time.monotonic()
                subprocess.run(["git", "-C", str(mnt), "status", "--short"], check=True, capture_output=True)
                seconds = time.monotonic() - t0
                after, cpu1 = _stats(mnt), cpu_s(pid)
                runs.append(
                    {
                        "run": name,
                        "seconds": seconds,
                        "cpu_s": cpu1 - cpu0,
                        "host": host_load(before["host"], after["host"]),
                        "gates": _gates(before, after),
                        "requests": kernel.take(),
                        "caches_dropped": slab_drops() - drops,
                    }
                )
            whole = _stats(mnt)["host"]
        finally:
            kernel.close()
    finally:
        ft("umount", str(mnt))
    mnt.rmdir()
    runs.append({"run": "whole mount", "host": whole})
    return runs


def run(rounds: int, profile: str) -> tuple[list[list[dict]], float]:
    pause_s = load_params(profile, []).nfs_acregmin_s + 1.0
    with tempfile.TemporaryDirectory(prefix="gitstatus-", dir="/var/tmp") as work:
        src = Path(work) / "src"
        make_repo(src)
        return [_once(Path(work), src, profile, pause_s) for _ in range(rounds)], pause_s


def _requests_text(requests: dict[str, int]) -> str:
    total = sum(requests.values())
    top = sorted(requests.items(), key=lambda kv: -kv[1])
    return f"{total:,}: " + ", ".join(f"{k} {n:,}" for k, n in top)


def render(label: str, rounds: list[list[dict]], profile: str, pause_s: float) -> str:
    """This run's rows, headed by its label and command."""
    load = os.getloadavg()
    lines = [
        f"### {label}",
        "",
        f"`bench/gitstatus.py --rounds {len(rounds)} --profile {profile} --label {shlex.quote(label)}`, run "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on this 2-core host, loaded by other "
        f"engineers' tests (load average {load[0]:.1f} at the end). The pauses: {pause_s:g} s, then "
        f"{pause_s - 1:g} s twice.",
        "",
        "| round | run | seconds | server CPU s | host verdict | gates (operations) | requests the kernel sent |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, runs in enumerate(rounds, 1):
        for one in runs:
            verdict = "**host-bound**" if one["host"]["host_bound"] else "kept up"
            words = f"{verdict}: {load_words(one['host'])}"
            if one["run"] == "whole mount":
                lines.append(f"| {i} | whole mount (`fusetrace stats`) | | | {words} | | |")
                continue
            gates = ", ".join(f"{g} {n:,}" for g, n in sorted(one["gates"].items(), key=lambda kv: -kv[1]))
            dropped = " (the kernel's caches were dropped meanwhile)" if one["caches_dropped"] else ""
            lines.append(
                f"| {i} | {one['run']}{dropped} | {one['seconds']:.2f} | {one['cpu_s']:.2f} | {words} | {gates} | "
                f"{_requests_text(one['requests'])} |"
            )
    return "\n".join(lines)


def merged(docs: Path, label: str, part: str) -> str:
    """The section between the markers: its head, the parts of other labels kept, this one's
    put in place of an earlier one of the same label."""
    head = (
        "## `git status` through an emulated mount\n\n"
        f"`git status` in a committed repository of {FILES:,} small files in {DIRS} directories, "
        "through `--emulate efs-bursting`: the first run (cold), again at once (warm), after a "
        "pause longer than acregmin (3 s) and after a second and a third of acregmin, each round on a "
        "fresh mount. *Host verdict* is "
        "`fusetrace stats`' over that run alone (hostload.py: host-bound over 10 % added); "
        "*gates*, the emulated NFS client's account (`cache`: answered with no RPC); *requests*, "
        "those the kernel sent the mount (its `fuse_request_send` tracepoint). Measured on a loaded "
        "host: the wall times are noisy, the counts are not."
    )
    body = docs.read_text() if docs.exists() else ""
    old = body.split(MARK)[1] if body.count(MARK) >= 2 else ""
    parts = [p for p in re.split(r"(?m)^(?=### )", old) if p.startswith("### ") and not p.startswith(f"### {label}\n")]
    return "\n\n".join([head, *(p.strip() for p in parts), part])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--profile", default="efs-bursting")
    p.add_argument("--label", default="this tree")
    p.add_argument("--docs", default=str(ROOT / "docs" / "BENCHMARKS.md"))
    args = p.parse_args()
    rounds, pause_s = run(args.rounds, args.profile)
    part = render(args.label, rounds, args.profile, pause_s)
    print(part)
    docs = Path(args.docs)
    if not docs.exists():
        docs.write_text("")
    write_between(docs, MARK, merged(docs, args.label, part))


if __name__ == "__main__":
    main()
