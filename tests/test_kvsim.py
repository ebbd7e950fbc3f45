"""kvlab/kvsim.py: the LRU and two-tier contract, examples, edges and a differential test."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import ModelLRU, ModelTwoTier
from kvlab.kvsim import LRUCache, TwoTierCache


def test_hit_moves_to_most_recent_and_miss_evicts_oldest():
    cache = LRUCache(10)
    assert cache.access("a", 4) is False
    assert cache.access("b", 4) is False
    assert cache.access("a", 4) is True
    assert cache.keys() == ["b", "a"]
    assert cache.access("c", 4) is False          # evicts b (the oldest), keeps a
    assert cache.keys() == ["a", "c"]
    assert cache.used == 8
    assert cache.evictions == 1


def test_eviction_continues_until_the_item_fits():
    cache = LRUCache(10)
    for key in "abcde":
        cache.access(key, 2)
    assert cache.access("big", 7) is False
    assert cache.keys() == ["e", "big"]
    assert cache.used == 9


def test_item_equal_to_capacity_is_stored():
    cache = LRUCache(5)
    cache.access("small", 1)
    assert cache.access("x", 5) is False
    assert cache.keys() == ["x"] and cache.used == 5
    assert cache.access("x", 5) is True


def test_item_larger_than_capacity_is_not_stored_and_evicts_nothing():
    cache = LRUCache(10)
    cache.access("a", 3)
    cache.access("b", 3)
    assert cache.access("huge", 11) is False
    assert cache.keys() == ["a", "b"] and cache.used == 6 and cache.evictions == 0
    assert "huge" not in cache
    assert cache.access("huge", 11) is False


def test_capacity_zero_stores_only_size_zero_items():
    cache = LRUCache(0)
    assert cache.access("a", 1) is False and "a" not in cache
    assert cache.access("empty", 0) is False and "empty" in cache
    for _ in range(3):
        assert cache.access("a", 1) is False
        assert cache.access("empty", 0) is True
    assert cache.keys() == ["empty"] and cache.used == 0 and cache.evictions == 0


def test_size_zero_item_evicted_from_gpu_comes_back_from_a_capacity_zero_cpu_tier():
    tiers = TwoTierCache(gpu_capacity=5, cpu_capacity=0)
    assert [tiers.access(k, s) for k, s in [("z", 0), ("a", 5), ("b", 5)]] == ["miss"] * 3
    assert "z" not in tiers.gpu and tiers.access("z", 0) == "cpu"   # the documented corner


@pytest.mark.parametrize("size, capacity", [
    (np.int64(3), np.int64(4)), (np.float32(3.5), np.float64(4.0)), (Fraction(7, 2), 4),
    (np.uint8(3), Fraction(4)), (3, np.int32(4)),
])
def test_any_real_number_is_a_size_or_capacity(size, capacity):
    cache = LRUCache(capacity)
    assert cache.access("a", size) is False and cache.access("a", size) is True
    assert cache.used == size
    tiers = TwoTierCache(capacity, capacity)
    assert [tiers.access("a", size) for _ in range(2)] == ["miss", "gpu"]


@pytest.mark.parametrize("bad", [True, np.bool_(False), float("nan"), np.float64("nan"), "3",
                                 None, complex(1, 0), -1, np.int64(-1), Fraction(-1, 2)])
def test_bool_nan_negative_and_non_reals_are_rejected(bad):
    with pytest.raises((TypeError, ValueError)):
        LRUCache(10).access("a", bad)
    with pytest.raises((TypeError, ValueError)):
        LRUCache(bad)


def test_contains_does_not_change_order():
    cache = LRUCache(10)
    cache.access("a", 3)
    cache.access("b", 3)
    assert "a" in cache and "zzz" not in cache
    assert cache.keys() == ["a", "b"]
    cache.access("c", 5)                          # must evict a, the true oldest
    assert cache.keys() == ["b", "c"]


def test_used_is_an_attribute():
    cache = LRUCache(10)
    cache.access(1, 7)
    assert cache.used == 7 and not callable(cache.used)


@pytest.mark.parametrize("bad", [-1, -0.5])
def test_negative_capacity_or_size_raises_value_error(bad):
    with pytest.raises(ValueError, match="capacity"):
        LRUCache(bad)
    with pytest.raises(ValueError, match="size"):
        LRUCache(10).access("a", bad)
    with pytest.raises(ValueError):
        TwoTierCache(bad, 10)
    with pytest.raises(ValueError):
        TwoTierCache(10, bad)


def test_non_numeric_arguments_raise_type_error():
    with pytest.raises(TypeError):
        LRUCache("10")
    with pytest.raises(TypeError):
        LRUCache(10).access("a", None)


def test_two_tier_rules():
    cache = TwoTierCache(gpu_capacity=5, cpu_capacity=10)
    assert cache.access("a", 5) == "miss"
    assert cache.gpu.keys() == ["a"] and cache.cpu.keys() == ["a"]
    assert cache.access("b", 5) == "miss"          # GPU evicts a; CPU keeps both
    assert cache.gpu.keys() == ["b"] and cache.cpu.keys() == ["a", "b"]
    assert cache.access("b", 5) == "gpu"           # GPU hit: CPU order untouched
    assert cache.cpu.keys() == ["a", "b"]
    assert cache.access("a", 5) == "cpu"           # reload: CPU copy most recent, GPU loads it
    assert cache.cpu.keys() == ["b", "a"] and cache.gpu.keys() == ["a"]
    assert isinstance(cache.gpu, LRUCache) and isinstance(cache.cpu, LRUCache)


def test_cpu_capacity_zero_is_one_tier():
    keys = [0, 1, 2, 0, 3, 1, 1, 4, 0]
    one, two = LRUCache(10), TwoTierCache(10, 0)
    for key in keys:
        hit = one.access(key, 4)
        assert two.access(key, 4) == ("gpu" if hit else "miss")
    assert two.gpu.keys() == one.keys()


traces = st.lists(st.tuples(st.integers(0, 7), st.integers(0, 12)), max_size=60)


@given(capacity=st.integers(0, 30), trace=traces)
def test_lru_matches_reference_model(capacity, trace):
    cache, model = LRUCache(capacity), ModelLRU(capacity)
    for key, size in trace:
        assert cache.access(key, size) == model.access(key, size)
        assert cache.keys() == [k for k, _ in model.entries]
        assert cache.used == model.used() <= capacity


@given(gpu=st.integers(0, 30), cpu=st.integers(0, 40), trace=traces)
def test_two_tier_matches_reference_model(gpu, cpu, trace):
    cache, model = TwoTierCache(gpu, cpu), ModelTwoTier(gpu, cpu)
    for key, size in trace:
        assert cache.access(key, size) == model.access(key, size)
        assert cache.gpu.keys() == [k for k, _ in model.gpu.entries]
        assert cache.cpu.keys() == [k for k, _ in model.cpu.entries]


@given(gpu=st.integers(0, 30), trace=traces)
def test_two_tier_with_no_cpu_equals_lru(gpu, trace):
    """Equal to one GPU tier, except that a size-0 item (which fits a capacity-0 CPU tier)
    evicted from the GPU comes back as a CPU hit: the documented corner."""
    one, two = LRUCache(gpu), TwoTierCache(gpu, 0)
    size_zero_keys = set()
    for key, size in trace:
        if size == 0 and key not in two.cpu:
            size_zero_keys.add(key)          # stored in the CPU tier (kept at size 0)
        tier, hit = two.access(key, size), one.access(key, size)
        if key not in size_zero_keys or hit:
            assert tier == ("gpu" if hit else "miss")
        else:
            assert tier in ("cpu", "miss")
        assert two.gpu.keys() == one.keys()
