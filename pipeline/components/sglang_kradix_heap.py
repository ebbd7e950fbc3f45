"""The compiled SGLang radix tree's eviction heap (``H``; the layout is
``pipeline.components.sglang_kradix_layout``): each policy's key (SGLang 0.5.23's
``evict_policy.py``), a lazy binary heap of the evictable leaves (entries whose node
changed since are skipped when popped, as in the oracle; live leaves never tie on (key,
access): every leaf's access tick is its own, so the order is the oracle's), and which
nodes are evictable leaves.
"""

from __future__ import annotations

from pipeline.components.sglang_kradix_layout import (
    N_ACC, N_CRE, N_FC, N_HIT, N_LEAF, N_LOCK, N_PRIO, T_HSIZE, T_NLEAF, T_POLICY, T_PUSH,
    T_SLRU, T_USED)
from pipeline.components.kjit import helper

__all__ = ["key_of", "sift_up", "sift_down", "push", "rebuild", "update_leaf"]


@helper
def key_of(NI, TG, n):
    """The policy's heap key (evict_policy.py), two numbers: smaller is evicted first."""
    policy = TG[T_POLICY]
    if policy == 0:
        return NI[n, N_ACC], 0
    if policy == 1:
        return NI[n, N_HIT], NI[n, N_ACC]
    if policy == 2:
        return NI[n, N_CRE], 0
    if policy == 3:
        return -NI[n, N_ACC], 0
    if policy == 4:
        return -NI[n, N_CRE], 0
    if policy == 5:
        return NI[n, N_PRIO], NI[n, N_ACC]
    return (1 if NI[n, N_HIT] >= TG[T_SLRU] else 0), NI[n, N_ACC]


@helper
def less(H, a, b):
    for j in range(4):
        if H[a, j] != H[b, j]:
            return H[a, j] < H[b, j]
    return False


@helper
def swap(H, a, b):
    for j in range(5):
        H[a, j], H[b, j] = H[b, j], H[a, j]


@helper
def sift_up(H, i):
    while i > 0:
        parent = (i - 1) // 2
        if less(H, i, parent):
            swap(H, i, parent)
            i = parent
        else:
            break


@helper
def sift_down(H, size, i):
    while True:
        left, smallest = 2 * i + 1, i
        if left < size and less(H, left, smallest):
            smallest = left
        if left + 1 < size and less(H, left + 1, smallest):
            smallest = left + 1
        if smallest == i:
            break
        swap(H, i, smallest)
        i = smallest


@helper
def put(T, n):
    NI, TG, H = T
    if TG[T_HSIZE] >= H.shape[0]:
        rebuild(T)
    k1, k2 = key_of(NI, TG, n)
    TG[T_PUSH] += 1
    i = TG[T_HSIZE]
    H[i, 0], H[i, 1], H[i, 2], H[i, 3], H[i, 4] = k1, k2, NI[n, N_ACC], TG[T_PUSH], n
    TG[T_HSIZE] = i + 1
    sift_up(H, i)


@helper
def push(T, n):
    """Queue ``n`` under its current key when it is an evictable leaf."""
    if T[0][n, N_LEAF]:
        put(T, n)


@helper
def rebuild(T):
    """The heap afresh from the evictable leaves (stale entries dropped)."""
    NI, TG, H = T
    TG[T_HSIZE] = 0
    for n in range(TG[T_USED]):
        if NI[n, N_LEAF]:
            k1, k2 = key_of(NI, TG, n)
            TG[T_PUSH] += 1
            i = TG[T_HSIZE]
            H[i, 0], H[i, 1], H[i, 2], H[i, 3], H[i, 4] = k1, k2, NI[n, N_ACC], TG[T_PUSH], n
            TG[T_HSIZE] = i + 1
    for i in range(TG[T_HSIZE] // 2 - 1, -1, -1):
        sift_down(H, TG[T_HSIZE], i)


@helper
def update_leaf(T, n):
    NI, TG = T[0], T[1]
    if NI[n, N_LOCK] > 0 or NI[n, N_FC] >= 0:
        if NI[n, N_LEAF]:
            NI[n, N_LEAF] = 0
            TG[T_NLEAF] -= 1
    elif not NI[n, N_LEAF]:
        NI[n, N_LEAF] = 1
        TG[T_NLEAF] += 1
        put(T, n)
