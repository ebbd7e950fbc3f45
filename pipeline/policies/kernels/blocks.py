"""The block-mode kernel: ``Policy.place`` compiled, one loop for the one-queue policies
(FIFO, MRU; LRU is kept, though LRU's block mode is the one-pass ``block-lru`` engine),
CLOCK, SIEVE, LFU and OPT, equal per request to the classes' replay
(tests/test_policies_blocks.py).

A request: look its blocks up (the prefix hit: the leading blocks present), then read its
touches (each a hit or an insertion), then evict until the tier fits, setting aside a victim
of this request and inserting the set-aside ones again, in the order they were set aside.
Requests with more touches than the tier's blocks are looked up and not placed.

``block_<policy>(touches, t_off, lookup, l_off, capacity, k) -> prefix hits per request`` is
a policy's block-mode fast path: its registry entry declares it (``CacheModel.block_kernel``;
``pipeline.policies.blockmode`` lays out the arrays)."""

from __future__ import annotations

import numpy as np

from pipeline.policies.kernels.lists import NONE, bucket_unlink, inlined, kernel
from pipeline.policies.kernels.opt import heap_pop, heap_push, next_use_codes, sift
from pipeline.policies.kernels.simple import (CLOCK, FIFO, LFU, LRU, MRU, SIEVE, insert, lfu_hit,
                                              list_hit, list_victim)

__all__ = ["place", "LRU", "FIFO", "MRU", "CLOCK", "SIEVE", "LFU", "OPT",
           "block_fifo", "block_mru", "block_lfu", "block_clock", "block_sieve", "block_opt"]

#: ``place``'s policies: ``simple.py``'s one-queue ones (LRU .. LFU; LFU's set-aside block
#: goes back at count 1, as ``LFU._insert``) and OPT, a max-heap by next use (``next_use``
#: indexes the placed touches, as ``OPT``'s future).
OPT = LFU + 1


@inlined
def _add(policy, ends, prev, nxt, freq, bhead, btail, bcount, heap, pos, pri, seq, used, x):
    """Insert ``x`` (not resident; ``used`` blocks are) in ``policy``'s order."""
    if policy == OPT:
        heap_push(heap, pos, pri, seq, used, x)
    else:
        insert(policy, ends, prev, nxt, freq, bhead, btail, bcount, x)


@kernel
def _place(touches, t_off, lookup, l_off, capacity, policy, next_use, out, resident, pin, aside,
           prev, nxt, ends, freq, bhead, btail, bcount, pos, pri, seq, heap):
    """``place``'s loop over its work arrays (allocated by the caller: no reference counts
    in the loop, whose helpers are inlined)."""
    requests = t_off.size - 1
    hand = NONE
    low = 1                                     # LFU: <= the lowest non-empty count
    clock = 0                                   # OPT: position in the placed touches
    count = 0                                   # OPT: pushes so far (the tie order)
    used = 0
    for r in range(requests):
        run = 0                                 # the prefix hit: leading blocks resident
        for q in range(l_off[r], l_off[r + 1]):
            if not resident[lookup[q]]:
                break
            run += 1
        out[r] = run
        if t_off[r + 1] - t_off[r] > capacity:
            continue
        for q in range(t_off[r], t_off[r + 1]):
            x = touches[q]
            pin[x] = r
            if policy == OPT:
                pri[x] = next_use[clock]
                clock += 1
                count += 1
                seq[x] = count
            if not resident[x]:
                _add(policy, ends, prev, nxt, freq, bhead, btail, bcount, heap, pos, pri, seq,
                     used, x)
                low = 1
                resident[x] = True
                used += 1
            elif policy == OPT:
                sift(heap, pos, pri, seq, pos[x], used)
            elif policy == LFU:
                lfu_hit(bhead, btail, bcount, prev, nxt, freq, x)
            else:
                list_hit(policy, ends, prev, nxt, freq, x)
        held = 0
        while used + held > capacity:
            if policy == OPT:
                v = heap_pop(heap, pos, pri, seq, used)
            elif policy == LFU:
                while bcount[low] == 0:
                    low += 1
                v = btail[low]
                bucket_unlink(bhead, btail, prev, nxt, low, v)
                bcount[low] -= 1
            else:
                v, hand = list_victim(policy, ends, prev, nxt, freq, hand)
            resident[v] = False
            used -= 1
            if pin[v] == r:
                aside[held] = v
                held += 1
        for a in range(held):
            x = aside[a]
            if policy == OPT:
                count += 1
                seq[x] = count
            _add(policy, ends, prev, nxt, freq, bhead, btail, bcount, heap, pos, pri, seq, used, x)
            low = 1
            resident[x] = True
            used += 1


def place(touches: np.ndarray, t_off: np.ndarray, lookup: np.ndarray, l_off: np.ndarray,
          capacity: int, k: int, policy: int, next_use: np.ndarray) -> np.ndarray:
    """Prefix hits (blocks) per request of ``policy`` (one of ``LRU`` .. ``OPT``) over ``k``
    dense block codes."""
    top = touches.size + 2 if policy == LFU else 1
    heaped = k if policy == OPT else 1
    out = np.zeros(t_off.size - 1, np.int64)
    _place(touches, t_off, lookup, l_off, capacity, policy, next_use, out,
           np.zeros(k, np.bool_), np.full(k, -1, np.int64), np.empty(max(capacity, 1), np.int64),
           np.full(k, NONE, np.int64), np.full(k, NONE, np.int64), np.array([NONE, NONE], np.int64),
           np.zeros(k, np.int64), np.full(top, NONE, np.int64), np.full(top, NONE, np.int64),
           np.zeros(top, np.int64), np.full(heaped, -1, np.int64), np.zeros(heaped, np.int64),
           np.zeros(heaped, np.int64), np.empty(heaped, np.int64))
    return out


_NO_FUTURE = np.zeros(1, np.int64)


def _block(policy: int):
    """``policy``'s block kernel (no future: OPT's is ``block_opt``)."""
    def block(touches, t_off, lookup, l_off, capacity, k):
        return place(touches, t_off, lookup, l_off, capacity, k, policy, _NO_FUTURE)
    return block


block_fifo, block_mru, block_clock, block_sieve, block_lfu = (
    _block(FIFO), _block(MRU), _block(CLOCK), _block(SIEVE), _block(LFU))


def block_opt(touches, t_off, lookup, l_off, capacity, k):
    """OPT's block kernel, given the future of the tier's own placements (a request longer
    than the tier is never placed, so it is not in the future)."""
    lengths = np.diff(t_off)
    future = touches[np.repeat(lengths <= capacity, lengths)]
    next_use = next_use_codes(future) if future.size else np.zeros(1, np.int64)
    return place(touches, t_off, lookup, l_off, capacity, k, OPT, next_use)
