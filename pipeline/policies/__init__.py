"""A family of cache policies behind kvlab's interface (``access(key, size) -> bool``,
``key in cache``, ``used``, ``keys()``), one small module each over one shared base
(``base.Policy``), and the registry ``POLICIES``.

LRU is kvlab's own ``LRUCache`` (the contract's class, unchanged). Every other policy follows
libCacheSim's default definition (``libCacheSim/cache/eviction/*.c``) so that the
cross-check (tests/test_policies_libcachesim.py) can demand identical hits per access.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from kvlab.kvsim import LRUCache
from pipeline.policies.arc import ARC
from pipeline.policies.base import Policy
from pipeline.policies.clock import Clock
from pipeline.policies.lfu import LFU
from pipeline.policies.opt import OPT
from pipeline.policies.s3fifo import S3FIFO
from pipeline.policies.sieve import Sieve
from pipeline.policies.simple import FIFO, MRU

__all__ = ["POLICIES", "Policy", "LRUCache", "FIFO", "MRU", "LFU", "Clock", "Sieve", "S3FIFO",
           "ARC", "OPT", "make_policy", "policy_names"]

#: name -> class; every class takes ``(capacity)``, and OPT also ``future``.
POLICIES: dict[str, type] = {
    "lru": LRUCache,
    "fifo": FIFO,
    "mru": MRU,
    "lfu": LFU,
    "clock": Clock,
    "sieve": Sieve,
    "s3fifo": S3FIFO,
    "arc": ARC,
    "opt": OPT,
}


def policy_names() -> list[str]:
    """The registry's names, in display order."""
    return list(POLICIES)


def make_policy(name: str, capacity: float, future: Sequence[Hashable] | None = None):
    """A fresh cache of policy ``name``; ``future`` (the key sequence) is needed by OPT."""
    try:
        cls: Callable = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; accepted: {', '.join(POLICIES)}") from None
    if getattr(cls, "needs_future", False):
        if future is None:
            raise ValueError(f"policy {name!r} needs the future key sequence")
        return cls(capacity, future)
    return cls(capacity)
