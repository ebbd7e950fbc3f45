"""pipeline/onepass/stack_distance.py: one-pass stack distances must match kvlab's caches access
by access."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvlab.kvsim import LRUCache, TwoTierCache
from pipeline.onepass.stack_distance import (COLD, hit_curve, lru_hit_counts, lru_hits, lru_states,
                                           stack_distances, two_tier_states)
from pipeline.cache.tiers import TIERS

DOC_TOKENS = 5011


# --------------------------------------------------------------------------- helpers


def kvlab_lru_hits(keys, sizes, capacity):
    """Re-run kvlab's LRUCache: one bool per access."""
    cache = LRUCache(capacity)
    return [cache.access(key, size) for key, size in zip(keys, sizes)]


def two_tier_tiers(keys, sizes, gpu, cpu_capacities):
    """Tier codes (K, N) of ``TwoTierCache(gpu, c)`` per CPU capacity c, from the one pass."""
    return two_tier_states(keys, sizes, [gpu], cpu_capacities)[0].tiers


def kvlab_tiers(keys, sizes, gpu, cpu):
    """Re-run kvlab's TwoTierCache: one tier name per access."""
    cache = TwoTierCache(gpu, cpu)
    return [cache.access(key, size) for key, size in zip(keys, sizes)]


def brute_force_distance(keys, sizes, i):
    """Own size + sizes of the distinct other keys since the previous access of keys[i]."""
    previous = [j for j in range(i) if keys[j] == keys[i]]
    if not previous:
        return COLD
    between = {keys[j]: sizes[j] for j in range(previous[-1] + 1, i) if keys[j] != keys[i]}
    return sizes[i] + sum(between.values())


def edge_capacities(sizes, drawn):
    """The drawn capacities plus 0 and every size - 1, size, size + 1 (band edges)."""
    edges = {0} | {s + d for s in sizes for d in (-1, 0, 1) if s + d >= 0}
    return sorted(set(drawn) | edges)


def lab_pass_keys(orders, docs=10):
    """The lab's document reads: fwd = 0..9, rev = 9..0, passes back to back."""
    return [doc for order in orders
            for doc in (range(docs) if order == "fwd" else range(docs - 1, -1, -1))]


@st.composite
def traces(draw, max_keys=8, max_size=14, max_len=60):
    """(keys, sizes): repeated keys, each with one fixed size (0 and oversize included)."""
    key_sizes = draw(st.lists(st.integers(0, max_size), min_size=1, max_size=max_keys))
    keys = draw(st.lists(st.integers(0, len(key_sizes) - 1), max_size=max_len))
    if draw(st.booleans()):                       # sparse / negative codes: the np.unique path
        keys = [key * 1_000_003 - 7 for key in keys]
        key_sizes = {key * 1_000_003 - 7: size for key, size in enumerate(key_sizes)}
    return keys, [key_sizes[key] for key in keys]


capacity_lists = st.lists(st.integers(0, 45), max_size=8)


# --------------------------------------------------------------------------- differential


@given(trace=traces())
def test_stack_distances_match_the_definition(trace):
    keys, sizes = trace
    expected = [brute_force_distance(keys, sizes, i) for i in range(len(keys))]
    assert stack_distances(keys, sizes).tolist() == expected


@given(trace=traces(), drawn=capacity_lists)
def test_lru_hits_match_kvlab_per_access(trace, drawn):
    keys, sizes = trace
    capacities = edge_capacities(sizes, drawn)
    hits = lru_hits(keys, sizes, capacities)
    assert hits.shape == (len(capacities), len(keys)) and hits.dtype == bool
    for row, capacity in zip(hits, capacities):
        assert row.tolist() == kvlab_lru_hits(keys, sizes, capacity), capacity
    assert lru_hit_counts(keys, sizes, capacities).tolist() == hits.sum(axis=1).tolist()


@given(trace=traces(), drawn=capacity_lists)
def test_hit_curve_is_exact_from_the_largest_size_up(trace, drawn):
    keys, sizes = trace
    curve = hit_curve(keys, sizes)
    first = int(curve.capacities[0])
    assert first == max(sizes, default=0)
    assert np.all(np.diff(curve.capacities) > 0) and np.all(np.diff(curve.hits) > 0)
    capacities = sorted({first + c for c in drawn} | set(curve.capacities.tolist()))
    expected = [sum(kvlab_lru_hits(keys, sizes, c)) for c in capacities]
    assert curve.at(capacities).tolist() == expected


@given(trace=traces(), gpu=st.integers(0, 30), drawn=capacity_lists)
def test_two_tier_tiers_match_kvlab_per_access(trace, gpu, drawn):
    keys, sizes = trace
    cpu_capacities = edge_capacities(sizes, drawn)
    tiers = two_tier_tiers(keys, sizes, gpu, cpu_capacities)
    assert tiers.shape == (len(cpu_capacities), len(keys)) and tiers.dtype == np.int8
    for row, cpu in zip(tiers, cpu_capacities):
        assert [TIERS[code] for code in row] == kvlab_tiers(keys, sizes, gpu, cpu), cpu


