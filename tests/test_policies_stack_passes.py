"""The one-pass engines of MRU and OPT (pipeline/onepass/stack_passes.py,
kernels/stack.py) equal the per-capacity replay per access, and the counterexamples that
keep LFU (and unequal sizes) out of the one pass."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.onepass.stack_passes import opt_distances_of
from pipeline.catalog.policy_replay import encode, hit_counts, hit_matrix, onepass_policies
from pipeline.catalog import entry


@st.composite
def equal_size_traces(draw):
    n_keys = draw(st.integers(1, 14))
    keys = draw(st.lists(st.integers(0, n_keys - 1), min_size=1, max_size=120))
    size = draw(st.sampled_from([1, 1, 1, 0, 2, 3, 7]))
    capacities = draw(st.lists(st.integers(0, 50), min_size=1, max_size=6))
    codes = encode(keys)
    return codes, np.full(codes.size, size, np.int64), capacities


def _replayed(name, codes, sizes, capacities, bypass=True):
    replay = entry(name).replay_kernel
    return np.vstack([replay(codes, sizes, c, bypass=bypass) for c in capacities])


@settings(max_examples=120)
@pytest.mark.parametrize("name", ["mru", "opt"])
@given(trace=equal_size_traces())
def test_one_pass_equals_the_replay_per_access(name, trace):
    codes, sizes, capacities = trace
    expected = _replayed(name, codes, sizes, capacities)
    np.testing.assert_array_equal(entry(name).onepass.hits(codes, sizes, capacities), expected)
    assert entry(name).onepass.counts(codes, sizes, capacities).tolist() == \
        expected.sum(axis=1).tolist()
    np.testing.assert_array_equal(hit_matrix(name, codes, sizes, capacities, "onepass"),
                                  expected)
    assert hit_counts(name, codes, sizes, capacities, "onepass").tolist() == \
        expected.sum(axis=1).tolist()


@settings(max_examples=80)
@given(trace=equal_size_traces())
def test_belady_without_bypass_is_a_stack_algorithm_too(trace):
    codes, sizes, capacities = trace
    ones = np.ones_like(sizes)
    expected = _replayed("opt", codes, ones, capacities, bypass=False)
    got = entry("opt").onepass.hits(codes, ones, capacities, bypass=False)
    np.testing.assert_array_equal(got, expected)


def test_a_truncated_stack_is_exact_below_its_limit():
    rng = np.random.default_rng(5)
    codes = encode(rng.zipf(1.2, 3000) % 200)
    ones = np.ones_like(codes)
    full = opt_distances_of(codes, 10_000)
    short = opt_distances_of(codes, 40)
    np.testing.assert_array_equal(np.minimum(full, 40), np.minimum(short, 40))
    assert (full < 40).sum() == entry("opt").replay_kernel(codes, ones, 40).sum()


def test_onepass_covers_the_stack_algorithms():
    assert onepass_policies() == ["lru", "mru", "opt"]


def test_lfu_is_not_a_stack_algorithm():
    """libCacheSim's LFU forgets counts on eviction: a hit at 2 slots, a miss at 3."""
    codes, ones = np.array([0, 2, 1, 2, 0, 1, 3, 2]), np.ones(8, np.int64)
    small, large = (entry("lfu").replay_kernel(codes, ones, c) for c in (2, 3))
    assert small[7] and not large[7]
    with pytest.raises(ValueError, match="exact only for lru, mru, opt, not lfu"):
        hit_matrix("lfu", codes, ones, [2, 3], "onepass")


@pytest.mark.parametrize("name, codes, sizes, capacity, hit_small, hit_large", [
    # MRU: key 0 does not fit 2 and key 1 survives; at 3 key 0 evicts it (fewer hits)
    ("mru", [1, 0, 1], [2, 3, 2], 2, [0, 0, 1], [0, 0, 0]),
    # OPT: at 2 only key 0 fits and hits; at 3 key 2 fits and keeps key 0 out
    ("opt", [2, 0, 2, 0], [3, 2, 3, 2], 2, [0, 0, 0, 1], [0, 0, 1, 0]),
])
def test_unequal_sizes_break_inclusion_so_auto_replays(name, codes, sizes, capacity,
                                                      hit_small, hit_large):
    codes, sizes = np.array(codes), np.array(sizes)
    rows = hit_matrix(name, codes, sizes, [capacity, capacity + 1])
    assert rows.astype(int).tolist() == [hit_small, hit_large]
    assert not entry(name).onepass.applies(codes, sizes)
    with pytest.raises(ValueError, match="one size for every access"):
        hit_matrix(name, codes, sizes, [capacity], "onepass")


def test_opt_bounds_the_others_on_a_one_pass_curve():
    rng = np.random.default_rng(9)
    codes = encode(rng.zipf(1.1, 2000) % 300)
    ones = np.ones_like(codes)
    capacities = [5, 20, 80, 300]
    best = hit_counts("opt", codes, ones, capacities)
    for name in ("lru", "mru", "fifo", "lfu", "arc"):
        assert (best >= hit_counts(name, codes, ones, capacities)).all(), name


@pytest.mark.parametrize("bypass", [True, False])
def test_blocks_and_super_blocks_of_the_stack_are_exact(bypass):
    """Stacks deeper than a block (32) and a super block (1024): the skipped blocks' bounds."""
    rng = np.random.default_rng(11)
    for codes in (encode(rng.integers(0, 2500, 12_000)), encode(rng.zipf(1.1, 12_000) % 3000)):
        ones = np.ones_like(codes)
        limit = int(codes.max()) + 1
        dist = opt_distances_of(codes, limit, bypass)
        for capacity in (1, 31, 33, 1023, 1025, 2049, limit):
            np.testing.assert_array_equal(
                dist < capacity,
                entry("opt").replay_kernel(codes, ones, capacity, bypass=bypass))
