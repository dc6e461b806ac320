"""A stand-in for /proc/self/mountstats (this machine has no NFS client): a public text
whose per-op counters a test moves on, rewritten atomically as the kernel's file would
read, for the server's sampler through its test hook (fusetrace/server/nfssampler.py)."""

import os
import re
from pathlib import Path

DATA = Path(__file__).parent.parent / "data" / "mountstats"
NFS41 = DATA / "procfs-nfs41-k8s-node.mountstats"
NFS41_MOUNT = (
    "/var/lib/kubelet/pods/1c2215a7-0d92-4df5-83ce-a807bcc2f8c8/volumes/kubernetes.io~nfs/"
    "home-automation--node-red-data--pv0001"
)


def bump(text: str, moves: dict[str, tuple[int, ...]]) -> str:
    """`text` with each named RPC's first counters increased by the given amounts
    (ops, transmissions, timeouts, bytes_sent, bytes_recv, queue_ms, rtt_ms, execute_ms)."""
    for name, by in moves.items():
        pattern = re.compile(rf"^(\s*{name}:)((?: \d+)+)$", re.M)
        match = pattern.search(text)
        assert match, name
        numbers = [int(w) for w in match.group(2).split()]
        moved = [n + (by[i] if i < len(by) else 0) for i, n in enumerate(numbers)]
        text = text[: match.start(2)] + "".join(f" {n}" for n in moved) + text[match.end(2) :]
    return text


def write(path: Path, text: str) -> None:
    """Replace the stand-in at once: a reader sees the old text or the new, never half."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
