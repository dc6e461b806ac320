"""The profiles against public figures they were NOT calibrated on, in virtual time.

The era profiles take each RPC's latency from per-RPC sources (mountstats, serial
per-operation benchmarks) and a stable write's cost from diskracer's dsync series.  These
are whole workloads other people measured (touch loops, small-file creates, dd, whole
files): what the model says for them checks the model.  The table goes between the
`<!-- crosscheck -->` markers of docs/EMULATOR.md.  Host costs (process starts, the FUSE
round trip) are not in the model's figures: the measured ones include the process start a
loop of `touch` pays (0.63 ms a file on EBS in the same workshop).

    .venv/bin/python bench/crosscheck.py [--docs FILE]
"""

import argparse
import functools
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from fusetrace.emulator.call import Call  # noqa: E402
from fusetrace.emulator.model import Model  # noqa: E402
from fusetrace.emulator.nfsclient import NfsClient  # noqa: E402
from fusetrace.emulator.params import MiB  # noqa: E402
from fusetrace.emulator.profiles import apply_overrides, load_profile  # noqa: E402
from fusetrace.emulator.simulate import chains, dd_write, dd_writers  # noqa: E402

MARK = "<!-- crosscheck -->"
TUTORIAL = ["stored_size=2 TiB"]  # the 2018 tutorial's file system permitted over 200 MB/s
_inode = iter(range(1, 1 << 62))  # a new file or directory each time


def client(profile: str, overrides: list[str] | None = None) -> NfsClient:
    return NfsClient(Model(apply_overrides(load_profile(profile), overrides or []), 0.0))


def touch(directory: int) -> Iterator[Call]:
    """touch of a new file: open(O_CREAT) after the kernel's lookup, utimensat, close."""
    f, name = next(_inode), f"f{next(_inode)}"
    yield Call("lookup", directory=directory, name=name)
    yield Call("create", file=f, directory=directory, name=name)
    yield Call("setattr", file=f)
    yield Call("flush", file=f)
    yield Call("release", file=f)


def whole_file(directory: int, size: int, read_back: bool = False, remove: bool = False) -> Iterator[Call]:
    """Create a file, write `size` bytes in writes of at most 1 MiB, close it; then, as
    asked, read it back (before the close) and remove it."""
    f, name = next(_inode), f"f{next(_inode)}"
    yield Call("lookup", directory=directory, name=name)
    yield Call("create", file=f, directory=directory, name=name)
    for at in range(0, size, MiB):
        yield Call("write", file=f, size=min(MiB, size - at), offset=at)
    if read_back:
        yield Call("read", file=f, size=size)
    yield Call("flush", file=f)
    yield Call("release", file=f)
    if remove:
        yield Call("unlink", file=f, directory=directory, name=name)


def each(n: int, make: Callable[[], Iterator[Call]]) -> Iterator[Call]:
    for _ in range(n):
        yield from make()


def per_item_ms(
    profile: str, make: Callable[[], Iterator[Call]], n: int = 1024, sets: list[str] | None = None
) -> float:
    return chains(client(profile, sets), [each(n, make)]) / n * 1000


def rate(profile: str, jobs: int, per_job: int, make: Callable[[int], Iterator[Call]], shared_dir: bool) -> float:
    """Items a second with `jobs` processes of `per_job` items each, in one directory or
    each in its own."""
    c = client(profile, TUTORIAL)
    dirs = [next(_inode)] * jobs if shared_dir else [next(_inode) for _ in range(jobs)]
    end = chains(c, [each(per_job, functools.partial(make, d)) for d in dirs])
    return jobs * per_job / end


def dd_mbps(profile: str, block_mib: int, writers: int = 1) -> float:
    model = Model(apply_overrides(load_profile(profile), TUTORIAL), 0.0)
    count = 1024 // block_mib // writers
    if writers == 1:
        return dd_write(model, block_mib * MiB, count, sync=True).mb_per_s
    return dd_writers(model, writers, block_mib * MiB, count, sync=True).mb_per_s


def op_ms(profile: str, calls: Callable[[int, int], list[Call]], n: int = 1000) -> float:
    """Mean time of one operation made `n` times on new names (mdtest's serial phases)."""
    c, d = client(profile), next(_inode)
    return chains(c, [iter([call for _ in range(n) for call in calls(d, next(_inode))])]) / n * 1000


