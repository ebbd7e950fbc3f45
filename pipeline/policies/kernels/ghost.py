"""Kernels of the policies with ghost lists: S3-FIFO and ARC."""

from __future__ import annotations

import numpy as np
from numba import njit

from pipeline.policies.kernels.lists import NONE, push as _push, unlink as _unlink

__all__ = ["s3fifo", "arc"]


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
    t = 0 if (t1 > 0 and (t1 > p or (t1 == p and ghost == 2))) or sz[1] == 0 else 1
    live, dead = (t1e, b1e) if t == 0 else (t2e, b2e)
    v = live[1]
    _unlink(live, prev, nxt, v)
    sz[t] -= stored[v]
    _push(dead, prev, nxt, v)
    sz[t + 2] += stored[v]
    where[v] = t + 3


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


s3fifo, arc = _s3fifo, _arc
