"""Block-mode kernels: ``Policy.place`` compiled for the queue policies (FIFO, MRU; LRU's mode
0 is kept, though LRU's block mode is the one-pass ``block-lru`` engine), CLOCK, SIEVE, LFU
and OPT, equal per request to the classes' replay (tests/test_policies_blocks.py).

A request: look its blocks up (the prefix hit: the leading blocks present), then read its
touches (each a hit or an insertion), then evict until the tier fits, setting aside a victim
of this request and inserting the set-aside ones again, in the order they were set aside.
Requests with more touches than the tier's blocks are looked up and not placed.

``block_<policy>(touches, t_off, lookup, l_off, capacity, k) -> prefix hits per request`` is
a policy's block-mode fast path: its registry entry declares it (``CacheModel.block_kernel``;
``pipeline.policies.blockmode`` lays out the arrays)."""

from __future__ import annotations

import numpy as np
from numba import njit

from pipeline.policies.kernels.lists import FIRST, NONE, bucket_push, bucket_unlink, push, unlink
from pipeline.policies.kernels.opt import next_use_codes, sift_down, sift_up

__all__ = ["place_queue", "place_opt", "place_ring", "place_lfu", "block_fifo", "block_mru",
           "block_lfu", "block_clock", "block_sieve", "block_opt"]


@njit(cache=True, nogil=True)
def prefix_run(resident, lookup, start, end):
    """The request's prefix hit: how many of its leading blocks ``lookup[start:end]`` are
    resident before it is placed."""
    run = 0
    for q in range(start, end):
        if not resident[lookup[q]]:
            break
        run += 1
    return run


@njit(cache=True, nogil=True)
def place_queue(touches, t_off, lookup, l_off, capacity, k, mode):
    """Prefix hits (blocks) per request of LRU (0), FIFO (1) or MRU (2)."""
    requests = t_off.size - 1
    out = np.zeros(requests, np.int64)
    resident = np.zeros(k, np.bool_)
    pin = np.full(k, -1, np.int64)
    prev = np.full(k, NONE, np.int64)
    nxt = np.full(k, NONE, np.int64)
    ends = np.array([NONE, NONE], np.int64)
    aside = np.empty(max(capacity, 1), np.int64)
    used = 0
    for r in range(requests):
        out[r] = prefix_run(resident, lookup, l_off[r], l_off[r + 1])
        if t_off[r + 1] - t_off[r] > capacity:
            continue
        for q in range(t_off[r], t_off[r + 1]):
            x = touches[q]
            pin[x] = r
            if resident[x]:
                if mode != 1:
                    unlink(ends, prev, nxt, x)
                    push(ends, prev, nxt, x)
            else:
                push(ends, prev, nxt, x)
                resident[x] = True
                used += 1
        held = 0
        while used + held > capacity:
            v = ends[0] if mode == 2 else ends[1]
            unlink(ends, prev, nxt, v)
            resident[v] = False
            used -= 1
            if pin[v] == r:
                aside[held] = v
                held += 1
        for a in range(held):
            push(ends, prev, nxt, aside[a])
            resident[aside[a]] = True
            used += 1
    return out


@njit(cache=True, nogil=True)
def _heap_push(heap, pos, pri, seq, size, x):
    heap[size] = x
    pos[x] = size
    sift_up(heap, pos, pri, seq, size)
    return size + 1


@njit(cache=True, nogil=True)
def place_opt(touches, t_off, lookup, l_off, capacity, k, next_use):
    """Prefix hits (blocks) per request of OPT; ``next_use`` indexes the placed touches
    (those of requests that fit), as ``OPT``'s future."""
    requests = t_off.size - 1
    out = np.zeros(requests, np.int64)
    pos = np.full(k, -1, np.int64)
    pri = np.zeros(k, np.int64)
    seq = np.zeros(k, np.int64)
    heap = np.empty(k, np.int64)
    pin = np.full(k, -1, np.int64)
    aside = np.empty(max(capacity, 1), np.int64)
    size = np.int64(0)                          # not a literal 0: one compile of _heap_push
    clock = 0                                   # position in the placed touches
    count = 0                                   # pushes so far (the tie order)
    for r in range(requests):
        run = 0
        for q in range(l_off[r], l_off[r + 1]):
            if pos[lookup[q]] == -1:
                break
            run += 1
        out[r] = run
        if t_off[r + 1] - t_off[r] > capacity:
            continue
        for q in range(t_off[r], t_off[r + 1]):
            x = touches[q]
            pin[x] = r
            pri[x] = next_use[clock]
            clock += 1
            count += 1
            seq[x] = count
            if pos[x] != -1:
                sift_up(heap, pos, pri, seq, pos[x])
            else:
                size = _heap_push(heap, pos, pri, seq, size, x)
        held = 0
        while size + held > capacity:
            v = heap[0]
            size -= 1
            pos[v] = -1
            if size > 0:
                heap[0] = heap[size]
                sift_down(heap, pos, pri, seq, 0, size)
            if pin[v] == r:
                aside[held] = v
                held += 1
        for a in range(held):
            count += 1
            seq[aside[a]] = count
            size = _heap_push(heap, pos, pri, seq, size, aside[a])
    return out


