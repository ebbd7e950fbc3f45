"""Belady's OPT: evict the resident item whose next read is farthest in the future.

It needs the future, so it is built with the whole key sequence up front and then fed the
same sequence through ``access``. With ``bypass=True`` (the family's ``opt``) a missed item
whose next read is no sooner than every resident item's is not stored at all when storing it
would evict: for equal sizes that is the optimum over every policy, bypassing ones included
(Belady 1966; Mattson et al. 1970), so its hits bound every other policy's. With
``bypass=False`` it always stores, as libCacheSim's ``Belady.c`` (optimal among policies
that must store every miss). For unequal sizes neither is optimal (the problem is NP-hard;
libCacheSim's ``BeladySize`` can beat it): it is a reference, not a bound.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable, Sequence

from pipeline.cache.tiers import Tier as Policy

__all__ = ["OPT", "next_uses"]

NEVER = math.inf


def next_uses(keys: Sequence[Hashable]) -> list[float]:
    """For each position, the position of the next read of the same key (inf if none)."""
    out: list[float] = [NEVER] * len(keys)
    seen: dict[Hashable, int] = {}
    for index in range(len(keys) - 1, -1, -1):
        out[index] = seen.get(keys[index], NEVER)
        seen[keys[index]] = index
    return out


class OPT(Policy):
    """Belady's OPT over ``future`` (the keys it will be given, in order, by ``access`` and
    ``place`` together).
    ``keys()``: eviction order, victim first."""

    name = "opt"
    needs_future = True
    #: with bypass, a miss may be left unstored
    may_decline = True

    def __init__(self, capacity: float, future: Sequence[Hashable], bypass: bool = True) -> None:
        super().__init__(capacity)
        self._future = list(future)
        self._next = next_uses(self._future)
        self._bypass = bypass
        self._t = 0
        self._now = NEVER                               # next use of the current key
        self._last: dict[Hashable, float] = {}          # key -> next use at its last touch
        self._due: dict[Hashable, float] = {}           # resident key -> its next use
        self._heap: list[tuple[float, int, Hashable]] = []   # (-next use, -seq, key), lazy
        self._seq = 0

    def _touch(self, key: Hashable) -> None:
        """Advance the clock; ``key`` must be the next key of the future given."""
        if self._t >= len(self._future) or self._future[self._t] != key:
            expected = self._future[self._t] if self._t < len(self._future) else "the end"
            raise ValueError(f"OPT: access {self._t} is {key!r}, but the future given "
                             f"says {expected!r}")
        self._now = self._last[key] = self._next[self._t]
        self._t += 1

    def _push(self, key) -> None:
        due = self._due[key] = self._last[key]
        self._seq += 1
        heapq.heappush(self._heap, (-due, -self._seq, key))

    def _top(self):
        heap = self._heap
        while heap and self._due.get(heap[0][2]) != -heap[0][0]:
            heapq.heappop(heap)
        return heap[0]

    def _hit(self, key):
        self._push(key)

    def _admissible(self, size):
        if size > self.capacity:
            return False
        if self._bypass and self.used + size > self.capacity and self._due:
            return self._now < -self._top()[0]
        return True

    def _evict(self, key, size):
        victim = heapq.heappop(self._heap)[2] if self._top() else None
        del self._due[victim]
        return victim

    def _insert(self, key, size):
        self._push(key)
        return True

    def keys(self) -> list:
        return sorted(self._due, key=lambda k: -self._due[k])
