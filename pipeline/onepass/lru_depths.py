"""The fast block engine: every capacity of a tier from one pass of per-block LRU depths.

**The stack.** Give every block touch a time stamp; the recency stack orders the blocks by
their last touch (most recent on top). A request's placement touches its blocks one after
another in the tier's order (tail-first: tail .. head, so the head ends on top; head-first:
head .. tail). The *depth* of a block just before a request is its 1-based rank in that
stack (1 + distinct blocks touched after it), ``COLD`` if never touched; one Fenwick tree over
touch stamps gives it in O(log N) (``pipeline.onepass.stack_distance``'s kernels).

**Claim.** Let every request of the stream have at most C blocks to place. Then after each
request a tier of C blocks holds exactly the top C of the stack. By induction: before the
request the tier holds top_C(S). Placing n <= C blocks yields S' = the request's blocks (in
the tier's order) on top of S without them, and the tier holds the request's blocks plus
top_C(S), minus least-recent others until C remain. Among the others the survivors are the
most recent C - n of top_C(S); and the first C - n non-request blocks of S lie within
top_C(S) (at most n request blocks sit above them), so the survivors are exactly the blocks
below the request in top_C(S'). (Pinning never has to act: the request's blocks are the top
n.) Hence, for every C at once,

    block j of a request is present before it  <=>  depth_j <= C
    prefix hit at C = #{ j : max(depth_0 .. depth_j) <= C }   (the running maximum)

and a stream's hits at C are the count of blocks whose running-max depth is <= C: one sort
gives the whole curve. This is exact for both orders and both tiers.

**Oversize requests** (more blocks than the tier holds) are not stored and evict nothing, so
for a capacity C the stream behaves as if their placements were not there; which requests
place depends on C only through the distinct placement sizes <= C. Capacities therefore fall
into bands between consecutive distinct sizes, with one exact pass per band (as
``pipeline.onepass.stack_distance`` does for oversize documents); every capacity >= the largest
placement shares the one unfiltered pass. Capacity 0 stores nothing (a placement of 0 blocks is
no change). The CPU tier places blocks g.. of each request (g = its GPU hit), so it is one more
banded pass per GPU capacity over sizes n - g, looking up all n blocks.

**Why depth at lookup, not the touch distance.** The classic stack distance of each touch
in the flattened touch sequence (what ``stack_distance.stack_distances`` gives) also counts the
request's own blocks touched just before. Under head-first with distinct keys (and C at
least every request's size) its running max is still exact: touch j's distance is depth_j +
#{i < j : depth_i > depth_j}, which is <= C when all of depth_0..depth_j are <= C (the extra
blocks are distinct and sit between depth_j and C) and > C as soon as one depth is. Under
tail-first it is not: block 0 is touched last, after the request's deeper or cold blocks.
E.g. requests [a], [b], [a, c] at C = 2: a is present before the third (depth 2) but its
touch distance counts b, c and a (3 > 2). So the kernel reads every depth before it places
the request, which is exact for both orders at the same cost (tests/test_blocks.py checks
both statements).
Keys repeated inside one request are rejected (``stream.block_stream``).
"""

from __future__ import annotations

import weakref
from typing import NamedTuple

import numpy as np
from numba import njit

from pipeline.base.arrays import read_only
from pipeline.onepass.bands import SMALL_TOP, band_counts
from pipeline.workloads.stream import TAIL_FIRST, BlockStream, capacity_blocks, check_order
from pipeline.onepass.stack_distance import NOTHING_STORED, band_limits
from pipeline.onepass.stack_distance_kernels import COLD, lookup_depths, touch

__all__ = ["COLD", "Distances", "block_distances", "prefix_counts",
           "block_lru_gpu", "block_lru_cpu", "prefix_blocks"]


@njit(cache=True, _nrt=False)             # allocates nothing: no reference counts
def _depth_pass(starts: np.ndarray, codes: np.ndarray, lookup: np.ndarray,
                touch_from: np.ndarray, tail_first: bool, limit: int, last: np.ndarray,
                tree: np.ndarray, depth: np.ndarray, prefix: np.ndarray) -> None:
    """Fill ``depth`` and ``prefix`` (running max of depth) for each request's first
    ``lookup[r]`` blocks (others stay ``COLD``), then place blocks
    ``touch_from[r]:lookup[r]`` in the tier's order if there are at most ``limit``.
    ``last`` (one -1 per key code) and ``tree`` (zeros, one more than the blocks) are the
    work arrays: int32 when the stream is small enough, so more of them stays in cache."""
    live = 0
    clock = np.int64(0)                 # not a literal 0: touch compiles once, for int64
    for r in range(starts.size - 1):
        start = starts[r]
        end = start + lookup[r]
        lookup_depths(tree, last, codes, start, end, live, depth, prefix)
        low = start + touch_from[r]
        if end - low > limit or end <= low:
            continue
        for t in range(end - low):
            b = end - 1 - t if tail_first else low + t
            code = codes[b]
            live += touch(tree, last, code, clock)
            clock += 1


@njit(cache=True)
def _count_prefix(starts: np.ndarray, lookup: np.ndarray, prefix: np.ndarray,
                  capacities: np.ndarray, out: np.ndarray) -> None:
    """out[k, r] = blocks of request r whose running-max depth is <= capacities[k]."""
    for r in range(starts.size - 1):
        segment = prefix[starts[r]:starts[r] + lookup[r]]
        for k in range(capacities.size):
            out[k, r] = np.searchsorted(segment, capacities[k], side="right")


