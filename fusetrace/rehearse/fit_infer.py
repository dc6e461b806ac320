"""`fusetrace fit` of a trace without `nfs` (a trace-only mount over a real NFS mount): the
RPCs each record sent, as the model's NFS client would have sent them.

The records are rebuilt into the requests the mount's handlers made (requests.py, as
`fusetrace simulate` does) and handed, at their recorded start times, to the emulated
Linux NFS client (emulator/nfsclient.py) over a model of the base profile: its caches
(attributes, names, listings, ACCESS answers, close-to-open) decide which record went to
the server and with which RPCs.  Only the names are used; the base's latencies do not
reach the fit.  One difference from that client: an O_SYNC write through a trace-only
mount is the mount's own write(2) to an O_SYNC file, whose stable WRITE the real client
sends then and there (the emulated one stages it for the kernel's flush that follows).
"""

from ..emulator.model import Model
from ..emulator.nfsclient import NfsClient
from ..emulator.params import Params
from .requests import COLUMNS, Rebuilder

__all__ = ["COLUMNS", "Inference"]


class Inference:
    """Feed it a trace's records in start order (requests.COLUMNS of each); it says what
    the emulated client sends for each."""

    def __init__(self, base: Params, origin_ns: int):
        self.client = NfsClient(Model(base, origin_ns / 1e9))
        self.rebuilder = Rebuilder()

    def rpcs(self, start_ns: int, uid: int, record: tuple) -> tuple[str, int, int]:
        """The RPCs the emulated client sends for the record ("" none), the latency it
        samples for them (0: none of its own, as a WRITE(FILE_SYNC) that only waits for
        write-back already under way) and how long they wait (a COMMIT: for the file's
        write-back), in ns."""
        request = self.rebuilder.rebuild(*record)
        if request is None:
            return "", 0, 0
        if request.op == "write" and request.write_mode == "sync":
            return "WRITE", 0, 0  # sent by the write itself (the module docstring)
        a = self.client.admit(request.call(uid), start_ns / 1e9)
        return a.rpcs, int(a.latency * 1e9), int(a.wait * 1e9)
