"""The least a pyfuse3 file system can be: a root directory holding one empty file `f`,
with no extended attributes.  `bench/roundtrip.py` times requests through it, to tell
what pyfuse3, trio and the kernel cost a request before any file system code runs.

    python bench/minimal_fs.py MOUNTPOINT [--read-at-once]   # foreground; fusermount3 -u to end it

`--read-at-once` adds the one thing of fusetrace's a server can do about pyfuse3's own cost:
a request already queued is read without a turn of trio's loop (fusetrace/server/fuseread.py).
"""

import errno
import stat
import sys

import pyfuse3
import trio

from fusetrace.server import fusectl, fuseread

ROOT, FILE = pyfuse3.ROOT_INODE, pyfuse3.ROOT_INODE + 1


class MinimalFS(pyfuse3.Operations):
    async def getattr(self, inode, ctx=None):
        if inode not in (ROOT, FILE):
            raise pyfuse3.FUSEError(errno.ENOENT)
        a = pyfuse3.EntryAttributes()
        a.st_ino = inode
        a.st_mode = stat.S_IFDIR | 0o755 if inode == ROOT else stat.S_IFREG | 0o644
        a.st_nlink = 2 if inode == ROOT else 1
        a.attr_timeout = a.entry_timeout = 1.0  # fusetrace's defaults
        return a

    async def lookup(self, parent_inode, name, ctx=None):
        if parent_inode != ROOT or name != b"f":
            raise pyfuse3.FUSEError(errno.ENOENT)
        return await self.getattr(FILE)

    async def getxattr(self, inode, name, ctx):
        raise pyfuse3.FUSEError(errno.ENODATA)


async def _serve(read_at_once: bool) -> None:
    if not read_at_once:
        await pyfuse3.main(4)  # fusetrace's number of idle reader tasks
        return
    with fuseread.unparked_when_queued(fusectl.session_fd()):
        await pyfuse3.main(4)


def main() -> None:
    options = set(pyfuse3.default_options)
    options.add("fsname=minimal_fs")
    pyfuse3.init(MinimalFS(), sys.argv[1], options)
    try:
        trio.run(_serve, "--read-at-once" in sys.argv[2:])
    finally:
        pyfuse3.close()


if __name__ == "__main__":
    main()
