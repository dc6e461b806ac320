"""The bpftrace program of a capture, written from the table of system calls (calls.py)
for one mount: its device as the kernel encodes it, its path and the directories above
it, and the process to leave out (the capture itself, which may write its trace on the
mount).

How records leave the kernel.  A printf per call costs the caller about 8 µs on this
machine (every perf-buffer event wakes the reader: an interprocessor interrupt, a VM exit
on a virtual machine), where keeping the record in a map costs it about 1 µs (bench/
capture.py).  So each record goes into one of SETS sets of hash maps, chosen by its exit
time in PERIOD_NS slots, and a timer asks bpftrace, GRACE_NS into each slot, to print
every set but the one being written and clear them, then to print a line that ends the
slot.  Printing and clearing are bpftrace's own, done later in its user half and in the
order asked; the slot's writers have finished by then (a record is written within
microseconds of its slot's choice), and a set is written again only SETS - 1 slots later,
so bpftrace may fall that far behind before a clear could meet new records.  The capture
reads bpftrace's output in a thread of its own, so that bpftrace never waits on it.  A
record the maps had no room for, one cleared unprinted, or one whose names were cleared
before they were printed, is still counted in `@n` by operation: the capture compares
those counts with the records it read, and a record without its names is not read.

Each entry keeps the system call's number, checked against the exit's: an entry whose
exit was not seen (the probes attached between the two) is dropped at the thread's next
exit, never taken for another call's.

Paths are compared without string functions (bpftrace's `strncmp` unrolls into more
states than the verifier takes): the mount's path, with a "/" or a NUL after it, is read
as 8-byte words from the caller's memory and compared under masks; so is a relative name
from a directory above the mount point (`rm efs/x` from /mnt).  Names are printed from
their own maps (STRLEN bytes each), so that no probe holds two on its 512-byte stack.
"""

from collections.abc import Callable
from typing import NamedTuple

from .calls import AT_FDCWD, FD_CALLS, NAMED_CALLS, OP_IDS, Fd, Named

PERIOD_NS = 100_000_000
SETS = 4
GRACE_NS = PERIOD_NS // 8  # the timer's wait into a slot before it prints the others
STRLEN = 200  # the longest name bpftrace 0.17 prints (BPFTRACE_STRLEN's limit)
MAP_KEYS = 32_768  # records of one slot (each map; 327,000 calls a second at PERIOD_NS)
READY = "fusetrace-capture-ready"
SLOT = "fusetrace-capture-slot"  # printed after a slot's maps: bpftrace prints no empty map
END = "fusetrace-capture-end"  # printed after the counts (no @n either when nothing was counted)
CWD = "cwd"  # printed with a pid and an inode: a program started there
ABOVE = 1 << 62  # a base "inode" that is the index of a directory above the mount point

_S_IFMT, _S_IFDIR = 0xF000, 0x4000
_O_CREAT, _O_DIRECTORY, _O_APPEND, _O_TMPFILE = 0o100, 0o200000, 0o2000, 0o20000000
_AT_REMOVEDIR = 0x200
# Every exit is read at one tracepoint, the one the per-call exits are made from: each
# body is then compiled and loaded once, not once per system call (bpftrace's start to
# ready, load 3: 19-22 s with 72 copies, 12 s with these), for a map lookup on every
# system call's exit.
_EXIT = "tracepoint:raw_syscalls:sys_exit"
# (maps per set: F records of calls on descriptors, P of named calls and their names)
_SET_MAPS = ("f", "p", "s", "t")


class Above(NamedTuple):
    """A directory above the mount point: its device (the kernel's encoding), its inode,
    and the rest of the mount point's path below it ("efs" for /mnt above /mnt/efs)."""

    dev: int
    ino: int
    rest: bytes


def program(dev: int, mountpoint: bytes, self_pid: int, above: tuple[Above, ...] = ()) -> str:
    """The program for the mount of device `dev` (the kernel's encoding: major << 20 |
    minor) at the absolute path `mountpoint`, leaving out the process `self_pid`; names
    relative to a directory of `above` that lead into the mount are matched too."""
    parts = [f'BEGIN {{ printf("{READY}\\n"); }}']
    parts += [_fd_enter(i, call, dev, self_pid) for i, call in enumerate(FD_CALLS)]
    parts += [_named_enter(i, call, self_pid) for i, call in enumerate(NAMED_CALLS)]
    parts += [_exit(_Match(dev, mountpoint, above)), _exec(dev, self_pid), _timer(), _end()]
    return "\n".join(parts) + "\n"


