"""A TraceWriter in a process of its own, for a test to kill (SIGKILL) while it merges.

`python -m support.busy_writer DIR` adds records as fast as it can, record i with
`fh` = i and `start_ns` the monotonic time it was added, flushing every 5 ms so that parts
are written and merged all the time, and prints one line once the first part is written.
"""

import sys
import time

from fusetrace.trace.schema import TraceRecord
from fusetrace.trace.writer import TraceWriter


def main(directory: str) -> None:
    w = TraceWriter(directory, {"host": "h"}, flush_interval=0.005)
    i = 0
    said = False
    while True:
        for _ in range(50):
            w.record(TraceRecord(time.monotonic_ns(), 1, "getattr", 1, f"/f{i}", None, i, 0, 0, 0, 0, 0, 0, 0, 0))
            i += 1
        if not said and w.files:
            print("writing", flush=True)
            said = True
        time.sleep(0.001)


if __name__ == "__main__":
    main(sys.argv[1])
