"""The benchmark rows: each runs in a directory (native or a mount) and returns one figure."""

import json
import os
import shlex
import statistics
import subprocess
import time
from dataclasses import dataclass, field


class WorkloadError(Exception):
    pass


@dataclass
class Sizes:
    fio_size: str = "64M"  # per file, 4k rows
    runtime: int = 10  # seconds, 4k rows (time_based)
    seq_size: str = "256M"
    nfiles: int = 2000
    create_reps: int = 2  # create runs (each a new directory); the median is reported
    ls_reps: int = 3  # cold `ls -l` runs; the median is reported
    jobs: int = 8  # numjobs of the parallel randread row
    rounds: int = 2  # times every target is run (alternating order); the best is reported


QUICK = Sizes(fio_size="16M", runtime=3, seq_size="32M", nfiles=2000, create_reps=1, ls_reps=1, rounds=1)
FULL = Sizes()

DROP_CACHES = "/proc/sys/vm/drop_caches"

READ_NOTE = (
    "buffered reads of data that is in memory below: the backing file is read natively first, so "
    "no target waits for the disk and the row measures each file system's cost per read. fio's "
    "random map reads every block once per pass; on the mounts fio's default `invalidate=1` drops "
    "the mount's own page cache at each pass, so every read reaches the FUSE server (without it the "
    "kernel's FUSE page cache would answer from the second pass on and the figure would say more "
    "about when the first pass ended than about the file system); natively `invalidate=0` keeps "
    "the warm page cache, which is what the data being in memory means there"
)


def can_drop_caches() -> bool:
    return os.access(DROP_CACHES, os.W_OK)


def drop_caches() -> None:
    """Write back dirty data and drop the page, dentry and inode caches (all file systems,
    FUSE included: the kernel forgets its FUSE inodes, so the next access is a lookup)."""
    os.sync()
    if can_drop_caches():
        with open(DROP_CACHES, "w") as f:
            f.write("3\n")