def _file(fd: str, var: str) -> str:
    """`var` := the open file behind descriptor `fd` of the current task, or 0."""
    return (
        f"$t = curtask->files->fdt; {var} = (struct file *)0; "
        f"if ((uint64)({fd}) < (uint64)$t->max_fds) {{ "
        f"{var} = *(struct file **)((uint64)$t->fd + (uint64)({fd}) * 8); }}"
    )


def _is_dir(mode: str) -> str:
    return f"(({mode}) & {_S_IFMT:#x}) == {_S_IFDIR:#x}"


def _in_set(writes: Callable[[int], str]) -> str:
    """Statements that run `writes(i)` for the set i of this slot (bpftrace names maps
    only by literals: one branch per set)."""
    out = [f"if ($set == {i}) {{ {writes(i)} }}" for i in range(SETS)]
    return f"$set = (nsecs / {PERIOD_NS}) % {SETS}; " + " else ".join(out)


def _fd_enter(index: int, call: Fd, dev: int, self_pid: int) -> str:
    op = OP_IDS[call.op]
    pick = f"$op = {op};"
    if call.op in ("flush", "fsync"):
        other = OP_IDS["releasedir" if call.op == "flush" else "fsyncdir"]
        pick += f" if ({_is_dir('$f->f_inode->i_mode')}) {{ $op = {other}; }}"
    size = "-1" if call.size is None else call.size
    return (
        f"tracepoint:syscalls:sys_enter_{call.name} /pid != {self_pid}/ {{\n"
        f"  {_file(call.fd, '$f')}\n"
        f"  if ($f != 0) {{ if ($f->f_inode->i_sb->s_dev == {dev}) {{\n"
        f"    {pick}\n"
        f"    @f[tid] = ((uint64)$op, nsecs, (uint64)$f, (int64)({call.offset}), (int64)({size}), "
        f"(uint64)$f->f_inode->i_ino, (uint64)$f->f_flags, (uint64)$f->f_inode->i_mode, (int64)({call.fd}), "
        f"(uint64){index}, (int64)args->__syscall_nr);\n"
        f"  }} }}\n}}"
    )


def _exit(match: "_Match") -> str:
    """The two programs every exit runs (a map lookup each for a call not followed): a
    call on a descriptor's record, and a named call's, matched as the module says.  (One
    program for both passes the 512-byte stack: a record of each kind and two names.)"""
    return (
        f"{_EXIT} /@f[tid].1/ {{\n"
        f"  $e = @f[tid]; delete(@f[tid]); if ($e.10 == args->id) {{\n{_fd_exit()}  }}\n}}\n"
        f"{_EXIT} /@p[tid].1/ {{\n"
        f"  $q = @p[tid]; delete(@p[tid]); if ($q.9 == args->id) {{\n{_named_exit(match)}  }}\n}}"
    )


def _fd_exit() -> str:
    # an O_APPEND write lands at the end of the file, wherever the position was
    offset = (
        f"$off = $e.3; if ($e.0 == {OP_IDS['write']} && ($e.6 & {_O_APPEND:#x}) && args->ret > 0) "
        f"{{ $off = (int64)((struct file *)$e.2)->f_inode->i_size - args->ret; }}"
    )
    fields = "$e.0, pid, uid, gid, nsecs - $e.1, args->ret, $e.2, $e.5, $e.7, $e.6, $off, $e.4, $e.8, $e.9"
    record = f"({fields}, comm, tid, $e.1)"
    store = _in_set(lambda i: f"@f{i}[tid, $e.1] = {record};")
    return f"    {offset}\n    @n[$e.0] = count();\n    {store}\n"


def _named_enter(index: int, call: Named, self_pid: int) -> str:
    op = OP_IDS[call.op]
    dirfd = call.dirfd or str(AT_FDCWD)
    dirfd2 = call.dirfd2 or str(AT_FDCWD)
    second = call.path2 or call.target or call.xname or "0"
    return (
        f"tracepoint:syscalls:sys_enter_{call.name} /pid != {self_pid}/ {{ "
        f"@p[tid] = ((uint64){op}, nsecs, (int64)(int32)({dirfd}), (uint64)({call.path}), (int64)(int32)({dirfd2}), "
        f"(uint64)({second}), (uint64)({call.x}), (uint64)({call.y}), (uint64){index}, (int64)args->__syscall_nr); }}"
    )


