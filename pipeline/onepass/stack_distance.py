"""Exact LRU hit curves for every capacity in one pass, from byte-weighted stack distances.

LRU is a stack algorithm (Mattson et al., 1970). The byte-weighted stack distance of an
access is the key's own size plus the summed sizes of the distinct other keys touched since
the key's previous access (a first access is ``COLD``: infinitely far). One O(N log N) pass
(a Fenwick tree over last-access positions) gives every distance, and then:

    access i hits an LRU cache of capacity C  <=>  distance_i <= C

which holds exactly for kvlab's ``LRUCache`` (``kvlab/kvsim.py``) once its two special rules
are honoured:

* **Oversize items.** An item larger than C is never stored and evicts nothing, so for that C
  the trace behaves as if its accesses were not there: they are always misses and must not
  count in anyone's distance. Which keys are storable depends on C only through the distinct
  sizes at or below C, so capacities fall into *bands* ``[s_j, s_j+1)`` between consecutive
  distinct trace sizes; within a band the set of storable keys is fixed and one pass with
  ``size_limit=s_j`` is exact for every capacity in the band. All capacities >= the largest
  size share one unfiltered pass. (Hit(C) is therefore not monotone in C below that size.)
* **Capacity 0** is no special case: the only rejection is size > C, so size-0 keys are
  stored at C = 0 (their distances are 0 when only size-0 keys are storable) and hit.

Why the equivalence is exact (storable keys only): the cached set is always a prefix
of the recency stack (a hit moves a cached key to the top; a miss pushes the new key on top
and evicts from the bottom of the cached prefix). If x is cached at its next access, every
key above it is cached too, so distance <= used <= C. Conversely x, cached right after its
previous access, is evicted only when a new key y (not above x) needs room although x and
every key above it are already counted: own size + those sizes + size(y) > C, which means
distance > C. Sizes must be fixed per key (kvlab keeps the first stored size on a hit, which
would make the state depend on C), so traces whose key sizes vary are rejected.

The same prefix property gives the state itself: after any access the cache holds the
longest top of the stack that fits, so ``lru_states`` finds the bytes used at every capacity
with a Fenwick descent, and evictions from the change in items held.

A two-tier cache (``TwoTierCache``) is two such passes (``two_tier_states``): the GPU tier is an
LRU cache that sees every access, the CPU tier one fed exactly the GPU misses (a GPU hit
leaves it untouched), so one ``lru_states`` pass gives the GPU tier at every GPU capacity and
one more over each GPU capacity's miss stream the CPU tier at every CPU capacity; an access's
tier is gpu on a GPU hit, else cpu on a CPU hit, else miss (``pipeline.cache.tiers.access_tiers``,
the one composition).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from pipeline.base.arrays import read_only
from pipeline.onepass.stack_distance_kernels import (COLD, first_size_change, occupancy_pass,
                                                   stack_distance_pass)
from pipeline.cache.tiers import access_tiers

__all__ = ["COLD", "NOTHING_STORED", "HitCurve", "LRUStates", "TwoTierStates", "stack_distances",
           "lru_hits", "lru_hit_counts", "lru_states", "two_tier_states", "hit_curve",
           "band_limits"]


#: band limit of a capacity that can store no key at all
NOTHING_STORED = -1
_DIRECT_CODE_SLACK = 1024     # keys in [0, 4 N + slack) index tables directly


# --------------------------------------------------------------------------- validation


class _Coded(NamedTuple):
    """The pass's index of an item stream (the keys and sizes of ``Workload.items()``, or any
    such arrays), validated: sizes, dense key codes 0..n_codes-1 and the sorted distinct
    sizes (the size bands). Not a workload: what the Fenwick pass reads."""

    sizes: np.ndarray
    codes: np.ndarray
    n_codes: int
    distinct_sizes: np.ndarray


def _as_int64(name: str, values: object) -> np.ndarray:
    """``values`` as a 1-D int64 array of non-negative integers, or raise."""
    array = np.asarray(values)
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    if array.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integers, got dtype {array.dtype}")
    if array.dtype == np.uint64 and array.max() > COLD:
        raise ValueError(f"{name} must fit in int64, got {array.max()}")
    array = array.astype(np.int64, copy=False)
    if array.min() < 0:
        raise ValueError(f"{name} must be >= 0, got {array[np.argmax(array < 0)]}")
    return array


def _as_keys(keys: object) -> np.ndarray:
    """``keys`` as a 1-D int64 array of key codes (any integers), or raise."""
    array = np.asarray(keys)
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise TypeError("keys must be a 1-D array of integer codes; encode other keys first, "
                        "e.g. np.unique(keys, return_inverse=True)[1]")
    return array.astype(np.int64, copy=False)


def _as_capacities(capacities: object) -> np.ndarray:
    """``capacities`` (a number or a sequence) as a 1-D int64 array, or raise."""
    array = _as_int64("capacity", np.atleast_1d(np.asarray(capacities)))
    if array.size and array.max() >= COLD:
        raise ValueError(f"capacity must be below {COLD}, got {array.max()}")
    return array


def _dense_codes(keys: np.ndarray) -> tuple[np.ndarray, int]:
    """Key codes 0..n_codes-1 for table lookups (the keys themselves when small enough)."""
    if keys.size == 0:
        return keys, 0
    if keys.min() >= 0 and keys.max() < 4 * keys.size + _DIRECT_CODE_SLACK:
        return keys, int(keys.max()) + 1
    unique, codes = np.unique(keys, return_inverse=True)
    return codes.astype(np.int64, copy=False).reshape(-1), unique.size


def _fixed_key_sizes(keys: np.ndarray, sizes: np.ndarray, codes: np.ndarray,
                     n_codes: int) -> np.ndarray:
    """Each code's size (-1 for unused codes); raise ValueError naming the first key whose
    size varies along the trace."""
    key_sizes = np.full(n_codes, -1, dtype=np.int64)
    index = first_size_change(codes, sizes, key_sizes)
    if index >= 0:
        raise ValueError(
            f"key {int(keys[index])} changes size at access {index}: "
            f"{int(key_sizes[codes[index]])} then {int(sizes[index])}; "
            "stack distances need one fixed size per key")
    return key_sizes


def _prepare(keys: object, sizes: object) -> _Coded:
    """Validate a trace (integer keys, non-negative fixed sizes per key) and code its keys."""
    keys_array, sizes_array = _as_keys(keys), read_only(_as_int64("size", sizes))
    if keys_array.size != sizes_array.size:
        raise ValueError(f"keys and sizes differ in length: {keys_array.size} != "
                         f"{sizes_array.size}")
    if sizes_array.size and int(sizes_array.max()) > COLD // (2 * sizes_array.size):
        raise ValueError(f"size {int(sizes_array.max())} is too large: byte sums could "
                         "overflow int64")
    codes, n_codes = _dense_codes(keys_array)
    key_sizes = _fixed_key_sizes(keys_array, sizes_array, codes, n_codes)
    distinct_sizes = np.unique(key_sizes[key_sizes >= 0])   # one entry per key, not per access
    return _Coded(sizes_array, codes, n_codes, distinct_sizes)


# --------------------------------------------------------------------------- passes and bands


def _distances(trace: _Coded, size_limit: int) -> np.ndarray:
    """Stack distances of a validated trace, keys larger than ``size_limit`` excluded."""
    n = trace.sizes.size
    out = np.empty(n, dtype=np.int64)
    last_position = np.full(trace.n_codes, -1, dtype=np.int64)
    tree = np.zeros(n + 1, dtype=np.int64)
    stack_distance_pass(trace.codes, trace.sizes, size_limit, last_position, tree, out)
    return out


def band_limits(distinct: np.ndarray, capacities: np.ndarray) -> np.ndarray:
    """Per capacity, the largest of the sorted ``distinct`` sizes that it can store
    (``NOTHING_STORED`` if none).

    Every capacity with the same limit stores the same keys, so one pass serves them all.
    """
    storable = np.concatenate(([NOTHING_STORED], distinct)).astype(np.int64)
    return storable[np.searchsorted(distinct, capacities, side="right")]


def _passes_by_band(trace: _Coded,
                    capacities: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield (row indices into ``capacities``, distances) once per band with a storable key."""
    limits = band_limits(trace.distinct_sizes, capacities)
    for limit in np.unique(limits):
        if limit == NOTHING_STORED:
            continue
        yield np.flatnonzero(limits == limit), _distances(trace, int(limit))


