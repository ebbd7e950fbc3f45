"""Exact per-access LRU state for many capacities in one pass over a trace.

For a size-aware LRU cache (kvlab's ``LRUCache``) the content after any access is the
longest top of the recency stack whose sizes sum to at most the capacity, counting only
items that fit the capacity at all (larger ones are never stored and evict nothing).
Hence, for every capacity C at once, from one Fenwick tree over last-access positions:

* access i hits iff its stack depth before the access (own size + distinct sizes touched
  since its previous access) is <= C;
* ``used`` after access i is the largest top-of-stack sum <= C, found by a Fenwick descent;
* evictions = items held before + (1 if stored) - items held after.

Capacities are grouped into size bands (between consecutive distinct item sizes) because
the set of storable items changes only there; one pass per band is exact. Capacity 0
stores nothing. Sizes must be fixed per key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numba
import numpy as np


@dataclass(frozen=True)
class LRUStates:
    """Per (capacity, access) results, arrays of shape (len(capacities), len(trace))."""

    capacities: np.ndarray
    hits: np.ndarray       # bool
    used: np.ndarray       # int64: stored size after the access
    evicted: np.ndarray    # int32: items evicted by the access


@numba.njit(cache=True)
def _prefix(tree: np.ndarray, index: int) -> int:
    total = 0
    while index > 0:
        total += tree[index]
        index -= index & -index
    return total


@numba.njit(cache=True)
def _add(tree: np.ndarray, index: int, value: int) -> None:
    while index < tree.size:
        tree[index] += value
        index += index & -index


@numba.njit(cache=True)
def _states_kernel(keys, sizes, limit, capacities, hits, used, evicted):  # pragma: no cover
    n = keys.size
    m = capacities.size
    n_keys = keys.max() + 1 if n else 0
    last = np.full(n_keys, -1, np.int64)
    tree_size = np.zeros(n + 1, np.int64)   # Fenwick tree over 1-based positions
    tree_count = np.zeros(n + 1, np.int64)
    point_size = np.zeros(n + 1, np.int64)
    held = np.zeros(m, np.int64)            # items stored, per capacity
    total = 0
    total_count = 0
    top = 1
    while top * 2 <= n:
        top *= 2
    for i in range(n):
        key = keys[i]
        size = sizes[i]
        storable = size <= limit
        if storable:
            previous = last[key]
            if previous >= 0:
                depth = total - _prefix(tree_size, previous)
                for c in range(m):
                    hits[c, i] = 0 < capacities[c] and depth <= capacities[c]
                _add(tree_size, previous + 1, -size)
                _add(tree_count, previous + 1, -1)
                point_size[previous + 1] = 0
            else:
                total += size
                total_count += 1
            _add(tree_size, i + 1, size)
            _add(tree_count, i + 1, 1)
            point_size[i + 1] = size
            last[key] = i
        for c in range(m):
            capacity = capacities[c]
            if capacity <= 0:
                continue
            target = total - capacity
            if target <= 0:
                now_used = total
                now_held = total_count
            else:  # smallest q with prefix(q) >= target; the cache holds positions > q
                position = 0
                accumulated = 0
                step = top
                while step > 0:
                    probe = position + step
                    if probe <= n and accumulated + tree_size[probe] < target:
                        position = probe
                        accumulated += tree_size[probe]
                    step //= 2
                q = position + 1
                now_used = total - (accumulated + point_size[q])
                now_held = total_count - _prefix(tree_count, q)
            stored = 1 if storable and not hits[c, i] else 0
            used[c, i] = now_used
            evicted[c, i] = held[c] + stored - now_held
            held[c] = now_held


def _dense_keys(keys: np.ndarray) -> np.ndarray:
    return np.unique(keys, return_inverse=True)[1].astype(np.int64).reshape(-1)


def check_fixed_sizes(keys: np.ndarray, sizes: np.ndarray) -> None:
    """Raise ValueError naming the first key whose size varies, or if a size is negative."""
    if sizes.size and sizes.min() < 0:
        raise ValueError(f"sizes must be >= 0, got {sizes.min()}")
    order = np.lexsort((sizes, keys))
    same_key = keys[order][1:] == keys[order][:-1]
    varies = same_key & (sizes[order][1:] != sizes[order][:-1])
    if varies.any():
        key = keys[order][1:][varies][0]
        raise ValueError(f"key {key} is accessed with different sizes; the one-pass method "
                         "needs one size per key (use the direct engine)")


def lru_states(keys: Sequence[int] | np.ndarray, sizes: Sequence[int] | np.ndarray,
               capacities: Sequence[int]) -> LRUStates:
    """Exact per-access hits, occupancy and evictions of kvlab's LRUCache at each capacity."""
    keys = np.asarray(keys, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    caps = np.asarray(capacities, dtype=np.int64)
    if caps.size and caps.min() < 0:
        raise ValueError(f"capacities must be >= 0, got {caps.min()}")
    check_fixed_sizes(keys, sizes)
    dense = _dense_keys(keys)
    shape = (caps.size, keys.size)
    hits = np.zeros(shape, np.bool_)
    used = np.zeros(shape, np.int64)
    evicted = np.zeros(shape, np.int32)
    distinct_sizes = np.unique(sizes)
    # Band of each capacity: the largest item size that fits it (-1: nothing fits).
    band_index = np.searchsorted(distinct_sizes, caps, side="right") - 1
    for band in np.unique(band_index):
        rows = np.flatnonzero(band_index == band)
        limit = distinct_sizes[band] if band >= 0 else -1
        sub = (np.zeros((rows.size, keys.size), np.bool_),
               np.zeros((rows.size, keys.size), np.int64),
               np.zeros((rows.size, keys.size), np.int32))
        _states_kernel(dense, sizes, limit, caps[rows], *sub)
        hits[rows], used[rows], evicted[rows] = sub
    return LRUStates(caps, hits, used, evicted)