def _words(ptr: str, text: bytes) -> str:
    """Whether the caller's memory at `ptr` starts with `text`, read as 8-byte words."""
    tests = []
    for i in range(0, len(text), 8):
        chunk = text[i : i + 8]
        value = int.from_bytes(chunk.ljust(8, b"\0"), "little")
        mask = (1 << (8 * len(chunk))) - 1
        tests.append(f"((*(uint64 *)uptr({ptr} + {i})) & {mask:#x}) == {value:#x}")
    return " && ".join(tests)


def _starts(ptr: str, path: bytes) -> str:
    """Whether the name at `ptr` is `path` or below it."""
    if path == b"/":
        return _words(ptr, b"/")
    return f"({_words(ptr, path + b'/')}) || ({_words(ptr, path + bytes(1))})"


class _Match(NamedTuple):
    dev: int
    mountpoint: bytes
    above: tuple[Above, ...]

    def name(self, ptr: str, dirfd: str, base: str, file: str | None) -> str:
        """Sets $m when the name at `ptr` below `dirfd` is on the mount: an absolute path
        below the mount point, or a relative one (an empty one: the descriptor itself)
        from a directory on the mount, whose inode goes in `base` and whose open file in
        `file`, or from a directory above the mount point that leads into it (`base` is
        then ABOVE + the directory's index)."""
        keep = "" if file is None else f"{file} = (uint64)$g;"
        above = "".join(
            f"\n      if ($d->d_sb->s_dev == {a.dev} && $d->d_inode->i_ino == {a.ino}) "
            f"{{ if ({_starts(ptr, a.rest)}) {{ $m = 1; {base} = {ABOVE + i}; }} }}"
            for i, a in enumerate(self.above)
        )
        return (
            f"  if ({_starts(ptr, self.mountpoint)}) {{ $m = 1; }}\n"
            f"  else {{ if ((*(uint8 *)uptr({ptr})) != 0x2f) {{\n"
            f"    $d = curtask->fs->pwd.dentry;\n"
            f"    if ({dirfd} != {AT_FDCWD}) {{ {_file(dirfd, '$g')} $d = (struct dentry *)0; "
            f"if ($g != 0) {{ $d = $g->f_path.dentry; {keep} }} }}\n"
            f"    if ($d != 0) {{ if ($d->d_sb->s_dev == {self.dev}) {{ $m = 1; {base} = $d->d_inode->i_ino; }}"
            f" else {{{above} }} }}\n"
            f"  }} }}\n"
        )