def _hits_of(trace: _Coded, capacities: np.ndarray) -> np.ndarray:
    """Per-access LRU hits, shape (len(capacities), N), of a validated trace."""
    hits = np.zeros((capacities.size, trace.sizes.size), dtype=bool)
    for rows, distances in _passes_by_band(trace, capacities):
        for row in rows:
            np.less_equal(distances, capacities[row], out=hits[row])
    return hits


def _count_within(distances: np.ndarray, capacities: np.ndarray) -> np.ndarray:
    """For each capacity, how many distances are <= it (``COLD`` never is)."""
    return np.searchsorted(np.sort(distances), capacities, side="right").astype(np.int64)


# --------------------------------------------------------------------------- public API


def stack_distances(keys: object, sizes: object, size_limit: int | None = None) -> np.ndarray:
    """Byte-weighted LRU stack distance per access (int64; ``COLD`` for first accesses).

    ``keys`` are integer key codes, ``sizes`` non-negative integers fixed per key. With
    ``size_limit``, keys larger than it are treated as never stored: they count in no
    distance and their own distance is ``COLD``.
    """
    trace = _prepare(keys, sizes)
    if size_limit is None:
        return _distances(trace, COLD)
    limit = _as_int64("size_limit", [size_limit])[0]
    return _distances(trace, int(limit))