# --------------------------------------------------------------------------- examples


def test_lab_scenario_second_pass_hits_only_at_50110():
    keys = lab_pass_keys(["fwd", "fwd"])
    sizes = [DOC_TOKENS] * len(keys)
    capacities = np.arange(0, 50111)
    counts = lru_hit_counts(keys, sizes, capacities)  # pass 1 is all cold: hits are pass 2's
    assert counts[:50110].max() == 0 and counts[50110] == 10
    assert stack_distances(keys, sizes)[10:].tolist() == [10 * DOC_TOKENS] * 10
    hits = lru_hits(keys, sizes, [21520, 50109, 50110])
    assert hits[:, 10:].sum(axis=1).tolist() == [0, 0, 10]
    curve = hit_curve(keys, sizes)
    assert curve.capacities.tolist() == [DOC_TOKENS, 50110] and curve.hits.tolist() == [0, 10]


def test_lab_scenario_two_tier_fwd_fwd_rev():
    keys = lab_pass_keys(["fwd", "fwd", "rev"])
    tiers = two_tier_tiers(keys, [DOC_TOKENS] * len(keys), 21520, [56000])[0]
    names = [TIERS[code] for code in tiers]
    assert names[:10] == ["miss"] * 10
    assert names[10:20] == ["cpu"] * 10
    assert names[20:] == ["gpu"] * 4 + ["cpu"] * 6
    assert names == kvlab_tiers(keys, [DOC_TOKENS] * len(keys), 21520, 56000)


def test_oversize_items_make_hits_non_monotone_in_capacity():
    keys, sizes = [0, 1, 0], [10, 11, 10]          # a (10), b (11), a again
    hits = lru_hits(keys, sizes, [9, 10, 11, 20, 21])[:, 2]
    # 10: b is never stored, a hits; 11: b evicts a; 21: both fit
    assert hits.tolist() == [False, True, False, False, True]
    assert stack_distances(keys, sizes).tolist() == [COLD, COLD, 21]
    assert stack_distances(keys, sizes, size_limit=10).tolist() == [COLD, COLD, 10]


def test_capacity_zero_stores_size_zero_items():
    keys, sizes = [0, 0, 1, 1, 2, 0], [0, 0, 0, 0, 3, 0]
    hits = [False, True, False, True, False, True]
    assert lru_hits(keys, sizes, [0, 1]).tolist() == [hits, hits]
    assert two_tier_tiers(keys, sizes, 0, [0]).tolist() == [[2, 0, 2, 0, 2, 0]]
    states = lru_states(keys, sizes, [0])
    assert states.used.tolist() == [[0] * 6] and states.evicted.tolist() == [[0] * 6]


def test_item_size_equal_to_capacity_is_stored():
    assert lru_hits([0, 0], [7, 7], [6, 7]).tolist() == [[False, False], [False, True]]


def test_empty_trace():
    assert stack_distances([], []).shape == (0,)
    assert lru_hits([], [], [0, 5]).shape == (2, 0)
    assert lru_hit_counts([], [], [0, 5]).tolist() == [0, 0]
    assert two_tier_tiers([], [], 5, [0, 5]).shape == (2, 0)
    curve = hit_curve([], [])
    assert curve.accesses == 0 and curve.at([1, 100]).tolist() == [0, 0]


# --------------------------------------------------------------------------- errors


def test_varying_size_names_the_first_key_that_varies():
    with pytest.raises(ValueError, match=r"key 7 changes size at access 3: 4 then 5"):
        lru_hits([1, 7, 1, 7, 1], [2, 4, 2, 5, 3], [10])


@pytest.mark.parametrize("call", [
    lambda: stack_distances([0, 1], [1, -2]),
    lambda: lru_hits([0], [1], [5, -1]),
    lambda: lru_hit_counts([0], [1], -1),
    lambda: two_tier_tiers([0], [1], -1, [5]),
    lambda: two_tier_tiers([0], [1], 5, [-5]),
    lambda: stack_distances([0], [1], size_limit=-1),
])
def test_negative_sizes_and_capacities_raise_value_error(call):
    with pytest.raises(ValueError, match="must be >= 0"):
        call()


def test_malformed_inputs_raise():
    with pytest.raises(ValueError, match="differ in length"):
        lru_hits([0, 1], [1], [5])
    with pytest.raises(TypeError, match="integer codes"):
        stack_distances(["a", "b"], [1, 1])
    with pytest.raises(TypeError, match="integers"):
        lru_hits([0], [1.5], [5])
    with pytest.raises(ValueError, match="exact range"):
        hit_curve([0, 1], [5, 9]).at([8])
