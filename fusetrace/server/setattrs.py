"""A setattr request, made on the object's own descriptor and as the caller."""

import errno as E
import os
import stat

import pyfuse3

from . import syscalls
from .nofollow import Owner

# how far before (and after) the server's clock a setattr's two times may be and still
# mean "now" (see Change): the kernel's own clock, read before the request was queued
_NOW_BEHIND, _NOW_AHEAD = 10_000_000_000, 1_000_000_000


class Change:
    """A setattr request: size, mode, owner, times, in that order, then fresh attributes.

    Applied to the object's O_PATH descriptor (or the open file's own), never by a
    name, and as the caller (`owner`; None: as the server), so the source decides with
    the caller's own credentials what the kernel allowed on the attributes it holds,
    which may be older than the source's.  A symbolic link's size and mode cannot
    change (Linux has no lchmod), so those answer as the kernel would natively rather
    than reach the link's target."""

    def __init__(
        self, is_link: bool, fh: int | None, attr: pyfuse3.EntryAttributes, fields: pyfuse3.SetattrFields, now: int
    ) -> None:
        self.is_link, self.fh = is_link, fh
        self.size = attr.st_size if fields.update_size else None
        self.mode = stat.S_IMODE(attr.st_mode) if fields.update_mode else None
        self.uid = attr.st_uid if fields.update_uid else -1
        self.gid = attr.st_gid if fields.update_gid else -1
        self.atime = attr.st_atime_ns if fields.update_atime else None
        self.mtime = attr.st_mtime_ns if fields.update_mtime else None
        # pyfuse3 gives "now" (utimensat(UTIME_NOW), touch) as an explicit time, its
        # clock's when the request reached it: both times, and lately, may mean now
        self.touch = all(t is not None and -_NOW_AHEAD <= now - t <= _NOW_BEHIND for t in (self.atime, self.mtime))
        # for the trace: what it sets, in the order it sets them
        self.names = ",".join(
            n
            for n, on in (
                ("size", self.size is not None),
                ("mode", self.mode is not None),
                ("uid", self.uid != -1),
                ("gid", self.gid != -1),
                ("atime", self.atime is not None),
                ("mtime", self.mtime is not None),
            )
            if on
        )

    def hand_over(self, path_fd: int) -> os.stat_result:
        """apply() for the kernel's hand-over of a file's times: where the source refuses
        to take them (a server not the file's owner, a root-squashed NFS source), it keeps
        the times the write-back gave it, and the hand-over, which no call made, does not
        fail a later fsync or close."""
        try:
            return self.apply(path_fd, None)
        except PermissionError:
            return os.stat(path_fd)

    def apply(self, path_fd: int, owner: Owner) -> os.stat_result:
        """Make the change as `owner`, but for what the kernel itself does on a caller's
        behalf after its own checks, which natively needs no ownership: the times a
        truncation sets, and the clearing of set-user-ID and set-group-ID bits when
        someone else writes or truncates (see _kills_set_id)."""
        fh = self.fh
        if self.is_link and (self.size is not None or self.mode is not None):
            raise OSError(E.EINVAL if self.size is not None else E.EOPNOTSUPP, "not on a symbolic link")
        target = fh if fh is not None else f"/proc/self/fd/{path_fd}"
        # before the truncation, which as the caller clears them itself
        kills = self.mode is not None and owner is not None and self._kills_set_id(path_fd)
        if self.size is not None:
            with syscalls.credentials(owner):
                os.truncate(target, self.size)
        if self.mode is not None:
            with syscalls.credentials(None if kills else owner):
                os.chmod(target, self.mode)
        if self.uid != -1 or self.gid != -1:
            with syscalls.credentials(owner):
                syscalls.fchown_empty(path_fd, self.uid, self.gid)
        if self.atime is not None or self.mtime is not None:
            # a truncation's times are the kernel's now, for a truncation the source allowed
            self._times(path_fd, owner if self.size is None else None)
        return os.stat(path_fd)

    def _kills_set_id(self, path_fd: int) -> bool:
        """Whether the mode asked for is the source's but for set-user-ID and set-group-ID
        bits, cleared: the kernel's own, when someone not the owner writes or truncates
        (fs/fuse: fuse_setattr turns ATTR_KILL_SUID into a mode, with the writer's
        credentials and no check of its own), which natively needs no ownership.  It
        only ever takes privileges away."""
        assert self.mode is not None
        st = os.stat(path_fd)
        now = stat.S_IMODE(st.st_mode)
        cleared = now & ~self.mode
        return (
            stat.S_ISREG(st.st_mode)
            and self.mode & ~now == 0
            and cleared != 0
            and not cleared & ~(stat.S_ISUID | stat.S_ISGID)
        )

    def _times(self, path_fd: int, owner: Owner) -> None:
        # a link itself (AT_EMPTY_PATH here needs Linux 5.8); anything else by its magic link
        at = (
            (path_fd, b"", syscalls.AT_EMPTY_PATH | syscalls.AT_SYMLINK_NOFOLLOW)
            if self.is_link
            else (syscalls.AT_FDCWD, f"/proc/self/fd/{path_fd}".encode(), 0)
        )
        with syscalls.credentials(owner):
            try:
                syscalls.utimensat(at[0], at[1], self.atime, self.mtime, at[2])
            except PermissionError as exc:
                # explicit times need ownership; "now" needs only write permission
                if owner is None or exc.errno != E.EPERM or not self.touch:
                    raise
                syscalls.utimensat_now(*at)