@njit(cache=True, nogil=True)
def place_ring(touches, t_off, lookup, l_off, capacity, k, sieve):
    """Prefix hits (blocks) per request of CLOCK (1-bit counter, 0 on insertion; ``sieve``
    False) or SIEVE (visited bit, a hand that stays; ``sieve`` True)."""
    requests = t_off.size - 1
    out = np.zeros(requests, np.int64)
    resident = np.zeros(k, np.bool_)
    bit = np.zeros(k, np.bool_)                 # CLOCK's counter / SIEVE's visited bit
    pin = np.full(k, -1, np.int64)
    prev = np.full(k, NONE, np.int64)
    nxt = np.full(k, NONE, np.int64)
    ends = np.array([NONE, NONE], np.int64)
    aside = np.empty(max(capacity, 1), np.int64)
    hand = NONE
    used = 0
    for r in range(requests):
        out[r] = prefix_run(resident, lookup, l_off[r], l_off[r + 1])
        if t_off[r + 1] - t_off[r] > capacity:
            continue
        for q in range(t_off[r], t_off[r + 1]):
            x = touches[q]
            pin[x] = r
            if resident[x]:
                bit[x] = True
            else:
                push(ends, prev, nxt, x)
                resident[x] = True
                bit[x] = False
                used += 1
        held = 0
        while used + held > capacity:
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
                    unlink(ends, prev, nxt, v)
                    push(ends, prev, nxt, v)
                    v = ends[1]
            unlink(ends, prev, nxt, v)
            resident[v] = False
            used -= 1
            if pin[v] == r:
                aside[held] = v
                held += 1
        for a in range(held):
            push(ends, prev, nxt, aside[a])
            resident[aside[a]] = True
            bit[aside[a]] = False
            used += 1
    return out


@njit(cache=True, nogil=True)
def place_lfu(touches, t_off, lookup, l_off, capacity, k):
    """Prefix hits (blocks) per request of LFU (in-cache counts, ties to the oldest of the
    lowest count; a set-aside block is inserted again at count 1, as ``LFU._insert``)."""
    requests = t_off.size - 1
    out = np.zeros(requests, np.int64)
    resident = np.zeros(k, np.bool_)
    freq = np.zeros(k, np.int64)
    pin = np.full(k, -1, np.int64)
    prev = np.full(k, NONE, np.int64)
    nxt = np.full(k, NONE, np.int64)
    top = touches.size + 2
    bhead = np.full(top, NONE, np.int64)        # per count: newest
    btail = np.full(top, NONE, np.int64)        # per count: oldest (the victim)
    bcount = np.zeros(top, np.int64)
    aside = np.empty(max(capacity, 1), np.int64)
    low = 1                                     # <= the lowest non-empty count
    used = 0
    for r in range(requests):
        out[r] = prefix_run(resident, lookup, l_off[r], l_off[r + 1])
        if t_off[r + 1] - t_off[r] > capacity:
            continue
        for q in range(t_off[r], t_off[r + 1]):
            x = touches[q]
            pin[x] = r
            if resident[x]:
                f = freq[x]
                bucket_unlink(bhead, btail, prev, nxt, f, x)
                bcount[f] -= 1
                freq[x] = f + 1
                bucket_push(bhead, btail, prev, nxt, f + 1, x)
                bcount[f + 1] += 1
            else:
                freq[x] = 1
                bucket_push(bhead, btail, prev, nxt, FIRST, x)
                bcount[1] += 1
                low = 1
                resident[x] = True
                used += 1
        held = 0
        while used + held > capacity:
            while bcount[low] == 0:
                low += 1
            v = btail[low]
            bucket_unlink(bhead, btail, prev, nxt, low, v)
            bcount[low] -= 1
            resident[v] = False
            used -= 1
            if pin[v] == r:
                aside[held] = v
                held += 1
        for a in range(held):
            x = aside[a]
            freq[x] = 1
            bucket_push(bhead, btail, prev, nxt, FIRST, x)
            bcount[1] += 1
            low = 1
            resident[x] = True
            used += 1
    return out


def block_fifo(touches, t_off, lookup, l_off, capacity, k):
    """FIFO's block kernel (the queue in mode 1)."""
    return place_queue(touches, t_off, lookup, l_off, capacity, k, 1)


def block_mru(touches, t_off, lookup, l_off, capacity, k):
    """MRU's block kernel (the queue in mode 2)."""
    return place_queue(touches, t_off, lookup, l_off, capacity, k, 2)


def block_clock(touches, t_off, lookup, l_off, capacity, k):
    """CLOCK's block kernel (the ring without SIEVE's hand)."""
    return place_ring(touches, t_off, lookup, l_off, capacity, k, False)


def block_sieve(touches, t_off, lookup, l_off, capacity, k):
    """SIEVE's block kernel (the ring with its hand)."""
    return place_ring(touches, t_off, lookup, l_off, capacity, k, True)


block_lfu = place_lfu


def block_opt(touches, t_off, lookup, l_off, capacity, k):
    """OPT's block kernel, given the future of the tier's own placements (a request longer
    than the tier is never placed, so it is not in the future)."""
    from pipeline.policies.kernels.opt import next_use_codes

    lengths = np.diff(t_off)
    future = touches[np.repeat(lengths <= capacity, lengths)]
    next_use = next_use_codes(future) if future.size else np.zeros(1, np.int64)
    return place_opt(touches, t_off, lookup, l_off, capacity, k, next_use)
