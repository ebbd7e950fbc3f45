"""Compiled (numba, ``nogil``) replays of every policy at one capacity, equal per access to
the Python classes (tests/test_policy_kernels.py). Keys are dense codes 0..K-1; lists are
doubly linked through ``prev`` (towards the newest end) and ``nxt`` (towards the oldest),
as libCacheSim's queues."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from pipeline.policies.s3fifo import _share

__all__ = ["replay", "KERNELS"]

NONE = -1
NEVER = np.iinfo(np.int64).max


# ----------------------------------------------------------------- linked-list helpers
# ends[0] = head (newest), ends[1] = tail (oldest)

@njit(cache=True, nogil=True)
def _push(ends, prev, nxt, x):
    prev[x] = NONE
    nxt[x] = ends[0]
    if ends[0] != NONE:
        prev[ends[0]] = x
    else:
        ends[1] = x
    ends[0] = x


@njit(cache=True, nogil=True)
def _unlink(ends, prev, nxt, x):
    p, n = prev[x], nxt[x]
    if p == NONE:
        ends[0] = n
    else:
        nxt[p] = n
    if n == NONE:
        ends[1] = p
    else:
        prev[n] = p
    prev[x] = NONE
    nxt[x] = NONE


def _arrays(codes):
    k = int(codes.max()) + 1 if codes.size else 1
    return k, np.full(k, NONE, np.int64), np.full(k, NONE, np.int64)


# ----------------------------------------------------------------- queue policies
# mode 0 = LRU, 1 = FIFO, 2 = MRU

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
def _bucket_push(bhead, btail, prev, nxt, f, x):
    prev[x] = NONE
    nxt[x] = bhead[f]
    if bhead[f] != NONE:
        prev[bhead[f]] = x
    else:
        btail[f] = x
    bhead[f] = x


@njit(cache=True, nogil=True)
def _bucket_unlink(bhead, btail, prev, nxt, f, x):
    p, q = prev[x], nxt[x]
    if p == NONE:
        bhead[f] = q
    else:
        nxt[p] = q
    if q == NONE:
        btail[f] = p
    else:
        prev[q] = p


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
            _bucket_unlink(bhead, btail, prev, nxt, f, x)
            bcount[f] -= 1
            if bcount[f] == 0 and low == f:
                low = f + 1
            freq[x] = f + 1
            _bucket_push(bhead, btail, prev, nxt, f + 1, x)
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
            _bucket_unlink(bhead, btail, prev, nxt, low, v)
            bcount[low] -= 1
            if bcount[low] == 0:
                low = 0
            resident[v] = False
            used -= stored[v]
        freq[x] = 1
        _bucket_push(bhead, btail, prev, nxt, 1, x)
        bcount[1] += 1
        low = 1
        resident[x] = True
        stored[x] = s
        used += s
    return hits


@njit(cache=True, nogil=True)
def _s3fifo(codes, sizes, capacity, k, prev, nxt, small_size, ghost_size, threshold):
    n = codes.size
    hits = np.zeros(n, np.bool_)
    where = np.zeros(k, np.int8)          # 0 absent, 1 small, 2 main, 3 ghost
    stored = np.zeros(k, np.int64)
    freq = np.zeros(k, np.int64)
    small = np.array([NONE, NONE], np.int64)
    main = np.array([NONE, NONE], np.int64)
    ghost = np.array([NONE, NONE], np.int64)
    main_size = capacity - small_size
    small_used = 0
    main_used = 0
    ghost_used = 0
    has_evicted = False
    for i in range(n):
        x, s = codes[i], sizes[i]
        if where[x] == 1 or where[x] == 2:
            hits[i] = True
            freq[x] += 1
            continue
        ghost_hit = False
        if where[x] == 3:
            _unlink(ghost, prev, nxt, x)
            ghost_used -= stored[x]
            where[x] = 0
            ghost_hit = True
        if s > small_size or s > capacity:
            continue
        while small_used + main_used + s > capacity:
            has_evicted = True
            if main_used > main_size or small_used == 0:
                while main_used > 0:
                    v = main[1]
                    _unlink(main, prev, nxt, v)
                    if freq[v] >= 1:
                        _push(main, prev, nxt, v)
                        freq[v] = min(freq[v], 3) - 1
                    else:
                        main_used -= stored[v]
                        where[v] = 0
                        break
            else:
                while small_used > 0:
                    v = small[1]
                    _unlink(small, prev, nxt, v)
                    small_used -= stored[v]
                    if freq[v] >= threshold:
                        _push(main, prev, nxt, v)
                        where[v] = 2
                        main_used += stored[v]
                        freq[v] = 0
                    else:
                        where[v] = 0
                        sv = stored[v]
                        if ghost_size > 0 and sv <= ghost_size:
                            while ghost_used + sv > ghost_size:
                                g = ghost[1]
                                _unlink(ghost, prev, nxt, g)
                                ghost_used -= stored[g]
                                where[g] = 0
                            _push(ghost, prev, nxt, v)
                            where[v] = 3
                            ghost_used += sv
                        break
        if ghost_hit:
            _push(main, prev, nxt, x)
            where[x] = 2
            main_used += s
        elif s >= small_size:
            continue
        elif not has_evicted and small_used >= small_size:
            _push(main, prev, nxt, x)
            where[x] = 2
            main_used += s
        else:
            _push(small, prev, nxt, x)
            where[x] = 1
            small_used += s
        stored[x] = s
        freq[x] = 0
    return hits


@njit(cache=True, nogil=True)
def _ratio_max1(a, b):
    """C's MAX((double)a / b, 1), including b == 0 (inf, or NaN which gives 1)."""
    if b == 0:
        return 1.0 if a == 0 else np.inf
    r = a / b
    return r if r > 1.0 else 1.0


