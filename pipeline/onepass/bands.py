"""Many small size bands of the block engine in one pass: the top of each band's stack.

``pipeline.onepass.lru_depths`` runs one Fenwick pass per size band: a band of limit L is the
stream in which only placements of at most L blocks happen (oversize requests store nothing
and evict nothing), and a tier of C >= L blocks then holds exactly the top C of that band's
recency stack. A curve's capacities below the largest request fall into many such bands
(about 30 on a trace of 40-block requests), each a pass over every block.

Below some depth K a band needs only the top K of its stack. Here each band keeps just that:
an array of its K most recent keys (most recent first). A block's depth is its position in
the array (1-based), or "beyond K" when absent, which every capacity <= K reads alike. A
placement of n <= L <= K blocks puts them on top in the tier's order and keeps the other
entries in their order, truncated to K: the new top K is the request's blocks plus the first
K - n others of the old top K (at most n of the old top K are the request's own), so the
array stays exactly the top K. All bands share one walk over the blocks; their arrays stay
in cache, and a request's lookups in a band stop at its first block deeper than K (the
running maximum only grows). tests/test_blocks_bands.py checks every count against the
per-band Fenwick passes.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pipeline.workloads.stream import TAIL_FIRST, BlockStream, check_order

__all__ = ["SMALL_TOP", "band_counts"]

#: The deepest top a band keeps here; a band needing more runs its own Fenwick pass.
SMALL_TOP = 256


@njit(cache=True)
def _bands_pass(starts: np.ndarray, codes: np.ndarray, lookup: np.ndarray,
                touch_from: np.ndarray, tail_first: bool, n_codes: int, limits: np.ndarray,
                tops: np.ndarray, by_band: np.ndarray, first_cap: np.ndarray,
                caps: np.ndarray, hist: np.ndarray, out: np.ndarray) -> None:
    """Per band b: ``hist[b, d]`` = blocks whose running-max depth is d (1 <= d <=
    ``tops[b]``); per capacity k of band b (``k`` in ``by_band[first_cap[b]:first_cap[b +
    1]]``, ``caps[k]`` <= its top): ``out[k, r]`` = request r's blocks with running-max
    depth <= ``caps[k]`` (when ``out`` has rows). Lookups cover each request's first
    ``lookup[r]`` blocks; placements blocks ``touch_from[r]:lookup[r]``, in band b only when
    there are 1 .. ``limits[b]`` of them."""
    n_bands = limits.size
    width = 0
    for b in range(n_bands):
        width = max(width, tops[b])
    stack = np.full((n_bands, max(width, 1)), -1, np.int64)
    fill = np.zeros(n_bands, np.int64)
    scratch = np.empty(max(width, 1), np.int64)
    running_of = np.empty(max(width, 1), np.int64)
    mark = np.full(n_codes, -1, np.int64)       # per code: the last request placing it
    for r in range(starts.size - 1):
        start = starts[r]
        end = start + lookup[r]
        low = start + touch_from[r]
        placed = end - low
        for i in range(low, end):
            mark[codes[i]] = r
        for b in range(n_bands):
            top = tops[b]
            size = fill[b]
            row = stack[b]
            running = 0
            hits = 0
            for i in range(start, end):
                code = codes[i]
                depth = top + 1
                for p in range(size):
                    if row[p] == code:
                        depth = p + 1
                        break
                if depth > running:
                    running = depth
                if running > top:
                    break
                running_of[hits] = running
                hits += 1
                hist[b, running] += 1
            for j in range(first_cap[b], first_cap[b + 1]):
                k = by_band[j]
                count = 0
                while count < hits and running_of[count] <= caps[k]:
                    count += 1
                out[k, r] = count
            if placed < 1 or placed > limits[b]:
                continue
            kept = 0
            for t in range(placed):
                scratch[kept] = codes[low + t] if tail_first else codes[end - 1 - t]
                kept += 1
            for p in range(size):
                if kept == top:
                    break
                if mark[row[p]] != r:
                    scratch[kept] = row[p]
                    kept += 1
            for p in range(kept):
                row[p] = scratch[p]
            fill[b] = kept


def band_counts(stream: BlockStream, order: str, limits: np.ndarray, tops: np.ndarray,
                touch_from: np.ndarray | None = None, caps: np.ndarray | None = None,
                cap_band: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Bands of ``limits`` (each >= 0, its ``tops`` entry >= it and <= ``SMALL_TOP``) in one
    pass: (hist (B, max top + 1): blocks per running-max depth, counts (K, R): prefix hit
    blocks per capacity ``caps[k]`` of band ``cap_band[k]`` and request; (0, R) without
    ``caps``). Requests place blocks ``touch_from[r]:cacheable[r]`` (default all)."""
    tail_first = check_order(order) == TAIL_FIRST
    limits = np.asarray(limits, np.int64)
    tops = np.asarray(tops, np.int64)
    if limits.size and (limits.min() < 0 or (tops < limits).any() or tops.max() > SMALL_TOP):
        raise ValueError("band_counts: need 0 <= limit <= top <= SMALL_TOP per band")
    touch = np.zeros(stream.requests, np.int64) if touch_from is None else \
        np.minimum(np.asarray(touch_from, np.int64), stream.cacheable)
    caps = np.zeros(0, np.int64) if caps is None else np.asarray(caps, np.int64)
    cap_band = np.zeros(0, np.int64) if cap_band is None else np.asarray(cap_band, np.int64)
    if caps.size and (caps > tops[cap_band]).any():
        raise ValueError("band_counts: a capacity deeper than its band's top")
    hist = np.zeros((limits.size, int(tops.max(initial=0)) + 1), np.int64)
    out = np.zeros((caps.size, stream.requests), np.int64)
    if limits.size:                   # sorted here: numba's argsort takes seconds to compile
        by_band = np.argsort(cap_band, kind="mergesort")
        first_cap = np.searchsorted(cap_band[by_band], np.arange(limits.size + 1)).astype(np.int64)
        _bands_pass(stream.starts, stream.codes, stream.cacheable, touch, tail_first,
                    stream.n_codes, limits, tops, by_band.astype(np.int64), first_cap, caps,
                    hist, out)
    return hist, out
