"""Soak: a traced fusetrace mount under a mixed real workload for a long time.

    .venv/bin/python bench/soak.py                      # 30 minutes, as root, from the repository root
    .venv/bin/python bench/soak.py --minutes 2 --markdown bench/out/soak.md

What it tests: that a mount which serves for a long time does not leak memory or descriptors,
does not fail operations and does not lose trace records. It mounts `python -m fusetrace mount
SRC MNT --trace DIR` over a fresh temporary directory and, from several processes at once, runs
through it until the time is up: fio random read/write with fsync over small files; a
create/write/rename/unlink storm (two processes sharing four directories, so ENOENT races are
expected and counted apart); `tar` of a tree into the mount and back out, checked with `diff -r`;
`find` and `ls -lR` walks of the whole mount; `git` commits and `sqlite3` transactions (each
skipped, with a note, when the tool is missing). During the middle third a second mount with
`--emulate efs-tiny` gets a storm and fio of its own. Every `--interval` seconds it samples the
traced server's RSS, descriptors and CPU time, the trace's counters and each workload's errors.
At the end (also after Ctrl-C or SIGTERM: children killed, both mounts removed) it prints a
markdown summary and writes the samples and summary to `--out` (JSON). The verdict: RSS growth
over the last half of the run (a leak is steady growth) and descriptor growth (must be flat).
"""

import argparse
import errno
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import server_pid

from fusetrace.scenarios.scratch import ScratchMount
from fusetrace.trace import metadata

RACE = "No such file or directory"
q = shlex.quote


@dataclass
class Counter:
    name: str
    unit: str
    procs: int = 1
    ops: int = 0
    errors: int = 0  # unexpected: must stay 0
    expected: int = 0  # races that a shared tree makes normal (ENOENT)
    last_error: str = ""

    def fail(self, what: str) -> None:
        self.errors += 1
        self.last_error = what[-300:]


class Procs:
    """Workload children, each in its own session so that all of it can be killed."""

    def __init__(self, stop: threading.Event):
        self.stop, self.lock = stop, threading.Lock()
        self.live: set[subprocess.Popen] = set()

    def run(self, args: list[str], timeout: float, **kw) -> tuple[int, str, str] | None:
        """(exit code, stdout, stderr); None when stopped. A timeout is exit code -1."""
        if self.stop.is_set():
            return None
        p = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            **kw,
        )
        with self.lock:
            self.live.add(p)
            if self.stop.is_set():  # kill_all() ran while it started
                self._kill(p)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._kill(p)
            out, err = p.communicate()
            return -1, out, f"timed out after {timeout:.0f} s; {err}"
        finally:
            with self.lock:
                self.live.discard(p)
        return None if self.stop.is_set() else (p.returncode, out, err)

    def kill_all(self) -> None:
        with self.lock:
            for p in list(self.live):
                self._kill(p)

    @staticmethod
    def _kill(p: subprocess.Popen) -> None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def storm(directory: str, seconds: float, seed: int) -> None:
    """Child process: create/write/rename/unlink/stat small files in directory/d0..d3."""
    rng = random.Random(seed)
    c: dict[str, Any] = {"ops": 0, "expected": 0, "errors": 0, "last_error": ""}
    dirs = [os.path.join(directory, f"d{i}") for i in range(4)]
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        path = os.path.join(rng.choice(dirs), f"f{rng.randrange(200)}")
        action = rng.random()
        try:
            if action < 0.4:
                fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
                try:
                    os.write(fd, rng.randbytes(rng.randrange(8192)))
                    if action < 0.02:
                        os.fsync(fd)
                finally:
                    os.close(fd)
            elif action < 0.6:
                os.rename(path, os.path.join(rng.choice(dirs), f"f{rng.randrange(200)}"))
            elif action < 0.75:
                os.unlink(path)
            elif action < 0.95:
                with open(path, "rb") as f:
                    f.read()
            else:
                os.listdir(os.path.dirname(path))
            c["ops"] += 1
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                c["expected"] += 1
            else:
                c["errors"] += 1
                c["last_error"] = f"{path}: {exc}"
    print(json.dumps(c))


