"""`fusetrace fault MOUNTPOINT add|list|clear|event|crash`: fault rules and model events on a
running mount, through its control socket.  The server checks every rule (one line per
mistake); this only turns options into the rule's keys (docs/FAULTS.md)."""

import argparse
import json
import time
from typing import Any

from .client import ask
from .errors import BadValue
from .faults.rules import EVENT_ID, parse_rule
from .texttable import table

# option → the rule's key, in the order `add --help` lists them
_MATCH = (
    (
        "--op",
        "op",
        "OPS",
        "operations or classes, comma-separated: write,fsync; data, metadata, "
        "meta_read, meta_write, read, write, commit, all (default all)",
    ),
    (
        "--path",
        "path",
        "GLOB",
        "paths below the mount: * and ? within a name, ** across /; a glob not starting with / matches at any depth",
    ),
)
_WHEN = (
    ("--probability", "probability", float, "P", "each match fires with probability P (0 < P <= 1)"),
    (
        "--seed",
        "seed",
        int,
        "N",
        "with --probability or a drawn --delay: the same seed and workload fire the same faults, "
        "delayed alike (default: drawn, and shown by list)",
    ),
    ("--count", "count", int, "N", "fire at most N times (a stall: N outages; default 1)"),
    ("--every", "every", int, "N", "fire on every Nth match only"),
    ("--after", "after", str, "DURATION", "not before this long after now (e.g. 10s, 500ms, 2m)"),
    ("--until", "until", str, "DURATION", "not after this long after now"),
)


def add_parser(sub) -> None:
    f = sub.add_parser(
        "fault",
        help="inject faults into a running mount: add, list, clear; model events",
        description="Fault rules make chosen operations fail, stall, slow down, go stale or come up "
        "short; events script the emulated file system's timeline. See "
        "docs/FAULTS.md.",
    )
    f.add_argument("mountpoint")
    actions = f.add_subparsers(dest="fault_command", required=True, metavar="ACTION")
    a = actions.add_parser("add", help="add a rule (in force at once)")
    a.add_argument("--id", help="the rule's name (default r1, r2, ...)")
    for option, _key, metavar, text in _MATCH:
        a.add_argument(option, metavar=metavar, help=text)
    a.add_argument("--pid", type=int, action="append", metavar="PID", help="only this process (repeatable)")
    a.add_argument("--comm", action="append", metavar="NAME", help="only processes of this name (repeatable)")
    for option, _key, kind, metavar, text in _WHEN:
        a.add_argument(option, type=kind, metavar=metavar, help=text)
    e = a.add_argument_group("effect (exactly one)")
    e.add_argument(
        "--errno",
        metavar="NAME",
        help="fail with this errno (EIO, ENOSPC, ...); with --full or --soft, the errno they fail with",
    )
    e.add_argument(
        "--stall",
        metavar="DURATION",
        help="the server stops answering this long: matching operations wait, then proceed (a hard NFS mount)",
    )
    e.add_argument(
        "--soft",
        action="store_true",
        help="with --stall: fail (EIO, or --errno ETIMEDOUT) after timeo x retrans, as a soft NFS mount does",
    )
    e.add_argument("--timeo", type=int, metavar="DECISECONDS", help="with --soft: NFS timeo (default 600)")
    e.add_argument("--retrans", type=int, metavar="N", help="with --soft: NFS retrans (default 2)")
    e.add_argument(
        "--delay",
        metavar="DELAY",
        help="each matching operation waits this long more, then runs: 50ms; uniform:10ms,200ms; "
        "lognormal:p50=5ms,p99=200ms",
    )
    e.add_argument("--stale", action="store_true", help="the file is gone on the server: ESTALE from now on")
    e.add_argument(
        "--write-error",
        metavar="ERRNO",
        help="buffered writes succeed; the next fsync and close of the file fail with ERRNO",
    )
    e.add_argument("--full", metavar="SIZE", help="ENOSPC (or --errno EDQUOT) once writes pass SIZE (4k, 10M)")
    e.add_argument("--short", metavar="BYTES", help="reads and writes carry at most BYTES")
    ls = actions.add_parser("list", help="the rules in force, how often each matched and fired; model events")
    ls.add_argument("--json", action="store_true")
    c = actions.add_parser(
        "clear",
        help="remove rules (all, or those named); stalled operations go on. "
        "Events not yet happened: named (e1, e2, ...), or all with --events",
    )
    c.add_argument("ids", nargs="*", metavar="ID")
    c.add_argument("--events", action="store_true", help="call off every model event not yet happened")
    ev = actions.add_parser("event", help="schedule a model event on an emulated mount")
    ev.add_argument("--at", required=True, metavar="DURATION", help="this long from now")
    what = ev.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="change profile keys then (burst_credit_balance=0: credits run out)",
    )
    what.add_argument("--stall", metavar="DURATION", help="the emulated server answers nothing this long")
    ev.add_argument("--json", action="store_true")
    cr = actions.add_parser(
        "crash",
        help="the client dies now (a mount armed with --crashable): every file back as it "
        "was last made durable, open files stale",
    )
    cr.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    mnt = args.mountpoint
    if args.fault_command == "add":
        raw = rule_of(args)
        parse_rule(raw, "fault add", "r1")  # a mistake in the options is a usage error (2), before anything is sent
        rule = ask(mnt, cmd="fault_add", rule=raw)["rule"]
        print(f"{rule['id']}: added")
    elif args.fault_command == "list":
        answer = ask(mnt, cmd="fault_list")
        print(json.dumps(answer, indent=2) if args.json else render(answer))
    elif args.fault_command == "clear":
        events = [i for i in args.ids if EVENT_ID.fullmatch(i)]
        rules = [i for i in args.ids if not EVENT_ID.fullmatch(i)]
        if events or args.events:
            off = ask(mnt, cmd="event_clear", **({} if args.events else {"ids": events}))["removed"]
            late = [i for i in events if i not in off]  # named, and already happened or called off
            if off:
                print(f"called off {', '.join(off)}")
            if late:
                print(
                    f"{', '.join(late)}: already happened or called off, nothing to call off "
                    f"(fusetrace fault {mnt} list)"
                )
            elif not off:
                print("no event was still to happen")
        if rules or not (events or args.events):
            removed = ask(mnt, cmd="fault_clear", **({"ids": rules} if rules else {}))["removed"]
            print(f"removed {', '.join(removed)}" if removed else "no rules were in force")
    elif args.fault_command == "crash":
        done = ask(mnt, cmd="crash")["crashed"]
        print(json.dumps(done) if args.json else crashed_line(done))
    else:
        event: dict[str, object] = {"at": args.at}
        if args.stall:
            event["stall"] = args.stall
        else:
            event["set"] = dict(_assignment(item) for item in args.set)
        added = ask(mnt, cmd="event_add", event=event)["event"]
        print(json.dumps(added) if args.json else f"scheduled {added['id']}: {_event_line(added, time.time())}")
    return 0


