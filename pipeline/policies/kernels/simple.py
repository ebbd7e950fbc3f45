"""Kernels of the one-queue policies: LRU, FIFO, MRU (mode 0, 1, 2), CLOCK, SIEVE, LFU.

Each policy's rule (what a hit does, which item is the victim) is one compiled function
here, called by the per-access replay below and by the block kernel (``blocks.py``): the
two differ only in when they evict (before a miss is stored, or after a request is placed
with its own blocks set aside)."""

from __future__ import annotations

import numpy as np
from numba import njit

from pipeline.policies.kernels.lists import FIRST, NONE, bucket_push, bucket_unlink
from pipeline.policies.kernels.lists import push as _push, unlink as _unlink

__all__ = ["queue", "ring", "lfu", "queue_hit", "queue_victim", "ring_victim", "lfu_hit",
           "lfu_victim"]


@njit(cache=True, nogil=True)
def queue_hit(ends, prev, nxt, x, mode):
    """A hit of LRU (0) or MRU (2) moves ``x`` to the head; FIFO's (1) changes nothing."""
    if mode != 1:
        _unlink(ends, prev, nxt, x)
        _push(ends, prev, nxt, x)


@njit(cache=True, nogil=True)
def queue_victim(ends, prev, nxt, mode):
    """The queue's victim, unlinked: the tail (LRU, FIFO), the head (MRU)."""
    v = ends[0] if mode == 2 else ends[1]
    _unlink(ends, prev, nxt, v)
    return v


@njit(cache=True, nogil=True)
def ring_victim(ends, prev, nxt, bit, hand, sieve):
    """CLOCK's victim (``sieve`` False: from the tail, an item with its bit set has it
    cleared and moves to the head) or SIEVE's (a hand that walks towards the head and
    stays, clearing set bits in place), unlinked; returns (victim, hand)."""
    if sieve:
        v = ends[1] if hand == NONE else hand
        while bit[v]:
            bit[v] = False
            v = ends[1] if prev[v] == NONE else prev[v]
        hand = prev[v]
    else:
        v = ends[1]
        while bit[v]:
            bit[v] = False
            _unlink(ends, prev, nxt, v)
            _push(ends, prev, nxt, v)
            v = ends[1]
    _unlink(ends, prev, nxt, v)
    return v, hand


@njit(cache=True, nogil=True)
def lfu_hit(bhead, btail, bcount, prev, nxt, freq, x):
    """An LFU hit: ``x`` moves from its count's bucket to the next one (as its newest)."""
    f = freq[x]
    bucket_unlink(bhead, btail, prev, nxt, f, x)
    bcount[f] -= 1
    freq[x] = f + 1
    bucket_push(bhead, btail, prev, nxt, f + 1, x)
    bcount[f + 1] += 1


@njit(cache=True, nogil=True)
def lfu_victim(bhead, btail, bcount, prev, nxt, low):
    """LFU's victim, unlinked: the oldest item of the lowest non-empty count at or above
    ``low`` (which must not be above the lowest); returns (victim, its count)."""
    while bcount[low] == 0:
        low += 1
    v = btail[low]
    bucket_unlink(bhead, btail, prev, nxt, low, v)
    bcount[low] -= 1
    return v, low


@njit(cache=True, nogil=True)
def _queue(codes, sizes, capacity, k, prev, nxt, mode):
    n = codes.size
    hits = np.zeros(n, np.bool_)
    resident = np.zeros(k, np.bool_)
    stored = np.zeros(k, np.int64)
    ends = np.array([NONE, NONE], np.int64)
    used = 0
    for i in range(n):
        x, s = codes[i], sizes[i]
        if resident[x]:
            hits[i] = True
            queue_hit(ends, prev, nxt, x, mode)
            continue
        if s > capacity:
            continue
        while used + s > capacity:
            v = queue_victim(ends, prev, nxt, mode)
            resident[v] = False
            used -= stored[v]
        _push(ends, prev, nxt, x)
        resident[x] = True
        stored[x] = s
        used += s
    return hits


@njit(cache=True, nogil=True)
def _ring(codes, sizes, capacity, k, prev, nxt, sieve):
    """CLOCK (one-bit counter, 0 on insertion: libCacheSim's defaults) or SIEVE."""
    n = codes.size
    hits = np.zeros(n, np.bool_)
    resident = np.zeros(k, np.bool_)
    stored = np.zeros(k, np.int64)
    bit = np.zeros(k, np.bool_)
    ends = np.array([NONE, NONE], np.int64)
    hand = NONE
    used = 0
    for i in range(n):
        x, s = codes[i], sizes[i]
        if resident[x]:
            hits[i] = True
            bit[x] = True
            continue
        if s > capacity:
            continue
        while used + s > capacity:
            v, hand = ring_victim(ends, prev, nxt, bit, hand, sieve)
            resident[v] = False
            used -= stored[v]
        _push(ends, prev, nxt, x)
        resident[x] = True
        bit[x] = False
        stored[x] = s
        used += s
    return hits


@njit(cache=True, nogil=True)
def _lfu(codes, sizes, capacity, k, prev, nxt):
    n = codes.size
    hits = np.zeros(n, np.bool_)
    resident = np.zeros(k, np.bool_)
    stored = np.zeros(k, np.int64)
    freq = np.zeros(k, np.int64)
    bhead = np.full(n + 2, NONE, np.int64)      # per count: newest
    btail = np.full(n + 2, NONE, np.int64)      # per count: oldest (the victim)
    bcount = np.zeros(n + 2, np.int64)
    low = 0                                     # <= the lowest non-empty count
    used = 0
    for i in range(n):
        x, s = codes[i], sizes[i]
        if resident[x]:
            hits[i] = True
            f = freq[x]
            lfu_hit(bhead, btail, bcount, prev, nxt, freq, x)
            if bcount[f] == 0 and low == f:
                low = f + 1
            continue
        if s > capacity:
            continue
        while used + s > capacity:
            v, low = lfu_victim(bhead, btail, bcount, prev, nxt, low)
            resident[v] = False
            used -= stored[v]
        freq[x] = 1
        bucket_push(bhead, btail, prev, nxt, FIRST, x)
        bcount[1] += 1
        low = 1
        resident[x] = True
        stored[x] = s
        used += s
    return hits


queue, ring, lfu = _queue, _ring, _lfu
