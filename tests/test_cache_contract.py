"""Every cache model in ``cache_contract.CACHE_MODELS`` keeps the cache contract."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cache_contract import CACHE_MODELS, check_access, check_store, single_store, snapshot
from kvlab.kvsim import LRUCache


#: Runs a test once per cache model.
every_model = pytest.mark.parametrize("model", CACHE_MODELS, ids=lambda model: model.name)


@st.composite
def traces(draw):
    """Reads of up to 8 keys, each with a fixed size (0..14: some oversize, some zero)."""
    n_keys = draw(st.integers(1, 8))
    size_of = draw(st.lists(st.integers(0, 14), min_size=n_keys, max_size=n_keys))
    keys = draw(st.lists(st.integers(0, n_keys - 1), max_size=40))
    return [(key, size_of[key]) for key in keys], dict(enumerate(size_of))


capacity_lists = st.lists(st.integers(0, 30), min_size=2, max_size=2)


@every_model
@given(trace=traces(), capacities=capacity_lists)
def test_every_access_keeps_the_contract(model, trace, capacities):
    reads, sizes = trace
    cache = model.make(*capacities[:model.tiers])
    seen: set = set()
    for store in model.stores(cache):
        check_store(store, sizes, seen)
    hits = [check_access(model, cache, key, size, sizes, seen) for key, size in reads]
    assert not any(hits[:1])                      # a fresh cache never hits


@every_model
def test_repeated_read_of_a_fitting_item_hits(model):
    cache = model.make(*[10] * model.tiers)
    sizes, seen = {"a": 4}, set()
    assert [check_access(model, cache, "a", 4, sizes, seen) for _ in range(3)] == [
        False, True, True]


@every_model
@pytest.mark.parametrize("capacity", [0, 5])
def test_oversize_item_is_not_stored_and_evicts_nothing(model, capacity):
    cache = model.make(*[capacity] * model.tiers)
    sizes, seen = {"small": 0, "big": capacity + 1}, set()
    check_access(model, cache, "small", 0, sizes, seen)     # size 0 fits even capacity 0
    stores = model.stores(cache)
    before = [snapshot(store) for store in stores]
    assert not check_access(model, cache, "big", capacity + 1, sizes, seen)
    assert [snapshot(store) for store in stores] == before
    assert "small" in stores[0] and not any("big" in store for store in stores)


@every_model
@pytest.mark.parametrize("size, error", [(-1, ValueError), (math.nan, ValueError),
                                         (True, TypeError), ("3", TypeError)])
def test_bad_size_raises_before_anything_changes(model, size, error):
    cache = model.make(*[10] * model.tiers)
    check_access(model, cache, "a", 4, {"a": 4}, set())
    before = [snapshot(store) for store in model.stores(cache)]
    with pytest.raises(error):
        cache.access("b", size)
    assert [snapshot(store) for store in model.stores(cache)] == before


@every_model
def test_negative_capacity_raises(model):
    with pytest.raises(ValueError):
        model.make(*[-1] * model.tiers)


class _EvictsForOversize(LRUCache):
    """A broken LRU: an oversize read evicts the oldest item anyway."""

    def access(self, key, size):
        if size > self.capacity and len(self):
            _, old_size = self._items.popitem(last=False)
            self.used -= old_size
            self.evictions += 1
        return super().access(key, size)


class _ForgetsEvictions(LRUCache):
    """A broken LRU: it does not count what it evicts."""

    def access(self, key, size):
        evictions = self.evictions
        try:
            return super().access(key, size)
        finally:
            self.evictions = evictions


@pytest.mark.parametrize("broken", [_EvictsForOversize, _ForgetsEvictions])
def test_the_contract_catches_a_broken_cache(broken):
    model = single_store(broken.__name__, broken)
    cache, sizes, seen = broken(5), {"a": 3, "b": 3, "big": 9}, set()
    with pytest.raises(AssertionError):
        for key in ("a", "b", "big"):
            check_access(model, cache, key, sizes[key], sizes, seen)
