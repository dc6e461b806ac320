"""A fleet's clients in one process on one file system (Model's `fs`, as `fusetrace simulate`
runs a fleet), in virtual time: a client with idle neighbours is a client alone; several
together never pass the file system's throughput, and each is slower than alone."""

import heapq
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from fusetrace.emulator.model import Model, Op, OpClass
from fusetrace.emulator.params import MiB
from fusetrace.emulator.profiles import apply_overrides, load_profile

# the baseline throughput, 5 MiB/s (50 MiB/s a TiB, 100 GiB stored), no credits to burst on
BASELINE = ["burst_credit_balance=0", "stored_size=100GiB", "seed=3"]

_ops = st.lists(
    st.tuples(
        st.sampled_from([OpClass.DATA_READ, OpClass.DATA_WRITE, OpClass.META_READ, OpClass.META_WRITE]),
        st.integers(0, 1 << 20),  # bytes
        st.integers(1, 5),  # file
        st.floats(0.0, 0.05),  # gap before it (s)
    ),
    min_size=1,
    max_size=60,
)


def _op(cls: OpClass, size: int, file: int) -> Op:
    data = cls in (OpClass.DATA_READ, OpClass.DATA_WRITE)
    return Op(cls, size if data else 0, file=file, directory=file if cls is OpClass.META_WRITE else 0)


@settings(max_examples=60, deadline=None)
@given(_ops, st.integers(1, 4))
def test_a_client_with_idle_neighbours_is_a_client_alone(ops, idle):
    params = apply_overrides(load_profile("efs-bursting"), BASELINE)
    alone = Model(params, 0.0)
    first = Model(params, 0.0)
    for i in range(idle):  # other hosts' clients on the same file system, making nothing
        Model(params, 0.0, random.Random(i), first)
    t = 0.0
    for cls, size, file, gap in ops:
        t += gap
        a, b = alone.admit(_op(cls, size, file), t), first.admit(_op(cls, size, file), t)
        assert (a.done_at, a.gate, a.wait) == (b.done_at, b.gate, b.wait)
    assert alone.metrics(t + 10) == first.metrics(t + 10)


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 6), st.sampled_from([64 * 1024, 256 * 1024, 1 << 20]), st.integers(1, 4))
def test_clients_together_stay_within_the_throughput_and_each_is_slower(n, size, depth):
    """n clients each keeping `depth` direct writes of `size` outstanding for 20 s: the bytes
    completed by then are within the 5 MiB/s baseline (and its first moment's allowance), and
    each client completed fewer than one alone does."""
    params = apply_overrides(load_profile("efs-bursting"), BASELINE)
    duration = 20.0

    def run(clients: int) -> list[int]:
        first = Model(params, 0.0)
        models = [first] + [Model(params, 0.0, random.Random(i), first) for i in range(1, clients)]
        heap = [(0.0, c, k) for c in range(clients) for k in range(depth)]
        done = [0] * clients
        while heap:
            t, c, k = heapq.heappop(heap)
            if t > duration:
                break
            if t > 0:
                done[c] += size
            a = models[c].admit(Op(OpClass.DATA_WRITE, size, file=100 * c + k, write_mode="direct"), t)
            heapq.heappush(heap, (a.done_at, c, k))
        return done

    (alone,) = run(1)
    together = run(n)
    assert sum(together) <= 5 * MiB * duration + n * depth * size
    assert all(x < alone for x in together)
