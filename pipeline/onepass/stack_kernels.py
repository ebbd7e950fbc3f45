"""One-pass stack kernels (Mattson et al. 1970) for the registry's MRU and OPT at unit size:
one replay gives every access's stack distance, and the access hits at ``slots`` slots
exactly when its distance is below ``slots`` (the inclusion property: the cache of ``c``
slots always holds the top ``c`` entries of one stack).

The update for a read of ``x`` found at depth ``d`` (``d`` = the stack's length when ``x`` is
new) is Mattson's: walk the entries above ``d`` carrying the one the smaller cache must drop;
an entry that ranks below the carried one swaps with it; the last carried entry takes ``d``.

* OPT with bypass (the family's ``opt``): the carry starts as ``x`` itself (a cache may leave
  ``x`` out), the rank is the next use (later drops first; ``x`` drops on ties, as the
  kernel bypasses when its next use is no sooner than every resident one). The carried entry
  is the running maximum of next uses, so the walk can stop once it carries a key that is
  never read again.
* OPT without bypass (libCacheSim's ``Belady``): ``x`` goes on top, the carry starts as the
  old top.
* MRU: ``x`` goes on top and the carry starts as the old top, which is the most recent read
  of all, so it is never swapped: it lands at ``d`` and nothing else moves (O(1)).

``limit`` truncates the stack to its top ``limit`` entries (exact for every cache of at most
``limit`` slots). Distances of misses at every size are ``NEVER``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pipeline.policies.kernels.lists import NEVER, inlined

__all__ = ["opt_distances", "mru_distances", "NEVER"]

_B = 32                                     # entries per block
_S = 1024                                   # entries per super block (32 blocks)


@inlined
def _carry(skey, spri, pos, q, ck, cp):
    """Swap the record at depth ``q`` with the carry ``ck`` (rank ``cp``) if it ranks below
    it; return the carry and its rank."""
    if spri[q] > cp:
        y = skey[q]
        yp = spri[q]
        skey[q] = ck
        spri[q] = cp
        pos[ck] = q
        return y, yp
    return ck, cp


@inlined
def _depth(pos, dist, i, x, length, limit):
    """Record the depth of ``x`` (read ``i``) in ``dist``; return its depth (the stack's
    length when new, ``limit`` when the truncated stack is full) and the new length."""
    d = pos[x]
    if d >= 0:
        dist[i] = d
    elif length < limit:
        d = length
        length += 1
    else:
        d = limit
    return d, length


@njit(cache=True, nogil=True)
def _scan_block(skey, spri, pos, lo, hi, ck, cp):
    """Swap the records of ``skey[lo:hi]`` with the carry; return (carry, its rank, max)."""
    top = -1
    for q in range(lo, hi):
        ck, cp = _carry(skey, spri, pos, q, ck, cp)
        top = max(top, spri[q])
    return ck, cp, top


@njit(cache=True, nogil=True)
def _opt(codes, next_use, k, limit, bypass):
    """Mattson's update over a stack whose blocks (and super blocks) keep an upper bound of
    their next uses: a block that cannot hold a record is skipped unread. A write only
    lowers a rank except the final placement, which raises its bounds."""
    n = codes.size
    dist = np.full(n, NEVER, np.int64)
    if limit <= 0:
        return dist
    pos = np.full(k, -1, np.int64)         # key -> depth; -1 when not in the (truncated) stack
    skey = np.empty(limit + 1, np.int64)    # slot ``limit`` takes the entry that falls off
    spri = np.zeros(limit + 1, np.int64)    # next use of the entry at each depth
    bmax = np.zeros(limit // _B + 2, np.int64)
    smax = np.zeros(limit // _S + 2, np.int64)
    length = 0
    for i in range(n):
        x = codes[i]
        d, length = _depth(pos, dist, i, x, length, limit)
        ck = x
        cp = next_use[i]
        j = 0
        if not bypass:                      # x goes on top; the old top is carried
            now = cp
            if d > 0:
                ck = skey[0]
                cp = spri[0]
                j = 1
            skey[0] = x
            spri[0] = now
            pos[x] = 0
            bmax[0] = max(bmax[0], now)
            smax[0] = max(smax[0], now)
            if d == 0:
                continue
        while j < d and cp != NEVER:
            if (j & (_S - 1)) == 0 and j + _S <= d:
                sb = j // _S
                if smax[sb] > cp:
                    top = -1
                    for b in range(j // _B, j // _B + _S // _B):
                        if bmax[b] > cp:
                            ck, cp, bmax[b] = _scan_block(skey, spri, pos, b * _B,
                                                          b * _B + _B, ck, cp)
                        top = max(top, bmax[b])
                    smax[sb] = top
                j += _S
            elif (j & (_B - 1)) == 0 and j + _B <= d:
                b = j // _B
                if bmax[b] > cp:
                    ck, cp, bmax[b] = _scan_block(skey, spri, pos, j, j + _B, ck, cp)
                j += _B
            else:
                ck, cp = _carry(skey, spri, pos, j, ck, cp)
                j += 1
        if d < limit:
            skey[d] = ck
            spri[d] = cp
            pos[ck] = d
            bmax[d // _B] = max(bmax[d // _B], cp)
            smax[d // _S] = max(smax[d // _S], cp)
        else:
            pos[ck] = -1
    return dist


@njit(cache=True, nogil=True)
def _mru(codes, k, limit):
    n = codes.size
    dist = np.full(n, NEVER, np.int64)
    if limit <= 0:
        return dist
    pos = np.full(k, -1, np.int64)
    skey = np.empty(limit, np.int64)
    length = 0
    for i in range(n):
        x = codes[i]
        d, length = _depth(pos, dist, i, x, length, limit)
        if d == 0:
            skey[0] = x
            pos[x] = 0
            continue
        top = skey[0]
        skey[0] = x
        pos[x] = 0
        if d < limit:
            skey[d] = top
            pos[top] = d
        else:
            pos[top] = -1
    return dist


def _keys(codes: np.ndarray) -> tuple[np.ndarray, int]:
    codes = np.ascontiguousarray(codes, dtype=np.int64)
    return codes, int(codes.max()) + 1 if codes.size else 1


def opt_distances(codes: np.ndarray, next_use: np.ndarray, limit: int,
                  bypass: bool = True) -> np.ndarray:
    """OPT stack distances (0-based depth; ``NEVER`` for a miss at every size) of dense
    ``codes`` with ``next_use`` from ``kernels.next_use_codes``, for caches of at most
    ``limit`` slots."""
    codes, k = _keys(codes)
    return _opt(codes, np.ascontiguousarray(next_use, dtype=np.int64), k,
                int(min(limit, k)), bool(bypass))


def mru_distances(codes: np.ndarray, limit: int) -> np.ndarray:
    """MRU stack distances of dense ``codes`` for caches of at most ``limit`` slots."""
    codes, k = _keys(codes)
    return _mru(codes, k, int(min(limit, k)))
