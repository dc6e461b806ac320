"""Delay rules in process: a delay is read in each of its forms and said back the same,
every mistake is one line naming the rule and the key, and a drawn delay is a pure
function of (seed, rule, operation, path, match count): within its bounds (uniform),
with its median and 99th percentile where they were asked (lognormal), the same for the
same workload whatever interleaves with it (Hypothesis)."""

import math
from statistics import NormalDist, median, quantiles

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusetrace.errors import UserError
from fusetrace.faults.durations import Delay, parse_delay
from fusetrace.faults.injector import Injector, point
from fusetrace.faults.rules import parse_rule
from fusetrace.request import Kind

MS = 1_000_000
KINDS = {"read": Kind.READ, "write": Kind.WRITE, "fsync": Kind.COMMIT}


def injector(**rule) -> Injector:
    inj = Injector()
    inj.add(rule, 0)
    return inj


def delay_ns(inj: Injector, op: str = "read", path: str = "/f", now: int = 0) -> int | None:
    """The delay a request is given (None: the rule did not fire)."""
    firing = inj.check(op, KINDS[op], 7, 0, path, 4096, lambda: (1, "app", 0), now)
    if firing is None:
        return None
    assert firing.effect == "delay" and firing.errno == 0
    return firing.until_ns - now


@pytest.mark.parametrize(
    "given_, said",
    [
        ("50ms", "50ms"),
        (0.05, "50ms"),
        ("2s", "2s"),
        (" uniform: 10ms , 0.2s ", "uniform:10ms,200ms"),
        ("uniform:0ms,1s", "uniform:0ms,1s"),
        ("lognormal:p99=200ms,p50=5ms", "lognormal:p50=5ms,p99=200ms"),
    ],
)
def test_each_form_is_read_and_said_back_as_a_faults_file_writes_it(given_, said):
    listed = Injector().add({"delay": given_, "op": "fsync"}, 0)  # (a drawn one's seed drawn)
    assert listed["delay"] == said
    assert parse_rule(dict(listed), "again", "x").describe() == listed


def test_a_fixed_delay_delays_every_match_by_exactly_itself_and_holds_no_one_else():
    inj = injector(op="fsync", path="*.db", delay="50ms", id="slowdb")
    assert [delay_ns(inj, "fsync", "/a.db", now=t * MS) for t in (0, 10, 20)] == [50 * MS] * 3
    assert delay_ns(inj, "fsync", "/a.db-journal") is None and delay_ns(inj, "write", "/a.db") is None
    [listed] = inj.listing()
    assert (listed["matched"], listed["fired"], listed["held"]) == (3, 3, 0)  # each its own delay, no outage
    assert listed["summary"] == "delay 50ms; fsync path *.db" and "seed" not in listed


def test_a_drawn_delay_gets_a_seed_that_is_listed_and_reproduces_it():
    inj = injector(delay="uniform:1ms,1s")
    [listed] = inj.listing()
    assert isinstance(listed["seed"], int) and listed["summary"].endswith(f"; seed {listed['seed']}")
    again = injector(delay="uniform:1ms,1s", seed=listed["seed"])
    assert [delay_ns(inj, path=f"/f{i}") for i in range(20)] == [delay_ns(again, path=f"/f{i}") for i in range(20)]
    other = injector(delay="uniform:1ms,1s", seed=listed["seed"] + 1)
    assert [delay_ns(inj, path=f"/f{i}") for i in range(20)] != [delay_ns(other, path=f"/f{i}") for i in range(20)]


def test_count_every_and_probability_choose_which_matches_are_delayed():
    inj = injector(delay="10ms", count=2)
    assert [delay_ns(inj) for _ in range(3)] == [10 * MS, 10 * MS, None]
    inj = injector(delay="10ms", every=2)
    assert [delay_ns(inj) for _ in range(4)] == [None, 10 * MS, None, 10 * MS]
    # a probability decides with the same hash as an errno rule's, the delay with its own
    fires = injector(errno="EIO", probability=0.3, seed=5, id="x")
    delays = injector(delay="uniform:1ms,2ms", probability=0.3, seed=5, id="x")
    paths = [f"/f{i % 7}" for i in range(300)]
    assert [fires.check("read", Kind.READ, 7, 0, p, 1, lambda: (1, "a", 0), 0) is not None for p in paths] == [
        delay_ns(delays, path=p) is not None for p in paths
    ]