@njit(cache=True, nogil=True)
def _arc_replace(t1e, t2e, b1e, b2e, where, stored, prev, nxt, sz, p, ghost):
    # sz: bytes in T1, T2, B1, B2
    t1 = sz[0]
    if (t1 > 0 and (t1 > p or (t1 == p and ghost == 2))) or sz[1] == 0:
        v = t1e[1]
        _unlink(t1e, prev, nxt, v)
        sz[0] -= stored[v]
        _push(b1e, prev, nxt, v)
        sz[2] += stored[v]
        where[v] = 3
    else:
        v = t2e[1]
        _unlink(t2e, prev, nxt, v)
        sz[1] -= stored[v]
        _push(b2e, prev, nxt, v)
        sz[3] += stored[v]
        where[v] = 4


@njit(cache=True, nogil=True)
def _arc(codes, sizes, capacity, k, prev, nxt):
    n = codes.size
    hits = np.zeros(n, np.bool_)
    where = np.zeros(k, np.int8)          # 0 absent, 1 T1, 2 T2, 3 B1, 4 B2
    stored = np.zeros(k, np.int64)
    t1e = np.array([NONE, NONE], np.int64)
    t2e = np.array([NONE, NONE], np.int64)
    b1e = np.array([NONE, NONE], np.int64)
    b2e = np.array([NONE, NONE], np.int64)
    sz = np.zeros(4, np.int64)
    p = 0.0
    for i in range(n):
        x, s = codes[i], sizes[i]
        w = where[x]
        if w == 1:
            hits[i] = True
            _unlink(t1e, prev, nxt, x)
            sz[0] -= stored[x]
            _push(t2e, prev, nxt, x)
            sz[1] += stored[x]
            where[x] = 2
            continue
        if w == 2:
            hits[i] = True
            _unlink(t2e, prev, nxt, x)
            _push(t2e, prev, nxt, x)
            continue
        ghost = 0
        if w == 3:
            ghost = 1
            delta = _ratio_max1(sz[3], sz[2])
            p = p + delta if p + delta < capacity else float(capacity)
            _unlink(b1e, prev, nxt, x)
            sz[2] -= stored[x]
            where[x] = 0
        elif w == 4:
            ghost = 2
            delta = _ratio_max1(sz[2], sz[3])
            p = p - delta if p - delta > 0 else 0.0
            _unlink(b2e, prev, nxt, x)
            sz[3] -= stored[x]
            where[x] = 0
        if s > capacity:
            continue
        while sz[0] + sz[1] + s > capacity:
            if ghost:
                _arc_replace(t1e, t2e, b1e, b2e, where, stored, prev, nxt, sz, p, ghost)
            elif sz[0] + sz[2] + s > capacity:
                if sz[2] > 0:
                    g = b1e[1]
                    _unlink(b1e, prev, nxt, g)
                    sz[2] -= stored[g]
                    where[g] = 0
                    _arc_replace(t1e, t2e, b1e, b2e, where, stored, prev, nxt, sz, p, ghost)
                else:
                    v = t1e[1]
                    _unlink(t1e, prev, nxt, v)
                    sz[0] -= stored[v]
                    where[v] = 0
            else:
                if sz[0] + sz[2] + sz[1] + sz[3] >= 2 * capacity and sz[3] > 0:
                    g = b2e[1]
                    _unlink(b2e, prev, nxt, g)
                    sz[3] -= stored[g]
                    where[g] = 0
                _arc_replace(t1e, t2e, b1e, b2e, where, stored, prev, nxt, sz, p, ghost)
        if ghost:
            _push(t2e, prev, nxt, x)
            sz[1] += s
            where[x] = 2
        else:
            _push(t1e, prev, nxt, x)
            sz[0] += s
            where[x] = 1
        stored[x] = s
    return hits


