"""CLOCK (FIFO with reinsertion, second chance) as libCacheSim's ``Clock.c`` defaults:
a 1-bit counter (``n_bits=1``), set on a hit and 0 on insertion (``init_freq=0``); the hand
takes the oldest item, and one with a non-zero counter loses one and goes to the back."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

from pipeline.cache.tiers import Tier as Policy

__all__ = ["Clock"]


class Clock(Policy):
    """CLOCK with an ``n_bits`` saturating counter. ``keys()``: hand order, next first."""

    name = "clock"

    def __init__(self, capacity: float, n_bits: int = 1, init_freq: int = 0) -> None:
        super().__init__(capacity)
        if n_bits < 1 or not 0 <= init_freq:
            raise ValueError(f"n_bits must be >= 1 and init_freq >= 0, got {n_bits}, {init_freq}")
        self._max = (1 << n_bits) - 1
        self._init = init_freq
        self._ring: OrderedDict[Hashable, int] = OrderedDict()   # oldest first

    def _hit(self, key):
        if self._ring[key] < self._max:
            self._ring[key] += 1

    def _evict(self, key, size):
        ring = self._ring
        while True:
            oldest, count = next(iter(ring.items()))
            if count < 1:
                del ring[oldest]
                return oldest
            ring[oldest] = count - 1
            ring.move_to_end(oldest)

    def _insert(self, key, size):
        self._ring[key] = self._init
        return True

    def keys(self) -> list:
        return list(self._ring)
