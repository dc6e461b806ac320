"""The request path in process (no mount): handlers over a real source directory, a
real shaper and model, the real timer, worker threads and trace writer.  Each request
is admitted, placed (loop or worker), held and traced; namespace changes name the
directory they change."""

import errno
import os
import stat
import threading
import time

import pytest
import trio
from pyfuse3 import FUSEError
from support.inprocess import CTX, serve

from fusetrace.request import Kind, Request, WriteMode
from fusetrace.server import syscalls
from fusetrace.server.handlers import Operations
from fusetrace.server.inline import InlinePolicy
from fusetrace.server.inodes import ROOT
from fusetrace.server.pipeline import IN_WORKER
from fusetrace.server.workers import Workers


def test_every_namespace_change_names_its_directory(tmp_path):
    ids = {}

    async def body(ops):
        d = await ops.mkdir(ROOT, b"d", stat.S_IFDIR | 0o755, CTX)
        e = await ops.mkdir(ROOT, b"e", stat.S_IFDIR | 0o755, CTX)
        info, f = await ops.create(d.st_ino, b"f", 0o644, os.O_WRONLY, CTX)
        await ops.mknod(d.st_ino, b"p", stat.S_IFIFO | 0o644, 0, CTX)
        await ops.symlink(d.st_ino, b"s", b"f", CTX)
        await ops.link(f.st_ino, e.st_ino, b"g", CTX)
        await ops.rename(d.st_ino, b"p", e.st_ino, b"q", 0, CTX)
        await ops.unlink(e.st_ino, b"q", CTX)
        await ops.release(info.fh)
        await ops.mkdir(e.st_ino, b"x", stat.S_IFDIR | 0o755, CTX)
        await ops.rmdir(e.st_ino, b"x", CTX)
        ids.update(d=d.st_ino, e=e.st_ino, f=f.st_ino)

    requests, rows = serve(tmp_path, body)
    changes = [(r.op, r.file, r.directory) for r in requests if r.kind is Kind.META_WRITE]
    d, e, f = ids["d"], ids["e"], ids["f"]
    assert changes == [
        ("mkdir", 0, ROOT),
        ("mkdir", 0, ROOT),
        ("create", 0, d),
        ("mknod", 0, d),
        ("symlink", 0, d),
        ("link", f, e),  # the new parent's slot, not the file's
        ("rename", 0, d),
        ("unlink", 0, e),
        ("mkdir", 0, e),
        ("rmdir", 0, e),
    ]
    # the trace names them as before: the linked file, and the entry's old and new paths
    link = next(r for r in rows if r["op"] == "link")
    assert (link["inode"], link["path"], link["path2"]) == (f, "/d/f", "/e/g")
    rename = next(r for r in rows if r["op"] == "rename")
    assert (rename["inode"], rename["path"], rename["path2"]) == (d, "/d/p", "/e/q")
    assert (tmp_path / "src" / "e" / "g").exists() and not (tmp_path / "src" / "e" / "q").exists()


def test_a_request_is_admitted_placed_held_and_traced(tmp_path):
    found = {}

    async def body(ops):
        info, f = await ops.create(ROOT, b"f", 0o644, os.O_RDWR, CTX)
        found["f"], found["fh"] = f.st_ino, info.fh
        assert await ops.write(info.fh, 0, b"x" * 4096) == 4096
        assert await ops.read(info.fh, 1024, 2048) == b"x" * 2048
        await ops.fsync(info.fh, False)
        await ops.release(info.fh)
        with pytest.raises(FUSEError) as missing:
            await ops.lookup(ROOT, b"missing", CTX)
        assert missing.value.errno == errno.ENOENT

    requests, rows = serve(tmp_path, body)
    f, fh = found["f"], found["fh"]
    assert [(r.op, r.kind, r.file, r.size, r.write_mode) for r in requests] == [
        ("create", Kind.META_WRITE, 0, 0, None),
        ("write", Kind.WRITE, f, 4096, WriteMode.BUFFERED),
        ("read", Kind.READ, f, 2048, None),
        ("fsync", Kind.COMMIT, f, 0, None),  # written since the last commit
        ("release", Kind.NONE, f, 0, None),  # nothing written since: never shaped
        ("lookup", Kind.META_READ, ROOT, 0, None),
    ]
    assert [r["op"] for r in rows] == ["create", "write", "read", "fsync", "release", "lookup"]
    by_op = {r["op"]: r for r in rows}
    assert {k: by_op["write"][k] for k in ("inode", "path", "fh", "offset", "size", "result", "errno")} == {
        "inode": f,
        "path": "/f",
        "fh": fh,
        "offset": 0,
        "size": 4096,
        "result": 4096,
        "errno": 0,
    }
    assert (by_op["read"]["offset"], by_op["read"]["size"], by_op["read"]["result"]) == (1024, 2048, 2048)
    assert (by_op["lookup"]["path"], by_op["lookup"]["errno"], by_op["lookup"]["result"]) == (
        "/missing",
        errno.ENOENT,
        0,
    )
    assert by_op["release"]["shaped_ns"] == 0
    assert all(r["pid"] == os.getpid() and r["uid"] == os.getuid() for r in rows)
    assert all(r["dur_ns"] >= r["shaped_ns"] >= 0 for r in rows)


