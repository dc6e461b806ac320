"""`fusetrace list`, `umount --lazy` of a mount in use, and the notice for a mount point
that is not empty, through real mounts."""

import json
import os
import signal
import subprocess
import sys

from support import Mount, fusetrace, is_mounted, poll

from fusetrace import processes


def _listed(tmp_path) -> dict[str, dict]:
    """`fusetrace list --json`'s rows of this test's mounts (the host may have others)."""
    rows = json.loads(fusetrace("list", "--json").stdout)
    return {os.path.basename(r["mountpoint"]): r for r in rows if r["mountpoint"].startswith(f"{tmp_path}/")}


def test_list_names_each_mount_and_a_server_that_is_gone_or_silent(mount, tmp_path):
    traced, plain, killed, stopped = mount(trace=True), mount(), mount(), mount("--emulate", "efs-2016")
    assert plain.mountpoint.name == "mnt1"
    (traced.mountpoint / "f").write_text("x")
    poll(lambda: (_listed(tmp_path)["mnt0"]["records"] or 0) > 0)  # the writer's parts, as they come
    os.kill(killed.server_pid(), signal.SIGKILL)
    poll(lambda: processes.proc_state(killed.server_pid()) is None)
    stopped_pid = stopped.server_pid()
    os.kill(stopped_pid, signal.SIGSTOP)
    try:
        rows = _listed(tmp_path)
        text = fusetrace("list").stdout
    finally:
        os.kill(stopped_pid, signal.SIGCONT)
    assert set(rows) == {"mnt0", "mnt1", "mnt2", "mnt3"}
    t = rows["mnt0"]
    assert (t["source"], t["trace"], t["profile"], t["server"]) == (
        str(traced.source),
        str(traced.trace),
        None,
        "running",
    )
    assert t["uid"] == 0 and t["user"] == "root" and t["pid"] == traced.server_pid() and t["uptime_s"] >= 0
    assert rows["mnt1"]["server"] == "running" and rows["mnt1"]["trace"] is None and rows["mnt1"]["records"] is None
    assert rows["mnt2"]["server"] == "gone" and rows["mnt2"]["pid"] is None
    assert rows["mnt3"]["server"] == "not answering" and rows["mnt3"]["profile"] == "efs-2016"
    line = {name: next(ln for ln in text.splitlines() if ln.startswith(str(tmp_path / name) + " ")) for name in rows}
    assert "trace only" in line["mnt0"] and "passthrough" in line["mnt1"]
    assert "server gone: fusetrace umount it" in line["mnt2"] and "not answering" in line["mnt3"]
    assert "efs-2016" in line["mnt3"] and text.splitlines()[0].split()[:3] == ["mountpoint", "user", "source"]


HOLDER = """
import sys
f = open(sys.argv[1], "w", buffering=1)
f.write("before\\n")
print("holding", flush=True)
sys.stdin.readline()
f.write("after\\n")
f.close()
"""


def test_umount_lazy_of_a_mount_in_use_lets_its_files_finish(mount):
    m = mount(trace=True)
    pid = m.server_pid()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(m.mountpoint / "held")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "holding\n"
        busy = fusetrace("umount", str(m.mountpoint), check=False)
        assert busy.returncode == 1 and f"fusetrace umount --lazy {m.mountpoint}" in busy.stderr
        done = fusetrace("umount", "--lazy", str(m.mountpoint))
        assert f"detached {m.mountpoint}; in use by" in done.stdout and f"(pid {holder.pid})" in done.stdout
        assert f"flushes its trace to {m.trace} and exits when the last lets go" in done.stdout
        assert not is_mounted(m.mountpoint)
        assert processes.proc_state(pid) is not None  # serving the open file still
        holder.stdin.write("go on\n")
        holder.stdin.flush()
        assert holder.wait(timeout=30) == 0  # its write after the detach went through
    finally:
        holder.kill()
        holder.wait()
    poll(lambda: processes.proc_state(pid) is None, timeout=30)  # the last let go: the server flushed and left
    assert (m.source / "held").read_text() == "before\nafter\n"
    ops = json.loads(fusetrace("report", str(m.trace), "--json", "--op", "write").stdout)["ops"]
    assert [(r["op"], r["count"]) for r in ops] == [("write", 2)]  # the write after the detach is traced


def test_umount_lazy_of_a_mount_not_in_use_waits_as_umount_does(mount):
    m = mount(trace=True)
    pid = m.server_pid()
    done = fusetrace("umount", "--lazy", str(m.mountpoint))
    assert done.stdout == f"fusetrace: unmounted {m.mountpoint}; trace in {m.trace}\n"
    assert processes.proc_state(pid) is None and not is_mounted(m.mountpoint)


def test_mounting_over_files_says_they_are_hidden(tmp_path):
    src, mnt, empty = tmp_path / "src", tmp_path / "mnt", tmp_path / "empty"
    for d in (src, mnt, empty):
        d.mkdir()
    (mnt / "a").write_text("")
    (mnt / "b").mkdir()
    try:
        done = fusetrace("mount", str(src), str(mnt), "--log", str(tmp_path / "log"))
        assert done.stderr == f"fusetrace: note: {mnt} is not empty: its 2 entries stay hidden while it is mounted\n"
        assert is_mounted(mnt) and os.listdir(mnt) == []
        quiet = fusetrace("mount", str(src), str(empty), "--log", str(tmp_path / "log2"))
        assert quiet.stderr == ""
    finally:
        Mount(src, mnt, None).unmount()
        Mount(src, empty, None).unmount()
    assert sorted(os.listdir(mnt)) == ["a", "b"]
