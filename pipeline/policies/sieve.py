"""SIEVE (Zhang et al., NSDI 2024) as libCacheSim's ``Sieve.c``: a FIFO queue with a
visited bit set on a hit; the hand walks from the oldest towards the newest, clearing
visited bits, evicts the first unvisited item and stays where it stopped (new items go to
the head and are not moved on a hit)."""

from __future__ import annotations

from collections.abc import Hashable

from pipeline.cache.tiers import Tier as Policy

__all__ = ["Sieve"]


class Sieve(Policy):
    """SIEVE. ``keys()``: queue order, oldest first."""

    name = "sieve"

    def __init__(self, capacity: float) -> None:
        super().__init__(capacity)
        self._visited: dict[Hashable, bool] = {}
        self._newer: dict[Hashable, Hashable | None] = {}   # neighbour towards the head
        self._older: dict[Hashable, Hashable | None] = {}   # neighbour towards the tail
        self._head = None          # newest
        self._tail = None          # oldest
        self._hand = None          # None: start from the tail

    def _hit(self, key):
        self._visited[key] = True

    def _evict(self, key, size):
        obj = self._tail if self._hand is None else self._hand
        while self._visited[obj]:
            self._visited[obj] = False
            newer = self._newer[obj]
            obj = self._tail if newer is None else newer
        self._hand = self._newer[obj]
        self._unlink(obj)
        return obj

    def _insert(self, key, size):
        self._visited[key] = False
        self._newer[key] = None
        self._older[key] = self._head
        if self._head is not None:
            self._newer[self._head] = key
        else:
            self._tail = key
        self._head = key
        return True

    def _unlink(self, obj) -> None:
        newer, older = self._newer.pop(obj), self._older.pop(obj)
        del self._visited[obj]
        if newer is None:
            self._head = older
        else:
            self._older[newer] = older
        if older is None:
            self._tail = newer
        else:
            self._newer[older] = newer

    def keys(self) -> list:
        out, obj = [], self._tail
        while obj is not None:
            out.append(obj)
            obj = self._newer[obj]
        return out
