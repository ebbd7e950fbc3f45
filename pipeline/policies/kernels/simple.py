"""Kernels of the one-queue policies: LRU, FIFO, MRU, CLOCK, SIEVE, LFU, one loop over one
queue (a count bucket per frequency for LFU); the ``inlined`` helpers are the policies' rules,
shared with the block-mode kernel (``blocks.py``)."""

from __future__ import annotations

import numpy as np

from pipeline.policies.kernels.lists import (FIRST, NONE, bucket_push, bucket_unlink, inlined,
                                             kernel, push, unlink)

__all__ = ["LRU", "FIFO", "MRU", "CLOCK", "SIEVE", "LFU", "replay", "list_hit", "list_victim",
           "lfu_hit", "insert"]

#: The policies of ``replay``. LRU, FIFO, MRU: one queue (a hit moves to the head but in
#: FIFO; the victim is the tail, MRU's the head). CLOCK: a 1-bit counter per key (``freq``,
#: 0 on insertion) spent while the tail moves to the head. SIEVE: a visited bit (``freq``)
#: and a hand that stays. LFU: counts per key, ties to the oldest of the lowest count.
LRU, FIFO, MRU, CLOCK, SIEVE, LFU = range(6)


@inlined
def list_hit(policy, ends, prev, nxt, freq, x):
    """A hit on resident ``x`` of a queue policy (not LFU)."""
    if policy == CLOCK or policy == SIEVE:
        freq[x] = 1
    elif policy != FIFO:
        unlink(ends, prev, nxt, x)
        push(ends, prev, nxt, x)


@inlined
def list_victim(policy, ends, prev, nxt, freq, hand):
    """Unlink the victim of a queue policy (not LFU); return it and SIEVE's hand."""
    if policy == SIEVE:
        v = ends[1] if hand == NONE else hand
        while freq[v]:
            freq[v] = 0
            v = ends[1] if prev[v] == NONE else prev[v]
        hand = prev[v]
    elif policy == CLOCK:
        v = ends[1]
        while freq[v]:
            freq[v] = 0
            unlink(ends, prev, nxt, v)
            push(ends, prev, nxt, v)
            v = ends[1]
    else:
        v = ends[0] if policy == MRU else ends[1]
    unlink(ends, prev, nxt, v)
    return v, hand


@inlined
def lfu_hit(bhead, btail, bcount, prev, nxt, freq, x):
    """Move resident ``x`` to the next count's bucket; return its old count."""
    f = freq[x]
    bucket_unlink(bhead, btail, prev, nxt, f, x)
    bcount[f] -= 1
    freq[x] = f + 1
    bucket_push(bhead, btail, prev, nxt, f + 1, x)
    bcount[f + 1] += 1
    return f


@inlined
def insert(policy, ends, prev, nxt, freq, bhead, btail, bcount, x):
    """Insert ``x`` (not resident): at the queue's head, or LFU's count 1."""
    if policy == LFU:
        freq[x] = 1
        bucket_push(bhead, btail, prev, nxt, FIRST, x)
        bcount[1] += 1
    else:
        push(ends, prev, nxt, x)
        freq[x] = 0


@kernel
def _replay(codes, sizes, capacity, policy, hits, resident, stored, freq, ends, prev, nxt,
            bhead, btail, bcount):
    """``replay``'s loop over its work arrays (allocated by the caller: no reference counts
    in the loop, whose helpers are inlined)."""
    n = codes.size
    hand = NONE
    low = 0
    used = 0
    for i in range(n):
        x, s = codes[i], sizes[i]
        if resident[x]:
            hits[i] = True
            if policy == LFU:
                f = lfu_hit(bhead, btail, bcount, prev, nxt, freq, x)
                if bcount[f] == 0 and low == f:
                    low = f + 1
            else:
                list_hit(policy, ends, prev, nxt, freq, x)
            continue
        if s > capacity:
            continue
        while used + s > capacity:
            if policy == LFU:
                if low == 0 or bcount[low] == 0:
                    low = 1
                    while bcount[low] == 0:
                        low += 1
                v = btail[low]
                bucket_unlink(bhead, btail, prev, nxt, low, v)
                bcount[low] -= 1
                if bcount[low] == 0:
                    low = 0
            else:
                v, hand = list_victim(policy, ends, prev, nxt, freq, hand)
            resident[v] = False
            used -= stored[v]
        insert(policy, ends, prev, nxt, freq, bhead, btail, bcount, x)
        low = 1
        resident[x] = True
        stored[x] = s
        used += s


def replay(codes: np.ndarray, sizes: np.ndarray, capacity: int, k: int, prev: np.ndarray,
           nxt: np.ndarray, policy: int) -> np.ndarray:
    """Per-access hits of ``policy`` (``LRU`` .. ``LFU``) over ``k`` dense key codes."""
    top = codes.size + 2 if policy == LFU else 1
    hits = np.zeros(codes.size, np.bool_)
    _replay(codes, sizes, capacity, policy, hits, np.zeros(k, np.bool_), np.zeros(k, np.int64),
            np.zeros(k, np.int64), np.array([NONE, NONE], np.int64), prev, nxt,
            np.full(top, NONE, np.int64), np.full(top, NONE, np.int64), np.zeros(top, np.int64))
    return hits
