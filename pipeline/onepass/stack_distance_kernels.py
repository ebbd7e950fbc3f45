"""The compiled loops behind ``pipeline.onepass.stack_distance`` (numba, cached in ``__pycache__``).

A Fenwick tree over last-access positions gives each access's byte-weighted LRU stack
distance (``stack_distance_pass``) and, by a descent, the exact cache content at every
capacity (``occupancy_pass``); see ``pipeline.onepass.stack_distance`` for why both are exact.
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: Stack distance of a first access (or of an access excluded by ``size_limit``).
COLD = int(np.iinfo(np.int64).max)
#: -1 and +1 as int64, not numba literals (each literal compiled ``fenwick_add`` once more).
_DOWN, _UP = np.int64(-1), np.int64(1)


@njit(cache=True)
def fenwick_add(tree: np.ndarray, position: int, delta: int) -> None:
    """Add ``delta`` at 0-based ``position`` of a 1-based Fenwick tree."""
    index = position + 1
    while index < tree.size:
        tree[index] += delta
        index += index & -index


@njit(cache=True)
def fenwick_prefix(tree: np.ndarray, position: int) -> int:
    """Sum of positions 0..``position`` (inclusive) of a 1-based Fenwick tree."""
    total = 0
    index = position + 1
    while index > 0:
        total += tree[index]
        index -= index & -index
    return total


@njit(inline="always", _nrt=False)
def lookup_depths(tree: np.ndarray, last: np.ndarray, codes: np.ndarray, start: int, end: int,
                  live: int, depth: np.ndarray, runmax: np.ndarray) -> None:
    """Without touching them: the LRU depth (1 = most recent of ``live`` keys; ``COLD`` if
    new) of each ``codes[start:end]`` into ``depth``, their running maximum into ``runmax``
    (inlined into the one-pass kernels: no call, no reference counts)."""
    running = 0
    for b in range(start, end):
        stamp = last[codes[b]]
        d = COLD if stamp < 0 else live - fenwick_prefix(tree, stamp) + 1
        depth[b] = d
        if d > running:
            running = d
        runmax[b] = running


@njit(cache=True)
def touch(tree: np.ndarray, last: np.ndarray, code: int, clock: int) -> int:
    """Make ``code`` the most recent key at time ``clock`` in a Fenwick tree of one count per
    key's last touch (``last[code]`` = that time, -1 before the first); 1 if it is new."""
    stamp = last[code]
    if stamp >= 0:
        fenwick_add(tree, stamp, _DOWN)
    fenwick_add(tree, clock, _UP)
    last[code] = clock
    return 1 if stamp < 0 else 0


@njit(cache=True)
def first_size_change(codes: np.ndarray, sizes: np.ndarray, first_size: np.ndarray) -> int:
    """Index of the first access whose size differs from its key's first size, or -1.

    ``first_size`` is a work array with one slot per key code, filled with -1.
    """
    for i in range(codes.size):
        code = codes[i]
        if first_size[code] < 0:
            first_size[code] = sizes[i]
        elif first_size[code] != sizes[i]:
            return i
    return -1


@njit(cache=True)
def stack_distance_pass(codes: np.ndarray, sizes: np.ndarray, size_limit: int,
                         last_position: np.ndarray, tree: np.ndarray, out: np.ndarray) -> None:
    """Fill ``out`` with byte-weighted LRU stack distances (``COLD`` for first accesses).

    Accesses with size > ``size_limit`` are skipped (never stored, distance ``COLD``). The
    tree holds each live key's size at its last-access position, so the bytes touched since
    a key's previous access p are ``live_bytes - prefix(p)`` (the prefix includes the key).
    Work arrays: ``last_position`` (one slot per code, -1), ``tree`` (N + 1 zeros).
    """
    live_bytes = 0
    for i in range(codes.size):
        size = sizes[i]
        if size > size_limit:
            out[i] = COLD
            continue
        code = codes[i]
        previous = last_position[code]
        if previous < 0:
            out[i] = COLD
            live_bytes += size
        else:
            out[i] = live_bytes - fenwick_prefix(tree, previous) + size
            fenwick_add(tree, previous, -size)
        fenwick_add(tree, i, size)
        last_position[code] = i


@njit(cache=True)
def occupancy_pass(codes: np.ndarray, sizes: np.ndarray, size_limit: int, hits: np.ndarray,
                    capacities: np.ndarray, used: np.ndarray, evicted: np.ndarray) -> None:
    """Fill ``used`` and ``evicted`` (shape (K, N)) for the capacities of one size band.

    The cache content is the longest top of the recency stack whose sizes fit the capacity,
    so ``used`` is the live bytes minus the bottom part found by a Fenwick descent for the
    first position whose prefix reaches ``live_bytes - capacity``. Evictions are the items
    held before, plus one if the access stored its item, minus the items held after.
    """
    n = codes.size
    last_position = np.full(codes.max() + 1 if n else 0, -1, np.int64)
    tree_size = np.zeros(n + 1, np.int64)
    tree_count = np.zeros(n + 1, np.int64)
    point_size = np.zeros(n + 1, np.int64)
    held = np.zeros(capacities.size, np.int64)
    live_bytes = 0
    live_keys = 0
    top = 1
    while top * 2 <= n:
        top *= 2
    for i in range(n):
        size = sizes[i]
        storable = size <= size_limit
        if storable:
            code = codes[i]
            previous = last_position[code]
            if previous < 0:
                live_bytes += size
                live_keys += 1
            else:
                fenwick_add(tree_size, previous, -size)
                fenwick_add(tree_count, previous, _DOWN)
                point_size[previous] = 0
            fenwick_add(tree_size, i, size)
            fenwick_add(tree_count, i, _UP)
            point_size[i] = size
            last_position[code] = i
        for c in range(capacities.size):
            excess = live_bytes - capacities[c]
            if excess <= 0:
                now_used, now_held = live_bytes, live_keys
            else:  # positions 0..index-1 sum below excess; the cache holds those > index
                index = 0
                below = 0
                step = top
                while step > 0:
                    probe = index + step
                    if probe <= n and below + tree_size[probe] < excess:
                        index = probe
                        below += tree_size[probe]
                    step //= 2
                now_used = live_bytes - below - point_size[index]
                now_held = live_keys - fenwick_prefix(tree_count, index)
            stored = 1 if storable and not hits[c, i] else 0
            used[c, i] = now_used
            evicted[c, i] = held[c] + stored - now_held
            held[c] = now_held
