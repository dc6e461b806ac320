"""Several mounts, one emulated file system: real mounts over one backing directory, each
its own client, sharing state through the test's own redis-server."""

import json
import os
import subprocess

import pytest
from support import fusetrace, is_mounted, one_line_error, poll, stats_json


def stats(m) -> dict:
    return stats_json(m.mountpoint)


def shared_mounts(mount, tmp_path, redis_server, n: int, *extra: str, fs_id: str = "fs1"):
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    return [
        mount("--emulate", "efs-bursting", "--shared", redis_server.url, "--fs-id", fs_id, *extra, source=data)
        for _ in range(n)
    ]


def clients(m) -> float:
    return stats(m)["metrics"]["ClientConnections"]


def write(path, nbytes: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, b"x" * nbytes)
        os.fsync(fd)
    finally:
        os.close(fd)


def test_two_mounts_are_two_clients_of_one_file_system(mount, tmp_path, redis_server):
    a, b = shared_mounts(mount, tmp_path, redis_server, 2)
    lone = mount("--emulate", "efs-bursting", "--shared", redis_server.url, "--fs-id", "other")
    poll(lambda: clients(a) == clients(b) == 2.0)
    assert clients(lone) == 1.0  # another file system in the same Redis
    write(a.mountpoint / "f", 3 << 20)
    poll(lambda: stats(b)["metrics"]["DataWriteIOBytes"] >= 3 << 20)  # a's writes, counted by b's metrics
    assert stats(lone)["metrics"]["DataWriteIOBytes"] == 0
    fusetrace("set", str(a.mountpoint), "burst_credit_balance=1MiB")
    poll(lambda: stats(b)["metrics"]["BurstCreditBalance"] < 2 << 20)  # a set on one is a set on all
    fusetrace("set", str(a.mountpoint), "client_dirty_limit=1MiB")  # a client's own: not shared
    shared = stats(b)["shared"]
    assert shared["state"] == "ok" and shared["fs_id"] == "fs1" and shared["failed"] == 0
    assert "shared: file system fs1" in fusetrace("stats", str(b.mountpoint)).stdout


@pytest.mark.slow
def test_eight_mounts_count_eight_clients_and_one_leaving_is_seen(mount, tmp_path, redis_server):
    ms = shared_mounts(mount, tmp_path, redis_server, 8)
    poll(lambda: all(clients(m) == 8.0 for m in ms), timeout=30)
    ms[-1].unmount()
    poll(lambda: clients(ms[0]) == 7.0, timeout=30)  # it leaves at unmount (else ages out in 5 s)


def test_redis_gone_the_mounts_serve_on_and_catch_up_when_it_is_back(mount, tmp_path, redis_server):
    (a,) = shared_mounts(mount, tmp_path, redis_server, 1, "--trace", str(tmp_path / "trace"))
    (b,) = shared_mounts(mount, tmp_path, redis_server, 1)
    poll(lambda: clients(a) == 2.0)
    writer = subprocess.Popen(
        [
            "sh",
            "-c",
            f'i=0; while :; do i=$((i+1)); dd if=/dev/zero of="{a.mountpoint}/w$i" '
            "bs=64k count=1 conv=fsync status=none; done",
        ]
    )
    try:
        poll(lambda: len(list(a.source.glob("w*"))) > 3)
        redis_server.stop()
        poll(lambda: stats(a)["shared"]["state"] == "unreachable")
        text = fusetrace("stats", str(a.mountpoint)).stdout
        assert "client(s) live when Redis last answered" in text and "DOES NOT ANSWER" in text, text
        before = len(list(a.source.glob("w*")))
        poll(lambda: len(list(a.source.glob("w*"))) > before + 10)  # the writes go on without Redis
        redis_server.start()
        poll(lambda: stats(a)["shared"]["state"] == "ok" and stats(b)["shared"]["state"] == "ok")
    finally:
        writer.kill()
        writer.wait()
    written = stats(a)["metrics"]["DataWriteIOBytes"]
    poll(lambda: stats(b)["metrics"]["DataWriteIOBytes"] >= written)  # what a kept through the outage reached b
    assert stats(a)["shared"]["outages"][0]["to"] is not None
    a.unmount()
    meta = json.loads((tmp_path / "trace" / "_metadata.json").read_text())
    assert meta["shared"]["fs_id"] == "fs1" and len(meta["shared"]["outages"]) == 1


