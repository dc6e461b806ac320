"""bpftrace's JSON lines read back (fusetrace/capture/events.py) as bpftrace 0.17 prints
them: names' bytes above 0x7f, which it escapes as a sign-extended "\\uffffffXX", come back
as the bytes they were, in UTF-8 or in none (an escaped backslash stays text); a capture
in which no call was counted, whose empty counts it does not print, lost nothing."""

import json
import os

from support.capture import bpftrace_json

from fusetrace.capture.calls import OP_IDS, OPS
from fusetrace.capture.events import Events, NamedCall
from fusetrace.capture.program import END, READY, SLOT

_SLOT = json.dumps({"type": "printf", "data": SLOT + "\n"}).encode()


def _names(name: bytes) -> list[str]:
    """What Events makes of one slot holding an open of `name`."""
    value = json.dumps(
        [OP_IDS["open"], 10, 0, 0, 5, 3, 0, 0, 0, 0, 1, 2, 0o100644, -100, -100, 0, 1, "cat", 11, 1000]
    ).encode()
    lines = [b'{"type": "map", "data": {"@%s": {"11,1000": %s}}}' % (m, v) for m, v in [
        (b"p0", value), (b"s0", bpftrace_json(name)), (b"t0", b'""'),
    ]]  # fmt: skip
    lines.append(_SLOT)
    lines.append(b'{"type": "map", "data": {"@n": {"%d": 1}}}' % OP_IDS["open"])
    lines.append(json.dumps({"type": "printf", "data": END + "\n"}).encode())
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


def _slot(index: int, starts: list[int]) -> list[bytes]:
    """A set's print and the slot's end: a write on a descriptor and an unlink by name,
    each begun at `starts`."""
    fds = {f"7,{s}": [OP_IDS["write"], 10, 0, 0, 5, 1, 1, 2, 0o100644, 1, 0, 1, 3, 5, "w", 7, s] for s in starts}
    named = {
        f"7,{s + 1}": [OP_IDS["unlink"], 10, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, -100, -100, 18, 1, "w", 7, s + 1]
        for s in starts
    }
    maps = [("@f", fds), ("@p", named), ("@s", {k: "/mnt/x" for k in named}), ("@t", {k: "" for k in named})]
    return [json.dumps({"type": "map", "data": {f"{m}{index}": d}}).encode() for m, d in maps if d] + [_SLOT]


def test_a_slot_printed_by_the_timer_and_by_end_is_read_once():
    """At the end, the timer's print of the last slot and END's come in either order."""
    counts = [b'{"type": "map", "data": {"@n": {"%d": 2, "%d": 2}}}' % (OP_IDS["write"], OP_IDS["unlink"])]
    end = [json.dumps({"type": "printf", "data": END + "\n"}).encode()]
    b = _slot(1, [100, 200])
    for lines in (
        [*b, *_slot(0, []), *b, *counts, *end],  # the timer's print, then END's
        [*_slot(0, []), *b, *counts, *end, *b],  # END's, then the timer's
    ):
        events = Events()
        calls = [c for line in lines for c in events.feed(line)]
        assert sorted((c.start_ns, OPS[c.op - 1]) for c in calls) == [
            (100, "write"),
            (101, "unlink"),
            (200, "write"),
            (201, "unlink"),
        ]


def test_a_named_call_whose_names_were_cleared_is_not_read():
    """A set cleared between the print of its calls and of their names: the calls are
    not read (the counts then say they were lost), never read with empty names."""
    p, s, t, end = _slot(2, [300])[1:]
    events = Events()
    calls = [c for line in (p, end) for c in events.feed(line)]
    assert calls == [] and events.unnamed == 1
    assert [c.name for line in (p, s, t, end, *_slot(3, [])) for c in events.feed(line)] == ["/mnt/x"]
