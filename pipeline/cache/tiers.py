"""The tiers that serve an access, and the one interface every cache model implements.

Names: an access is served by a GPU hit, a CPU reload or a miss (recompute), fastest first,
as kvlab's ``TwoTierCache.access`` names them (``kvlab.kvsim.TIERS``). ``TIER`` is the polars
Enum of those names: sorting by it gives gpu, cpu, miss, so no rank map is needed.

``Tier`` is the base of every cache model with keys (cachetools style: the base does the
bookkeeping, a policy overrides a few hooks); ``TwoTier`` composes a GPU and a CPU tier,
the one composition every command uses.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Sequence

import numpy as np
import polars as pl

# kvlab's own amount check, so a Tier refuses exactly what kvlab's caches refuse (kvlab/ is
# the frozen contract: its files, and so this private name, stay as they are)
from kvlab.kvsim import TIERS, _check_amount

__all__ = ["TIERS", "TIER", "GPU_CODE", "CPU_CODE", "MISS_CODE", "TIER_CODES", "COUNT_COLUMNS",
           "COUNT_NAMES", "Tier", "TwoTier", "served_beyond", "access_tiers", "leading_run"]

#: The tier names as a polars Enum, fastest first.
TIER = pl.Enum(list(TIERS))
#: int8 codes of the tiers in numpy arrays: they index TIERS.
GPU_CODE, CPU_CODE, MISS_CODE = range(len(TIERS))
TIER_CODES = {name: code for code, name in enumerate(TIERS)}
#: tier -> the aggregates column that counts it (pipeline.sweeps.AGGREGATE_SCHEMA).
COUNT_COLUMNS = {"gpu": "gpu_hits", "cpu": "cpu_hits", "miss": "misses"}
#: tier -> how a count of it reads in a sentence ("4 GPU hits + 6 misses").
COUNT_NAMES = {"gpu": "GPU hits", "cpu": "CPU hits", "miss": "misses"}


def leading_run(keys: Sequence[Hashable], held: object) -> int:
    """How many leading ``keys`` are in ``held`` (a container): a tier's prefix hit."""
    run = 0
    for key in keys:
        if key not in held:
            break
        run += 1
    return run


def served_beyond(gpu_hit: object, cpu_prefix: object) -> np.ndarray:
    """What the CPU tier serves: its prefix hit (counted from the request's start) beyond
    the GPU hit, ``max(0, cpu - gpu)``, elementwise (tokens or blocks)."""
    return np.maximum(np.asarray(cpu_prefix, np.int64) - np.asarray(gpu_hit, np.int64), 0)


def access_tiers(gpu_hit: np.ndarray, cpu_hit: np.ndarray) -> np.ndarray:
    """The same composition per access (one key per request, so the CPU tier sees exactly
    the GPU misses): tier codes (K, N) from GPU hits (N,) and CPU hits (K, M) over the M GPU
    misses (a 1-D ``cpu_hit`` gives codes of shape (N,))."""
    gpu_hit = np.asarray(gpu_hit, bool)
    cpu_hit = np.asarray(cpu_hit, bool)
    rows = cpu_hit if cpu_hit.ndim > 1 else cpu_hit[None, :]
    tiers = np.full((rows.shape[0], gpu_hit.size), MISS_CODE, dtype=np.int8)
    tiers[:, gpu_hit] = GPU_CODE
    tiers[:, ~gpu_hit] = np.where(rows, CPU_CODE, MISS_CODE)
    return tiers if cpu_hit.ndim > 1 else tiers[0]


class Tier:
    """A size-aware cache tier: ``access(key, size) -> bool`` (True on a hit),
    ``lookup(keys)``, ``place(keys, sizes)``, ``key in tier``, ``used``, ``keys()``,
    ``capacity``, ``evictions``.

    The rules every subclass inherits are kvlab's (``kvlab/kvsim.py``) and libCacheSim's
    (``cache_get_base`` in ``libCacheSim/cache/cache.c``), which agree: a hit keeps the size
    stored by the miss that inserted the item; on a miss, an item larger than the capacity is
    not stored and evicts nothing (a size-0 item fits even capacity 0); otherwise the policy
    evicts until ``used + size <= capacity`` and stores the item (a policy may still decline
    it: S3-FIFO, OPT with bypass).

    Subclasses override ``_hit`` (a resident key was read), ``_evict`` (remove one victim
    from the policy's own structures and return its key, or None when this round only moved
    items around), ``_insert`` (place a new key; return False to decline it) and, when they
    keep history of absent keys, ``_miss`` (called on every miss before the fit test, like
    libCacheSim's ``find``).
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

    def lookup(self, keys: Sequence[Hashable]) -> int:
        """How many leading ``keys`` the tier holds (the prefix hit); changes nothing."""
        return leading_run(keys, self._sizes)

    def place(self, keys: Sequence[Hashable], sizes: float | Sequence[float] = 1) -> None:
        """Read ``keys`` (one request's cacheable blocks, in the tier's touch order; ``sizes``
        one number for all or one per key) each as a hit or an insertion, then evict until
        the tier fits, never a key of this request: a victim the policy picks among them is
        set aside and inserted again afterwards. A request larger than the capacity is not
        stored and evicts nothing. The lookup (the prefix hit) happens before, outside."""
        if isinstance(sizes, (int, float)):
            total = len(keys) * _check_amount("size", sizes)
            sizes = itertools.repeat(sizes)
        else:
            sizes = [_check_amount("size", size) for size in sizes]
            total = sum(sizes)
        if total > self.capacity:
            return
        for key, size in zip(keys, sizes):
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


class TwoTier:
    """A GPU tier and a CPU tier (any objects with ``lookup`` and ``place``) composed, one
    request at a time: both look the request up before any update; the CPU serves what lies
    beyond the GPU hit (``served_beyond``); the GPU tier then places every key and the CPU
    tier the keys from where the GPU hit ends (all of them for a tier that stores from its
    own hit, ``places_whole_request``: LMCache). With one key per request this is kvlab's
    ``TwoTierCache`` (the CPU tier sees exactly the GPU misses)."""

    def __init__(self, gpu: Tier, cpu: Tier) -> None:
        self.gpu, self.cpu = gpu, cpu

    def request(self, keys: Sequence[Hashable], sizes: float | Sequence[float] = 1
                ) -> tuple[int, int]:
        """Serve one request: (keys the GPU serves, keys the CPU serves beyond them)."""
        gpu_hit, cpu_prefix = self.gpu.lookup(keys), self.cpu.lookup(keys)
        self.gpu.place(keys, sizes)
        start = 0 if getattr(self.cpu, "places_whole_request", False) else gpu_hit
        rest = sizes if isinstance(sizes, (int, float)) else sizes[start:]
        self.cpu.place(keys[start:], rest)
        return gpu_hit, int(served_beyond(gpu_hit, cpu_prefix))
