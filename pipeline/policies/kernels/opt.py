"""Belady's OPT kernel: an indexed max-heap of the resident keys by next use."""

from __future__ import annotations

import numpy as np
from numba import njit

from pipeline.policies.kernels.lists import NEVER, inlined, kernel

__all__ = ["opt", "next_use_codes", "sift", "heap_push", "heap_pop"]


@kernel
def _above(pri, seq, a, b):
    """Heap order: a later next use first; among equals, the later push first."""
    return pri[a] > pri[b] or (pri[a] == pri[b] and seq[a] > seq[b])


@kernel
def sift(heap, pos, pri, seq, i, size):
    """Move ``heap[i]`` of ``heap[:size]`` to its place (``pos``: key -> heap slot): towards
    the root while it ranks above its parent, else towards the leaves."""
    x = heap[i]
    while i > 0 and _above(pri, seq, x, heap[(i - 1) >> 1]):
        y = heap[(i - 1) >> 1]
        heap[i] = y
        pos[y] = i
        i = (i - 1) >> 1
    while 2 * i + 1 < size:
        child = 2 * i + 1
        if child + 1 < size and _above(pri, seq, heap[child + 1], heap[child]):
            child += 1
        y = heap[child]
        if not _above(pri, seq, y, x):
            break
        heap[i] = y
        pos[y] = i
        i = child
    heap[i] = x
    pos[x] = i


@inlined
def heap_push(heap, pos, pri, seq, size, x):
    """Add ``x`` to ``heap[:size]``."""
    heap[size] = x
    pos[x] = size
    sift(heap, pos, pri, seq, size, size + 1)


@inlined
def heap_pop(heap, pos, pri, seq, size):
    """Remove and return the root of ``heap[:size]`` (the latest next use)."""
    v = heap[0]
    pos[v] = -1
    if size > 1:
        heap[0] = heap[size - 1]
        sift(heap, pos, pri, seq, 0, size - 1)
    return v


@kernel
def _opt_loop(codes, sizes, capacity, next_use, bypass, hits, pos, pri, seq, stored, heap):
    """An indexed max-heap of the resident keys by (next use, last push); the work arrays
    come from the caller (no reference counts in the loop, whose helpers are inlined)."""
    n = codes.size
    size = 0
    used = 0
    for i in range(n):
        x, s, now = codes[i], sizes[i], next_use[i]
        if pos[x] != -1:
            hits[i] = True
            pri[x] = now
            seq[x] = i
            sift(heap, pos, pri, seq, pos[x], size)  # the next use only moves later
            continue
        if s > capacity:
            continue
        if bypass and used + s > capacity and size > 0 and now >= pri[heap[0]]:
            continue
        while used + s > capacity:
            v = heap_pop(heap, pos, pri, seq, size)
            size -= 1
            used -= stored[v]
        pri[x] = now
        seq[x] = i
        stored[x] = s
        used += s
        heap_push(heap, pos, pri, seq, size, x)
        size += 1


def _opt(codes: np.ndarray, sizes: np.ndarray, capacity: int, k: int, next_use: np.ndarray,
         bypass: bool) -> np.ndarray:
    """Per-access hits of OPT over ``k`` dense key codes (``bypass``: a key whose next use is
    no sooner than every resident one's is not inserted)."""
    hits = np.zeros(codes.size, np.bool_)
    _opt_loop(codes, sizes, capacity, next_use, bypass, hits, np.full(k, -1, np.int64),
              np.zeros(k, np.int64), np.zeros(k, np.int64), np.zeros(k, np.int64),
              np.empty(k, np.int64))
    return hits


@njit(cache=True, nogil=True)
def _next_use(codes, k):
    out = np.empty(codes.size, np.int64)
    seen = np.full(k, NEVER, np.int64)
    for i in range(codes.size - 1, -1, -1):
        out[i] = seen[codes[i]]
        seen[codes[i]] = i
    return out


def next_use_codes(codes: np.ndarray) -> np.ndarray:
    """Position of the next access of the same code; NEVER (int64 max) if none."""
    codes = np.ascontiguousarray(codes, dtype=np.int64)
    return _next_use(codes, int(codes.max()) + 1 if codes.size else 1)


opt = _opt