def crashed_line(done: dict[str, int]) -> str:
    """One line of what a crash undid (the control socket's answer)."""
    return (
        f"crashed: {done['files']:,} files put back as last made durable ({done['pages_lost']:,} pages "
        f"undone, {done['pages_torn']:,} torn, {done['bytes_cut']:,} bytes cut at their ends), "
        f"{done['handles']:,} open files stale"
    )


def rule_of(args: argparse.Namespace) -> dict[str, object]:
    """The rule's table from `fault add`'s options: only those given."""
    rule: dict[str, object] = {}
    if args.id is not None:
        rule["id"] = args.id
    for _option, key, _metavar, _text in _MATCH:
        if getattr(args, key) is not None:
            rule[key] = getattr(args, key)
    for key in ("pid", "comm"):
        if getattr(args, key):
            rule[key] = getattr(args, key)
    for _option, key, *_ in _WHEN:
        if getattr(args, key) is not None:
            rule[key] = getattr(args, key)
    for key in ("errno", "stall", "delay", "timeo", "retrans", "write_error", "full", "short"):
        if getattr(args, key) is not None:
            rule[key] = getattr(args, key)
    for key in ("soft", "stale"):
        if getattr(args, key):
            rule[key] = True
    return rule


def _assignment(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep:
        raise BadValue(f"fault event --set {item}: expected KEY=VALUE")
    return key.strip(), value.strip()


def _event_line(ev: dict[str, Any], now: float) -> str:
    """A scheduled model event, with when it happens and whether it has."""
    what = (
        f"stall {_span(ev['stall'])}"
        if "stall" in ev
        else "set " + ", ".join(f"{k}={_value(v)}" for k, v in ev["set"].items())
    )
    at, end = ev["wall_time"], ev["wall_time"] + ev.get("stall", 0)
    day = time.localtime(at)[:3] != time.localtime(now)[:3]  # another day: say which
    clock = time.strftime("%Y-%m-%d %H:%M:%S" if day else "%H:%M:%S", time.localtime(at))
    off = ev.get("called_off")
    if "refused" in ev:  # a later change made it inconsistent at its instant
        state = f"not applied: {ev['refused']}"
    elif off is not None and off < end:
        state = f"called off {_span(now - off)} ago" + (f", {_span(off - at)} into it" if off > at else "")
    elif now < at:
        state = f"due in {_span(at - now)}"
    elif now < end:
        state = f"in force, {_span(end - now)} left"
    else:
        state = f"happened {_span(now - at)} ago" if "set" in ev else f"ended {_span(now - end)} ago"
    return f"{what} at {clock} ({state})"


def _value(v: object) -> str:
    """A value an event sets, as `set` would take it back: 1 TiB as 1099511627776, not 1.09951e+12."""
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() else f"{v:g}"
    return str(v)


def _span(seconds: float) -> str:
    """1h 2m, 4m 58s, 12.5s, 250ms."""
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 59.5:
        return f"{seconds:.3g}s"
    whole = round(seconds)
    h, rest = divmod(whole, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}h {m}m" if h else f"{m}m {sec}s" if m else f"{sec}s"


def render(answer: dict[str, Any]) -> str:
    """`fault list` for a terminal."""
    rules = answer.get("rules", [])
    lines = []
    if rules:
        lines.append(
            table(
                ["rule", "matched", "fired", "held", "what"],
                [[r["id"], f"{r['matched']:,}", f"{r['fired']:,}", f"{r['held']:,}", r["summary"]] for r in rules],
                "lrrrl",
            )
        )
    else:
        lines.append("no fault rules in force")
    left = [
        f"{answer[k]:,} {name}"
        for k, name in (("stale_files", "stale files"), ("pending_write_errors", "write-back errors not yet reported"))
        if answer.get(k)
    ]
    if left:
        lines.append("left by the rules: " + "; ".join(left))
    now = time.time()
    for ev in answer.get("events", []):
        lines.append(f"event {ev['id']}: {_event_line(ev, now)}")
    lines.append(f"faults fired since mounting: {answer.get('fired', 0):,}")
    return "\n".join(lines)