class Soak:
    def __init__(self, args: argparse.Namespace, work: str):
        self.args, self.work = args, work
        self.stop = threading.Event()
        self.procs = Procs(self.stop)
        self.t0 = time.monotonic()
        self.end = self.t0 + args.minutes * 60
        self.counters: list[Counter] = []
        self.notes: list[str] = []
        self.emulated: dict = {}

    def left(self, end: float | None = None) -> float:
        return (end or self.end) - time.monotonic()

    def counter(self, name: str, unit: str, procs: int = 1) -> Counter:
        self.counters.append(Counter(name, unit, procs))
        return self.counters[-1]

    def checked(self, c: Counter, args: list[str], timeout: float = 300, races: bool = False, **kw) -> str | None:
        """Run a command; its stdout, or None when it failed (counted) or the soak stopped.
        With races, a failure whose every message is ENOENT counts as expected."""
        done = self.procs.run(args, timeout, **kw)
        if done is None:
            return None
        rc, out, err = done
        lines = err.strip().splitlines()
        if rc != 0 and races and rc > 0 and lines and all(line.endswith(RACE) for line in lines):
            c.expected += len(lines)
            return out
        if rc != 0:
            c.fail(f"{args[0]} exit {rc}: {err.strip()}")
            return None
        return out

    # ---- the workloads: each loops until `end` and stops by itself -----------------------------

    def fio(self, mnt: str, c: Counter, end: float, jobs: int = 2) -> None:
        os.makedirs(os.path.join(mnt, "fio"), exist_ok=True)
        while self.left(end) > 3 and not self.stop.is_set():
            # --thread: jobs as threads of one process (fio's job processes leave its session,
            # so killing its group would leave them running on the mount)
            out = self.checked(
                c,
                [
                    "fio",
                    "--name=soak",
                    f"--directory={mnt}/fio",
                    "--rw=randrw",
                    "--bs=4k",
                    "--nrfiles=16",
                    "--filesize=256k",
                    f"--numjobs={jobs}",
                    "--fsync=16",
                    "--ioengine=psync",
                    "--thread",
                    "--time_based",
                    "--group_reporting",
                    f"--runtime={int(min(30, self.left(end)))}",
                    "--output-format=json",
                ],
                timeout=120,
            )
            if out is not None:
                job = json.loads(out[out.find("{") :])["jobs"][0]
                c.ops += job["read"]["total_ios"] + job["write"]["total_ios"]
                if job.get("error"):
                    c.fail(f"fio job error {job['error']}")

    def storm(self, mnt: str, c: Counter, end: float, seed: int) -> None:
        for i in range(4):
            os.makedirs(os.path.join(mnt, "storm", f"d{i}"), exist_ok=True)
        while self.left(end) > 1 and not self.stop.is_set():
            seconds = str(min(self.args.interval, self.left(end)))
            out = self.checked(
                c,
                [
                    sys.executable,
                    __file__,
                    "--storm",
                    os.path.join(mnt, "storm"),
                    "--seconds",
                    seconds,
                    "--seed",
                    str(seed),
                ],
                timeout=120,
            )
            seed += 1000
            if out:
                r = json.loads(out)
                c.ops, c.expected, c.errors = c.ops + r["ops"], c.expected + r["expected"], c.errors + r["errors"]
                c.last_error = r["last_error"] or c.last_error

    def tar(self, mnt: str, tree: str, c: Counter) -> None:
        copy, archive = os.path.join(mnt, "tar"), os.path.join(self.work, "out.tar")
        while self.left() > 5 and not self.stop.is_set():
            pipe = f"mkdir {q(copy)} && tar -C {q(tree)} -cf - . | tar -C {q(copy)} -xf -"
            steps = [
                ["bash", "-o", "pipefail", "-c", pipe],
                ["tar", "-C", copy, "-cf", archive, "."],
                ["diff", "-r", tree, copy],
                ["rm", "-rf", copy],
            ]
            if all(self.checked(c, s) is not None for s in steps):
                c.ops += 1
            elif not self.stop.is_set():
                self.checked(c, ["rm", "-rf", copy])

    def walk(self, mnt: str, c: Counter) -> None:
        while self.left() > 2 and not self.stop.is_set():
            for cmd in (["find", mnt, "-xdev"], ["ls", "-lR", mnt]):
                if self.checked(c, cmd, races=True, env={**os.environ, "LC_ALL": "C"}) is not None:
                    c.ops += 1
            self.stop.wait(0.5)

    def git(self, mnt: str, c: Counter) -> None:
        repo = os.path.join(mnt, "git")
        env = {
            **os.environ,
            "HOME": self.work,
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_AUTHOR_NAME": "soak",
            "GIT_AUTHOR_EMAIL": "soak@localhost",
            "GIT_COMMITTER_NAME": "soak",
            "GIT_COMMITTER_EMAIL": "soak@localhost",
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": "gc.autoDetach",
            "GIT_CONFIG_VALUE_0": "false",
        }  # no gc left running
        if self.checked(c, ["git", "init", "-q", repo], env=env) is None:
            return
        n = 0
        while self.left() > 2 and not self.stop.is_set():
            with open(os.path.join(repo, f"f{n % 40}.txt"), "a") as f:
                f.write(f"line {n}\n" * 20)
            commit = ["bash", "-c", f"git add -A && git commit -qm c{n}"]
            if self.checked(c, commit, cwd=repo, env=env) is not None:
                c.ops += 1
            n += 1
            if n % 100 == 0:  # pack the loose objects: the tree stays bounded, so a growing RSS is a leak
                self.checked(c, ["git", "gc", "-q"], cwd=repo, env=env)

    def sqlite(self, mnt: str, c: Counter) -> None:
        db = os.path.join(mnt, "sqlite", "soak.db")
        os.makedirs(os.path.dirname(db), exist_ok=True)
        n = 0
        self.checked(c, ["sqlite3", "-bail", db, "CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v BLOB, n INT)"])
        while self.left() > 2 and not self.stop.is_set():
            inserts = " ".join(f"INSERT INTO t(v, n) VALUES (randomblob(512), {n});" for _ in range(20))
            sql = f"BEGIN; {inserts} DELETE FROM t WHERE id < (SELECT max(id) FROM t) - 2000; COMMIT;"
            if self.checked(c, ["sqlite3", "-bail", db, sql]) is not None:
                c.ops += 1
            if n % 50 == 49:
                out = self.checked(c, ["sqlite3", db, "PRAGMA integrity_check;"])
                if out is not None and out.strip() != "ok":
                    c.fail(f"integrity_check: {out.strip()[:200]}")
            n += 1

    def emulated_phase(self) -> None:
        """Middle third: a second mount, --emulate efs-tiny, with a storm and fio of its own."""
        third = (self.end - self.t0) / 3
        if self.stop.wait(third):
            return
        fio_c, storm_c = self.counter("efs-tiny fio randrw", "I/Os"), self.counter("efs-tiny storm", "ops")
        trace = os.path.join(self.work, "trace-tiny")
        with ScratchMount("--emulate", "efs-tiny", "--trace", trace, prefix="fusetrace-soak-tiny-") as m:
            pid = server_pid(m.mnt)
            self.emulated["start"] = proc_sample(pid)
            end = time.monotonic() + third
            threads = [
                threading.Thread(target=self.fio, args=(m.mnt, fio_c, end, 1)),
                threading.Thread(target=self.storm, args=(m.mnt, storm_c, end, 7)),
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.emulated["end"] = proc_sample(pid)
            self.emulated["trace"] = m.stats().get("trace", {})
        self.emulated["trace_final"] = metadata.read(trace)

    def start(self, mnt: str, tree: str) -> list[threading.Thread]:
        storm = self.counter("create/rename/unlink storm", "ops", 2)  # two processes, one counter
        fio = self.counter("fio randrw+fsync (4k, 16 files of 256k)", "I/Os", 2)
        jobs: list[tuple[Callable[..., None], tuple]] = [
            (self.fio, (mnt, fio, self.end)),
            (self.storm, (mnt, storm, self.end, 1)),
            (self.storm, (mnt, storm, self.end, 2)),
            (self.tar, (mnt, tree, self.counter("tar in, out, diff -r", "cycles"))),
            (self.walk, (mnt, self.counter("find / ls -lR walks", "walks"))),
        ]
        for tool, fn, name, unit in (
            ("git", self.git, "git add+commit (gc every 100)", "commits"),
            ("sqlite3", self.sqlite, "sqlite3 transactions", "transactions"),
        ):
            if shutil.which(tool):
                jobs.append((fn, (mnt, self.counter(name, unit))))
            else:
                self.notes.append(f"{tool} not installed: its workload skipped")
        if self.args.emulate:
            jobs.append((self.emulated_phase, ()))
        threads = [threading.Thread(target=fn, args=a) for fn, a in jobs]
        for t in threads:
            t.start()
        return threads


def proc_sample(pid: int) -> dict:
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    return {"rss_mib": rss / 1024, "fds": len(os.listdir(f"/proc/{pid}/fd")), "cpu_s": cpu}


def make_tree(root: str) -> None:
    rng = random.Random(0)
    for i in range(300):
        path = os.path.join(root, f"dir{i % 15}", f"sub{i % 4}", f"file{i}")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(rng.randbytes(rng.choice((0, 100, 4096, 20000, 65536))))
    os.symlink("dir0/sub0/file0", os.path.join(root, "link"))


def rise(samples: list[dict], key: str) -> float:
    """Growth of `key` over the samples, by a least-squares line (first to last time)."""
    if len(samples) < 2:
        return 0.0
    ts, ys = [s["t"] for s in samples], [s[key] for s in samples]
    mt, my = sum(ts) / len(ts), sum(ys) / len(ys)
    var = sum((t - mt) ** 2 for t in ts)
    return sum((t - mt) * (y - my) for t, y in zip(ts, ys)) / var * (ts[-1] - ts[0]) if var else 0.0


def summarise(soak: Soak, samples: list[dict], trace: dict) -> tuple[dict, str]:
    """The summary (JSON) and its markdown. samples[-2] is taken once the workloads ended,
    samples[-1] after everything in the mount was deleted (the kernel forgets those inodes)."""
    run, end, emptied = [s for s in samples if "phase" not in s], samples[-2], samples[-1]
    half = [s for s in run if s["t"] >= run[-1]["t"] / 2]
    rss_rise, fd_rise = rise(half, "rss_mib"), rise(half, "other_fds")
    rss_ok = rss_rise < max(8.0, 0.05 * half[0]["rss_mib"])
    # in-flight descriptors (a readdir's, a create's before it is counted) make "other" noisy by tens
    fd_ok = fd_rise < 20 and emptied["fds"] <= samples[0]["fds"] + 10
    errors = sum(c.errors for c in soak.counters)
    short = "; under 10 minutes RSS may still be warming up: judge a longer run" if end["t"] < 600 else ""
    verdict = (
        f"{'PASS' if rss_ok and fd_ok and not errors else 'FAIL'}: RSS {rss_rise:+.1f} MiB over the last "
        f"half ({'flat' if rss_ok else 'GROWING'}); descriptors beyond known inodes and open files "
        f"{fd_rise:+.1f} over the last half, {emptied['fds']} left after deleting everything (start "
        f"{samples[0]['fds']}: {'flat' if fd_ok else 'GROWING'}); {errors} unexpected errors{short}"
    )
    keys = (("RSS (MiB)", "rss_mib", 1), ("descriptors", "fds", 0), ("inodes known", "inodes", 0))
    summary = {
        "duration_s": round(end["t"], 1),
        "workloads": [asdict(c) for c in soak.counters],
        "server": {
            k: {"start": samples[0][k], "peak": max(s[k] for s in samples), "end": end[k], "emptied": emptied[k]}
            for _, k, _ in keys
        },
        "server_cpu_s": end["cpu_s"] - samples[0]["cpu_s"],
        "trace": trace,
        "emulated": soak.emulated,
        "notes": soak.notes,
        "verdict": verdict,
        "rss_rise_last_half_mib": rss_rise,
        "other_fds_rise_last_half": fd_rise,
    }
    L = [
        f"Soak of {end['t'] / 60:.1f} min; traced server CPU {summary['server_cpu_s']:.0f} s",
        "",
        "| workload | at once | operations | errors | expected (ENOENT races) |",
        "|---|---:|---:|---:|---:|",
    ]
    L += [f"| {c.name} | {c.procs} | {c.ops:,} {c.unit} | {c.errors} | {c.expected:,} |" for c in soak.counters]
    L += ["", "| traced server | start | peak | end | after deleting all |", "|---|---:|---:|---:|---:|"]
    L += [
        f"| {label} | "
        + " | ".join(f"{summary['server'][k][w]:,.{d}f}" for w in ("start", "peak", "end", "emptied"))
        + " |"
        for label, k, d in keys
    ]
    L += [
        "",
        (
            f"Trace: {trace.get('records', 0):,} records written, {trace.get('dropped', 0):,} dropped, "
            f"{trace.get('lost', 0):,} lost."
        ),
    ]
    if soak.emulated.get("end"):
        e, t = soak.emulated, soak.emulated.get("trace_final", {})
        L.append(
            f"efs-tiny server (middle third): RSS {e['start']['rss_mib']:.1f} → {e['end']['rss_mib']:.1f} MiB, "
            f"descriptors {e['start']['fds']} → {e['end']['fds']}; trace {t.get('records', 0):,} records, "
            f"{t.get('dropped', 0):,} dropped, {t.get('lost', 0):,} lost."
        )
    L += [f"Note: {n}" for n in soak.notes]
    L += [f"Last error of {c.name}: {c.last_error}" for c in soak.counters if c.errors]
    return summary, "\n".join([*L, "", f"Verdict: {verdict}"])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--interval", type=float, default=10, help="seconds between samples")
    p.add_argument("--out", default="bench/out/soak.json")
    p.add_argument("--markdown", metavar="FILE", help="also write the summary table here")
    p.add_argument("--no-emulate", dest="emulate", action="store_false", help="skip the efs-tiny mount")
    p.add_argument("--storm", help=argparse.SUPPRESS)
    p.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.storm:
        storm(args.storm, args.seconds, args.seed)
        return 0
    missing = [t for t in ("fio", "tar", "diff", "find", "ls", "fusermount3") if not shutil.which(t)]
    if missing:
        print(f"soak: missing {', '.join(missing)}", file=sys.stderr)
        return 2

    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with SIGINT ignored
    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGHUP, interrupt)
    work = tempfile.mkdtemp(prefix="fusetrace-soak-", dir="/var/tmp")
    samples: list[dict] = []
    try:
        tree, trace_dir = os.path.join(work, "tree"), os.path.join(work, "trace")
        make_tree(tree)
        with ScratchMount("--trace", trace_dir, prefix="fusetrace-soak-") as m:
            pid = server_pid(m.mnt)
            soak = Soak(args, work)

            def sample(**extra) -> dict:
                st = m.stats()
                s = {
                    "t": time.monotonic() - soak.t0,
                    **proc_sample(pid),
                    **extra,
                    "inodes": st["inodes"],
                    "open_files": st["open_files"],
                    "trace": {k: st["trace"].get(k, 0) for k in ("records", "queued", "dropped", "lost")},
                    "errors": {c.name: c.errors for c in soak.counters},
                }
                s["other_fds"] = s["fds"] - s["inodes"] - s["open_files"]
                samples.append(s)
                print(
                    f"[{s['t']:6.0f} s] RSS {s['rss_mib']:.1f} MiB, {s['fds']} fds ({s['inodes']} inodes), "
                    f"CPU {s['cpu_s']:.0f} s, trace {s['trace']['records']:,} written/"
                    f"{s['trace']['queued']:,} queued/{s['trace']['dropped']:,} dropped, "
                    f"errors {sum(s['errors'].values())}",
                    file=sys.stderr,
                )
                return s

            sample()
            threads = soak.start(m.mnt, tree)
            try:
                while any(t.is_alive() for t in threads):
                    deadline = time.monotonic() + args.interval
                    while time.monotonic() < deadline and any(t.is_alive() for t in threads):
                        time.sleep(0.2)
                    if any(t.is_alive() for t in threads):
                        sample()
            finally:
                soak.stop.set()
                soak.procs.kill_all()
                for t in threads:
                    t.join()
            sample(phase="end")
            for name in os.listdir(m.mnt):  # the kernel forgets deleted inodes: their descriptors must go
                path = os.path.join(m.mnt, name)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
            time.sleep(2)
            sample(phase="emptied")
        trace = metadata.read(trace_dir)
        summary, text = summarise(soak, samples, trace)
        summary["samples"] = samples
        print(text)
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=1)
        if args.markdown:
            with open(args.markdown, "w") as f:
                f.write(text + "\n")
        return 0 if summary["verdict"].startswith("PASS") else 1
    except KeyboardInterrupt:
        print("soak: interrupted; cleaned up", file=sys.stderr)
        return 130
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
