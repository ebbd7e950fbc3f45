"""KV-cache models for kvlab: an LRU cache and a GPU + CPU two-tier cache.

Standard library only. Sizes and capacities are in tokens (any unit works).

>>> from kvsim import LRUCache, TwoTierCache
>>> cache = LRUCache(10)
>>> cache.access("a", 6), cache.access("b", 4), cache.access("a", 6)
(False, False, True)
>>> cache.keys(), cache.used
(['b', 'a'], 10)
>>> cache.access("c", 3)              # evicts the oldest ("b") until c fits
False
>>> cache.keys(), cache.used, cache.evictions
(['a', 'c'], 9, 1)
>>> cache.access("huge", 11)          # larger than the capacity: not stored, evicts nothing
False
>>> cache.keys()
['a', 'c']
>>> tiers = TwoTierCache(gpu_capacity=5, cpu_capacity=10)
>>> [tiers.access(k, 5) for k in "ab"], tiers.access("a", 5), tiers.access("a", 5)
(['miss', 'miss'], 'cpu', 'gpu')
"""

from __future__ import annotations

import math
import numbers
from collections import OrderedDict
from collections.abc import Hashable

__all__ = ["LRUCache", "TwoTierCache", "TIERS"]

#: The values ``TwoTierCache.access`` returns, fastest first.
TIERS = ("gpu", "cpu", "miss")


def _check_amount(name: str, value: float, allow_inf: bool = False) -> float:
    """Return ``value`` if it is a real number >= 0 (finite unless ``allow_inf``), else raise.

    Any ``numbers.Real`` counts (int, float, Fraction, numpy integers and floats); bool does
    not, and neither does NaN.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {value!r}")
    if math.isnan(value) or (math.isinf(value) and not allow_inf):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return value


class LRUCache:
    """A size-aware least-recently-used cache.

    ``access(key, size)`` returns True on a hit (the item becomes the most recent) and
    False on a miss, after which the oldest items are evicted until ``used + size <=
    capacity`` and the item is stored. An item larger than the capacity is not stored and
    evicts nothing; that is the only rejection, so a size-0 item fits even a capacity-0
    cache (stored, evicting nothing, and a hit next time). A hit keeps the size stored by
    the miss that inserted the item.

    Attributes: ``capacity``, ``used`` (sum of stored sizes) and ``evictions`` (items
    evicted so far, for event logs).
    """

    def __init__(self, capacity: float) -> None:
        self.capacity = _check_amount("capacity", capacity, allow_inf=True)
        self.used = 0
        self.evictions = 0
        self._items: OrderedDict[Hashable, float] = OrderedDict()

    def access(self, key: Hashable, size: float) -> bool:
        """Read ``key`` of ``size``; return True on a hit, False on a miss."""
        _check_amount("size", size)
        items = self._items
        if key in items:
            items.move_to_end(key)
            return True
        if size > self.capacity:
            return False
        while self.used + size > self.capacity:
            _, old_size = items.popitem(last=False)
            self.used -= old_size
            self.evictions += 1
        items[key] = size
        self.used += size
        return False

    def keys(self) -> list:
        """The stored keys, least recently used first."""
        return list(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(capacity={self.capacity!r}) "
                f"used={self.used!r} items={len(self._items)}")


class TwoTierCache:
    """A GPU LRU tier backed by a CPU LRU tier that keeps copies of what was read.

    ``access(key, size)`` returns ``"gpu"`` (GPU hit; the CPU tier is not touched),
    ``"cpu"`` (GPU miss, CPU hit: the CPU copy becomes most recent and the item is loaded
    into the GPU tier) or ``"miss"`` (stored in both tiers). The CPU tier therefore sees
    exactly the stream of GPU misses. With ``cpu_capacity=0`` it behaves as one GPU tier
    whenever no item has size 0 (the lab's documents all share one size, so a scenario with
    ``--cpu 0`` always equals the GPU tier alone). The one corner: a size-0 item fits a
    capacity-0 CPU tier, so after the GPU evicts it, it can come back as a ``"cpu"`` hit.
    """

    def __init__(self, gpu_capacity: float, cpu_capacity: float) -> None:
        self.gpu = LRUCache(gpu_capacity)
        self.cpu = LRUCache(cpu_capacity)

    def access(self, key: Hashable, size: float) -> str:
        """Read ``key`` of ``size``; return the tier that served it: gpu, cpu or miss."""
        _check_amount("size", size)
        if key in self.gpu:
            self.gpu.access(key, size)
            return "gpu"
        tier = "cpu" if self.cpu.access(key, size) else "miss"
        self.gpu.access(key, size)
        return tier

    def __repr__(self) -> str:
        return f"{type(self).__name__}(gpu={self.gpu!r}, cpu={self.cpu!r})"


if __name__ == "__main__":
    import doctest

    raise SystemExit(doctest.testmod().failed)
