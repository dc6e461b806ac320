"""The file systems under test: how to mount each over a source directory and unmount it.

Every target is mounted over its own fresh source directory and unmounted (its server gone)
before the next one starts, so only one FUSE server runs at a time.
"""

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from baseline import Baseline, pythonpath_of, server_of  # noqa: E402
from common import cpu_s, server_pid  # noqa: E402

from fusetrace.server.mounts import canonical, mounted_at  # noqa: E402

CACHE = REPO / "bench" / "out"
PY = sys.executable
MOUNT_TIMEOUT = 30.0


class TargetError(Exception):
    pass


def fstype_at(path: str) -> str | None:
    """The file system type mounted exactly at `path`, or None."""
    found = mounted_at(canonical(path))
    return found.fstype if found else None


def wait_mounted(mnt: str, proc: subprocess.Popen | None, log: Path | None) -> None:
    deadline = time.monotonic() + MOUNT_TIMEOUT
    while time.monotonic() < deadline:
        fs = fstype_at(mnt)
        if fs is not None and fs.startswith("fuse"):
            return
        if proc is not None and proc.poll() is not None:
            raise TargetError(f"server exited with code {proc.returncode} before {mnt} was live{_tail(log)}")
        time.sleep(0.02)
    raise TargetError(f"{mnt} not mounted after {MOUNT_TIMEOUT:.0f} s{_tail(log)}")


def force_unmount(mnt: str) -> None:
    """Clear a mount left over by an earlier, interrupted run."""
    if fstype_at(mnt) is not None:
        subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)
        if fstype_at(mnt) is not None:
            subprocess.run(["umount", "-l", mnt], capture_output=True)


def _tail(log: Path | None) -> str:
    if log is None or not log.exists():
        return ""
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    return f": {lines[-1].strip()} (log: {log})" if lines else ""


def _stop_server(mnt: str, proc: subprocess.Popen | None) -> None:
    done = subprocess.run(["fusermount3", "-u", mnt], capture_output=True, text=True)
    if done.returncode != 0:
        time.sleep(0.5)  # EBUSY right after a run: let the last references go
        done = subprocess.run(["fusermount3", "-u", mnt], capture_output=True, text=True)
    if done.returncode != 0:
        force_unmount(mnt)
    if proc is None:
        return
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()  # our own child, by its pid
        proc.wait()


# ---- the targets ---------------------------------------------------------------------------


class Target:
    key = ""
    label = ""
    fuse = True
    mnt = ""  # where it is mounted, once started
    proc: subprocess.Popen | None = None  # the server process, where this script owns it

    def describe(self) -> str:
        return self.label

    def command(self, src: str, mnt: str, placeholder: bool = False) -> list[str]:
        return []

    def _spawn(self, src: str, mnt: str, log: Path) -> str:
        """Start a foreground FUSE server of ours to own; return once it is mounted."""
        self.mnt = mnt
        with open(log, "ab") as f:
            self.proc = subprocess.Popen(
                self.command(src, mnt), stdin=subprocess.DEVNULL, stdout=f, stderr=f, start_new_session=True
            )
        wait_mounted(mnt, self.proc, log)
        return mnt

    def start(self, src: str, mnt: str, scratch: Path) -> str:
        """Mount; return the directory the benchmarks run in."""
        raise NotImplementedError

    def stop(self) -> None:
        pass

    def sample(self) -> tuple[float, int] | None:
        """(the server's CPU seconds so far, operations it has recorded), where it can tell."""
        return None

    def after(self) -> dict:
        """Extra facts once stopped (e.g. trace size)."""
        return {}


class Native(Target):
    key = "native"
    label = "native"
    fuse = False

    def describe(self) -> str:
        return "the source directory itself, no FUSE"

    def start(self, src, mnt, scratch):
        return src