@pytest.mark.parametrize(
    "delay, says",
    [
        ("0s", "delay '0s': must be longer than 0"),
        ("fast", "delay 'fast': expected a duration (50ms), uniform:LOW,HIGH"),
        (True, "delay True: expected a duration"),
        ("400d", "delay '400d': expected a duration"),
        ("9000h", "delay '9000h': must be longer than 0 and at most a year"),
        ("uniform:10ms", "delay 'uniform:10ms': expected uniform:LOW,HIGH"),
        ("uniform:1s,10ms", "LOW must be less than HIGH"),
        ("uniform:1s,1s", "LOW must be less than HIGH"),
        ("uniform:1s,9000h", "delay uniform '9000h': at most a year"),
        ("uniform:soon,1s", "delay uniform 'soon': expected seconds"),
        ("lognormal:5ms,200ms", "expected lognormal:p50=A,p99=B"),
        ("lognormal:p50=5ms,p90=200ms", "expected lognormal:p50=A,p99=B"),
        ("lognormal:p50=5ms,p99=5ms", "p50 must be above 0 and p99 above p50"),
        ("lognormal:p50=0ms,p99=5ms", "p50 must be above 0 and p99 above p50"),
        ("lognormal:p50=1,p99=x", "delay p99 'x': expected seconds"),
        ("gamma:1s,2s", "delay 'gamma:1s,2s': expected a duration"),
    ],
)
def test_every_mistake_in_a_delay_is_one_line_naming_the_rule_and_key(delay, says):
    with pytest.raises(UserError) as caught:
        parse_rule({"delay": delay}, "faults.toml: rule 3", "r1")
    message = str(caught.value)
    assert message.startswith("faults.toml: rule 3: ") and says in message and "\n" not in message


@pytest.mark.parametrize(
    "rule, says",
    [
        ({"delay": "1s", "errno": "EIO"}, "exactly one effect of errno, stall, delay"),
        ({"delay": "1s", "seed": 3}, "seed: only with probability or a drawn delay"),
        ({"delay": "1s", "soft": True}, "soft: only with stall"),
    ],
)
def test_a_delay_is_one_effect_and_a_fixed_one_takes_no_seed(rule, says):
    with pytest.raises(UserError, match=says):
        parse_rule(rule, "fault add", "r1")


@given(u=st.floats(1e-12, 1 - 1e-12), v=st.floats(1e-12, 1 - 1e-12))
def test_a_quantile_function_is_monotone_and_a_uniforms_stays_within_its_bounds(u, v):
    uniform = Delay("uniform", 0.01, 0.2)
    assert 0.01 <= uniform.at(u) <= 0.2
    lognormal = Delay("lognormal", 0.005, 0.2)
    lo, hi = sorted((u, v))
    assert lognormal.at(lo) <= lognormal.at(hi) and lognormal.at(lo) > 0
    assert lognormal.at(0.5) == pytest.approx(0.005) and lognormal.at(0.99) == pytest.approx(0.2)


@given(h=st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([0, 1, 2**64 - 1, 2**64 - 2**11])))
def test_every_hash_is_a_point_strictly_inside_0_1_and_every_lognormal_draw_finite(h):
    u = point(h)
    assert 0 < u < 1
    assert 0 < Delay("lognormal", 0.005, 0.2).at(u) < 3600  # (the tail's farthest: 38 min)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    bounds=st.tuples(st.integers(0, 500), st.integers(1, 5000)),
    workload=st.lists(st.tuples(st.sampled_from(["read", "fsync"]), st.integers(0, 9)), min_size=1, max_size=300),
)
def test_a_uniform_delay_is_within_its_bounds_whatever_the_seed_and_workload(seed, bounds, workload):
    low, high = bounds[0], bounds[0] + bounds[1]
    inj = injector(delay=f"uniform:{low}ms,{high}ms", seed=seed)
    for op, f in workload:
        assert low * MS <= delay_ns(inj, op, f"/f{f}") <= high * MS


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    p50_ms=st.sampled_from([1, 5, 50]),
    spread=st.sampled_from([2, 40, 1000]),
)
def test_a_lognormal_delay_has_its_median_and_99th_percentile_over_many_draws(seed, p50_ms, spread):
    n = 4000
    inj = injector(delay=f"lognormal:p50={p50_ms}ms,p99={p50_ms * spread}ms", seed=seed)
    logs = sorted(math.log(delay_ns(inj, "read", f"/f{i % 53}") / MS) for i in range(n))  # 53 paths, 75 each
    sigma = math.log(spread) / NormalDist().inv_cdf(0.99)
    # five standard errors of a sample quantile: sqrt(q (1 - q) / n) / density, in log space
    for q, want_ms, z in ((0.5, p50_ms, 0.0), (0.99, p50_ms * spread, NormalDist().inv_cdf(0.99))):
        bound = 5 * sigma * math.sqrt(q * (1 - q) / n) / NormalDist().pdf(z)
        got = median(logs) if q == 0.5 else quantiles(logs, n=100)[98]
        assert abs(got - math.log(want_ms)) <= bound, (q, math.exp(got), want_ms)


def test_a_parsed_delay_is_the_delay_the_rule_keeps():
    assert parse_delay("lognormal:p50=5ms,p99=200ms", "t") == Delay("lognormal", 0.005, 0.2)
    assert parse_delay(2, "t") == Delay("fixed", 2.0)
