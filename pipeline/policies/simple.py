"""LRU, FIFO and MRU: one ordered dict each (``LRU`` is kvlab's ``LRUCache`` on the shared
base, equal per access)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

from pipeline.cache.tiers import Tier as Policy

__all__ = ["LRU", "FIFO", "MRU"]


class FIFO(Policy):
    """First in, first out: a hit changes nothing; evict the oldest insertion.
    ``keys()`` lists insertion order, oldest first (libCacheSim ``FIFO.c``)."""

    name = "fifo"

    def __init__(self, capacity: float) -> None:
        super().__init__(capacity)
        self._order: OrderedDict[Hashable, None] = OrderedDict()

    def _evict(self, key, size):
        return self._order.popitem(last=False)[0]

    def _insert(self, key, size):
        self._order[key] = None
        return True

    def keys(self) -> list:
        return list(self._order)


class LRU(FIFO):
    """Least recently used: FIFO's queue, a hit moves the item to the newest end. Equal per
    access to kvlab's ``LRUCache`` (tests/test_policies_blocks.py proves it). ``keys()``:
    least recent first."""

    name = "lru"

    def _hit(self, key):
        self._order.move_to_end(key)


class MRU(LRU):
    """Most recently used: evict the most recently read resident item (the incoming item
    is not yet resident, so it is never its own victim). libCacheSim ``MRU.c`` does the
    same; its PyPI wheel (0.3.5) does not ship MRU, so the cross-check tests a literal
    model instead. LRU's bookkeeping, the other end of the recency order.
    ``keys()``: least recent first."""

    name = "mru"

    def _evict(self, key, size):
        return self._order.popitem(last=True)[0]
