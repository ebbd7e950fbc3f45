"""A family of cache policies on one base (``pipeline.cache.tiers.Tier``: ``access(key, size) ->
bool``, ``lookup``, ``place``, ``key in cache``, ``used``, ``keys()``), one small module
each. Their registry entries (name, class, fast paths) are in ``pipeline.cache.registry``;
``POLICIES``, ``make_policy`` and ``policy_names`` are read from there on first use.

LRU is equal per access to kvlab's own ``LRUCache`` (the contract's class; tests prove it).
Every other policy follows libCacheSim's default definition (``libCacheSim/cache/eviction/*.c``)
so that the cross-check (tests/test_policies_libcachesim.py) can demand identical hits per
access.
"""

from __future__ import annotations

from pipeline.policies.arc import ARC
from pipeline.policies.base import Policy
from pipeline.policies.clock import Clock
from pipeline.policies.lfu import LFU
from pipeline.policies.opt import OPT
from pipeline.policies.s3fifo import S3FIFO
from pipeline.policies.sieve import Sieve
from pipeline.policies.simple import FIFO, LRU, MRU

__all__ = ["Policy", "LRU", "FIFO", "MRU", "LFU", "Clock", "Sieve", "S3FIFO", "ARC", "OPT",
           "POLICIES", "make_policy", "policy_names"]
_FROM_REGISTRY = ("POLICIES", "make_policy", "policy_names")


def __getattr__(name: str):
    """``POLICIES``, ``make_policy``, ``policy_names``: the registry's (imported on first use,
    so the registry can import the policy classes)."""
    if name in _FROM_REGISTRY:
        from pipeline.cache import registry
        return getattr(registry, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
