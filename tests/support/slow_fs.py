"""A FUSE file system of the tests' own, standing in for a slow network file system
below a fusetrace mount: one read-only file `f` of --size bytes, every read of which
takes --delay-ms (direct I/O, so every read reaches here; many wait at once, as a
network file system's do).  Lookups, attributes and opens answer at once.

    python tests/support/slow_fs.py MOUNTPOINT --delay-ms 20 --size 1048576   # fusermount3 -u to end it
"""

import argparse
import errno
import os
import stat

import pyfuse3
import trio

ROOT, FILE = pyfuse3.ROOT_INODE, pyfuse3.ROOT_INODE + 1


class SlowFS(pyfuse3.Operations):
    def __init__(self, size: int, delay_s: float):
        super().__init__()
        self.size, self.delay_s = size, delay_s
        self.data = bytes(range(256)) * (size // 256 + 1)

    async def getattr(self, inode, ctx=None):
        if inode not in (ROOT, FILE):
            raise pyfuse3.FUSEError(errno.ENOENT)
        a = pyfuse3.EntryAttributes()
        a.st_ino = inode
        a.st_mode = stat.S_IFDIR | 0o755 if inode == ROOT else stat.S_IFREG | 0o444
        a.st_nlink = 2 if inode == ROOT else 1
        a.st_size = 0 if inode == ROOT else self.size
        a.st_uid, a.st_gid = os.getuid(), os.getgid()
        a.st_blksize = 4096
        a.attr_timeout = a.entry_timeout = 60.0
        return a

    async def lookup(self, parent_inode, name, ctx=None):
        if parent_inode != ROOT or name != b"f":
            raise pyfuse3.FUSEError(errno.ENOENT)
        return await self.getattr(FILE)

    async def open(self, inode, flags, ctx):
        if inode != FILE:
            raise pyfuse3.FUSEError(errno.EISDIR)
        if flags & os.O_ACCMODE != os.O_RDONLY:
            raise pyfuse3.FUSEError(errno.EROFS)
        return pyfuse3.FileInfo(fh=FILE, direct_io=True)

    async def read(self, fh, off, size):
        await trio.sleep(self.delay_s)  # the network round trip
        return self.data[off : min(off + size, self.size)]

    async def statfs(self, ctx):
        out = pyfuse3.StatvfsData()
        out.f_bsize = out.f_frsize = 4096
        out.f_namemax = 255
        return out

    async def getxattr(self, inode, name, ctx):
        raise pyfuse3.FUSEError(errno.ENODATA)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("mountpoint")
    p.add_argument("--delay-ms", type=float, required=True)
    p.add_argument("--size", type=int, required=True)
    args = p.parse_args()
    pyfuse3.init(SlowFS(args.size, args.delay_ms / 1000.0), args.mountpoint, {"fsname=slow_fs", "ro"})
    try:
        trio.run(pyfuse3.main)
    finally:
        pyfuse3.close()


if __name__ == "__main__":
    main()