# ----------------------------------------------------------------- Belady's OPT

@njit(cache=True, nogil=True)
def _above(pri, seq, a, b):
    """Heap order: a later next use first; among equals, the later push first."""
    return pri[a] > pri[b] or (pri[a] == pri[b] and seq[a] > seq[b])


@njit(cache=True, nogil=True)
def _sift_up(heap, pos, pri, seq, i):
    x = heap[i]
    while i > 0:
        parent = (i - 1) >> 1
        y = heap[parent]
        if not _above(pri, seq, x, y):
            break
        heap[i] = y
        pos[y] = i
        i = parent
    heap[i] = x
    pos[x] = i


@njit(cache=True, nogil=True)
def _sift_down(heap, pos, pri, seq, i, size):
    x = heap[i]
    while True:
        child = 2 * i + 1
        if child >= size:
            break
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


@njit(cache=True, nogil=True)
def _opt(codes, sizes, capacity, k, next_use, bypass):
    """An indexed max-heap of the resident keys by (next use, last push)."""
    n = codes.size
    hits = np.zeros(n, np.bool_)
    pos = np.full(k, -1, np.int64)          # resident key -> heap slot; -1 absent
    pri = np.zeros(k, np.int64)
    seq = np.zeros(k, np.int64)
    stored = np.zeros(k, np.int64)
    heap = np.empty(k, np.int64)
    size = 0
    used = 0
    for i in range(n):
        x, s, now = codes[i], sizes[i], next_use[i]
        if pos[x] != -1:
            hits[i] = True
            pri[x] = now
            seq[x] = i
            _sift_up(heap, pos, pri, seq, pos[x])     # the next use only moves later
            continue
        if s > capacity:
            continue
        if bypass and used + s > capacity and size > 0 and now >= pri[heap[0]]:
            continue
        while used + s > capacity:
            v = heap[0]
            size -= 1
            pos[v] = -1
            if size > 0:
                heap[0] = heap[size]
                _sift_down(heap, pos, pri, seq, 0, size)
            used -= stored[v]
        pri[x] = now
        seq[x] = i
        stored[x] = s
        used += s
        heap[size] = x
        size += 1
        _sift_up(heap, pos, pri, seq, size - 1)
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


# ----------------------------------------------------------------- dispatch

KERNELS = ("lru", "fifo", "mru", "lfu", "clock", "sieve", "s3fifo", "arc", "opt")


def replay(name: str, codes: np.ndarray, sizes: np.ndarray, capacity: int,
           bypass: bool = True) -> np.ndarray:
    """Per-access hits of policy ``name`` (registry defaults) at ``capacity``."""
    codes = np.ascontiguousarray(codes, dtype=np.int64)
    sizes = np.ascontiguousarray(sizes, dtype=np.int64)
    capacity = int(capacity)
    if capacity < 0:
        raise ValueError(f"capacity must be >= 0, got {capacity}")
    if codes.size == 0:
        return np.zeros(0, dtype=bool)
    k, prev, nxt = _arrays(codes)
    if name in ("lru", "fifo", "mru"):
        return _queue(codes, sizes, capacity, k, prev, nxt, ("lru", "fifo", "mru").index(name))
    if name == "clock":
        return _clock(codes, sizes, capacity, k, prev, nxt, 1, 0)
    if name == "sieve":
        return _sieve(codes, sizes, capacity, k, prev, nxt)
    if name == "lfu":
        return _lfu(codes, sizes, capacity, k, prev, nxt)
    if name == "s3fifo":
        return _s3fifo(codes, sizes, capacity, k, prev, nxt, int(_share(capacity, 0.10)),
                       int(_share(capacity, 0.90)), 2)
    if name == "arc":
        return _arc(codes, sizes, capacity, k, prev, nxt)
    if name == "opt":
        return _opt(codes, sizes, capacity, k, next_use_codes(codes), bypass)
    raise ValueError(f"unknown policy {name!r}; accepted: {', '.join(KERNELS)}")
