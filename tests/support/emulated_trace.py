"""An emulated mount's trace, in virtual time: a workload's records rebuilt into the requests
the mount's handlers make (fusetrace/rehearse/requests.py), each admitted by the emulated
NFS client over the model of a profile when the one before it is done (one application,
one thing at a time), and written with the model's account (`nfs`, `latency_ns`,
`wait_ns`, `transfer_ns`, `gate`) as the shaper writes it.  What a real emulated mount
adds (the host's delays in `dur_ns`) is left out: the fit does not read it.

The workload exercises every RPC the client sends, each `cycles` times, a cycle five
minutes after the one before, in three parts, so that every cache the client keeps has
expired (a GETATTR, ACCESS and READDIRPLUS each time): per file, an access of its
directory (ACCESS), a LOOKUP of its name and its create (OPEN(create)); an O_SYNC write
and fsync (WRITE(FILE_SYNC)), 4 KiB written back and fsync (WRITE(FILE_SYNC), waiting
for it), 2 MiB written back and fsync (COMMIT), an O_DIRECT write (WRITE), of sizes 4
KiB to 1 MiB; close (CLOSE); a getattr (GETATTR), open, read (READ) and close; a
truncate (SETATTR), rename, link and two unlinks (RENAME, LINK, REMOVE); an opendir and
readdir (ACCESS, GETATTR, READDIRPLUS) and a statfs (STATFS).
"""

import dataclasses
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from fusetrace.emulator.model import Model
from fusetrace.emulator.nfsclient import NfsClient
from fusetrace.emulator.params import MiB, Params
from fusetrace.rehearse.requests import Rebuilder
from fusetrace.trace.schema import TraceRecord
from fusetrace.trace.writer import TraceWriter

GAP_NS = 50_000  # between one operation's reply and the next call
CYCLE_NS = 300 * 10**9  # a cycle in three parts, each longer than the client trusts a cache (acregmax, acdirmax: 60 s)
DIR, DIR_PATH = 2, "/d"
_FILE, _DIRMODE = stat.S_IFREG | 0o644, stat.S_IFDIR | 0o755
_SIZES = (4096, 65536, 1 << 20)


