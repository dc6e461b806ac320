"""Fault rules and the injector's decisions, in process: what a rule matches, when it
fires, what it leaves behind; a probability rule fires at its rate and a seed reproduces
its firings (Hypothesis); every mistake in a rule is one line naming it."""

import errno as E
import math
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusetrace import fault_cli
from fusetrace.errors import UserError
from fusetrace.faults.injector import Injector
from fusetrace.faults.rules import parse_rule
from fusetrace.request import Kind

S = 1_000_000_000


def nobody() -> tuple[int, str, int]:
    return 4242, "app", 0


def check(
    inj: Injector,
    op: str = "write",
    path: str = "/d/f.db",
    now: int = 0,
    kind: Kind | None = None,
    file: int = 7,
    directory: int = 0,
    size: int = 4096,
    who=nobody,
):
    kind = (
        kind
        or {
            "write": Kind.WRITE,
            "read": Kind.READ,
            "fsync": Kind.COMMIT,
            "getattr": Kind.META_READ,
            "create": Kind.META_WRITE,
            "lookup": Kind.META_READ,
            "mkdir": Kind.META_WRITE,
        }[op]
    )
    return inj.check(op, kind, file, directory, path, size, who, now)


def injector(**rule) -> Injector:
    inj = Injector()
    inj.add(rule, 0)
    return inj


def test_a_rule_matches_its_ops_classes_and_glob():
    inj = injector(op="fsync,meta_write", path="*.db", errno="EIO")
    assert check(inj, "fsync", "/a/b/c.db").errno == E.EIO
    assert check(inj, "create", "/x.db").errno == E.EIO  # a class
    assert check(inj, "fsync", "/a/b.dbx") is None
    assert check(inj, "write", "/x.db") is None
    assert check(inj, "getattr", "/x.db") is None
    rooted = injector(path="/top/*", errno="EACCES")
    assert check(rooted, path="/top/f") is not None and check(rooted, path="/top/sub/f") is None
    assert check(injector(path="/top/**", errno=5), path="/top/sub/f").errno == 5


def test_pid_and_process_name_are_looked_up_only_when_a_rule_asks():
    asked = []

    def who():
        asked.append(1)
        return 99, "sqlite3", 0

    inj = injector(errno="EIO")
    check(inj, who=who)
    assert not asked
    inj = injector(comm="sqlite3", errno="EIO")
    assert check(inj, who=who) is not None and asked
    assert check(injector(pid=[98], errno="EIO"), who=who) is None


