"""What several benchmarks share: the command line as a user runs it, a mount's server and
its CPU time, the caller of handlers run in this process, and writing figures between a
page's markers."""

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

from fusetrace.server import runstate

FUSETRACE = [sys.executable, "-m", "fusetrace"]
ACCURACY_MARK = "<!-- accuracy -->"  # around bench/accuracy.py's part of docs/BENCHMARKS.md


def ft(*args: str) -> str:
    """Run a fusetrace command; its standard output (an error raises)."""
    return subprocess.run([*FUSETRACE, *args], check=True, capture_output=True, text=True, timeout=600).stdout


def server_pid(mountpoint: str) -> int:
    """The pid of the fusetrace server of `mountpoint`, from its run state."""
    state = runstate.read(mountpoint)
    if state is None:
        raise RuntimeError(f"no fusetrace server's run state for {mountpoint}")
    return state["pid"]


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in KiB ({} once it has gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return {k: int(v.split()[0]) for k, _, v in (line.partition(":") for line in f) if k in ("VmRSS", "VmHWM")}
    except (FileNotFoundError, ProcessLookupError):
        return {}


def cpu_s(pid: int) -> float:
    """CPU time (user and system) of process `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Caller:
    """The request context of a handler called in this process (bench/tracecost.py,
    bench/handlercost.py): this process, as root."""

    pid = os.getpid()
    uid = gid = 0


def write_between(docs: Path, mark: str, text: str) -> None:
    """Put `text` between the two `mark` lines of `docs`, in place of what was there
    (a page without them gets them, and `text`, at its end)."""
    body = docs.read_text()
    if mark not in body:
        body = f"{body.rstrip()}\n\n{mark}\n{mark}\n"
    head, _, rest = body.partition(mark)
    _, _, tail = rest.partition(mark)
    docs.write_text(f"{head}{mark}\n{text}\n{mark}{tail}")


def publish(name: str, command: str, raw: dict, text: str, out: str, mark: str) -> None:
    """A benchmark's results: its raw figures in bench/out/NAME-STAMP.json, its text between
    `mark`'s lines of the page `out` (relative to the repository), and both said."""
    from targets import CACHE, REPO  # (targets imports this module)

    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = CACHE / f"{name}-{stamp}.json"
    path.write_text(json.dumps({"command": command, **raw}, indent=2))
    page = Path(out) if Path(out).is_absolute() else REPO / out
    if not page.exists():
        page.write_text("")
    write_between(page, mark, text)
    print(text)
    print(f"\nwrote {page} (raw figures: {path})")
