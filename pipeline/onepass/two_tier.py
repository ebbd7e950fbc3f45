"""kvlab's ``TwoTierCache`` at every capacity pair, from LRU stack distances.

Document mode's two LRU tiers at every capacity, composed by ``pipeline.cache.tiers.access_tiers``
(the one composition): the GPU tier is an LRU cache that sees every access; the CPU tier is
an LRU cache fed exactly the GPU misses (a GPU hit leaves it untouched). So one
``lru_states`` pass gives the GPU tier at every GPU capacity, and one more over each GPU
capacity's miss stream gives the CPU tier at every CPU capacity. An access's tier is gpu on
a GPU hit, else cpu on a CPU hit, else miss (``pipeline.cache.tiers``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pipeline.onepass.stack_distance import lru_states
from pipeline.cache.tiers import access_tiers

__all__ = ["TwoTierStates", "compose_tiers", "two_tier_states", "two_tier_tiers"]


class TwoTierStates(NamedTuple):
    """``TwoTierCache(gpu, cpu)`` per access for one GPU capacity and K CPU capacities."""

    tiers: np.ndarray         # int8 (K, N): codes indexing pipeline.cache.tiers.TIERS
    gpu_used: np.ndarray      # int64 (N,): GPU tokens stored after the access
    gpu_evicted: np.ndarray   # int32 (N,): items the GPU tier evicted on the access
    cpu_used: np.ndarray      # int64 (K, N): CPU tokens stored after the access
    cpu_evicted: np.ndarray   # int32 (K, N): items the CPU tier evicted on the access


def compose_tiers(gpu_hit: np.ndarray, cpu_hit: np.ndarray) -> np.ndarray:
    """Tier codes (K, N) from GPU hits (N,) and CPU hits (K, M) over the M GPU misses
    (``pipeline.cache.tiers.access_tiers``, the one composition)."""
    return access_tiers(gpu_hit, np.atleast_2d(cpu_hit))


def two_tier_states(keys: object, sizes: object, gpu_capacities: object,
                    cpu_capacities: object) -> list[TwoTierStates]:
    """Per-access state of ``TwoTierCache(g, c)`` for every GPU capacity g (one list item
    each) and every CPU capacity c (the rows of its arrays), exactly."""
    gpu = lru_states(keys, sizes, gpu_capacities)           # validates the trace
    keys, sizes = np.asarray(keys), np.asarray(sizes)
    positions = np.arange(keys.size)
    results = []
    for g in range(gpu.hits.shape[0]):
        misses = np.flatnonzero(~gpu.hits[g])
        cpu = lru_states(keys[misses], sizes[misses], cpu_capacities)
        cpu_evicted = np.zeros((cpu.hits.shape[0], keys.size), dtype=np.int32)
        cpu_evicted[:, misses] = cpu.evicted
        # The CPU tier changes only on GPU misses: carry its occupancy over GPU hits.
        last_miss = np.searchsorted(misses, positions, side="right") - 1
        cpu_used = (np.where(last_miss >= 0, cpu.used[:, np.maximum(last_miss, 0)], 0)
                    if misses.size else np.zeros_like(cpu_evicted, dtype=np.int64))
        results.append(TwoTierStates(compose_tiers(gpu.hits[g], cpu.hits), gpu.used[g],
                                     gpu.evicted[g], cpu_used, cpu_evicted))
    return results


def two_tier_tiers(keys: object, sizes: object, gpu_capacity: int,
                   cpu_capacities: object) -> np.ndarray:
    """Per-access tier of ``TwoTierCache(gpu_capacity, c)`` for each CPU capacity c: int8
    codes indexing ``TIERS`` (0 = gpu, 1 = cpu, 2 = miss), shape (K, N)."""
    if np.ndim(gpu_capacity) != 0:
        raise TypeError(f"capacity must be a single number, got {gpu_capacity!r}")
    return two_tier_states(keys, sizes, [gpu_capacity], cpu_capacities)[0].tiers
