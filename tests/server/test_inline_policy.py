"""The inline policy: which system calls run on the trio loop (a pure model, no clock)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from fusetrace.server.inline import EVICT_FACTOR, PROBE_EVERY, InlinePolicy, is_network

US = 1000
KEY = ("getattr", "meta_read")


def ALONE() -> bool:  # the server has nothing else in hand
    return True


def test_quick_calls_stay_on_the_loop():
    p = InlinePolicy(threshold_us=50)
    for _ in range(1000):
        assert p.inline(KEY)
        p.observe(KEY, 10 * US)
    assert p.describe()["loop"] == ["getattr/meta_read"]


def test_one_hiccup_moves_nothing_but_a_slow_spell_does():
    p = InlinePolicy(threshold_us=50)
    p.observe(KEY, 400 * US)  # a preemption in the middle of one call
    assert p.inline(KEY)
    for _ in range(5):
        p.observe(KEY, 400 * US)  # the file system below has become slow
    assert not p.inline(KEY)
    assert p.describe()["workers"] == ["getattr/meta_read"]


def test_one_very_slow_call_moves_the_operation_at_once():
    p = InlinePolicy(threshold_us=50)
    p.observe(KEY, EVICT_FACTOR * 50 * US)
    assert not p.inline(KEY)


def test_alone_a_slow_operation_runs_on_the_loop_unless_its_last_call_stalled():
    """A serial caller's slow call blocks no one else, and a hand-off would only add to it;
    a call that stalled (over EVICT_FACTOR thresholds) keeps the operation off the loop."""
    p = InlinePolicy(threshold_us=50)
    for _ in range(10):
        p.observe(KEY, 400 * US)  # slow, under the stall bound
    assert not p.inline(KEY) and p.inline(KEY, alone=ALONE)
    p.observe(KEY, EVICT_FACTOR * 50 * US)
    assert [p.inline(KEY, alone=ALONE) for _ in range(PROBE_EVERY)].count(True) == 1  # the probe
    p.observe(KEY, 400 * US)  # slow again, but no stall
    assert p.inline(KEY, alone=ALONE)
    assert not p.inline(("fsync", "commit"), alone=ALONE)


def test_over_a_network_source_a_close_after_writes_never_runs_inline():
    """There it writes back (NFS's close-to-open), even with --inline always."""
    p = InlinePolicy(threshold_us=50, closes_inline=False)
    assert not p.inline(("flush", "commit"), alone=ALONE)
    assert not p.inline(("release", "commit"), alone=ALONE)
    assert p.inline(("flush", "meta_read"))


def test_an_exiled_operation_is_probed_and_comes_back_when_quick_again():
    p = InlinePolicy(threshold_us=50)
    p.observe(KEY, 10_000 * US)
    decisions = [p.inline(KEY) for _ in range(PROBE_EVERY * 3)]
    assert decisions.count(True) == 3  # one probe every PROBE_EVERY calls
    calls = 0
    while not p.inline(KEY):
        calls += 1
        assert calls < 100 * PROBE_EVERY, "never came back to the loop"
    for _ in range(40):  # every probe is quick now
        p.observe(KEY, 5 * US)
        while not p.inline(KEY):
            pass
    assert all(p.inline(KEY) for _ in range(PROBE_EVERY * 2))


def test_fsyncs_sync_writes_and_a_zero_threshold_never_run_inline():
    p = InlinePolicy(threshold_us=50)
    assert not p.inline(("fsync", "commit"))
    assert not p.inline(("fsyncdir", "commit"))
    assert not p.inline(("write", "sync"))
    assert p.inline(("write", "buffered"))
    assert p.inline(("flush", "commit"))  # a close after writes: a descriptor closed, on a local source
    assert p.inline(("release", "commit"))
    off = InlinePolicy(threshold_us=0)
    assert not any(off.inline(KEY) for _ in range(100))


def test_network_and_fuse_file_systems_are_recognised():
    assert is_network("nfs4") and is_network("fuse.fusetrace") and is_network("fuse")
    assert not is_network("ext4") and not is_network("tmpfs") and not is_network("xfs")


def test_a_data_call_is_judged_by_its_speed_not_its_time():
    """A 1 MiB buffered write taking 1 ms (1 GB/s into the page cache) stays on the loop;
    the same write at 100 MB/s (10 ms) is slow, and a 4 KiB one taking 1 ms is too."""
    write = ("write", "buffered")
    p = InlinePolicy(threshold_us=50)
    for _ in range(200):
        p.observe(write, 1000 * US, size=1 << 20)
    assert p.inline(write)
    for _ in range(20):
        p.observe(write, 10_000 * US, size=1 << 20)
    assert not p.inline(write)
    small = InlinePolicy(threshold_us=50)
    for _ in range(20):
        small.observe(write, 1000 * US, size=4096)
    assert not small.inline(write)


def test_one_very_slow_write_moves_writes_at_once():
    """A 1 MiB write is allowed its bytes on top of the usual eviction: 4 ms moves it at
    once (a write stalled in the page cache's throttling), 3 ms does not."""
    write = ("write", "buffered")
    p = InlinePolicy(threshold_us=100)
    p.observe(write, 3000 * US, size=1 << 20)
    assert p.inline(write)
    p.observe(write, 5000 * US, size=1 << 20)
    assert not p.inline(write)


KEYS = [KEY, ("write", "buffered"), ("fsync", "commit"), ("write", "sync"), ("flush", "commit")]


@settings(deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(KEYS),
            st.integers(0, 5_000 * US),
            st.sampled_from([0, 4096, 1 << 20]),
            st.booleans(),
            st.integers(1, 60),
        ),
        max_size=40,
    ),
    st.sampled_from([0, 50]),
)
def test_a_calm_key_is_exactly_one_whose_quick_calls_the_policy_would_ignore(calls, threshold_us):
    """Pipeline.timed asks the policy nothing for a calm key's call within the
    threshold: so a calm key must be one inline() lets run and such a call's observe()
    leaves as it was, and every key with no slow call lately that may run inline is
    calm.  Calls come as the handlers make them (observed when inline() let them run)
    and, the policy being pure, as a caller that observes anything would; each call
    `times` times over, so that a slow key's share can decay back to none."""
    p = InlinePolicy(threshold_us=threshold_us)
    for key, ns, size, asked, times in calls:
        for _ in range(times):
            if not asked or p.inline(key):
                p.observe(key, ns, size)
        for k in KEYS:
            eligible = threshold_us > 0 and (k[1] not in ("commit", "sync") or k[0] == "flush")
            assert (k in p.calm) == (eligible and p._slow.get(k) == 0.0)
            if k in p.calm:
                state = (dict(p._slow), dict(p._skipped), set(p.calm))
                assert p.inline(k)
                p.observe(k, int(p.threshold_ns), size)
                assert (p._slow, p._skipped, p.calm) == state


def test_a_slow_key_is_calm_again_once_its_share_is_forgotten():
    p = InlinePolicy(threshold_us=50)
    p.observe(KEY, 10 * US)
    assert KEY in p.calm
    p.observe(KEY, 400 * US)  # one slow call: share 0.1
    assert KEY not in p.calm and p.inline(KEY)
    quick = 0
    while KEY not in p.calm:
        p.observe(KEY, 10 * US)
        quick += 1
        assert quick < 100, "never calm again"
    assert 40 <= quick <= 50  # 0.1 x 0.9^n under FORGOTTEN (0.001): n = 44