def _cycle(i: int) -> Iterator[dict]:
    """One cycle's records, as dicts of the columns requests.COLUMNS reads (and `result`)."""
    f, name, fh = 1000 + i, f"{DIR_PATH}/f{i}", 10_000 + 10 * i
    size = _SIZES[i % len(_SIZES)]
    wr = os.O_WRONLY | os.O_CREAT
    yield dict(op="access", inode=DIR, path=DIR_PATH, mode=_DIRMODE, kind="meta_read")
    yield dict(op="lookup", inode=DIR, path=name, errno=2, kind="meta_read")
    yield dict(op="create", inode=DIR, path=name, fh=fh, flags=wr, mode=_FILE, entry=f, kind="meta_write")
    yield dict(op="write", inode=f, path=name, fh=fh, size=4096, kind="sync")
    yield dict(op="fsync", inode=f, path=name, fh=fh, kind="commit")
    yield dict(op="write", inode=f, path=name, fh=fh, size=4096, offset=4096, kind="buffered")
    yield dict(op="fsync", inode=f, path=name, fh=fh, kind="commit")
    for at in range(0, 2 * MiB, MiB):
        yield dict(op="write", inode=f, path=name, fh=fh, size=MiB, offset=at, kind="buffered")
    yield dict(op="fsync", inode=f, path=name, fh=fh, kind="commit")
    yield dict(op="write", inode=f, path=name, fh=fh, size=size, offset=4 * MiB, kind="direct")
    yield dict(op="flush", inode=f, path=name, fh=fh, kind="commit")
    yield dict(op="release", inode=f, path=name, fh=fh, kind="none")
    yield dict(op="getattr", inode=f, path=name, mode=_FILE, kind="meta_read", at=CYCLE_NS // 3)
    yield dict(op="open", inode=f, path=name, fh=fh + 1, flags=os.O_RDONLY, kind="meta_read")
    yield dict(op="read", inode=f, path=name, fh=fh + 1, size=size, kind="read")
    yield dict(op="flush", inode=f, path=name, fh=fh + 1, kind="none")
    yield dict(op="release", inode=f, path=name, fh=fh + 1, kind="none")
    yield dict(op="setattr", inode=f, path=name, mode=_FILE, kind="meta_write")
    moved, linked = f"{DIR_PATH}/g{i}", f"{DIR_PATH}/h{i}"
    yield dict(op="rename", inode=DIR, path=name, path2=moved, kind="meta_write")
    yield dict(op="link", inode=f, path=moved, path2=linked, mode=_FILE, entry=f, kind="meta_write")
    yield dict(op="unlink", inode=DIR, path=linked, kind="meta_write")
    yield dict(op="unlink", inode=DIR, path=moved, kind="meta_write")
    yield dict(op="opendir", inode=DIR, path=DIR_PATH, fh=fh + 2, kind="meta_read", at=CYCLE_NS // 3)
    yield dict(op="readdir", inode=DIR, path=DIR_PATH, fh=fh + 2, size=10, kind="meta_read")
    yield dict(op="releasedir", inode=DIR, path=DIR_PATH, fh=fh + 2, kind="none")
    yield dict(op="statfs", inode=1, path="/", kind="meta_read")


def record(
    directory: Path, params: Params, cycles: int, profile: str = "", metadata: dict | None = None, nfs: bool = True
) -> None:
    """Write the workload's trace, as a mount emulating `params` (named `profile`) would,
    into `directory`; without `nfs`, as a trace-only mount over that file system would (no
    emulation in its metadata, no model's account; `dur_ns` is what the caller saw less
    one FUSE round trip, `fuse_round_trip_ns` in `metadata`)."""
    meta = dict(metadata or {})
    if nfs:
        meta["emulation"] = {"profile": profile, "params": dataclasses.asdict(params)}
    rt = int(meta.get("fuse_round_trip_ns", 0))
    client = NfsClient(Model(params, 0.0))
    rebuilder = Rebuilder()
    t = 1
    mkdir = dict(op="mkdir", inode=1, path=DIR_PATH, mode=_DIRMODE, entry=DIR, kind="meta_write")
    with TraceWriter(directory, meta) as w:
        for i, r in [(0, mkdir), *((n, r) for n in range(cycles) for r in _cycle(n))]:
            t = max(t, i * CYCLE_NS + 1) + r.pop("at", 0)
            fh, offset, size, err = (r.get(k, 0) for k in ("fh", "offset", "size", "errno"))
            flags, mode, entry = (r.get(k, 0) for k in ("flags", "mode", "entry"))
            where = (r["op"], r["inode"], r["path"], r.get("path2"), fh, offset, size)  # both take these first
            request = rebuilder.rebuild(*where, err, r["kind"], flags, mode, entry, None)
            assert request is not None, r
            a = client.admit(request.call(0), t / 1e9)
            dur = max(int(a.done_at * 1e9) - t, 1)
            account = (
                dict(gate=str(a.gate), wait_ns=int(a.wait * 1e9), latency_ns=int(a.latency * 1e9))
                | dict(transfer_ns=int(a.transfer * 1e9), nfs=a.rpcs, shaped_ns=dur)
                if nfs
                else dict(shaped_ns=0)
            )
            w.record(
                TraceRecord(
                    t,
                    dur if nfs else max(dur - rt, 1),
                    *where,
                    size,
                    err,
                    100,
                    0,
                    0,
                    kind=r["kind"],
                    flags=flags,
                    mode=mode,
                    entry=entry,
                    comm="app",
                    **account,
                )
            )
            t += dur + GAP_NS