class Distances(NamedTuple):
    """Per block (N,): depth before its request and the running max along the request
    (``COLD`` where never touched or not cacheable)."""

    depth: np.ndarray
    prefix: np.ndarray


#: The unlimited pass of each order for the last stream asked (read-only arrays): the
#: infinite figures, the events and the top band of every curve share it.
_UNLIMITED: dict[str, tuple[weakref.ref, Distances]] = {}


def _forget(order: str, ref: weakref.ref) -> None:
    if order in _UNLIMITED and _UNLIMITED[order][0] is ref:
        del _UNLIMITED[order]


def block_distances(stream: BlockStream, order: str, touch_from: np.ndarray | None = None,
                    size_limit: int | None = None) -> Distances:
    """Depths of one pass: requests place blocks ``touch_from[r]:cacheable[r]`` (default
    all) when there are at most ``size_limit`` of them (default: no limit). The unlimited
    pass (every placement within ``size_limit``, nothing looked up but not placed) is
    computed once per stream and order; its arrays are read-only."""
    tail_first = check_order(order) == TAIL_FIRST
    touch = np.zeros(stream.requests, np.int64) if touch_from is None else \
        np.minimum(np.asarray(touch_from, np.int64), stream.cacheable)
    unlimited = size_limit is None or size_limit >= np.max(stream.cacheable - touch, initial=0)
    if unlimited and not touch.any():
        held = _UNLIMITED.get(order)
        if held is not None and held[0]() is stream:
            return held[1]
        distances = _pass(stream, tail_first, touch, COLD)
        for array in distances:
            array.flags.writeable = False
        _UNLIMITED[order] = (weakref.ref(stream, lambda ref: _forget(order, ref)), distances)
        return distances
    return _pass(stream, tail_first, touch, COLD if size_limit is None else int(size_limit))


def _pass(stream: BlockStream, tail_first: bool, touch: np.ndarray, limit: int) -> Distances:
    depth = np.full(stream.blocks, COLD, np.int64)
    prefix = np.full(stream.blocks, COLD, np.int64)
    work = np.int32 if stream.blocks < np.iinfo(np.int32).max else np.int64
    _depth_pass(stream.starts, stream.codes, stream.cacheable, touch, tail_first, limit,
                np.full(stream.n_codes, -1, work), np.zeros(stream.blocks + 1, work), depth,
                prefix)
    return Distances(depth, prefix)


def _placements(stream: BlockStream, touch_from: np.ndarray | None) -> np.ndarray:
    """Blocks each request places."""
    if touch_from is None:
        return stream.cacheable
    return stream.cacheable - np.minimum(np.asarray(touch_from, np.int64), stream.cacheable)


def prefix_counts(stream: BlockStream, prefix: np.ndarray, capacities: np.ndarray) -> np.ndarray:
    """Prefix hit blocks per (capacity in blocks, request) from running-max depths."""
    out = np.zeros((capacities.size, stream.requests), np.int64)
    _count_prefix(stream.starts, stream.cacheable, read_only(prefix),
                  capacities.astype(np.int64), out)
    return out


def prefix_blocks(stream: BlockStream, capacities: np.ndarray, order: str,
                  touch_from: np.ndarray | None = None) -> np.ndarray:
    """Prefix hit blocks per (capacity in blocks, request): one pass per size band, the
    bands whose capacities are all <= ``bands.SMALL_TOP`` together in one
    (``pipeline.onepass.bands``)."""
    capacities = np.asarray(capacities, np.int64)
    out = np.zeros((capacities.size, stream.requests), np.int64)
    limits = band_limits(np.unique(_placements(stream, touch_from)), capacities)
    small: list[tuple[int, np.ndarray]] = []
    for limit in np.unique(limits):
        if limit == NOTHING_STORED:
            continue                      # nothing is ever stored: every lookup misses
        rows = np.flatnonzero(limits == limit)
        if capacities[rows].max() <= SMALL_TOP:
            small.append((int(limit), rows))
            continue
        distances = block_distances(stream, order, touch_from, int(limit))
        out[rows] = prefix_counts(stream, distances.prefix, capacities[rows])
    if small:
        rows = np.concatenate([band_rows for _, band_rows in small])
        band = np.repeat(np.arange(len(small)), [band_rows.size for _, band_rows in small])
        tops = [capacities[band_rows].max() for _, band_rows in small]
        out[rows] = band_counts(stream, order, np.array([limit for limit, _ in small]),
                                np.array(tops), touch_from, capacities[rows], band)[1]
    return out


def block_lru_gpu(stream: BlockStream, capacities: object, order: str) -> np.ndarray:
    """GPU model API: prefix hit tokens per (capacity in tokens, request), shape (K, R)."""
    blocks = capacity_blocks(capacities, stream.block_size)
    return prefix_blocks(stream, blocks, order) * stream.block_size


def block_lru_cpu(stream: BlockStream, gpu_hit_tokens: np.ndarray, capacities: object,
              order: str) -> np.ndarray:
    """CPU model API: CPU prefix hit tokens (counted from block 0) per (capacity, request),
    given each request's GPU hit tokens; the tier places blocks g.. of each request."""
    blocks = capacity_blocks(capacities, stream.block_size)
    gpu_blocks = np.asarray(gpu_hit_tokens, np.int64) // stream.block_size
    return prefix_blocks(stream, blocks, order, touch_from=gpu_blocks) * stream.block_size