def size_bytes(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


@dataclass
class Row:
    key: str
    title: str
    unit: str  # shown after the figure
    higher_is_better: bool = True
    notes: str = ""
    commands: list[str] = field(default_factory=list)

    def speed(self, value: float) -> float:
        """A figure where more is better, for ratios."""
        return value if self.higher_is_better else 1.0 / value


# ---- fio ----------------------------------------------------------------------------------

FIO_COMMON = ["--ioengine=psync", "--fallocate=none", "--output-format=json", "--group_reporting"]


def fio_4k(name: str, rw: str, sizes: Sizes, jobs: int = 1, invalidate: int | None = None) -> list[str]:
    args = [
        "fio",
        f"--name={name}",
        f"--rw={rw}",
        "--bs=4k",
        f"--size={sizes.fio_size}",
        f"--runtime={sizes.runtime}",
        "--time_based",
        *FIO_COMMON,
    ]
    if invalidate is not None:
        args.append(f"--invalidate={invalidate}")
    if jobs == 1:
        args.append("--filename={dir}/" + ("rw.dat" if rw == "randwrite" else "rr.0"))
    else:
        args += [f"--numjobs={jobs}", "--directory={dir}", "--filename_format=rr.$jobnum"]
    return args


def fio_seq(sizes: Sizes, fsync: bool = True) -> list[str]:
    return [
        "fio",
        f"--name={'seqwrite' if fsync else 'seqbuf'}",
        "--rw=write",
        "--bs=1M",
        f"--size={sizes.seq_size}",
        *(["--end_fsync=1"] if fsync else []),
        "--filename={dir}/seq.dat",
        *FIO_COMMON,
    ]


def shell(template: list[str]) -> str:
    """The command as one shell line, with $DIR for the directory under test."""
    return " ".join(shlex.quote(a.replace("{dir}", "DIRMARK")).replace("DIRMARK", "$DIR") for a in template)


def run_fio(template: list[str], where: str) -> dict:
    args = [a.replace("{dir}", where) for a in template]
    done = subprocess.run(args, capture_output=True, text=True)
    start = done.stdout.find("{")
    if done.returncode != 0 or start < 0:
        raise WorkloadError(f"fio exit {done.returncode}: {(done.stderr.strip().splitlines() or ['no output'])[-1]}")
    job = json.loads(done.stdout[start:])["jobs"][0]
    if job.get("error"):
        raise WorkloadError(f"fio job error {job['error']}")
    return job


def fio_figures(job: dict, direction: str) -> dict:
    d = job[direction]
    clat = d.get("clat_ns", {})
    pct = clat.get("percentile", {})
    return {
        "iops": d["iops"],
        "MiB_s": d["bw_bytes"] / (1 << 20),
        "io_MiB": d["io_bytes"] / (1 << 20),
        "runtime_ms": d["runtime"],
        "clat_mean_us": clat.get("mean", 0) / 1000,
        "clat_p99_us": pct.get("99.000000", 0) / 1000,
    }


# ---- the rows -------------------------------------------------------------------------------


def make_rows(sizes: Sizes) -> list[Row]:
    n = sizes.nfiles
    cache_note = "caches dropped (`sync; echo 3 > /proc/sys/vm/drop_caches`) before the run"
    return [
        Row(
            "randwrite",
            f"fio 4k randwrite, psync, {sizes.fio_size} file, {sizes.runtime} s",
            "IOPS",
            notes=f"buffered; the file is created natively in the source before mounting; {cache_note}",
            commands=[shell(fio_4k("randwrite", "randwrite", sizes))],
        ),
        Row(
            "randread",
            f"fio 4k randread, psync, {sizes.fio_size} file, {sizes.runtime} s",
            "IOPS",
            notes=READ_NOTE,
            commands=[
                "cat $SRC/rr.0 >/dev/null  # data in memory below",
                "native: " + shell(fio_4k("randread", "randread", sizes, invalidate=0)),
                "mounts: " + shell(fio_4k("randread", "randread", sizes, invalidate=1)),
            ],
        ),
        Row(
            "seqwrite",
            f"1 MiB sequential write, {sizes.seq_size} + fsync",
            "MiB/s",
            notes=f"fio with end_fsync=1: the figure includes the final fsync; a new file; {cache_note}",
            commands=[shell(fio_seq(sizes))],
        ),
        Row(
            "seqbuf",
            f"1 MiB sequential write, {sizes.seq_size}, no fsync",
            "MiB/s",
            notes=(
                "the same writes without the final fsync: into the page cache below, as the pyfuse3 "
                f"example's figure in the row above is (it implements no fsync); a new file; {cache_note}"
            ),
            commands=["rm -f $DIR/seq.dat; sync  # the row above's file", shell(fio_seq(sizes, fsync=False))],
        ),
        Row(
            "create",
            f"create {n:,} empty files",
            "files/s",
            notes=(
                f"timed Python loop of os.open(O_CREAT|O_EXCL|O_WRONLY, 0o644) + os.close into a new "
                f"directory; the median of {sizes.create_reps} such directories per round; {cache_note}"
            ),
            commands=[
                f"python: for i in range({n}): os.close(os.open(f'$DIR/create{{r}}/f{{i:05d}}', "
                f"os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))"
            ],
        ),
        Row(
            "ls",
            f"`ls -l` of {n:,} files, cold",
            "ms",
            higher_is_better=False,
            notes=(
                f"wall time of `ls -l DIR >/dev/null` (LC_ALL=C) over the first create directory, "
                f"right after dropping caches (no remount); the median of {sizes.ls_reps} per round"
            ),
            commands=["sync; echo 3 > /proc/sys/vm/drop_caches", "LC_ALL=C ls -l $DIR/create0 >/dev/null"],
        ),
        Row(
            "randread8",
            f"fio 4k randread, psync, numjobs={sizes.jobs}, {sizes.fio_size} file each, {sizes.runtime} s",
            "IOPS",
            notes="one file per job, total IOPS of all jobs; otherwise as the single-job randread",
            commands=[
                "cat $SRC/rr.* >/dev/null  # data in memory below",
                "native: " + shell(fio_4k("randread8", "randread", sizes, jobs=sizes.jobs, invalidate=0)),
                "mounts: " + shell(fio_4k("randread8", "randread", sizes, jobs=sizes.jobs, invalidate=1)),
            ],
        ),
    ]


def run_row(row: Row, where: str, src: str, sizes: Sizes) -> tuple[float, dict]:
    """Run one row in `where` (the mount, or `src` itself for native); return (figure, details)."""
    if row.key == "randwrite":
        drop_caches()
        figs = fio_figures(run_fio(fio_4k(row.key, "randwrite", sizes), where), "write")
        return figs["iops"], figs
    if row.key in ("randread", "randread8"):
        jobs = sizes.jobs if row.key == "randread8" else 1
        drop_caches()
        for j in range(jobs):
            warm(os.path.join(src, f"rr.{j}"))
        job = run_fio(fio_4k(row.key, "randread", sizes, jobs=jobs, invalidate=0 if where == src else 1), where)
        figs = fio_figures(job, "read")
        return figs["iops"], figs
    if row.key in ("seqwrite", "seqbuf"):
        if os.path.exists(os.path.join(where, "seq.dat")):
            os.unlink(os.path.join(where, "seq.dat"))  # a new file each time, removed through the mount
            os.sync()  # its blocks freed before the run, not during it
        drop_caches()
        figs = fio_figures(run_fio(fio_seq(sizes, fsync=row.key == "seqwrite"), where), "write")
        return figs["MiB_s"], figs
    if row.key == "create":
        drop_caches()
        rates = []
        for r in range(sizes.create_reps):
            rates.append(create_files(os.path.join(where, f"create{r}"), sizes.nfiles))
        return statistics.median(rates), {"runs_files_s": rates}
    if row.key == "ls":
        times = []
        for _ in range(sizes.ls_reps):
            drop_caches()
            times.append(ls_l(os.path.join(where, "create0"), sizes.nfiles))
        ms = [t * 1000 for t in times]
        return statistics.median(ms), {"runs_ms": ms}
    raise ValueError(row.key)


def warm(path: str) -> None:
    """Read a file once, natively, so that its data is in the page cache."""
    with open(path, "rb", buffering=0) as f:
        while f.read(1 << 20):
            pass


def create_files(directory: str, n: int) -> float:
    os.mkdir(directory)
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY
    names = [f"{directory}/f{i:05d}" for i in range(n)]
    t0 = time.perf_counter()
    for name in names:
        os.close(os.open(name, flags, 0o644))
    return n / (time.perf_counter() - t0)


def ls_l(directory: str, expect: int) -> float:
    env = dict(os.environ, LC_ALL="C")
    t0 = time.perf_counter()
    done = subprocess.run(["ls", "-l", directory], stdout=subprocess.DEVNULL, env=env)
    elapsed = time.perf_counter() - t0
    found = len(os.listdir(directory))
    if done.returncode != 0 or found != expect:
        raise WorkloadError(f"ls -l exit {done.returncode}, {found} entries (expected {expect})")
    return elapsed