def lru_hits(keys: object, sizes: object, capacities: object) -> np.ndarray:
    """Per-access hits of kvlab's ``LRUCache`` for each capacity: bool, shape (K, N).

    Exact, including oversize items (one pass per size band that a capacity falls in) and
    capacity 0 (only size-0 items are stored there).
    """
    return _hits_of(_prepare(keys, sizes), _as_capacities(capacities))


def lru_hit_counts(keys: object, sizes: object, capacities: object) -> np.ndarray:
    """Total hits of kvlab's ``LRUCache`` per capacity (int64, shape (K,)); exact like
    ``lru_hits`` but without the (K, N) matrix: one pass per size band."""
    trace = _prepare(keys, sizes)
    capacity_array = _as_capacities(capacities)
    counts = np.zeros(capacity_array.size, dtype=np.int64)
    for rows, distances in _passes_by_band(trace, capacity_array):
        counts[rows] = _count_within(distances, capacity_array[rows])
    return counts


class LRUStates(NamedTuple):
    """Per (capacity, access) state of kvlab's ``LRUCache``, arrays of shape (K, N)."""

    hits: np.ndarray       # bool: the access hit
    used: np.ndarray       # int64: bytes stored after the access
    evicted: np.ndarray    # int32: items the access evicted


def lru_states(keys: object, sizes: object, capacities: object) -> LRUStates:
    """Per-access hits, occupancy and evictions of ``LRUCache`` at every capacity, exactly.

    One hit pass and one occupancy pass per size band (see the module docstring).
    """
    trace = _prepare(keys, sizes)
    capacity_array = _as_capacities(capacities)
    hits = _hits_of(trace, capacity_array)
    used = np.zeros(hits.shape, dtype=np.int64)
    evicted = np.zeros(hits.shape, dtype=np.int32)
    limits = band_limits(trace.distinct_sizes, capacity_array)
    for limit in np.unique(limits):
        if limit == NOTHING_STORED:
            continue
        rows = np.flatnonzero(limits == limit)
        band_used = np.zeros((rows.size, trace.sizes.size), dtype=np.int64)
        band_evicted = np.zeros((rows.size, trace.sizes.size), dtype=np.int32)
        occupancy_pass(trace.codes, trace.sizes, int(limit), hits[rows], capacity_array[rows],
                        band_used, band_evicted)
        used[rows], evicted[rows] = band_used, band_evicted
    return LRUStates(hits, used, evicted)


class TwoTierStates(NamedTuple):
    """``TwoTierCache(gpu, cpu)`` per access for one GPU capacity and K CPU capacities."""

    tiers: np.ndarray         # int8 (K, N): codes indexing pipeline.cache.tiers.TIERS
    gpu_used: np.ndarray      # int64 (N,): GPU tokens stored after the access
    gpu_evicted: np.ndarray   # int32 (N,): items the GPU tier evicted on the access
    cpu_used: np.ndarray      # int64 (K, N): CPU tokens stored after the access
    cpu_evicted: np.ndarray   # int32 (K, N): items the CPU tier evicted on the access


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
        results.append(TwoTierStates(access_tiers(gpu.hits[g], np.atleast_2d(cpu.hits)),
                                     gpu.used[g], gpu.evicted[g], cpu_used, cpu_evicted))
    return results


class HitCurve(NamedTuple):
    """Hits as a step function of capacity, exact for capacities >= ``capacities[0]``.

    ``hits[j]`` is the number of hits at every capacity in ``[capacities[j],
    capacities[j + 1])`` (the last step lasts forever). ``capacities[0]`` is the largest item
    size (0 for an empty trace): below it, oversize items break the stack property (see
    ``lru_hit_counts``). ``accesses`` is the trace length.
    """

    capacities: np.ndarray
    hits: np.ndarray
    accesses: int

    def at(self, capacities: object) -> np.ndarray:
        """Hits at each of ``capacities`` (each must be >= ``self.capacities[0]``)."""
        query = _as_capacities(capacities)
        if query.size and query.min() < self.capacities[0]:
            raise ValueError(f"capacity {int(query.min())} is below the curve's exact range "
                             f"(>= {int(self.capacities[0])}); use lru_hit_counts")
        return self.hits[np.searchsorted(self.capacities, query, side="right") - 1]


def hit_curve(keys: object, sizes: object) -> HitCurve:
    """The whole LRU hit curve for capacities >= the largest item size, from one pass.

    Its steps (the distinct stack distances) are where the cliffs are.
    """
    trace = _prepare(keys, sizes)
    distances = _distances(trace, COLD)
    first = int(trace.distinct_sizes[-1]) if trace.distinct_sizes.size else 0
    later = distances[(distances > first) & (distances != COLD)]
    steps, step_hits = np.unique(later, return_counts=True)
    capacities = np.concatenate(([first], steps)).astype(np.int64)
    base = np.count_nonzero(distances <= first)
    hits = base + np.concatenate(([0], np.cumsum(step_hits))).astype(np.int64)
    return HitCurve(capacities, hits, int(trace.sizes.size))

