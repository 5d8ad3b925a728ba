"""The interval pool against a plain set, and its cost on a huge pool."""

from __future__ import annotations

import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

from projections.pools import IntervalPool

VNI_MAX = 16_777_215

operations = st.lists(
    st.one_of(
        st.tuples(st.just("lowest"), st.just(0)),
        st.tuples(st.just("take"), st.integers(0, 70)),
        st.tuples(st.just("give"), st.integers(0, 70)),
    ),
    max_size=200,
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.sets(st.integers(0, 70), max_size=10), operations)
def test_the_pool_behaves_like_a_set_of_free_identifiers(
    excluded: set[int], ops: list[tuple[str, int]]
) -> None:
    pool = IntervalPool(1, 64, excluded, block=2)  # tiny blocks: splits and merges across them
    free = set(range(1, 65)) - excluded
    for op, identifier in ops:
        if op == "lowest":
            expected = min(free) if free else None
            assert pool.take_lowest() == expected
            free.discard(expected)
        elif op == "take":
            assert pool.take(identifier) == (identifier in free)
            free.discard(identifier)
        else:
            returnable = 1 <= identifier <= 64 and identifier not in free
            assert pool.give_back(identifier) == returnable
            if returnable:
                free.add(identifier)
        assert len(pool) == len(free)
        assert all(pool.is_free(i) == (i in free) for i in range(0, 66))
    # intervals stay merged: no two touch
    assert pool.intervals <= len(free)


def test_excluded_addresses_are_never_handed_out() -> None:
    # a /29: network .0 and broadcast .7 and the gateway .1 are excluded
    pool = IntervalPool(0, 7, excluded={0, 1, 7})
    assert [pool.take_lowest() for _ in range(6)] == [2, 3, 4, 5, 6, None]


def test_sixteen_million_vnis_cost_what_ten_do() -> None:
    big = IntervalPool(1, VNI_MAX)
    assert [big.take_lowest() for _ in range(3)] == [1, 2, 3]
    assert big.take(VNI_MAX) and not big.take(VNI_MAX)
    assert big.give_back(2) and big.take_lowest() == 2
    assert len(big) == VNI_MAX - 4
    assert big.intervals == 1
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    taken = [big.take_lowest() for _ in range(100_000)]
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert taken[0] == 4 and taken[-1] == 100_003
    assert big.intervals == 1
    assert after - before < 10_000_000  # the 100k ints returned, not a table of the pool
