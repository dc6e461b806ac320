"""bpftrace's JSON lines read back (fusetrace/capture/events.py) as bpftrace 0.17 prints
them: names' bytes above 0x7f, which it escapes as a sign-extended "\\uffffffXX", come back
as the bytes they were, in UTF-8 or in none (an escaped backslash stays text); a capture
in which no call was counted, whose empty counts it does not print, lost nothing."""

import json
import os

from fusetrace.capture.calls import OP_IDS
from fusetrace.capture.events import Events, NamedCall
from fusetrace.capture.program import END, READY


def _bpftrace(name: bytes) -> bytes:
    """`name` as a JSON string, escaped as bpftrace 0.17 escapes it."""
    out = b""
    for b in name:
        if b in b'"\\':
            out += b"\\" + bytes([b])
        elif b < 0x20:
            out += b"\\u%04x" % b
        elif b > 0x7F:
            out += b"\\u%08x" % (b | 0xFFFFFF00)  # (a signed char, printed with %04x)
        else:
            out += bytes([b])
    return b'"' + out + b'"'


def _names(name: bytes) -> list[str]:
    """What Events makes of one slot holding an open of `name`."""
    value = json.dumps(
        [OP_IDS["open"], 10, 0, 0, 5, 3, 0, 0, 0, 0, 1, 2, 0o100644, -100, -100, "cat", 11, 1000]
    ).encode()
    lines = [b'{"type": "map", "data": {"@%s": {"11,1000": %s}}}' % (m, v) for m, v in [
        (b"fa", b"null"), (b"pa", value), (b"sa", _bpftrace(name)), (b"ta", b'""'),
    ]]  # fmt: skip
    lines[0] = b'{"type": "map", "data": {"@fa": {}}}'
    lines.append(b'{"type": "map", "data": {"@n": {"%d": 1}}}' % OP_IDS["open"])
    events = Events()
    return [c.name for line in lines for c in events.feed(line) if isinstance(c, NamedCall)]


def test_bytes_above_0x7f_are_kept():
    for name in ("/mnt/café".encode(), b"/mnt/\xff\xfe-not-utf8", "/mnt/日本\n\t\"'".encode()):
        (got,) = _names(name)
        assert os.fsencode(got) == name


def test_an_escaped_backslash_before_the_text_stays_text():
    (got,) = _names(b"/mnt/a\\uffffffc3\\\\uffffffc3")  # names holding the escape's text itself
    assert got == "/mnt/a\\uffffffc3\\\\uffffffc3"


def test_a_capture_with_no_call_has_counts_of_nothing():
    """bpftrace prints no empty map: the end's line says the counts, none, were all there are."""
    events = Events()
    list(events.feed(json.dumps({"type": "printf", "data": READY + "\n"}).encode()))
    assert events.counts is None
    list(events.feed(json.dumps({"type": "printf", "data": END + "\n"}).encode()))
    assert events.counts == {} and events.ready