def _named_exit(match: "_Match") -> str:
    """A named call's exit (its entry is $q): its first name, and the second where it is a
    path (rename, link).  An open that succeeded is matched by what it opened, and only
    the inode of the directory its name starts from is looked up; a name is printed only
    where the call has one (the record says which it has)."""
    opens = " || ".join(f"$op == {OP_IDS[op]}" for op in ("open", "create"))
    twos = " || ".join(f"$op == {OP_IDS[op]}" for op in sorted({c.op for c in NAMED_CALLS if c.path2}))
    base = (
        "    $d = curtask->fs->pwd.dentry;\n"
        f"    if ($q.2 != {AT_FDCWD}) {{ {_file('$q.2', '$g')} $d = (struct dentry *)0; "
        "if ($g != 0) { $d = $g->f_path.dentry; } }\n"
        "    if ($d != 0) { $b1 = $d->d_inode->i_ino; }\n"
    )
    body = "  $m = 0; $b1 = (uint64)0; $b2 = (uint64)0; $fp = (uint64)0;\n"
    body += "  $ino = (uint64)0; $mode = (uint64)0; $op = $q.0; $n2 = $q.5;\n"
    body += (
        f"  if (({opens}) && args->ret >= 0) {{ {_file('args->ret', '$o')}\n"
        f"    if ($o != 0) {{ if ($o->f_inode->i_sb->s_dev == {match.dev}) {{ $m = 1; $fp = (uint64)$o; "
        f"$ino = $o->f_inode->i_ino; $mode = $o->f_inode->i_mode;\n"
        # (and what it opened by name in its directory: the path when the caller's
        # starting directory is off the mount, `cat mnt/file` from its parent)
        f"      $w = $o->f_path.dentry; $b2 = $w->d_parent->d_inode->i_ino; $n2 = (uint64)$w->d_name.name;\n"
        f"{base}    }} }}\n"
        f"  }} else {{\n{match.name('$q.3', '$q.2', '$b1', '$fp')}"
        f"  if ({twos}) {{\n{match.name('$q.5', '$q.4', '$b2', None)}  }} }}\n"
        f"  if ($op == {OP_IDS['open']}) {{\n"
        f"    if ($q.6 & {_O_CREAT:#x}) {{ $op = {OP_IDS['create']}; }}\n"
        # (O_TMPFILE holds O_DIRECTORY's bit: a file made in the directory, a create)
        f"    if ($q.6 & {_O_TMPFILE:#x}) {{ $op = {OP_IDS['create']}; }}\n"
        f"    else {{ if (($q.6 & {_O_DIRECTORY:#x}) || {_is_dir('$mode')}) {{ $op = {OP_IDS['opendir']}; }} }}\n"
        f"  }}\n"
        f"  if ($op == {OP_IDS['unlink']} && ($q.6 & {_AT_REMOVEDIR:#x})) {{ $op = {OP_IDS['rmdir']}; }}\n"
        # where a chdir went, which later relative names start from: its inode, and its
        # parent's and its name (what the directory was matched by is the new one: the
        # exit is after the change)
        f"  if ($op == {OP_IDS['chdir']}) {{ $w = curtask->fs->pwd.dentry; $ino = $w->d_inode->i_ino; "
        f"$b2 = $w->d_parent->d_inode->i_ino; $n2 = (uint64)$w->d_name.name; }}\n"
    )
    # which names the record has (1: the first, 2: the second): the others are not printed
    fields = "$op, pid, uid, gid, nsecs - $q.1, args->ret, $q.6, $q.7, $b1, $b2, $fp, $ino, $mode, $q.2, $q.4, $q.8"
    record = f"({fields}, $names, comm, tid, $q.1)"
    store = _in_set(
        lambda i: (
            f"@p{i}[tid, $q.1] = {record}; "
            f"if ($q.3 != 0) {{ @s{i}[tid, $q.1] = str($q.3); }} if ($n2 != 0) {{ @t{i}[tid, $q.1] = str($n2); }}"
        )
    )
    body += (
        f"  if ($m) {{\n    @n[$op] = count();\n"
        f"    $names = ($q.3 != 0 ? 1 : 0) | ($n2 != 0 ? 2 : 0);\n    {store}\n  }}\n"
    )
    return body


def _exec(dev: int, self_pid: int) -> str:
    """A program starting with its working directory on the mount: said at once (its calls
    come a slot later), so that its directory's path can be read while it runs."""
    return (
        f"tracepoint:sched:sched_process_exec /pid != {self_pid}/ {{ $d = curtask->fs->pwd.dentry;\n"
        f'  if ($d->d_sb->s_dev == {dev}) {{ printf("{CWD} %d %lu\\n", pid, $d->d_inode->i_ino); }} }}'
    )


def _print(sets: range | list[int]) -> str:
    maps = [f"@{m}{i}" for i in sets for m in _SET_MAPS]
    return " ".join(f"print({m});" for m in maps) + " " + " ".join(f"clear({m});" for m in maps)


def _timer() -> str:
    """Once per slot, GRACE_NS into it: every set but this slot's, printed and cleared,
    then the line that ends a slot."""
    tick = GRACE_NS // 1_000_000
    prints = " else ".join(
        f"if ($k % {SETS} == {i}) {{ {_print([s for s in range(SETS) if s != i])} }}" for i in range(SETS)
    )
    return (
        f"interval:ms:{tick} {{\n"
        f"  $k = nsecs / {PERIOD_NS}; $into = nsecs % {PERIOD_NS};\n"
        f"  if ($k != @slot && $into >= {GRACE_NS}) {{\n"
        f"    @slot = $k;\n"
        f"    {prints}\n"
        f'    printf("{SLOT}\\n");\n'
        f"  }}\n}}"
    )


def _end() -> str:
    """At the end: every set's records, then the counts (so that every record printed is
    read before the counts it is compared with), and nothing left for bpftrace to print."""
    return (
        f"END {{ {_print(range(SETS))} "
        f'printf("{SLOT}\\n"); print(@n); clear(@n); clear(@slot); clear(@f); clear(@p); printf("{END}\\n"); }}'
    )
