"""What the kernel is told to keep (NfsClient.trusted), in virtual time: the time the emulated
NFS client goes on trusting a name and an object's attributes, so that a kernel told these
timeouts asks the mount again exactly when that client would send an RPC (docs/EMULATOR.md,
"What the kernel is told")."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusetrace.emulator.call import Call
from fusetrace.emulator.model import Model
from fusetrace.emulator.nfsclient import NfsClient
from fusetrace.emulator.ops import Gate
from fusetrace.emulator.profiles import apply_overrides, load_profile

# fixed 1 ms reads and 10 ms writes, as tests/emulator/test_nfs_client.py's FIXED, acregmin 3 s,
# acregmax 60 s, acdirmin 30 s (the nfs(5) defaults)
FIXED = [
    "read_latency_ms=1",
    "read_latency_p99_ms=1",
    "meta_read_latency_ms=1",
    "meta_read_latency_p99_ms=1",
    "meta_write_latency_ms=10",
    "meta_write_latency_p99_ms=10",
]
ROOT = 1


def client() -> NfsClient:
    return NfsClient(Model(apply_overrides(load_profile("efs-bursting"), FIXED), 0.0))


def test_attributes_are_kept_as_long_as_the_client_trusts_them_doubling_while_unchanged():
    c = client()
    found = c.admit(Call("lookup", directory=ROOT, name="a"), 0.0)
    name, attrs = c.trusted(7, False, found.done_at, ROOT, "a")
    # acdirmin from the directory's ACCESS, 1 ms before; acregmin from the LOOKUP, which brought them
    assert name == pytest.approx(30.0, abs=0.01) and attrs == pytest.approx(3.0, abs=0.01)
    first = c.admit(Call("getattr", file=7), 3.5)
    assert first.rpcs == "GETATTR" and c.trusted(7, False, first.done_at)[1] == pytest.approx(3.0, abs=0.01)
    again = c.admit(Call("getattr", file=7), 7.0)
    assert again.rpcs == "GETATTR"
    # fetched again unchanged: trusted twice as long, and the kernel is told so, not acregmin
    assert c.trusted(7, False, again.done_at)[1] == pytest.approx(6.0, abs=0.01)
    assert c.trusted(7, False, again.done_at + 5.0)[1] == pytest.approx(1.0, abs=0.01)
    assert c.trusted(7, False, again.done_at + 7.0)[1] == 0.0


def test_telling_the_kernel_changes_nothing_the_client_decides():
    """trusted() is asked on a mount and never by `fusetrace simulate`: the client's answers
    to the requests are the same either way."""
    told, untold = client(), client()
    calls = [
        (0.0, Call("lookup", directory=ROOT, name="a")),
        (0.1, Call("mkdir", directory=ROOT, name="d")),
        (0.2, Call("opendir", file=9)),
        (0.3, Call("readdir", file=9, handle=5, size=3)),
        (1.0, Call("getattr", file=7)),
        (1.0, Call("getattr", file=9)),
        (4.0, Call("getattr", file=7)),
    ]
    for now, call in calls:
        a, b = told.admit(call, now), untold.admit(call, now)
        assert (a.gate, a.rpcs, a.done_at) == (b.gate, b.rpcs, b.done_at)
        told.trusted(7, False, a.done_at, ROOT, "a")
        told.trusted(9, True, a.done_at, ROOT, "d")
        told.trusted(8, False, a.done_at, 9, "x", handle=5)


def test_a_cached_name_of_stale_attributes_tells_the_kernel_to_ask_for_them():
    """A name NFS still trusts (its directory's attributes are) whose object's attributes it
    does not: no RPC for the lookup, then the stat's GETATTR (the kernel's FUSE path asks
    for them at once, told 0)."""
    c = client()
    c.admit(Call("lookup", directory=ROOT, name="a"), 0.0)
    c.trusted(7, False, 0.01, ROOT, "a")
    assert c.admit(Call("lookup", directory=ROOT, name="a"), 2.0).gate is Gate.CACHE
    assert c.trusted(7, False, 2.0, ROOT, "a")[1] == pytest.approx(1.0, abs=0.01)  # acregmin of the LOOKUP's
    assert c.admit(Call("lookup", directory=ROOT, name="a"), 5.0).gate is Gate.CACHE
    name, attrs = c.trusted(7, False, 5.0, ROOT, "a")
    assert name > 20.0 and attrs == 0.0
    assert c.admit(Call("getattr", file=7), 5.0).rpcs == "GETATTR"


def test_a_listing_that_sent_readdirplus_brings_its_entries_attributes_a_cached_one_does_not():
    c = client()
    c.admit(Call("opendir", file=2), 0.0)
    listed = c.admit(Call("readdir", file=2, handle=5, size=3), 0.01)
    assert listed.rpcs == "READDIRPLUS"
    name, attrs = c.trusted(8, False, listed.done_at, 2, "x", handle=5)
    assert name == c.trusted(2, True, listed.done_at)[1] > 0  # as a looked-up name: while the directory is
    assert attrs == pytest.approx(3.0, abs=0.01)
    c.admit(Call("opendir", file=2), 1.0)
    assert c.admit(Call("readdir", file=2, handle=7, size=3), 1.01).gate is Gate.CACHE
    # the cached listing's entries: acregmin from the READDIRPLUS pass that filled it
    assert c.trusted(8, False, 1.01, 2, "x", handle=7)[1] == pytest.approx(2.0, abs=0.01)
    c.admit(Call("opendir", file=2), 10.0)
    again = c.admit(Call("readdir", file=2, handle=6, size=3), 10.01)
    assert again.gate is Gate.CACHE  # the listing NFS kept: no attributes came with it
    assert c.trusted(8, False, 10.01, 2, "x", handle=6)[1] == 0.0


def test_what_a_create_makes_comes_with_its_attributes():
    c = client()
    made = c.admit(Call("mkdir", directory=ROOT, name="d"), 0.0)
    name, attrs = c.trusted(9, True, made.done_at, ROOT, "d")
    assert name == pytest.approx(30.0, abs=0.01) and attrs == pytest.approx(30.0, abs=0.01)  # acdirmin
    assert c.trusted(0, False, made.done_at, ROOT, "gone")[0] == 0.0  # a name it never looked up


# one file in each of three directories (a directory's revalidation then revalidates one name,
# as the kernel's FUSE path does each of its own), stats at random moments
stats = st.lists(
    st.tuples(st.floats(min_value=0.0, max_value=40.0), st.integers(min_value=0, max_value=2)),
    min_size=1,
    max_size=40,
)


@settings(max_examples=80, deadline=None)
@given(stats)
def test_a_kernel_told_these_timeouts_asks_exactly_when_nfs_would_send(seq):
    """The kernel's FUSE path in miniature: a dentry and an attribute expiry per file, set
    from each reply.  Whatever the pauses, every request it sends costs an RPC, and it
    answers a stat alone only within the client's period for the file (or acregmin of the
    LOOKUP that brought its attributes, which NFS trusts as it trusts a GETATTR's)."""
    c = client()
    name_until: dict[int, float] = {}
    attrs_until: dict[int, float] = {}
    brought: dict[int, float] = {}  # when a LOOKUP last brought the file's attributes
    now = 0.0
    for pause, k in seq:
        now += pause
        directory, inode, name = 10 + k, 20 + k, f"f{k}"
        if now >= name_until.get(k, -1.0):
            looked = c.admit(Call("lookup", directory=directory, name=name), now)
            assert looked.gate is not Gate.CACHE  # NFS revalidates (or looks up) too
            now = looked.done_at
            kept_name, kept_attrs = c.trusted(inode, False, now, directory, name)
            name_until[k], attrs_until[k] = now + kept_name, now + kept_attrs
            brought[k] = now if looked.rpcs.endswith("LOOKUP") else brought.get(k, -1.0)
        if now >= attrs_until[k]:
            fetched = c.admit(Call("getattr", file=inode), now)
            assert fetched.rpcs == "GETATTR"  # never a stat NFS answers from its cache
            now = fetched.done_at
            attrs_until[k] = now + c.trusted(inode, False, now)[1]
        else:  # the kernel answers: within the client's period, or acregmin of a LOOKUP's
            assert c.trusted(inode, False, now)[1] > 0.0 or now < brought[k] + 3.0
            assert c.trusted(directory, True, now)[1] > 0.0
