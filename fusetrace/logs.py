"""Logging, configured in one place, once per process.

The server logs to its standard error: the `--log` file (or the log in the private
state directory, see fusetrace/server/runstate.py) when it runs in the background,
the terminal with `--foreground`.  Each line carries the local time (ISO 8601, with
milliseconds and the UTC offset), the level and the logger's name, so a log read
later says when.  libfuse's own debug output (`--debug-fuse`) and faulthandler's
tracebacks write to the same descriptor.  Every other command logs warnings to
standard error as one bare line, as it prints its errors.
"""

import logging
import sys
from datetime import datetime

SERVER_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _IsoFormatter(logging.Formatter):
    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return datetime.fromtimestamp(record.created).astimezone().isoformat(timespec="milliseconds")


def configure(server: bool = False, debug: bool = False) -> None:
    """Send every logger's records to standard error: timestamped in a server (INFO and
    up from fusetrace, DEBUG from fusetrace and pyfuse3 when `debug`), bare warnings
    elsewhere.  Calling it again replaces the earlier configuration."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_IsoFormatter(SERVER_FORMAT) if server else logging.Formatter("%(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler], force=True)
    logging.getLogger("fusetrace").setLevel(logging.DEBUG if debug else logging.INFO if server else logging.NOTSET)
    # pyfuse3's debug lines: its steps to mount and unmount, its worker tasks
    logging.getLogger("pyfuse3").setLevel(logging.DEBUG if debug else logging.NOTSET)
