"""Fixtures that mount real fusetrace file systems through the real command line; the
helpers they share with the tests are in tests/support/."""

import subprocess
import sys
from pathlib import Path

import pytest

pytest.register_assert_rewrite("support")  # the helpers' asserts explain a failure as a test's do

from support import Mount, is_mounted, mount_here, poll  # noqa: E402
from support.capture import local_mount  # noqa: E402

from fusetrace.scenarios.redisserver import RedisServer  # noqa: E402

SLOW_FS = Path(__file__).with_name("support") / "slow_fs.py"


@pytest.fixture
def mount(tmp_path):
    """mount(*options, source=None, trace=False) -> Mount; unmounted at the end of the test."""
    made = []

    def make(*options: str, source: Path | None = None, trace: bool = False) -> Mount:
        n = len(made)
        src = source or tmp_path / f"src{n}"
        src.mkdir(exist_ok=True)
        mnt = tmp_path / f"mnt{n}"
        mnt.mkdir()
        tdir = tmp_path / f"trace{n}" if trace else None
        args = list(options)
        if tdir:
            args += ["--trace", str(tdir)]
        if "--log" not in options and "--foreground" not in options:  # not one more in the state directory
            args += ["--log", str(tmp_path / f"server{n}.log")]
        mount_here(src, mnt, *args)
        m = Mount(src, mnt, tdir)
        made.append(m)
        return m

    yield make
    for m in reversed(made):
        m.unmount()


@pytest.fixture
def redis_server(tmp_path):
    """The test's own redis-server (scenarios/redisserver.py), stopped at its end."""
    with RedisServer(str(tmp_path)) as server:
        yield server


@pytest.fixture
def redis_hub(redis_server):
    """redis_hub() -> a RedisHub on the test's redis-server, for one new file system per test."""
    from fusetrace.shaping.redis_hub import RedisHub

    hubs: list = []

    def make(fs_id: str = "fs1"):
        hub = RedisHub(redis_server.url, fs_id)
        hubs.append(hub)
        return hub

    yield make
    for hub in hubs:
        hub.close()


@pytest.fixture
def slow_mount(tmp_path):
    """slow_mount(delay_ms, size, trace=False) -> Mount: a fusetrace mount over a slow_fs
    one; both unmounted at the end of the test, the fusetrace one first."""
    made: list[tuple[subprocess.Popen, Path, Mount]] = []

    def make(delay_ms: float, size: int, trace: bool = False) -> Mount:
        below, mnt = tmp_path / "slow", tmp_path / "mnt"
        below.mkdir()
        mnt.mkdir()
        server = subprocess.Popen(
            [sys.executable, str(SLOW_FS), str(below), "--delay-ms", str(delay_ms), "--size", str(size)]
        )
        m = Mount(below, mnt, tmp_path / "trace" if trace else None)
        made.append((server, below, m))
        poll(lambda: is_mounted(below) or server.poll() is not None)
        assert is_mounted(below), f"slow_fs exited ({server.returncode})"
        mount_here(below, mnt, *(["--trace", str(m.trace)] if trace else []))
        return m

    yield make
    for server, below, m in made:
        m.unmount()
        # the server above may still be closing its descriptors on `below` (EBUSY until then);
        # a slow_fs killed while mounted would leave its mount behind, so it goes lazily then
        try:
            poll(lambda below=below: not is_mounted(below) or _unmounted(below), timeout=10)
        except AssertionError:
            subprocess.run(["fusermount3", "-u", "-z", str(below)], check=False)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _unmounted(mountpoint: Path) -> bool:
    return subprocess.run(["fusermount3", "-u", str(mountpoint)], capture_output=True).returncode == 0


@pytest.fixture
def dirs(tmp_path):
    """An empty source and mount point, `src` and `mnt`, under tmp_path."""
    (tmp_path / "src").mkdir()
    (tmp_path / "mnt").mkdir()
    return tmp_path


@pytest.fixture(scope="module")
def tmpfs(tmp_path_factory):
    """A tmpfs of its own for a module's capture (support/capture.py), gone at its end."""
    with local_mount("tmpfs", tmp_path_factory.mktemp("tmpfs")) as mnt:
        yield mnt


@pytest.fixture(scope="module")
def ext4(tmp_path_factory):
    """A loop-mounted ext4 of its own (an image file in the module's temporary directory), gone
    at its end, image and all."""
    with local_mount("ext4", tmp_path_factory.mktemp("ext4")) as mnt:
        yield mnt
