"""The policy family's contract where the shared one (tests/cache_contract.py, which runs
every other policy) cannot apply: S3-FIFO and OPT may leave a fitting miss unstored. Also
literal models for MRU, FIFO and LRU, and Belady's OPT as the bound: optimal by exhaustive
search on tiny traces, and never behind any other policy on equal-size traces."""

from __future__ import annotations

from functools import lru_cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.policies import LRU, OPT
from pipeline.catalog import POLICIES, make_policy

NAMES = list(POLICIES)
sized_traces = st.lists(st.tuples(st.integers(0, 7), st.integers(0, 12)), max_size=40)

FEW = settings(max_examples=min(50, settings.default.max_examples))  # per policy: x9


def fixed_sizes(trace):
    """Give every key the size of its first access (the size a hit keeps anyway)."""
    first = {}
    return [(key, first.setdefault(key, size)) for key, size in trace]


def build(name, capacity, trace):
    return make_policy(name, capacity, [key for key, _ in trace])


#: the policies tests/cache_contract.py cannot take (they may leave a fitting miss unstored,
#: or need the future); every other policy runs the shared contract there
DECLINING = [name for name, cls in POLICIES.items()
             if getattr(cls, "may_decline", False) or getattr(cls, "needs_future", False)]


def test_the_shared_contract_runs_every_other_policy():
    from cache_contract import CACHE_MODELS
    names = {model.name for model in CACHE_MODELS}
    assert DECLINING == ["s3fifo", "opt"]
    assert {f"policy-{name}" for name in POLICIES if name not in DECLINING} <= names


@FEW
@pytest.mark.parametrize("name", DECLINING)
@given(capacity=st.integers(0, 40), trace=sized_traces)
def test_contract(name, capacity, trace):
    cache = build(name, capacity, trace)
    declines = getattr(cache, "may_decline", False)
    for key, size in trace:
        before, used_before, evictions_before = set(cache.keys()), cache.used, cache.evictions
        resident = key in cache
        hit = cache.access(key, size)
        after = set(cache.keys())
        assert hit == resident
        assert cache.used == sum(dict(fixed_sizes_of(cache)).values()) <= capacity
        assert len(after) == len(cache.keys()) == len(cache)
        if hit:                                   # a hit moves nothing in or out
            assert after == before and cache.used == used_before
        elif size > capacity:                     # oversize: not stored, evicts nothing
            assert after == before and cache.evictions == evictions_before
        else:
            assert after - before <= {key}
            assert cache.evictions - evictions_before == len(before - after)
            if used_before + size <= capacity:    # it fitted: nothing evicted
                assert before <= after
            if not declines:
                assert key in cache


def fixed_sizes_of(cache):
    """(key, stored size) of every resident key, from the base's bookkeeping or kvlab's."""
    stored = cache._sizes if hasattr(cache, "_sizes") else cache._items
    return [(key, stored[key]) for key in cache.keys()]


@pytest.mark.parametrize("name", [n for n in NAMES if n not in ("s3fifo",)])
def test_size_zero_fits_capacity_zero(name):
    cache = make_policy(name, 0, ["a", "a", "b"])
    assert [cache.access("a", 0), cache.access("a", 0)] == [False, True]
    assert cache.access("b", 1) is False and "b" not in cache and cache.used == 0


def test_s3fifo_declines_below_its_small_queue():
    """libCacheSim's rule, kept: an item >= the small queue (10 % of the capacity) is not
    stored, so unit items need a capacity of 20."""
    assert not any(POLICIES["s3fifo"](19).access(k, 1) for k in [1, 1, 1])
    cache = POLICIES["s3fifo"](20)
    assert [cache.access(k, 1) for k in [1, 1, 1]] == [False, True, True]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("capacity, size, error", [(-1, 1, ValueError), (3, -1, ValueError),
                                                   (3, "2", TypeError), (3, True, TypeError)])
def test_bad_amounts_raise(name, capacity, size, error):
    with pytest.raises(error):
        make_policy(name, capacity, ["a"]).access("a", size)