def test_a_mount_that_would_emulate_the_file_system_otherwise_is_refused(mount, tmp_path, redis_server):
    (a,) = shared_mounts(mount, tmp_path, redis_server, 1)
    (tmp_path / "s").mkdir()
    (tmp_path / "m").mkdir()
    for other, key in (
        (["--emulate", "efs-elastic"], "throughput_mode 'elastic' here, 'bursting' on its clients"),
        (["--emulate", "efs-bursting", "--set", "burst_mibps=50"], "burst_mibps 50.0 here"),
    ):
        done = fusetrace(
            "mount",
            str(tmp_path / "s"),
            str(tmp_path / "m"),
            *other,
            "--shared",
            redis_server.url,
            "--fs-id",
            "fs1",
            check=False,
        )
        one_line_error(done, "--fs-id fs1: its live clients emulate it otherwise", key, "another --fs-id")
        assert not os.path.ismount(tmp_path / "m")
    # a client's own parameters are its own; a parameter set since mounting is taken by a joiner
    fusetrace("set", str(a.mountpoint), "burst_mibps=60")
    (b,) = shared_mounts(mount, tmp_path, redis_server, 1, "--set", "per_client_mibps=10")
    poll(lambda: stats(b)["metrics"]["PermittedThroughput"] == stats(a)["metrics"]["PermittedThroughput"])
    a.unmount()
    b.unmount()
    # no client live: the next one's parameters are the file system's, and those set before are forgotten
    lone = mount("--emulate", "efs-bursting")
    (c,) = shared_mounts(mount, tmp_path, redis_server, 1)
    poll(lambda: stats(c)["shared"]["exchanges"] >= 5)
    assert stats(c)["metrics"]["PermittedThroughput"] == stats(lone)["metrics"]["PermittedThroughput"]
    c.unmount()
    mount("--emulate", "efs-elastic", "--shared", redis_server.url, "--fs-id", "fs1")


def test_a_mount_that_fails_after_joining_leaves_the_file_system(tmp_path, mount, redis_server):
    (tmp_path / "faults.toml").write_text('[[event]]\nat = "1s"\nset = {nfs_acregmin_s = 0}\n')
    (tmp_path / "s").mkdir()
    (tmp_path / "m").mkdir()
    done = fusetrace(
        "mount",
        str(tmp_path / "s"),
        str(tmp_path / "m"),
        "--emulate",
        "efs-bursting",
        "--shared",
        redis_server.url,
        "--fs-id",
        "fs1",
        "--faults",
        str(tmp_path / "faults.toml"),
        check=False,
    )
    one_line_error(done, "nfs_acregmin_s: fixed at mount")
    # not counted live: a mount of other parameters is the file system's first client
    mount("--emulate", "efs-elastic", "--shared", redis_server.url, "--fs-id", "fs1")


def test_parameters_set_outlive_a_redis_restarted_without_persistence(mount, tmp_path, redis_server):
    (a,) = shared_mounts(mount, tmp_path, redis_server, 1)
    fusetrace("set", str(a.mountpoint), "burst_mibps=60")
    permitted = poll(lambda: stats(a)["metrics"]["PermittedThroughput"])
    redis_server.stop()
    redis_server.start()  # empty: the parameters set went with it
    # a counts itself live again with its next exchange (after a failed one, RETRY_EVERY on); a joiner
    # before that finds no live client, and rightly makes the file system afresh
    seen = stats(a)["shared"]["exchanges"]
    poll(lambda: stats(a)["shared"]["exchanges"] > seen + 1)
    fusetrace("set", str(a.mountpoint), "read_latency_ms=0.3")  # likely to reach Redis before a's announce
    # a mount of other parameters waits for the live client's announce, and is refused
    (tmp_path / "s").mkdir()
    (tmp_path / "m").mkdir()
    try:
        one_line_error(
            fusetrace(
                "mount",
                str(tmp_path / "s"),
                str(tmp_path / "m"),
                "--emulate",
                "efs-elastic",
                "--shared",
                redis_server.url,
                "--fs-id",
                "fs1",
                check=False,
            ),
            "emulate it otherwise",
        )
    finally:  # a mount the test did not expect is not left behind
        if is_mounted(tmp_path / "m"):
            fusetrace("umount", str(tmp_path / "m"), check=False)
    # a live client gives them back with its next announce (once a second), beside what was set since,
    # and a joiner takes them
    (b,) = shared_mounts(mount, tmp_path, redis_server, 1)
    poll(lambda: stats(b)["metrics"]["PermittedThroughput"] == permitted)
    assert stats(b)["shared"]["refused_sets"] == []


