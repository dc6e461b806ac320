"""Private directories and files: no-follow, owner-checked, writable by nobody else.

The run state, the control socket and the trace directory all live in directories
that must be ours alone, so that no other user can plant a symlink or a file there
for us to follow or trust.  Everything is checked through a descriptor, never by
name afterwards.
"""

import errno
import os
import stat

from .errors import UserError


class NotPrivate(UserError):
    """A directory or file that another user could have planted or may change."""


def open_private_dir(path: str, create: bool = True, owner: int | None = None) -> int:
    """A descriptor of directory `path`, made (mode 0700) when `create` and it is missing.

    Raises NotPrivate (the reason, no path) when it is a symlink or no directory,
    belongs to another user than `owner` (default: this one; root reads another user's
    run state), or group or others may write in it, and OSError when it
    cannot be made or opened (FileNotFoundError when missing and not `create`).
    Opened with O_NOFOLLOW and checked through the descriptor, so what is checked is
    what the caller then works in, whatever happens to the path afterwards."""
    if create:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except NotADirectoryError:  # O_NOFOLLOW on a symlink says ENOTDIR too
        if stat.S_ISLNK(os.lstat(path).st_mode):
            raise NotPrivate("is a symbolic link; refusing to follow it") from None
        raise NotPrivate("exists and is not a directory") from None
    try:
        st = os.fstat(fd)
        if os.fstatvfs(fd).f_flag & os.ST_RDONLY:
            raise OSError(errno.EROFS, "Read-only file system")  # EROFS: said before the checks below
        if st.st_uid != (os.geteuid() if owner is None else owner):
            raise NotPrivate(
                f"belongs to {_owner(st.st_uid)}, not to {'you' if owner is None else 'its user'} "
                f"(uid {os.geteuid() if owner is None else owner}); refusing to use a directory another user controls"
            )
        if st.st_mode & 0o022:
            who = " and ".join(w for w, bit in (("group", 0o020), ("others", 0o002)) if st.st_mode & bit)
            raise NotPrivate(
                f"is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o}); "
                f"make it private (chmod 700) or give another directory"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_own_file(fd: int, name: str, owner: int | None = None) -> None:
    """Refuse (NotPrivate) an opened file that is not a regular file of ours (of `owner`'s)."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise NotPrivate(f"{name}: not a regular file")
    if st.st_uid != (os.geteuid() if owner is None else owner):
        raise NotPrivate(f"{name}: belongs to {_owner(st.st_uid)}, not to you (uid {os.geteuid()})")


def open_own_log(path: str, shown: str, dir_fd: int | None = None) -> int:
    """A log opened for appending, made (mode 0600) when missing: never through a
    symbolic link at `path` (O_NOFOLLOW), never hanging on a FIFO (O_NONBLOCK), and
    refused unless it is then a regular file of ours with no other name (a hard link
    someone made to a file of ours elsewhere).  Every refusal is one UserError naming
    `shown`, so nothing is written into a file another user chose or planted.  Given no
    `dir_fd`, the path's directories are reached through no symbolic link another user
    owns (_trusted_parent)."""
    parent = None
    if dir_fd is None:
        dir_fd = parent = _trusted_parent(path, shown)
        path = os.path.basename(path)
    try:
        fd = os.open(
            path,
            os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
            0o600,
            dir_fd=dir_fd,
        )
    except OSError as exc:
        why = "not a regular file" if exc.errno == errno.ENXIO else (exc.strerror or str(exc)).lower()
        # (a link answers ELOOP, or EACCES in another user's sticky directory)
        if exc.errno in (errno.ELOOP, errno.EACCES) and _is_link(path, dir_fd):
            why = "is a symbolic link; refusing to follow it"
        raise UserError(f"{shown}: {why}") from None
    finally:
        if parent is not None:
            os.close(parent)
    try:
        check_own_file(fd, shown)
        links = os.fstat(fd).st_nlink
        if links > 1:
            raise NotPrivate(
                f"{shown}: has {links} names (hard links); refusing to write into a file that is also elsewhere"
            )
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str, most: int) -> bytes:
    """The bytes of the regular file at `path`; ValueError ("not a regular file", "over
    `most` bytes": words to follow its name) for anything else or anything larger, and
    OSError when it cannot be opened or read.  Opened without blocking: a FIFO given or
    planted there would otherwise hold the reader for good."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        data = f.read(most + 1) if st.st_size <= most else b""
    if st.st_size > most or len(data) > most:
        raise ValueError(f"over {most:,} bytes")
    return data


def _trusted_parent(path: str, shown: str) -> int:
    """An O_PATH descriptor of the directory holding `path`, walked to one component at a
    time from / (or the working directory), following a symbolic link only if root or
    this user owns it: a link another user planted in a world-writable directory on the
    way (/tmp/ww/d -> /etc) would otherwise lead a root server's log into /etc/passwd.
    A link is checked by its lstat, then followed, then checked again to be the same
    link; one swapped in between is refused."""
    head = os.path.dirname(path) or "."
    fd = os.open("/" if head.startswith("/") else ".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    walked = "/" if head.startswith("/") else ""
    try:
        for part in (p for p in head.split("/") if p and p != "."):
            walked = os.path.join(walked, part)
            try:
                try:
                    nfd = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    link = os.stat(part, dir_fd=fd, follow_symlinks=False)
                    if not stat.S_ISLNK(link.st_mode):
                        raise
                    if link.st_uid not in (0, os.geteuid()):
                        raise UserError(
                            f"{shown}: {walked} is a symbolic link of {_owner(link.st_uid)}; refusing "
                            f"to follow it (give the path it leads to, if that is meant)"
                        ) from None
                    nfd = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
                    again = os.stat(part, dir_fd=fd, follow_symlinks=False)
                    if (again.st_dev, again.st_ino) != (link.st_dev, link.st_ino):
                        os.close(nfd)
                        raise UserError(f"{shown}: {walked} changed while it was followed; refusing it") from None
            except OSError as exc:
                raise UserError(f"{shown}: {walked}: {(exc.strerror or str(exc)).lower()}") from None
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def _is_link(path: str, dir_fd: int | None) -> bool:
    try:
        return stat.S_ISLNK(os.stat(path, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _owner(uid: int) -> str:
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (KeyError, ImportError):
        return f"uid {uid}"