def test_registry():
    assert POLICIES["lru"] is LRU       # kvlab's LRUCache on the shared base (equal per access)
    assert set(POLICIES) >= {"lru", "fifo", "mru", "lfu", "clock", "sieve", "s3fifo", "arc",
                             "opt"}                  # and any policy registered since
    with pytest.raises(ValueError, match="unknown policy 'nope'; accepted: lru, fifo"):
        make_policy("nope", 3)
    with pytest.raises(ValueError, match="future"):
        make_policy("opt", 3)


def test_opt_rejects_a_different_future():
    cache = make_policy("opt", 3, ["a", "b"])
    cache.access("a", 1)
    with pytest.raises(ValueError, match="future"):
        cache.access("c", 1)


# ----------------------------------------------------------------------- literal models


class ListModel:
    """A list, most recent last; ``victim`` picks the index to evict."""

    def __init__(self, capacity, victim, touch):
        self.capacity, self.victim, self.touch, self.entries = capacity, victim, touch, []

    def access(self, key, size):
        keys = [k for k, _ in self.entries]
        if key in keys:
            if self.touch:
                self.entries.append(self.entries.pop(keys.index(key)))
            return True
        if size <= self.capacity:
            while sum(s for _, s in self.entries) + size > self.capacity:
                self.entries.pop(self.victim(self.entries))
            self.entries.append((key, size))
        return False


@pytest.mark.parametrize("name, victim, touch", [("mru", lambda e: len(e) - 1, True),
                                                 ("fifo", lambda e: 0, False),
                                                 ("lru", lambda e: 0, True)])
@given(capacity=st.integers(0, 40), trace=sized_traces)
def test_against_literal_models(name, victim, touch, capacity, trace):
    cache, model = make_policy(name, capacity), ListModel(capacity, victim, touch)
    for key, size in trace:
        assert cache.access(key, size) == model.access(key, size)
        assert cache.keys() == [k for k, _ in model.entries]


# ----------------------------------------------------------------------- OPT is the bound

unit_traces = st.lists(st.integers(0, 6), max_size=14)


def best_possible_hits(keys, capacity):
    """Exhaustive search over every policy (bypassing included) with unit sizes."""
    @lru_cache(maxsize=None)
    def best(position, cached):
        if position == len(keys):
            return 0
        key = keys[position]
        if key in cached:
            return 1 + best(position + 1, cached)
        options = [best(position + 1, cached)]                       # do not store
        if len(cached) < capacity:
            options.append(best(position + 1, cached | {key}))
        else:
            options += [best(position + 1, (cached - {old}) | {key}) for old in cached]
        return max(options)
    return best(0, frozenset())


@given(capacity=st.integers(0, 4), keys=unit_traces)
def test_opt_is_optimal_with_unit_sizes(capacity, keys):
    cache = OPT(capacity, keys)
    assert sum(cache.access(k, 1) for k in keys) == best_possible_hits(tuple(keys), capacity)


@given(capacity=st.integers(0, 12), size=st.integers(1, 3),
       keys=st.lists(st.integers(0, 9), max_size=60))
def test_opt_hits_at_least_every_policy(capacity, size, keys):
    opt = OPT(capacity, keys)
    bound = sum(opt.access(k, size) for k in keys)
    for name in NAMES:
        cache = make_policy(name, capacity, keys)
        assert sum(cache.access(k, size) for k in keys) <= bound, name


def test_opt_without_bypass_stores_every_miss():
    keys = ["a", "b", "a"]
    always = OPT(1, keys, bypass=False)
    assert [always.access(k, 1) for k in keys] == [False, False, False]
    bypass = OPT(1, keys)
    assert [bypass.access(k, 1) for k in keys] == [False, False, True]


def test_opt_hits_at_least_every_policy_on_random_evicting_traces():
    from policy_traces import random_traces
    for keys, sizes, capacity in random_traces(11, count=30):
        keys, size = keys.tolist(), int(sizes[0]) or 1          # equal sizes
        opt = OPT(capacity, keys)
        bound = sum(opt.access(k, size) for k in keys)
        for name in NAMES:
            cache = make_policy(name, capacity, keys)
            assert sum(cache.access(k, size) for k in keys) <= bound, (name, capacity)
