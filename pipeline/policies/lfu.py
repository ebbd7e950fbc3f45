"""LFU as libCacheSim's ``LFU.c``: evict the least frequently read resident item; among
equals, the one that reached that count first (which is the least recently read of them).
Counts live only while an item is resident (an evicted item starts again at 1), so this LFU
is not a stack algorithm: it is replayed per capacity."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

from pipeline.cache.tiers import Tier as Policy

__all__ = ["LFU"]


class LFU(Policy):
    """In-cache LFU, ties to the least recent. ``keys()``: eviction order, victim first."""

    name = "lfu"

    def __init__(self, capacity: float) -> None:
        super().__init__(capacity)
        self._freq: dict[Hashable, int] = {}
        self._buckets: dict[int, OrderedDict[Hashable, None]] = {}
        self._min = 0                       # 0: recompute on the next eviction

    def _hit(self, key):
        count = self._freq[key]
        bucket = self._buckets[count]
        del bucket[key]
        if not bucket:
            del self._buckets[count]
            if self._min == count:
                self._min = count + 1
        self._freq[key] = count + 1
        self._buckets.setdefault(count + 1, OrderedDict())[key] = None

    def _evict(self, key, size):
        if self._min not in self._buckets:
            self._min = min(self._buckets)
        bucket = self._buckets[self._min]
        victim = bucket.popitem(last=False)[0]
        if not bucket:
            del self._buckets[self._min]
            self._min = 0
        del self._freq[victim]
        return victim

    def _insert(self, key, size):
        self._freq[key] = 1
        self._buckets.setdefault(1, OrderedDict())[key] = None
        self._min = 1
        return True

    def keys(self) -> list:
        return [k for count in sorted(self._buckets) for k in self._buckets[count]]
