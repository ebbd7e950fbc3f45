"""The shared base of the policy family, in the style of cachetools: one class holds the
capacity, ``used``, the oversize rule and the eviction bookkeeping; a policy overrides a few
small hooks (what a hit updates, which item to evict, where a new item goes).

The rules every policy inherits are kvlab's (``kvlab/kvsim.py``) and libCacheSim's
(``cache_get_base`` in ``libCacheSim/cache/cache.c``), which agree:

* a hit keeps the size stored by the miss that inserted the item;
* on a miss, an item larger than the capacity is not stored and evicts nothing (a size-0
  item fits even capacity 0);
* otherwise the policy evicts until ``used + size <= capacity`` and stores the item (S3-FIFO
  may still decline it, as libCacheSim's does; see ``s3fifo.py``).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from kvlab.kvsim import _check_amount

__all__ = ["Policy"]


class Policy:
    """A size-aware cache: ``access(key, size) -> bool`` (True on a hit), ``key in cache``,
    ``used``, ``keys()``, ``capacity``, ``evictions``.

    Subclasses override ``_hit`` (a resident key was read), ``_evict`` (remove one victim
    from the policy's own structures and return its key, or None when this round only
    moved items around), ``_insert`` (place a new key; return False to decline it) and,
    when they keep history of absent keys, ``_miss`` (called on every miss before the fit
    test, like libCacheSim's ``find``).
    """

    #: registry name, e.g. "fifo"
    name = "base"
    #: True for policies that must be given the future (Belady's OPT).
    needs_future = False
    #: True for policies that may leave a miss unstored although it fits
    may_decline = False

    def __init__(self, capacity: float) -> None:
        self.capacity = _check_amount("capacity", capacity, allow_inf=True)
        self.used = 0
        self.evictions = 0
        self._sizes: dict[Hashable, float] = {}

    # ------------------------------------------------------------------ the interface

    def access(self, key: Hashable, size: float) -> bool:
        """Read ``key`` of ``size``; return True on a hit, False on a miss."""
        _check_amount("size", size)
        self._touch(key)
        if key in self._sizes:
            self._hit(key)
            return True
        self._miss(key, size)
        if not self._admissible(size):
            return False
        while self.used + size > self.capacity:
            victim = self._evict(key, size)
            if victim is not None:
                self.used -= self._sizes.pop(victim)
                self.evictions += 1
        if self._insert(key, size):
            self._sizes[key] = size
            self.used += size
        return False

    def place(self, keys: Sequence[Hashable], size: float = 1) -> None:
        """Block mode (the block issue's placement): read ``keys`` (one request's cacheable
        blocks, in the tier's touch order) each as a hit or an insertion, then evict until
        the tier fits, never a block of this request: a victim the policy picks among them
        is set aside and inserted again afterwards. A request larger than the capacity is
        not stored and evicts nothing. The lookup (the prefix hit) happens before, outside.
        """
        _check_amount("size", size)
        if len(keys) * size > self.capacity:
            return
        for key in keys:
            self._touch(key)
            if key in self._sizes:
                self._hit(key)
            else:
                self._miss(key, size)
                if self._insert(key, size):
                    self._sizes[key] = size
                    self.used += size
        pinned, aside, held = set(keys), [], 0
        while self.used + held > self.capacity:
            victim = self._evict(None, 0)
            if victim is None:
                continue
            victim_size = self._sizes.pop(victim)
            self.used -= victim_size
            if victim in pinned:
                aside.append((victim, victim_size))
                held += victim_size
            else:
                self.evictions += 1
        for key, key_size in aside:
            if self._insert(key, key_size):
                self._sizes[key] = key_size
                self.used += key_size

    def keys(self) -> list:
        """The stored keys (order: the policy's own, documented per policy)."""
        return list(self._sizes)

    def __contains__(self, key: object) -> bool:
        return key in self._sizes

    def __len__(self) -> int:
        return len(self._sizes)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(capacity={self.capacity!r}) "
                f"used={self.used!r} items={len(self._sizes)}")

    # ------------------------------------------------------------------ the hooks

    def _admissible(self, size: float) -> bool:
        """kvlab's only rejection: an item larger than the capacity."""
        return size <= self.capacity

    def _touch(self, key: Hashable) -> None:
        """Called first on every read and every placed block (OPT's clock)."""

    def _hit(self, key: Hashable) -> None:
        """Update the policy's state for a hit on resident ``key``."""

    def _miss(self, key: Hashable, size: float) -> None:
        """Called on every miss before the fit test (ghost lists live here)."""

    def _evict(self, key: Hashable, size: float) -> Hashable | None:
        """Remove one victim from the policy's structures and return its key."""
        raise NotImplementedError

    def _insert(self, key: Hashable, size: float) -> bool:
        """Place new ``key``; False declines it (it is then not stored)."""
        raise NotImplementedError
