"""A family of cache policies on one base (``pipeline.cache.tiers.Tier``: ``access(key, size) ->
bool``, ``lookup``, ``place``, ``key in cache``, ``used``, ``keys()``), one small module
each, with their registry entries (``entries.py``: name, class, fast paths). Which policies
there are is the registry's word (``pipeline.catalog``; ``python -m pipeline policies
--list``): ``POLICIES``, ``make_policy``, ``policy_names`` and each registered policy's
class by its name (``pipeline.policies.LRU``) are read from the registry's interface
(``pipeline.cache.registry``) on use, the built-in classes from ``entries.py``.

LRU is equal per access to kvlab's own ``LRUCache`` (the contract's class; tests prove it).
The built-in others follow libCacheSim's default definition (``libCacheSim/cache/eviction/*.c``)
so that the cross-check (tests/test_policies_libcachesim.py) can demand identical hits per
access.
"""

from __future__ import annotations

from pipeline.cache.tiers import Tier as Policy

__all__ = ["Policy", "POLICIES", "make_policy", "policy_names"]
_FROM_REGISTRY = ("POLICIES", "make_policy", "policy_names")


def _classes() -> dict[str, type]:
    """Each policy's class, by class name: the built-in ones, then every registered one."""
    from pipeline.cache import registry
    from pipeline.policies.entries import ENTRIES
    return {cls.__name__: cls for cls in
            [entry.tier for entry in ENTRIES] + list(registry.POLICIES.values())}


def __getattr__(name: str):
    """``POLICIES``, ``make_policy``, ``policy_names`` and the policy classes: the registry's
    (read on use: the entries are registered by ``pipeline.catalog``)."""
    if name in _FROM_REGISTRY:
        from pipeline.cache import registry
        return getattr(registry, name)
    classes = _classes()
    if name in classes:
        return classes[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_FROM_REGISTRY, *_classes()})