def test_count_every_and_window():
    inj = injector(errno="EIO", count=2)
    assert [check(inj) is not None for _ in range(4)] == [True, True, False, False]
    inj = injector(errno="EIO", every=3)
    assert [check(inj) is not None for _ in range(7)] == [False, False, True, False, False, True, False]
    inj = injector(errno="EIO", after="2s", until="3s")
    assert [check(inj, now=t * S // 2) is not None for t in range(8)] == [False] * 4 + [True] * 3 + [False]
    [listed] = inj.listing()
    assert (listed["matched"], listed["fired"]) == (8, 3)


def test_a_stall_is_one_outage_that_holds_what_the_rule_matches_until_it_ends():
    inj = injector(op="data", stall="2s")
    first = check(inj, now=S)
    assert (first.effect, first.until_ns, first.fail_ns) == ("stall", 3 * S, 0)
    held = check(inj, "read", now=2 * S)
    assert held.until_ns == 3 * S  # held to the same end
    assert check(inj, "getattr", now=2 * S) is None  # not matched: answers
    assert check(inj, now=3 * S) is None  # over; one outage unless count says more
    [listed] = inj.listing()
    assert (listed["fired"], listed["held"]) == (1, 1)


def test_a_soft_stall_fails_after_the_nfs_timeouts():
    rule = parse_rule({"stall": "10m", "soft": True, "timeo": 600, "retrans": 2}, "t", "r1")
    assert rule.soft_timeout_s() == 60 + 120 + 180  # linear back-off: timeo, 2 timeo, 3 timeo
    assert (
        parse_rule({"stall": "1h", "soft": True, "timeo": 3000, "retrans": 3}, "t", "r1").soft_timeout_s()
        == 300 + 600 + 600 + 600
    )  # each timeout capped at 600 s
    huge = parse_rule({"stall": "1h", "soft": True, "timeo": 600, "retrans": 10**12}, "t", "r1")
    assert huge.soft_timeout_s() == pytest.approx(600 * 10**12)  # at once: no loop over the retries
    inj = injector(stall="30s", soft=True, timeo=5, retrans=1, errno="ETIMEDOUT")
    f = check(inj, now=0)
    assert f.fail_ns == int(1.5 * S) and f.errno == E.ETIMEDOUT


def test_stale_marks_the_object_and_never_a_name_being_looked_up():
    inj = injector(op="read,lookup", stale=True)
    assert check(inj, "lookup", file=3, directory=3) is None  # a lookup names an entry: not stale-able
    assert check(inj, "read", file=9).errno == E.ESTALE
    assert inj.stale_rule(9, 0) == "r1" and inj.stale_rule(2, 9) == "r1" and inj.stale_rule(2, 3) is None
    inj.clear()
    assert inj.stale_rule(9, 0) is None and not inj.active


def test_a_write_error_is_reported_once_per_handle_open_at_the_time():
    inj = injector(write_error="EIO")
    assert check(inj).effect == "write_error"
    inj.write_failed(7, "r1", E.EIO, {10, 11})
    assert inj.reported(7, 12) is None  # opened later: never sees it
    assert inj.reported(7, 10) == (E.EIO, "r1")
    assert inj.reported(7, 10) is None
    assert inj.reported(7, 11) == (E.EIO, "r1") and not inj.pending


def test_full_lets_writes_through_cuts_the_crossing_one_and_refuses_the_rest():
    inj = injector(full="10k", errno="EDQUOT")
    assert check(inj, size=8192) is None
    short = check(inj, size=8192)
    assert (short.effect, short.short) == ("short", 2048)
    assert check(inj, size=1).errno == E.EDQUOT
    assert check(inj, "create", directory=1).errno == E.EDQUOT
    assert check(inj, "read") is None  # not what a full rule takes


def test_with_the_write_back_cache_no_write_is_cut_short():
    # its kernel takes a short write-back as done and drops the rest: a full file system
    # fails the crossing write-back (the caller sees it at fsync or close), and a short
    # rule is refused in one line (a short read would be taken for a hole of zeros)
    inj = Injector(write_back=True)
    inj.add({"full": "10k", "errno": "ENOSPC"}, 0)
    assert check(inj, size=8192) is None
    crossing = check(inj, size=8192)
    assert (crossing.effect, crossing.errno) == ("errno", E.ENOSPC)
    for rule in ({"short": 100}, {"short": 100, "op": "write"}, {"short": 100, "op": "read"}):
        with pytest.raises(UserError, match="fault add: short: ") as caught:
            inj.add(rule, 0, "fault add")
        assert "\n" not in str(caught.value) and "--no-writeback-cache" in str(caught.value)


@pytest.mark.parametrize(
    "rule, says",
    [
        ({"errno": "EIOO"}, "errno 'EIOO': not an errno name"),
        ({}, "exactly one effect"),
        ({"errno": "EIO", "stale": True}, "exactly one effect"),
        ({"errno": "EIO", "op": "wirte"}, "op 'wirte': not an operation"),
        ({"errno": "EIO", "op": "release"}, "op 'release': not an operation"),
        ({"errno": "EIO", "probability": 1.5}, "probability 1.5: must be a number above 0"),
        ({"errno": "EIO", "seed": 3}, "seed: only with probability"),
        ({"errno": "EIO", "count": 0}, "count 0: must be a whole number, 1 or more"),
        ({"errno": "EIO", "after": "10 parsecs"}, "after '10 parsecs': expected seconds"),
        ({"errno": "EIO", "after": "5s", "until": "2s"}, "until '2s': must be later than after"),
        ({"errno": "EIO", "path": "a[b"}, "path a[b: a [ opens a character class"),
        ({"errno": "EIO", "colour": "red"}, "unknown key 'colour'"),
        ({"stall": "0s"}, "stall '0s': must be longer than 0"),
        ({"stall": "5s", "timeo": 10}, "timeo, retrans and errno go with soft = true"),
        ({"short": 0}, "short 0: expected bytes (1 or more)"),
        ({"short": 10, "op": "fsync"}, "short applies to read and write only"),
        ({"full": "1M", "count": 2}, "count: a full rule counts every matched write"),
        ({"write_error": "EIO", "op": "read"}, "write_error applies to write only"),
        ({"stale": "yes"}, "stale 'yes': write stale = true"),
        ({"errno": "EIO", "id": "a b"}, "id 'a b': letters, digits"),
        ({"errno": "EIO", "pid": -1}, "pid -1: a process id is a number above 0"),
        ({"errno": "EIO", "comm": "averyveryverylongname"}, "give 'averyveryverylo'"),  # it would never match
        (
            {"errno": "EIO", "comm": "b\udcffd-name-of-sixteen"},
            "Linux keeps 1 to 15 bytes",
        ),  # undecodable, as argv gives
        ({"full": "1M", "errno": "EIO"}, "errno 'EIO': a full file system answers ENOSPC, or EDQUOT"),
    ],
)
def test_every_mistake_is_one_line_naming_the_rule_and_key(rule, says):
    with pytest.raises(UserError) as caught:
        parse_rule(rule, "faults.toml: rule 3", "r1")
    message = str(caught.value)
    assert message.startswith("faults.toml: rule 3: ") and says in message and "\n" not in message


def test_ids_are_unique_and_clear_names_what_it_removed():
    inj = Injector()
    assert inj.add({"errno": "EIO"}, 0)["id"] == "r1"
    assert inj.add({"errno": "EIO", "id": "mine"}, 0)["id"] == "mine"
    with pytest.raises(UserError, match="a rule with that id is in force"):
        inj.add({"errno": "EIO", "id": "mine"}, 0)
    with pytest.raises(UserError, match="no such rule"):
        inj.clear(["nope"])
    assert inj.clear(["mine"]) == ["mine"] and inj.clear() == ["r1"] and not inj.active


def test_a_rule_listed_is_a_rule_that_can_be_added_again():
    inj = Injector()
    for rule in (
        {"op": "fsync,write", "path": "*.db", "errno": "EIO", "probability": 0.5, "seed": 7},
        {"stall": "1500ms", "soft": True, "errno": "ETIMEDOUT", "after": "10s", "until": "1m"},
        {"full": "1M", "errno": "EDQUOT"},
        {"short": 100, "op": "read", "pid": [3], "comm": ["x"]},
    ):
        listed = inj.add(rule, 0)
        again = parse_rule({k: v for k, v in listed.items()}, "again", "x")
        assert again.describe() == listed


@settings(max_examples=30, deadline=None)
@given(p=st.sampled_from([0.01, 0.1, 0.5, 0.9]), seed=st.integers(0, 2**31 - 1), n=st.sampled_from([2000, 5000]))
def test_a_probability_rule_fires_at_its_rate_within_the_binomial_bound(p, seed, n):
    inj = injector(errno="EIO", probability=p, seed=seed)
    fired = sum(check(inj, path=f"/f{i % 37}") is not None for i in range(n))
    sigma = math.sqrt(n * p * (1 - p))
    assert abs(fired - n * p) <= 5 * sigma  # five standard deviations: a false alarm about once in 1.7 million


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    workload=st.lists(
        st.tuples(st.sampled_from(["read", "write", "fsync"]), st.integers(0, 5)), min_size=1, max_size=200
    ),
    other=st.lists(st.integers(6, 9), max_size=50),
)
@pytest.mark.parametrize(
    "rule",
    [{"errno": "EIO", "probability": 0.3}, {"delay": "lognormal:p50=5ms,p99=200ms", "probability": 0.5}],
    ids=["errno", "drawn delay"],
)
def test_a_seed_reproduces_the_same_firings_whatever_else_interleaves(rule, seed, workload, other):
    """Which matches fire, and a drawn delay's length, hang on the seed and the file's own
    operations only."""

    def firings(interleave: list[int]) -> list[tuple[int, int] | None]:
        inj = injector(**rule, seed=seed)
        out = []
        for i, (op, f) in enumerate(workload):
            if i < len(interleave):  # another file's operations in between change nothing here
                check(inj, "read", path=f"/other{interleave[i]}")
            fired = check(inj, op, path=f"/f{f}")
            out.append(None if fired is None else (fired.errno, fired.until_ns))
        return out

    assert firings([]) == firings(other)


def test_without_a_seed_one_is_drawn_and_listed():
    inj = injector(errno="EIO", probability=0.5)
    [listed] = inj.listing()
    assert isinstance(listed["seed"], int) and f"seed {listed['seed']}" in listed["summary"]


def test_an_event_on_another_day_is_listed_with_its_date():
    now = time.time()
    year_on = fault_cli._event_line({"wall_time": now + 365 * 86400, "set": {"burst_credit_balance": 0.0}}, now)
    assert re.search(r" at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \(due in ", year_on), year_on
    soon = fault_cli._event_line({"wall_time": now, "stall": 1.0}, now)
    assert re.search(r" at \d\d:\d\d:\d\d \(in force", soon), soon


@given(st.integers(1, 20_000), st.integers(0, 300))
def test_the_soft_timeout_is_the_sum_of_the_capped_linear_back_off(timeo, retrans):
    rule = parse_rule({"stall": "1h", "soft": True, "timeo": timeo, "retrans": retrans}, "t", "r1")
    assert rule.soft_timeout_s() == pytest.approx(sum(min(timeo / 10 * (i + 1), 600.0) for i in range(retrans + 1)))
