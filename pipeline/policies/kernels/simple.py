"""Kernels of the one-queue policies: LRU, FIFO, MRU (mode 0, 1, 2), CLOCK, SIEVE, LFU."""

from __future__ import annotations

import numpy as np
from numba import njit

from pipeline.policies.kernels.lists import FIRST, NONE, bucket_push, bucket_unlink
from pipeline.policies.kernels.lists import push as _push, unlink as _unlink

__all__ = ["queue", "clock", "sieve", "lfu"]


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
            if mode != 1:
                _unlink(ends, prev, nxt, x)
                _push(ends, prev, nxt, x)
            continue
        if s > capacity:
            continue
        while used + s > capacity:
            v = ends[0] if mode == 2 else ends[1]
            _unlink(ends, prev, nxt, v)
            resident[v] = False
            used -= stored[v]
        _push(ends, prev, nxt, x)
        resident[x] = True
        stored[x] = s
        used += s
    return hits


@njit(cache=True, nogil=True)
def _clock(codes, sizes, capacity, k, prev, nxt, max_freq, init_freq):
    n = codes.size
    hits = np.zeros(n, np.bool_)
    resident = np.zeros(k, np.bool_)
    stored = np.zeros(k, np.int64)
    freq = np.zeros(k, np.int64)
    ends = np.array([NONE, NONE], np.int64)
    used = 0
    for i in range(n):
        x, s = codes[i], sizes[i]
        if resident[x]:
            hits[i] = True
            if freq[x] < max_freq:
                freq[x] += 1
            continue
        if s > capacity:
            continue
        while used + s > capacity:
            v = ends[1]
            while freq[v] >= 1:
                freq[v] -= 1
                _unlink(ends, prev, nxt, v)
                _push(ends, prev, nxt, v)
                v = ends[1]
            _unlink(ends, prev, nxt, v)
            resident[v] = False
            used -= stored[v]
        _push(ends, prev, nxt, x)
        resident[x] = True
        stored[x] = s
        freq[x] = init_freq
        used += s
    return hits


@njit(cache=True, nogil=True)
def _sieve(codes, sizes, capacity, k, prev, nxt):
    n = codes.size
    hits = np.zeros(n, np.bool_)
    resident = np.zeros(k, np.bool_)
    stored = np.zeros(k, np.int64)
    visited = np.zeros(k, np.bool_)
    ends = np.array([NONE, NONE], np.int64)
    hand = NONE
    used = 0
    for i in range(n):
        x, s = codes[i], sizes[i]
        if resident[x]:
            hits[i] = True
            visited[x] = True
            continue
        if s > capacity:
            continue
        while used + s > capacity:
            v = ends[1] if hand == NONE else hand
            while visited[v]:
                visited[v] = False
                v = ends[1] if prev[v] == NONE else prev[v]
            hand = prev[v]
            _unlink(ends, prev, nxt, v)
            resident[v] = False
            used -= stored[v]
        _push(ends, prev, nxt, x)
        resident[x] = True
        visited[x] = False
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
    low = 0
    used = 0
    for i in range(n):
        x, s = codes[i], sizes[i]
        if resident[x]:
            hits[i] = True
            f = freq[x]
            bucket_unlink(bhead, btail, prev, nxt, f, x)
            bcount[f] -= 1
            if bcount[f] == 0 and low == f:
                low = f + 1
            freq[x] = f + 1
            bucket_push(bhead, btail, prev, nxt, f + 1, x)
            bcount[f + 1] += 1
            continue
        if s > capacity:
            continue
        while used + s > capacity:
            if low == 0 or bcount[low] == 0:
                low = 1
                while bcount[low] == 0:
                    low += 1
            v = btail[low]
            bucket_unlink(bhead, btail, prev, nxt, low, v)
            bcount[low] -= 1
            if bcount[low] == 0:
                low = 0
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


queue, clock, sieve, lfu = _queue, _clock, _sieve, _lfu