class Fusetrace(Target):
    def __init__(
        self,
        trace: bool,
        no_xattrs: bool = False,
        baseline: Baseline | None = None,
        extra: tuple[str, ...] = (),
        tag: str = "",
    ):
        self.trace = trace
        self.no_xattrs = no_xattrs
        self.baseline = baseline  # None: this checkout's code
        self.extra = extra  # more mount options, named by `tag` in the key and label
        name = "fusetrace" if baseline is None else "baseline"
        self.key = f"{name}+trace" if trace else f"{name}-noxattrs" if no_xattrs else name
        self.label = f"{name}, traced" if trace else f"{name} --no-xattrs" if no_xattrs else name
        if tag:
            self.key += f"+{tag}"
            self.label += f", {tag} ({' '.join(extra)})"
        self.trace_dir: str | None = None
        # this checkout's code comes first on its path; the baseline's runs in its own folder,
        # where the working directory puts nothing of this checkout on the path
        self.cwd = REPO if baseline is None else baseline.site
        self.env = dict(os.environ, PYTHONPATH=str(REPO)) if baseline is None else baseline.env()

    def describe(self) -> str:
        how = "`--trace DIR` (a new directory on the same disk)" if self.trace else "no trace"
        if self.no_xattrs:
            return (
                f"`python -m fusetrace mount SRC MNT --no-xattrs`, {how}: no extended attributes, "
                "like the pyfuse3 example (the kernel is answered ENOSYS once and asks no more)"
            )
        if self.baseline is not None:
            return (
                f"the same as fusetrace{', traced' if self.trace else ''}, run from the code of "
                f"{self.baseline.label}, laid out as it installs, on PYTHONPATH, by the same Python "
                f"({self.baseline.modules} of its modules checked to load from there, and the "
                "server's PYTHONPATH checked at every mount)"
            )
        opts = f"`{' '.join(self.extra)}`" if self.extra else "default options"
        return f"`python -m fusetrace mount SRC MNT` from this checkout, {opts}, {how}"

    def command(self, src, mnt, placeholder=False):
        cmd = [PY, "-m", "fusetrace", "mount", src, mnt]
        if self.no_xattrs:
            cmd.append("--no-xattrs")
        if self.trace:
            cmd += ["--trace", "TRACE_DIR" if placeholder or not self.trace_dir else self.trace_dir]
        return cmd + list(self.extra)

    def start(self, src, mnt, scratch):
        if self.trace:
            self.trace_dir = str(scratch / "trace")
        self.mnt = mnt
        log = scratch / "fusetrace.log"
        done = subprocess.run(
            [*self.command(src, mnt), "--log", str(log)], cwd=self.cwd, env=self.env, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise TargetError((done.stderr or done.stdout).strip() or f"exit {done.returncode}")
        wait_mounted(mnt, None, log)
        if self.baseline is not None:  # the server itself, not only the command that started it
            found = pythonpath_of(self._server())
            if found != str(self.baseline.site):
                raise TargetError(f"the baseline's server runs with PYTHONPATH={found}, not {self.baseline.site}")
        return mnt

    def stop(self):
        done = subprocess.run(
            [PY, "-m", "fusetrace", "umount", self.mnt], cwd=self.cwd, env=self.env, capture_output=True, text=True
        )
        if done.returncode != 0:
            time.sleep(0.5)
            done = subprocess.run(
                [PY, "-m", "fusetrace", "umount", self.mnt], cwd=self.cwd, env=self.env, capture_output=True, text=True
            )
        if done.returncode != 0:
            force_unmount(self.mnt)
            raise TargetError(f"umount: {done.stderr.strip()}")

    def sample(self) -> tuple[float, int] | None:
        """(the server's CPU seconds so far, operations it has recorded), traced only."""
        if not self.trace:
            return None
        done = subprocess.run(
            [PY, "-m", "fusetrace", "stats", self.mnt, "--json"],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        )
        recorded = json.loads(done.stdout)["trace"]["recorded"]
        return cpu_s(self._server()), recorded

    def _server(self) -> int:
        return server_pid(self.mnt) if self.baseline is None else server_of(self.mnt)

    def after(self):
        if not self.trace or not self.trace_dir:
            return {}

        d = Path(self.trace_dir)
        parts = list(d.glob("*.parquet"))
        out = {"trace_files": len(parts), "trace_bytes": sum(p.stat().st_size for p in parts)}
        meta = d / "_metadata.json"
        if meta.exists():
            m = json.loads(meta.read_text())
            for k in ("records", "dropped", "lost", "write_errors"):
                if k in m:
                    out["trace_" + k] = m[k]
        return out


class PyfuseExample(Target):
    key = "pyfuse3-example"
    label = "pyfuse3 example"

    def __init__(self):
        self.script: Path | None = None

    def describe(self) -> str:
        import pyfuse3

        return (
            f"`examples/passthroughfs.py` from the pyfuse3 {pyfuse3.__version__} sdist, "
            f"run with the same Python: `python passthroughfs.py SRC MNT`"
        )

    def command(self, src, mnt, placeholder=False):
        return [PY, str(self.script or "passthroughfs.py"), src, mnt]

    def fetch(self) -> Path:
        """examples/passthroughfs.py of the installed pyfuse3 version, from its sdist."""
        import pyfuse3

        version = pyfuse3.__version__
        dest = CACHE / f"passthroughfs-{version}.py"
        if dest.exists():
            return dest
        CACHE.mkdir(parents=True, exist_ok=True)
        sdist = CACHE / f"pyfuse3-{version}.tar.gz"
        if not sdist.exists():
            done = subprocess.run(
                [
                    PY,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--no-binary",
                    ":all:",
                    f"pyfuse3=={version}",
                    "-d",
                    str(CACHE),
                ],
                capture_output=True,
                text=True,
            )
            if done.returncode != 0 or not sdist.exists():
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                raise TargetError(f"pip download pyfuse3=={version} failed: {last}")
        with tarfile.open(sdist) as tar:
            member = tar.getmember(f"pyfuse3-{version}/examples/passthroughfs.py")
            extracted = tar.extractfile(member)
            if extracted is None:
                raise TargetError(f"{sdist}: {member.name} is not a file")
            data = extracted.read()
        tmp = dest.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.rename(dest)
        return dest

    def start(self, src, mnt, scratch):
        self.script = self.fetch()
        return self._spawn(src, mnt, scratch / "pyfuse3-example.log")

    def stop(self):
        _stop_server(self.mnt, self.proc)


class PassthroughHP(Target):
    key = "passthrough_hp"
    label = "passthrough_hp"

    def __init__(self, path: str, nocache: bool = False):
        self.path = os.path.abspath(path)
        self.nocache = nocache  # its --nocache: entry and attribute timeouts 0, no kernel caching
        if nocache:
            self.key = "passthrough_hp-nocache"
            self.label = "passthrough_hp --nocache"

    def describe(self) -> str:
        ver = subprocess.run(["pkg-config", "--modversion", "fuse3"], capture_output=True, text=True)
        lib = f", linked against libfuse {ver.stdout.strip()}" if ver.returncode == 0 else ""
        return (
            f"libfuse's C++ `example/passthrough_hp` (`{self.path}`{lib}; built by hand with "
            f"extended-attribute support as libfuse's own build has it, see bench/README.md), "
            f"{'`--nocache`' if self.nocache else 'default options'}, `--foreground` so this script owns the process"
        )

    def command(self, src, mnt, placeholder=False):
        return [self.path, "--foreground", *(["--nocache"] if self.nocache else []), src, mnt]

    def start(self, src, mnt, scratch):
        if not os.access(self.path, os.X_OK):
            raise TargetError(f"{self.path}: not an executable")
        return self._spawn(src, mnt, scratch / "passthrough_hp.log")

    def stop(self):
        _stop_server(self.mnt, self.proc)