def rows() -> list[tuple[str, str, str, float, float, str]]:
    """(source, workload, profile, measured, model, unit)."""
    era, today, elastic = "efs-2018", "efs-bursting", "efs-elastic"
    tutorial = "AWS EFS tutorial 2018 (c5.2xlarge)"
    workshop = "AWS EFS workshop 2020"
    mdtest = "JuiceFS mdtest of EFS 2020 (c5.large)"
    xyzt = "xyzt.ai 2021 (8 vCPU, bursting)"
    proxy = "efs-utils PR 210, 2024"
    dz = "Dzhuneyt, elastic vs bursting, 2023"

    def create(d: int, i: int) -> list[Call]:
        return [Call("create", file=i, directory=d, name=str(i)), Call("flush", file=i), Call("release", file=i)]

    def mkdir(d: int, i: int) -> list[Call]:
        return [Call("mkdir", directory=d, name=str(i))]

    def stat(d: int, i: int) -> list[Call]:  # of a file made here before: its name is cached
        return [Call("getattr", file=i)]

    def open_close(d: int, i: int) -> list[Call]:
        return [Call("open", file=i), Call("flush", file=i, writable=False), Call("release", file=i)]

    def remove(d: int, i: int) -> list[Call]:
        return [Call("unlink", file=i, directory=d, name=str(i))]

    out = [
        (
            tutorial,
            "serial touch, 1,024 new files",
            era,
            16.219 / 1024 * 1000,
            per_item_ms(era, lambda: touch(1)),
            "ms a file",
        ),
        (
            workshop,
            "serial touch, 1,024 new files",
            era,
            12.545 / 1024 * 1000,
            per_item_ms(era, lambda: touch(2)),
            "ms a file",
        ),
        (tutorial, "parallel -j128 touch, one directory", era, 127, rate(era, 128, 8, touch, True), "files/s"),
        (workshop, "parallel -j32 touch, one directory", era, 1024 / 6.138, rate(era, 32, 32, touch, True), "files/s"),
        (tutorial, "parallel -j32 touch, 32 directories", era, 1136, rate(era, 32, 32, touch, False), "files/s"),
        (workshop, "32 threads touch, each its directory", era, 1771.6, rate(era, 32, 32, touch, False), "files/s"),
        (
            workshop,
            "smallfile create 4 KiB, 1 thread",
            era,
            1000 / 85.87,
            per_item_ms(era, lambda: whole_file(3, 4096)),
            "ms a file",
        ),
        (
            workshop,
            "smallfile create 4 KiB, 32 threads, one directory",
            era,
            186.8,
            rate(era, 32, 32, lambda d: whole_file(d, 4096), True),
            "files/s",
        ),
        (
            workshop,
            "smallfile create 4 KiB, 32 threads, own directories",
            era,
            1973.4,
            rate(era, 32, 32, lambda d: whole_file(d, 4096), False),
            "files/s",
        ),
        (tutorial, "dd bs=1M oflag=sync", era, 25, dd_mbps(era, 1), "MB/s"),
        (workshop, "dd bs=1M oflag=sync", era, 23.6, dd_mbps(era, 1), "MB/s"),
        (tutorial, "dd bs=16M oflag=sync", era, 93, dd_mbps(era, 16), "MB/s"),
        (workshop, "dd bs=16M oflag=sync", era, 67.0, dd_mbps(era, 16), "MB/s"),
        (tutorial, "4 x dd bs=1M oflag=sync", era, 99, dd_mbps(era, 1, 4), "MB/s"),
        (workshop, "4 x dd bs=1M oflag=sync", era, 87.9, dd_mbps(era, 1, 4), "MB/s"),
        (tutorial, "16 x dd bs=1M oflag=sync", era, 271, dd_mbps(era, 1, 16), "MB/s"),
        (workshop, "16 x dd bs=1M oflag=sync", era, 193.6, dd_mbps(era, 1, 16), "MB/s"),
        (mdtest, "file creation (create, close)", era, 1000 / 179.293, op_ms(era, create), "ms"),
        (mdtest, "directory creation", era, 1000 / 192.301, op_ms(era, mkdir), "ms"),
        (mdtest, "file stat", era, 1000 / 915.230, op_ms(era, stat), "ms"),
        (mdtest, "file read (open, close)", era, 1000 / 371.012, op_ms(era, open_close), "ms"),
        (mdtest, "file removal", era, 1000 / 217.498, op_ms(era, remove), "ms"),
    ]
    for size, name, ms in ((1000, "1 kB", 25.0), (100_000, "100 kB", 24.7), (1_000_000, "1 MB", 52.6)):
        out.append(
            (
                xyzt,
                f"write a whole {name} file",
                era,
                ms,
                per_item_ms(era, functools.partial(whole_file, 4, size), 64),
                "ms",
            )
        )
    out.append(
        (
            proxy,
            "create, write 8 KiB, read, close, remove",
            today,
            20.0,
            per_item_ms(today, lambda: whole_file(5, 8192, True, True)),
            "ms",
        )
    )
    for size, name, e_ms, b_ms in (
        (1000, "1 KB", 9.52, 10.06),
        (1_000_000, "1 MB", 36.6, 37.0),
        (100_000_000, "100 MB", 1216, 1708),
    ):
        out.append(
            (
                dz,
                f"write a whole {name} file, elastic",
                elastic,
                e_ms,
                per_item_ms(elastic, functools.partial(whole_file, 6, size), 10),
                "ms",
            )
        )
        out.append(
            (
                dz,
                f"write a whole {name} file, bursting",
                today,
                b_ms,
                per_item_ms(today, functools.partial(whole_file, 7, size), 10),
                "ms",
            )
        )
    return out


def table(found: list[tuple[str, str, str, float, float, str]]) -> str:
    lines = ["| source | workload | profile | measured | model | diff |", "|---|---|---|---|---|---|"]
    for source, what, profile, measured, model, unit in found:
        diff = model / measured - 1
        lines.append(
            f"| {source} | {what} | `{profile}` | {measured:,.1f} {unit} | {model:,.1f} {unit} | {diff:+.0%} |"
        )
    within = sum(abs(m / w - 1) <= 0.15 for _, _, _, w, m, _ in found)
    lines.append("")
    lines.append(f"{within} of {len(found)} within 15% (bench/crosscheck.py, virtual time).")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=Path, default=ROOT / "docs" / "EMULATOR.md")
    args = parser.parse_args()
    text = table(rows())
    print(text)
    doc = args.docs.read_text()
    head, _, rest = doc.partition(MARK)
    _, _, tail = rest.partition(MARK)
    if rest:
        args.docs.write_text(f"{head}{MARK}\n{text}\n{MARK}{tail}")


if __name__ == "__main__":
    main()