@pytest.mark.parametrize(
    "args, says",
    [
        (
            ["--emulate", "efs-bursting", "--shared", "redis://127.0.0.1:99999/0", "--fs-id", "x"],
            "the port is not a number from 0 to 65535",
        ),
        (
            ["--emulate", "efs-bursting", "--shared", "redis://127.0.0.1:1/abc", "--fs-id", "x"],
            "the database 'abc' is not a number",
        ),
        (["--emulate", "efs-bursting", "--shared", "redis://127.0.0.1:1/0"], "--shared URL and --fs-id ID go together"),
        (["--shared", "redis://127.0.0.1:1/0", "--fs-id", "x"], "needs --emulate PROFILE"),
        (["--emulate", "efs-bursting", "--shared", "http://x", "--fs-id", "x"], "expected a Redis URL"),
        (["--emulate", "efs-bursting", "--shared", "redis://127.0.0.1:1/0", "--fs-id", "a/b"], "--fs-id 'a/b'"),
        (["--emulate", "efs-bursting", "--shared", "redis://127.0.0.1:1/0", "--fs-id", "x"], "Redis does not answer"),
    ],
)
def test_a_shared_mount_that_cannot_be_is_one_line_and_no_mount(tmp_path, args, says):
    (tmp_path / "src").mkdir()
    (tmp_path / "mnt").mkdir()
    done = fusetrace("mount", str(tmp_path / "src"), str(tmp_path / "mnt"), *args, check=False)
    one_line_error(done, says)
    assert not os.path.ismount(tmp_path / "mnt")


def test_stats_says_when_another_clients_set_was_refused_here():
    from fusetrace.stats_view import _shared_line

    shared = {
        "fs_id": "fs1",
        "url": "redis://h/0",
        "clients": 2,
        "state": "ok",
        "since": 0.0,
        "exchanges": 9,
        "failed": 0,
        "outages": [],
        "refused_sets": [],
    }
    assert "warning" not in _shared_line(shared)
    shared["refused_sets"] = ["set provisioned_mibps: provisioned mode needs a rate above 0"]
    assert _shared_line(shared).splitlines()[1] == (
        "warning: another client's set this mount's own --set refused, so the clients differ: "
        "set provisioned_mibps: provisioned mode needs a rate above 0"
    )


def test_a_password_redis_refuses_is_said_as_such(tmp_path, redis_server):
    import redis

    redis.Redis.from_url(redis_server.url).config_set("requirepass", "sekrit")
    (tmp_path / "src").mkdir()
    (tmp_path / "mnt").mkdir()
    host = redis_server.url.removeprefix("redis://")
    for url, says in (
        (f"redis://{host}", "Redis answered but wants a password"),
        (f"redis://:wrong@{host}", "Redis answered but refused this mount's password"),
    ):
        done = fusetrace(
            "mount",
            str(tmp_path / "src"),
            str(tmp_path / "mnt"),
            "--emulate",
            "efs-bursting",
            "--shared",
            url,
            "--fs-id",
            "x",
            check=False,
        )
        assert "wrong" not in one_line_error(done, says)
        assert not os.path.ismount(tmp_path / "mnt")


def test_mount_says_what_it_emulates_and_whose_client_it_is(tmp_path, redis_server):
    (tmp_path / "src").mkdir()
    (tmp_path / "mnt").mkdir()
    done = fusetrace(
        "mount",
        str(tmp_path / "src"),
        str(tmp_path / "mnt"),
        "--emulate",
        "efs-bursting",
        "--shared",
        redis_server.url,
        "--fs-id",
        "fs9",
    )
    try:
        assert (
            f", emulating efs-bursting as a client of file system fs9 shared through Redis at {redis_server.url}\n"
        ) in done.stdout, done.stdout
    finally:
        fusetrace("umount", str(tmp_path / "mnt"))
