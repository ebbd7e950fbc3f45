"""The contract every cache model keeps, in the style of cachetools' ``CacheTestMixin``.

``CACHE_MODELS`` lists the models; ``tests/test_cache_contract.py`` runs every check on
every one of them. To put a new cache class under the contract (a policy, another tier
layout), add one ``CacheModel`` to the list (``single_store`` for LRUCache's interface).

A model is a class built from capacities whose ``access(key, size)`` returns what served the
read, and whose *stores* (the cache itself, or each of its tiers) offer ``capacity``,
``used``, ``evictions``, ``keys()``, ``__contains__`` and ``__len__``, as
``kvlab.kvsim.LRUCache`` does. The contract, checked around every access:

* the result says hit or miss (``hit``), and it is a hit iff some store held the key;
* each store: ``used <= capacity``; ``used`` is the sum of its keys' sizes; ``keys()`` has no
  duplicates and agrees with ``in`` and ``len``; ``evictions`` grows by exactly the number
  of keys that left it;
* an item larger than every store's capacity is not stored and changes nothing (no
  eviction); the only rejection is size > capacity, so an item that fits the first store is
  in it after the access (a size-0 item fits capacity 0);
* a read of a key the first store holds changes no store's set of keys;
* a negative, NaN or boolean size raises before anything changes, and so does a negative
  capacity at construction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvlab.kvsim import TIERS, LRUCache, TwoTierCache


@dataclass(frozen=True)
class CacheModel:
    """How the contract builds and reads one cache class."""

    name: str
    tiers: int                                   # capacities the factory takes
    make: Callable[..., object]                  # (*capacities) -> cache
    hit: Callable[[object], bool]                # access's result -> hit?; raises if malformed
    stores: Callable[[object], list]             # cache -> its stores, first = read first


def _bool_hit(result: object) -> bool:
    assert isinstance(result, bool), f"access must return a bool, got {result!r}"
    return result


def _tier_hit(result: object) -> bool:
    assert result in TIERS, f"access must return one of {TIERS}, got {result!r}"
    return result != "miss"


def single_store(name: str, make: Callable[[float], object]) -> CacheModel:
    """A cache with LRUCache's interface: one capacity, a bool hit flag, itself the store.
    A policy family joins the contract with ``CACHE_MODELS += [single_store(name, cls)
    for name, cls in POLICIES.items()]``."""
    return CacheModel(name, 1, make, _bool_hit, lambda cache: [cache])


CACHE_MODELS = [
    single_store("LRUCache", LRUCache),
    CacheModel("TwoTierCache", 2, TwoTierCache, _tier_hit,
               lambda cache: [cache.gpu, cache.cpu]),
]


def snapshot(store: object) -> tuple:
    """What a store holds: its keys in order, used, evictions."""
    return list(store.keys()), store.used, store.evictions


def check_store(store: object, sizes: dict, seen: set) -> None:
    """The invariants of one store (``sizes``: each key's fixed size; ``seen``: keys read)."""
    keys = store.keys()
    assert len(keys) == len(set(keys)) == len(store), keys
    assert 0 <= store.used <= store.capacity, (store.used, store.capacity)
    assert store.used == sum(sizes[key] for key in keys)
    assert all(key in store for key in keys)
    assert not any(key in store for key in seen - set(keys))


def check_access(model: CacheModel, cache: object, key: object, size: int, sizes: dict,
                 seen: set) -> bool:
    """Read ``key`` of ``size`` (fixed per key) and check the contract around it; the hit."""
    stores = model.stores(cache)
    before = [snapshot(store) for store in stores]
    held = [key in store for store in stores]
    hit = model.hit(cache.access(key, size))
    seen.add(key)
    after = [snapshot(store) for store in stores]
    assert hit == any(held), (key, held, hit)
    for store, (old_keys, _, old_evictions), (new_keys, _, new_evictions) in zip(
            stores, before, after):
        check_store(store, sizes, seen)
        assert new_evictions - old_evictions == len(set(old_keys) - set(new_keys))
    if all(size > store.capacity for store in stores):
        assert before == after and not any(key in store for store in stores)
    if size <= stores[0].capacity:
        assert key in stores[0]
    if held[0]:
        assert [set(keys) for keys, _, _ in before] == [set(keys) for keys, _, _ in after]
    return hit

# The policy family (pipeline/policies): every policy that stores each fitting miss and needs
# no future (S3-FIFO and OPT may decline a miss: tests/test_policy_contract.py checks them).
from pipeline.catalog import POLICIES  # noqa: E402

CACHE_MODELS += [single_store(f"policy-{name}", cls) for name, cls in POLICIES.items()
                 if not getattr(cls, "may_decline", False)
                 and not getattr(cls, "needs_future", False)]