def test_calibration_samples_come_from_the_handlers_and_nothing_is_shaped(tmp_path):
    seen = {}

    async def body(ops):
        with ops.shaper.calibration() as samples:
            for _ in range(3):
                await ops.statfs(CTX)
            seen["samples"] = list(samples)
        seen["ops"] = ops.shaper.ops
        await ops.statfs(CTX)
        seen["after"] = ops.shaper.ops

    _, rows = serve(tmp_path, body)
    assert len(seen["samples"]) == 3 and all(ns > 0 for ns in seen["samples"])
    assert (seen["ops"], seen["after"]) == (0, 1)
    assert [r["shaped_ns"] for r in rows[:3]] == [0, 0, 0]


@pytest.mark.parametrize("threshold_us", [50.0, 0.0])
def test_placement_on_the_loop_or_in_a_worker(tmp_path, threshold_us):
    """A quick metadata call runs on the loop's own thread while the inline policy lets
    it (never with a zero threshold); a commit always goes to a worker."""
    seen = {}

    async def body(ops):
        loop = threading.get_ident()
        getattr_req = Request("getattr", Kind.META_READ, ROOT)
        seen["getattr"] = await ops.pipeline.place(getattr_req, threading.get_ident, ()) == (loop, 0)
        seen["commit"] = await ops.pipeline.place(Request("fsync", Kind.COMMIT, ROOT), threading.get_ident, ()) == (
            loop,
            0,
        )
        seen["error"] = await ops.pipeline.place(getattr_req, os.stat, ("/no/such/path",))
        root = ops.inodes.get(ROOT)
        out, err = await ops.pipeline.place(getattr_req, os.fstat, (root,))  # an Inode reaches fn as its descriptor
        seen["inode"] = (err, out.st_ino)

    serve(tmp_path, body, threshold_us=threshold_us)
    assert seen["getattr"] is (threshold_us > 0)
    assert seen["commit"] is False
    assert seen["error"] == (None, errno.ENOENT)
    assert seen["inode"] == (0, os.stat(tmp_path / "src").st_ino)


@pytest.mark.parametrize("threshold_us", [10_000.0, 0.0])
def test_a_plain_write_is_placed_and_keeps_its_errno(tmp_path, threshold_us):
    """Neither shaped nor traced, a write is described to nobody (it passes no Request
    through _call) but still placed: on the loop while the inline policy lets it (and
    timed for it), else in a worker, and an O_SYNC write always in a worker; the file's
    size follows it, and a write the source refuses answers the source's errno.  (A
    threshold of 10 ms: a loaded host cannot make the first write slow enough to move
    buffered writes to the workers.)"""
    source = tmp_path / "src"
    source.mkdir()
    seen: dict = {"described": [], "in_workers": 0}

    async def main():
        workers = Workers(2)
        ops = Operations(str(source), workers=workers, inline=InlinePolicy(threshold_us))
        call, run = ops.pipeline.call, workers.run

        async def described(req, *args, **kwargs):
            seen["described"].append(req.op)
            return await call(req, *args, **kwargs)

        async def in_worker(fn, *args):
            seen["in_workers"] += fn is os.pwrite
            return await run(fn, *args)

        ops.pipeline.call, workers.run = described, in_worker
        try:
            info, f = await ops.create(ROOT, b"f", 0o644, os.O_RDWR, CTX)
            seen["written"] = await ops.write(info.fh, 8192, b"y" * 100)
            seen["size"] = ops.inodes.get(f.st_ino).size
            await ops.release(info.fh)
            ro = await ops.open(f.st_ino, os.O_RDONLY, CTX)
            with pytest.raises(FUSEError) as refused:
                await ops.write(ro.fh, 0, b"z")
            seen["errno"] = refused.value.errno
            await ops.release(ro.fh)
            synced = await ops.open(f.st_ino, os.O_WRONLY | os.O_SYNC, CTX)
            seen["workers_before_sync"] = seen["in_workers"]
            await ops.write(synced.fh, 0, b"s")
            await ops.release(synced.fh)
            seen["where"] = ops.pipeline.inline.describe()
        finally:
            ops.close()
            workers.close()

    trio.run(main)
    assert "write" not in seen["described"] and "create" in seen["described"]
    assert (seen["written"], seen["size"], seen["errno"]) == (100, 8192 + 100, errno.EBADF)
    assert (source / "f").read_bytes() == b"s" + bytes(8191) + b"y" * 100
    assert ("write/buffered" in seen["where"]["loop"]) is (threshold_us > 0)
    # the O_SYNC write went to a worker, however quick writes are
    assert seen["in_workers"] == seen["workers_before_sync"] + 1
    assert "write/sync" not in seen["where"]["loop"] + seen["where"]["workers"]


