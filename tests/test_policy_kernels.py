"""The compiled replays (pipeline/policies/kernels, each entry's ``replay_kernel``) equal the Python classes per access,
and the curve engine (pipeline/catalog/policy_replay.py) equals them at every capacity."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.catalog import POLICIES, entry, names
from pipeline.catalog.policy_replay import class_hits, encode, hit_counts, hit_matrix, tiered_codes
from kvlab.kvsim import TwoTierCache
from policy_traces import random_traces

FEW = settings(max_examples=min(50, settings.default.max_examples))  # per policy: x9


@st.composite
def traces(draw):
    n_keys = draw(st.integers(1, 12))
    keys = draw(st.lists(st.integers(0, n_keys - 1), min_size=1, max_size=80))
    if draw(st.booleans()):
        size_of = draw(st.lists(st.integers(0, 20), min_size=n_keys, max_size=n_keys))
        sizes = [size_of[k] for k in keys]
    else:
        sizes = draw(st.lists(st.integers(0, 20), min_size=len(keys), max_size=len(keys)))
    return np.array(keys, dtype=np.int64), np.array(sizes, dtype=np.int64)


@FEW
@pytest.mark.parametrize("name", names(policy=True, replay_kernel=True))
@given(capacity=st.integers(0, 120), trace=traces())
def test_kernel_equals_class(name, capacity, trace):
    codes, sizes = trace
    np.testing.assert_array_equal(entry(name).replay_kernel(codes, sizes, capacity),
                                  class_hits(name, codes, sizes, capacity))


@settings(max_examples=40)
@given(capacities=st.lists(st.integers(0, 80), min_size=1, max_size=5), trace=traces())
def test_hit_matrix_engines_agree(capacities, trace):
    codes, sizes = trace
    sizes = sizes[np.unique(codes, return_index=True)[1]][np.searchsorted(
        np.unique(codes), codes)]                  # one size per key (one-pass LRU needs it)
    for name in POLICIES:
        fast = hit_matrix(name, codes, sizes, capacities, "auto", workers=2)
        slow = hit_matrix(name, codes, sizes, capacities, "classes")
        np.testing.assert_array_equal(fast, slow, err_msg=name)


@given(gpu=st.integers(0, 40), cpu=st.integers(0, 60), trace=traces())
def test_tiered_lru_equals_two_tier_cache(gpu, cpu, trace):
    codes, sizes = trace
    tiers = TwoTierCache(gpu, cpu)
    expected = [("gpu", "cpu", "miss").index(tiers.access(int(k), int(s)))
                for k, s in zip(codes, sizes)]
    assert tiered_codes("lru", "lru", codes, sizes, gpu, cpu, "replay").tolist() == expected


def test_encode_is_dense_in_first_appearance_order():
    assert encode([30, 10, 30, 20]).tolist() == [0, 1, 0, 2]
    assert encode(["b", "a", "b"]).tolist() == [0, 1, 0]


def test_onepass_only_where_exact():
    with pytest.raises(ValueError, match="onepass is exact only for lru, mru, opt, not fifo"):
        hit_matrix("fifo", np.array([0]), np.array([1]), [1], "onepass")


@pytest.mark.parametrize("name", names(policy=True, replay_kernel=True))
def test_kernel_equals_class_on_random_evicting_traces(name):
    for codes, sizes, capacity in random_traces(7, count=30):
        np.testing.assert_array_equal(entry(name).replay_kernel(codes, sizes, capacity),
                                      class_hits(name, codes, sizes, capacity))


def test_lru_with_sizes_that_vary_per_key_falls_back_to_the_replay():
    codes, sizes = np.array([0, 1, 0, 2, 0]), np.array([3, 2, 5, 4, 1])
    expected = class_hits("lru", codes, sizes, 6)
    np.testing.assert_array_equal(hit_matrix("lru", codes, sizes, [6])[0], expected)
    assert hit_counts("lru", codes, sizes, [6]).tolist() == [int(expected.sum())]
    with pytest.raises(ValueError, match="fixed size per key"):
        hit_matrix("lru", codes, sizes, [6], "onepass")
