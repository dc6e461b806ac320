"""A FUSE operation is added in one place: a handler on Operations (or a mixin of it), named in HANDLED.

HANDLED is what wraps the handler (pipeline.guarded) and what the emulated NFS client
and the trace must know; these tests fail when a handler is added without it, or when
a handler answers without going through the request pipeline (whose trace stage is the
only writer of records)."""

import inspect
import os
import stat
from types import SimpleNamespace

import pyarrow.parquet as pq
import pyfuse3
import trio
from pyfuse3 import FUSEError

from fusetrace.emulator.nfsclient import VFS_OPS
from fusetrace.server.handlers import HANDLED, Operations
from fusetrace.server.inline import InlinePolicy
from fusetrace.server.inodes import ROOT
from fusetrace.server.workers import Workers
from fusetrace.trace.writer import TraceWriter


class Caller:
    pid = os.getpid()
    uid = os.getuid()
    gid = os.getgid()


CTX = Caller()


def test_every_fuse_operation_the_surface_implements_is_registered():
    fuse_ops = {
        name for name, _ in inspect.getmembers(pyfuse3.Operations, inspect.isfunction) if not name.startswith("_")
    } | {name for name in vars(pyfuse3.Operations) if not name.startswith("_")}
    # handlers live on Operations and on the mixins it inherits (namespace.py, files.py):
    # each is found where it is defined, before HANDLED's wrappers set on Operations hide it
    implemented = {
        name
        for cls in Operations.__mro__
        if cls not in inspect.getmro(pyfuse3.Operations)
        for name, member in vars(cls).items()
        if name in fuse_ops and inspect.iscoroutinefunction(member)
    }
    assert implemented == set(HANDLED), "a handler on Operations must be named in HANDLED (and the reverse)"
    assert set(HANDLED) <= VFS_OPS, "the emulated NFS client (emulator/nfsclient.py) must know every operation"
    for name in HANDLED:
        assert hasattr(getattr(Operations, name), "__wrapped__"), f"{name} is not wrapped by pipeline.guarded"


def test_every_handler_but_forget_is_traced_through_the_pipeline(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    (source / "dir").mkdir()
    trace = tmp_path / "trace"

    async def drive(ops: Operations) -> None:
        d = await ops.lookup(ROOT, b"dir", CTX)
        await ops.getattr(d.st_ino, CTX)
        info, f = await ops.create(d.st_ino, b"f", 0o644, os.O_RDWR, CTX)
        await ops.write(info.fh, 0, b"data")
        await ops.read(info.fh, 0, 4)
        await ops.fsync(info.fh, False)
        await ops.flush(info.fh)
        await ops.release(info.fh)
        attr = pyfuse3.EntryAttributes()
        attr.st_mode = stat.S_IFREG | 0o600
        fields = SimpleNamespace(
            update_size=False,
            update_mode=True,
            update_uid=False,
            update_gid=False,
            update_atime=False,
            update_mtime=False,
            update_ctime=False,
        )
        await ops.setattr(f.st_ino, attr, fields, None, CTX)
        opened = await ops.open(f.st_ino, os.O_RDONLY, CTX)
        await ops.release(opened.fh)
        link = await ops.symlink(d.st_ino, b"s", b"f", CTX)
        await ops.readlink(link.st_ino, CTX)
        await ops.mknod(d.st_ino, b"p", stat.S_IFIFO | 0o644, 0, CTX)
        await ops.mkdir(d.st_ino, b"sub", 0o755, CTX)
        await ops.link(f.st_ino, d.st_ino, b"g", CTX)
        await ops.rename(d.st_ino, b"g", d.st_ino, b"h", 0, CTX)
        await ops.unlink(d.st_ino, b"h", CTX)
        await ops.rmdir(d.st_ino, b"sub", CTX)
        fh = await ops.opendir(d.st_ino, CTX)
        token = object()
        try:
            await ops.readdir(fh, 0, token)
        except (FUSEError, TypeError):
            pass  # the token is no kernel's: the reply cannot be sent, but the request was made
        await ops.fsyncdir(fh, False)
        await ops.releasedir(fh)
        await ops.statfs(CTX)
        await ops.access(f.st_ino, os.R_OK, CTX)
        for call in (
            ops.setxattr(f.st_ino, b"user.k", b"v", CTX),
            ops.getxattr(f.st_ino, b"user.k", CTX),
            ops.listxattr(f.st_ino, CTX),
            ops.removexattr(f.st_ino, b"user.k", CTX),
        ):
            try:
                await call
            except FUSEError:
                pass  # a source without extended attributes answers, traced all the same

    async def main() -> None:
        workers = Workers(2)
        tracer = TraceWriter(trace, {}, flush_interval=3600)
        ops = Operations(str(source), workers=workers, inline=InlinePolicy(50.0), tracer=tracer)
        try:
            await drive(ops)
        finally:
            ops.close()
            workers.close()
            tracer.close()

    trio.run(main)
    traced = set(pq.read_table(trace, columns=["op"]).column("op").to_pylist())
    assert traced == set(HANDLED) - {"forget"}  # forget has no reply, and no record