def test_a_calm_operation_s_slow_call_still_moves_it_to_the_workers(tmp_path):
    """_timed asks the policy nothing for a quick call of a calm key, but a slow one
    still reaches it: one call over twenty thresholds sends the key to the workers."""
    workers = Workers(1)
    ops = Operations(str(tmp_path), workers=workers, inline=InlinePolicy(5_000.0))
    key = ("getattr", Kind.META_READ)
    try:
        assert ops.pipeline.timed(key, 0, abs, (-1,)) == 1  # quick: the key is calm from now on
        assert key in ops.pipeline.inline.calm
        ops.pipeline.timed(key, 0, time.sleep, (0.12,))  # a call that takes 120 ms, over 20 x 5 ms
        assert key not in ops.pipeline.inline.calm
        assert ops.pipeline.timed(key, 0, abs, (-1,)) is IN_WORKER
    finally:
        ops.close()
        workers.close()


def test_stats_are_read_through_the_operations(tmp_path):
    seen = {}

    async def body(ops):
        info, _ = await ops.create(ROOT, b"f", 0o644, os.O_WRONLY, CTX)
        seen["open"] = ops.stats()
        await ops.release(info.fh)
        seen["closed"] = ops.stats()

    serve(tmp_path, body)
    assert seen["open"]["inodes"] == 2 and seen["open"]["open_files"] == 1
    assert seen["open"]["inode_fds"]["held"] == 1 and seen["open"]["inode_fds"]["reopened"] == 0
    assert set(seen["open"]["inline"]) == {"threshold_us", "loop", "workers"}
    assert seen["closed"]["open_files"] == 0


def _closed(ops, node) -> None:
    """Close node's descriptor as the table's trim does (its file handle kept)."""
    node.handle = syscalls.name_to_handle(node.fd)[0]
    ops.inodes._close(node)


@pytest.mark.parametrize("forgotten", [False, True])
def test_a_closed_descriptor_is_reopened_for_the_call(tmp_path, forgotten):
    """An inode whose descriptor was closed (the table's limit) is opened again by its
    file handle before the call runs on it; one the kernel forgot while that reopen was
    in flight is not kept, and the call answers ESTALE (the kernel looks the name up
    again) rather than run on no descriptor."""
    seen = {}
    (tmp_path / "src").mkdir(exist_ok=True)
    (tmp_path / "src" / "f").write_bytes(b"x")

    async def body(ops):
        entry = await ops.lookup(ROOT, b"f", CTX)
        node = ops.inodes.get(entry.st_ino)
        _closed(ops, node)
        if forgotten:
            node.nlookup = 0  # as forget() leaves a node still in use
        seen["out"] = await ops.pipeline.place(Request("getattr", Kind.META_READ, node.id), os.fstat, (node,))
        seen["fd"] = node.fd

    serve(tmp_path, body)
    out, err = seen["out"]
    if forgotten:
        assert (out, err, seen["fd"]) == (None, errno.ESTALE, -1)
    else:
        assert err == 0 and out.st_ino == os.stat(tmp_path / "src" / "f").st_ino and seen["fd"] >= 0


@pytest.mark.parametrize("closed", ["first", "second"])
@pytest.mark.parametrize("op", ["rename", "link"])
def test_every_inode_of_a_call_is_reopened(tmp_path, op, closed):
    """rename and link name two inodes; either may have had its descriptor closed."""
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "b").mkdir()
    (src / "a" / "x").write_bytes(b"x")
    seen = {}

    async def body(ops):
        a = ops.inodes.get((await ops.lookup(ROOT, b"a", CTX)).st_ino)
        b = ops.inodes.get((await ops.lookup(ROOT, b"b", CTX)).st_ino)
        x = ops.inodes.get((await ops.lookup(a.id, b"x", CTX)).st_ino)
        first = a if op == "rename" else x
        _closed(ops, first if closed == "first" else b)
        if op == "rename":
            await ops.rename(a.id, b"x", b.id, b"y", 0, CTX)
        else:
            await ops.link(x.id, b.id, b"y", CTX)
        seen["done"] = True

    serve(tmp_path, body)
    assert seen == {"done": True}
    assert (src / "b" / "y").read_bytes() == b"x"


def test_an_inode_in_use_on_the_loop_is_the_last_closed(tmp_path):
    """Calls that run on the loop mark their inodes as used, so a file in constant use
    (the kernel's entry cache sends no lookups for it) keeps its descriptor while new
    names push the table past its limit."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(20):
        (src / f"f{i:02d}").write_bytes(b"x")
    seen = {}

    async def body(ops):
        ops.inodes.max_open = 16
        hot = ops.inodes.get((await ops.lookup(ROOT, b"f00", CTX)).st_ino)
        for i in range(1, 16):
            await ops.lookup(ROOT, f"f{i:02d}".encode(), CTX)
        for _ in range(5):
            await ops.getattr(hot.id, CTX)
        for i in range(16, 20):
            await ops.lookup(ROOT, f"f{i:02d}".encode(), CTX)
        seen["reopened_before"] = ops.inodes.reopened
        await ops.getattr(hot.id, CTX)
        seen["hot_fd"], seen["reopened"] = hot.fd, ops.inodes.reopened - seen.pop("reopened_before")

    serve(tmp_path, body, threshold_us=100_000)
    assert seen["hot_fd"] >= 0 and seen["reopened"] == 0, seen
