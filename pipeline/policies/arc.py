"""ARC (Megiddo and Modha, FAST 2003) with byte sizes, as libCacheSim's ``ARC.c``.

T1 holds keys read once, T2 keys read again; B1 and B2 are their ghosts (keys and sizes of
what was evicted). A miss whose key is in B1 moves the target size ``p`` of T1 up by
``max(|B2|/|B1|, 1)`` bytes (in B2: down by ``max(|B1|/|B2|, 1)``) and the key re-enters T2;
any other miss enters T1. REPLACE evicts T1's least recent into B1 when T1 is above ``p``
(or at ``p`` on a B2 hit, or T2 is empty), else T2's least recent into B2. On a miss in no
list, when T1 + B1 + the item exceed the capacity, B1's oldest ghost is dropped first (or,
with B1 empty, T1's least recent is evicted without a ghost); otherwise B2's oldest ghost is
dropped once all four lists reach twice the capacity. Sizes are bytes throughout, as in
libCacheSim (the paper counts pages)."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Hashable

from pipeline.cache.tiers import Tier as Policy

__all__ = ["ARC"]


def _ratio(a: float, b: float) -> float:
    """C's double division, including x/0 (inf, or NaN for 0/0)."""
    if b == 0:
        return math.nan if a == 0 else math.inf
    return a / b


def _cmax(a: float, b: float) -> float:
    """C's ``MAX(a, b)`` macro, ``a > b ? a : b`` (so a NaN ``a`` gives ``b``)."""
    return a if a > b else b


class ARC(Policy):
    """ARC. ``keys()``: T1 least recent first, then T2 least recent first."""

    name = "arc"

    def __init__(self, capacity: float) -> None:
        super().__init__(capacity)
        self.p = 0.0
        # each list: key -> size, least recent first
        self._t1: OrderedDict[Hashable, float] = OrderedDict()
        self._t2: OrderedDict[Hashable, float] = OrderedDict()
        self._b1: OrderedDict[Hashable, float] = OrderedDict()
        self._b2: OrderedDict[Hashable, float] = OrderedDict()
        self._t1_size = self._t2_size = self._b1_size = self._b2_size = 0
        self._ghost = 0            # this request's key was in B1 (1), B2 (2) or neither (0)

    def _hit(self, key):
        if key in self._t1:
            size = self._t1.pop(key)
            self._t1_size -= size
            self._t2[key] = size
            self._t2_size += size
        else:
            self._t2.move_to_end(key)

    def _miss(self, key, size):
        self._ghost = 0
        if key in self._b1:
            self._ghost = 1
            delta = _cmax(_ratio(self._b2_size, self._b1_size), 1)
            self.p = min(self.p + delta, self.capacity)
            self._b1_size -= self._b1.pop(key)
        elif key in self._b2:
            self._ghost = 2
            delta = _cmax(_ratio(self._b1_size, self._b2_size), 1)
            self.p = _cmax(self.p - delta, 0)
            self._b2_size -= self._b2.pop(key)

    def _evict(self, key, size):
        if self._ghost:
            return self._replace()
        if self._t1_size + self._b1_size + size > self.capacity:
            if self._b1_size > 0:
                self._b1_size -= self._b1.popitem(last=False)[1]
                return self._replace()
            victim, victim_size = self._t1.popitem(last=False)
            self._t1_size -= victim_size
            return victim
        total = self._t1_size + self._b1_size + self._t2_size + self._b2_size
        if total >= 2 * self.capacity and self._b2_size > 0:
            self._b2_size -= self._b2.popitem(last=False)[1]
        return self._replace()

    def _replace(self):
        t1 = self._t1_size
        if (t1 > 0 and (t1 > self.p or (t1 == self.p and self._ghost == 2))) \
                or self._t2_size == 0:
            victim, size = self._t1.popitem(last=False)
            self._t1_size -= size
            self._b1[victim] = size
            self._b1_size += size
        else:
            victim, size = self._t2.popitem(last=False)
            self._t2_size -= size
            self._b2[victim] = size
            self._b2_size += size
        return victim

    def _insert(self, key, size):
        # block mode's place puts back a set-aside victim that ``_replace`` already made a
        # ghost: drop that ghost (per access a miss has left the ghosts in ``_miss``)
        if key in self._b1:
            self._b1_size -= self._b1.pop(key)
        elif key in self._b2:
            self._b2_size -= self._b2.pop(key)
        if self._ghost:
            self._ghost = 0
            self._t2[key] = size
            self._t2_size += size
        else:
            self._t1[key] = size
            self._t1_size += size
        return True

    def keys(self) -> list:
        return [*self._t1, *self._t2]
