"""A trace's limits: --trace-max SIZE, --trace-max-age AGE and --trace-full rotate|stop.

Read by the mount's command line (which imports no pyarrow) and applied by the writer
thread (fusetrace/trace/writer.py): past the size or the age, the oldest files are rotated
out, or recording stops, as chosen; either way counted in _metadata.json.
"""

import re
import sys
from dataclasses import dataclass

TARGET_BYTES = 128 << 20  # a merged file's size at most (inputs' bytes); files this big are merged no more


@dataclass(frozen=True)
class Limits:
    """A trace's size and age limits (--trace-max, --trace-max-age) and what happens there
    (--trace-full): `rotate` its oldest files out, or `stop` recording."""

    max_bytes: int | None = None
    max_age_ns: int | None = None
    full: str = "rotate"

    def cap_bytes(self) -> int:
        """A merged file's size at most: an eighth of the size limit, so that rotation
        drops at most that much at a time and a merge's new file has room beside the rest."""
        return TARGET_BYTES if self.max_bytes is None else max(MIN_BYTES // 8, min(TARGET_BYTES, self.max_bytes // 8))

    def cap_span_ns(self) -> int | None:
        """A merged file's records at most this far apart: an eighth of the age limit."""
        return None if self.max_age_ns is None else self.max_age_ns // 8

    def budget(self) -> int:
        """The files' bytes at most, once a flush's part is written: the size limit less
        room for one merge (its new file is made before its inputs go)."""
        return sys.maxsize if self.max_bytes is None else self.max_bytes - self.cap_bytes()

    def aged(self, max_start: int | None, now_ns: int) -> bool:
        """Whether records whose latest started at `max_start` (a file's) all started more
        than the age limit before `now_ns`."""
        return self.max_age_ns is not None and max_start is not None and now_ns - max_start > self.max_age_ns

    def metadata(self) -> dict[str, object]:
        if self.max_bytes is None and self.max_age_ns is None:
            return {}
        age = None if self.max_age_ns is None else self.max_age_ns // 10**9
        return {"trace_max": self.max_bytes, "trace_max_age_s": age, "trace_full": self.full}


MIN_BYTES = 256 << 10  # --trace-max at least: room for a few flushes' parts
MAX_BYTES = 1 << 60
MIN_AGE_S = 10
MAX_AGE_S = 100 * 365 * 86400
FULL = ("rotate", "stop")
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?", re.IGNORECASE)
_AGE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])", re.IGNORECASE)
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_size(text: str) -> int:
    """Bytes of a size such as 10G, 500M, 1.5T or 4096 (K, M, G, T: powers of 1024);
    ValueError (words to follow the option) when it is none or under MIN_BYTES."""
    m = _SIZE.fullmatch(text.strip())
    if m is None:
        raise ValueError("not a size (give e.g. 10G, 500M: K, M, G, T are powers of 1024)")
    size = int(float(m[1]) * 1024 ** " kmgt".index(m[2].lower() or " "))
    if size < MIN_BYTES:
        raise ValueError(f"under the least, {MIN_BYTES >> 10}K (room for a few parts)")
    if size > MAX_BYTES:
        raise ValueError("over the most, 1E (1024P)")
    return size


def parse_age(text: str) -> int:
    """Nanoseconds of an age such as 7d, 12h, 30m, 90s or 2w; ValueError when it is none
    or out of range (MIN_AGE_S to MAX_AGE_S)."""
    m = _AGE.fullmatch(text.strip())
    if m is None:
        raise ValueError("not an age (give e.g. 7d, 12h, 30m: s, m, h, d, w)")
    seconds = float(m[1]) * _AGE_UNITS[m[2].lower()]
    if seconds < MIN_AGE_S:
        raise ValueError(f"under the least, {MIN_AGE_S}s (a part is written every 0.5 s)")
    if seconds > MAX_AGE_S:
        raise ValueError("over the most, 100 years (5218w)")
    return int(seconds * 10**9)
