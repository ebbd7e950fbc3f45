"""The compiled HiCache tree's node table and its bookkeeping: the layout, node creation
and removal, the write-back registry, device and host leaves, the split, the locks, the
eviction heaps. ``sglang_khiradix`` runs ``HiRadixTree``'s rules over it.

A HiCache tree is the tuple ``(NI, TG, H, HN, HG, WA, LA, HH, X)``: ``NI`` / ``TG`` / ``H`` as
in ``sglang_kradix_layout`` (the node rows, the clock and sizes, an eviction heap; the plain tree's
evictable-leaf flags and lazy heap are not used: eviction takes the device or host leaves of
the moment, as the model does), and

* ``HN[node]``: on device, on host, host lock count, the write-through ack pending (the
  writing node's id), the load back pending (the loading node's id), the node's id, its host
  lock segment id (``host_uuid``), its place in the write-back registry of nodes on both
  tiers (``full_host_duplicates``: an insertion-ordered list, previous / next), and whether
  it is in the tree (a removed node's row keeps its columns until reused);
* ``HG``: the host pool, tokens written and loaded, the write policy, the id counter, ...;
* ``WA`` / ``LA``: the write acks (node, locked) and load acks (node, host lock receipt)
  that the next ``check_events`` takes; ``HH`` the host-eviction heap; ``X`` scratch
  columns (a walk's stack, a subtree, the backups of an insert, an ancestor chain, the
  registry's snapshot).

Node rows are reused after a node is removed (``sglang_kradix``'s free list); ids are never.
"""

from __future__ import annotations

import numpy as np

from pipeline.components.kjit import helper, kernel
from pipeline.components.sglang_kradix import (new_node, new_tree, take_place_above, tick,
                                               unlink_child)
from pipeline.components.sglang_kradix_heap import key_of, sift_down, sift_up
from pipeline.components.sglang_kradix_layout import (
    N_ACC, N_CRE, N_FC, N_HIT, N_KL, N_LOCK, N_NEXTFREE, N_NS, N_PAR, N_PRIO,
    ROOT_PRIORITY, T_EVICT, T_FREE, T_NLEAF, T_PAGE, T_PROT, T_USED)

__all__ = ["new_hitree", "WRITE_POLICIES", "LOAD_BACK_THRESHOLD", "H_DEV"]

WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")
LOAD_BACK_THRESHOLD = 10

H_DEV, H_HOST, H_HLOCK, H_WT, H_LB, H_ID, H_UUID, H_DUP, H_DPREV, H_DNEXT, H_LIVE = range(11)
H_COLUMNS = 11
(HG_CAP, HG_USED, HG_WRITTEN, HG_LOADED, HG_WB, HG_THRESH, HG_IDS, HG_NWA, HG_NLA,
 HG_FREED, HG_DHEAD, HG_DTAIL) = range(12)
HG_COLUMNS = 12
X_STACK, X_BELOW, X_BACKUP, X_CHAIN, X_SNAP = range(5)



def new_hitree(device_tokens: int, host_tokens: int, page_size: int = 1,
               policy: str = "lru", write_policy: str = "write_through") -> tuple:
    """An empty HiCache tree for pools of ``device_tokens`` / ``host_tokens``."""
    if write_policy not in WRITE_POLICIES:
        raise ValueError(f"unknown write policy {write_policy!r}")
    nodes = (device_tokens + host_tokens) // page_size + 64
    NI, TG, H = new_tree(nodes, page_size, policy)
    HN = np.zeros((nodes, H_COLUMNS), np.int64)
    HG = np.zeros(HG_COLUMNS, np.int64)
    HG[HG_CAP], HG[HG_WB] = host_tokens, write_policy == "write_back"
    HG[HG_THRESH] = 1 if write_policy == "write_through" else 2
    HG[HG_DHEAD] = HG[HG_DTAIL] = -1
    T = (NI, TG, H, HN, HG, np.zeros((nodes, 2), np.int64), np.zeros((nodes, 2), np.int64),
         np.zeros((2 * nodes + 16, 5), np.int64), np.zeros((nodes, 5), np.int64))
    TG[0] = 0                                    # the clock, as a fresh HiRadixTree's
    hi_reset_py(T)
    return T


# --------------------------------------------------------------------------- nodes

@helper
def hi_reset(T):
    NI, TG, HN, HG = T[0], T[1], T[3], T[4]
    clock = TG[0]
    TG[:T_PAGE] = 0
    TG[T_NLEAF] = 0
    TG[0] = clock
    TG[T_FREE] = -1
    root = new_node(T, ROOT_PRIORITY)
    HN[root, :] = 0
    HN[root, H_DEV] = 1
    NI[root, N_LOCK] = 0
    HG[HG_IDS] += 1
    HN[root, H_ID] = HG[HG_IDS]
    HG[HG_USED] = HG[HG_WRITTEN] = HG[HG_LOADED] = HG[HG_NWA] = HG[HG_NLA] = 0
    HG[HG_DHEAD] = HG[HG_DTAIL] = -1


@kernel
def hi_reset_py(T):
    hi_reset(T)


@helper
def hnew(T, priority):
    HN, HG = T[3], T[4]
    n = new_node(T, priority)
    HN[n, :] = 0
    HN[n, H_DPREV] = HN[n, H_DNEXT] = -1
    HN[n, H_LIVE] = 1
    HG[HG_IDS] += 1
    HN[n, H_ID] = HG[HG_IDS]
    return n


@helper
def dup_pop(T, n):
    HN, HG = T[3], T[4]
    if not HN[n, H_DUP]:
        return
    prev, nxt = HN[n, H_DPREV], HN[n, H_DNEXT]
    if prev >= 0:
        HN[prev, H_DNEXT] = nxt
    else:
        HG[HG_DHEAD] = nxt
    if nxt >= 0:
        HN[nxt, H_DPREV] = prev
    else:
        HG[HG_DTAIL] = prev
    HN[n, H_DUP] = 0
    HN[n, H_DPREV] = HN[n, H_DNEXT] = -1


@helper
def dup_track(T, n):
    """``_dup_track``: in the registry (appended) when on both tiers with nothing pending."""
    HN, HG = T[3], T[4]
    if n != 0 and HN[n, H_DEV] and HN[n, H_HOST] and HN[n, H_WT] == 0 and HN[n, H_LB] == 0:
        if not HN[n, H_DUP]:
            tail = HG[HG_DTAIL]
            HN[n, H_DUP], HN[n, H_DPREV], HN[n, H_DNEXT] = 1, tail, -1
            if tail >= 0:
                HN[tail, H_DNEXT] = n
            else:
                HG[HG_DHEAD] = n
            HG[HG_DTAIL] = n
    else:
        dup_pop(T, n)


@helper
def remove(T, n):
    """Unlink ``n`` from its parent and recycle its row (its columns kept until reused)."""
    NI, TG = T[0], T[1]
    unlink_child(NI, n)
    dup_pop(T, n)
    T[3][n, H_LIVE] = 0
    NI[n, N_NEXTFREE] = TG[T_FREE]
    TG[T_FREE] = n


@helper
def device_leaf(T, n):
    NI, HN = T[0], T[3]
    if n <= 0 or not HN[n, H_DEV] or NI[n, N_LOCK] != 0:
        return False
    c = NI[n, N_FC]
    while c >= 0:
        if HN[c, H_DEV]:
            return False
        c = NI[c, N_NS]
    return True


@helper
def host_leaf(T, n):
    NI, HN = T[0], T[3]
    return (n > 0 and not HN[n, H_DEV] and HN[n, H_HOST] and HN[n, H_HLOCK] == 0
            and NI[n, N_LOCK] == 0 and NI[n, N_FC] < 0)


@helper
def hsplit(T, c, length):
    """``_split``: the new upper node (c's place, flags, locks, creation time)."""
    NI, TG, HN = T[0], T[1], T[3]
    upper = hnew(T, NI[c, N_PRIO])
    NI[upper, N_HIT], NI[upper, N_LOCK] = NI[c, N_HIT], NI[c, N_LOCK]
    HN[upper, H_HLOCK] = HN[c, H_HLOCK]
    HN[upper, H_UUID], HN[c, H_UUID] = HN[c, H_UUID], 0
    HN[upper, H_DEV], HN[upper, H_HOST] = HN[c, H_DEV], HN[c, H_HOST]
    HN[upper, H_WT], HN[upper, H_LB] = HN[c, H_WT], HN[c, H_LB]
    NI[upper, N_CRE] = NI[c, N_CRE]
    take_place_above(NI, upper, c, length)
    NI[c, N_ACC] = tick(TG)
    dup_track(T, upper)
    return upper


# --------------------------------------------------------------------------- locks

@helper
def hi_inc_lock(T, n):
    """``inc_lock_ref``: the change of the evictable size (<= 0)."""
    NI, TG, HN = T[0], T[1], T[3]
    delta = 0
    while n != 0 and not HN[n, H_DEV]:
        NI[n, N_LOCK] += 1
        n = NI[n, N_PAR]
    while n != 0:
        if NI[n, N_LOCK] == 0:
            size = NI[n, N_KL]
            TG[T_EVICT] -= size
            TG[T_PROT] += size
            delta -= size
        NI[n, N_LOCK] += 1
        n = NI[n, N_PAR]
    return delta


@helper
def hi_dec_lock(T, n):
    NI, TG, HN = T[0], T[1], T[3]
    while n != 0:
        if NI[n, N_LOCK] == 1 and HN[n, H_DEV]:
            TG[T_EVICT] += NI[n, N_KL]
            TG[T_PROT] -= NI[n, N_KL]
        NI[n, N_LOCK] -= 1
        n = NI[n, N_PAR]
    return 0


@helper
def host_lock(T, n):
    """``_host_lock``: the receipt (0: none)."""
    HN, HG = T[3], T[4]
    if not HN[n, H_HOST] and not HG[HG_WB]:
        return 0
    if HN[n, H_UUID] == 0:
        HG[HG_IDS] += 1
        HN[n, H_UUID] = HG[HG_IDS]
    HN[n, H_HLOCK] += 1
    return HN[n, H_UUID]


@helper
def release_host_lock(T, n, uuid):
    NI, HN, HG = T[0], T[3], T[4]
    while uuid != 0 and n >= 0:
        if not HN[n, H_HOST] and not HG[HG_WB]:
            return
        HN[n, H_HLOCK] -= 1
        if HN[n, H_UUID] == uuid:
            return
        n = NI[n, N_PAR]


# --------------------------------------------------------------------------- eviction

@helper
def heap_push(NI, TG, H, size, seq, n):
    k1, k2 = key_of(NI, TG, n)
    H[size, 0], H[size, 1], H[size, 2], H[size, 3], H[size, 4] = k1, k2, NI[n, N_ACC], seq, n
    sift_up(H, size)
    return size + 1


@helper
def heap_pop(H, size):
    n = H[0, 4]
    size -= 1
    if size > 0:
        for j in range(5):
            H[0, j] = H[size, j]
        sift_down(H, size, 0)
    return n, size


@helper
def leaves_heap(T, H, host):
    """A heap of the device (or host) leaves of the moment (the tree's nodes: its rows in
    use); its size."""
    NI, TG, HN = T[0], T[1], T[3]
    size = 0
    for n in range(1, TG[T_USED]):
        if HN[n, H_LIVE] and (host_leaf(T, n) if host else device_leaf(T, n)):
            k1, k2 = key_of(NI, TG, n)
            H[size, 0], H[size, 1], H[size, 2], H[size, 3], H[size, 4] = \
                k1, k2, NI[n, N_ACC], size, n
            size += 1
    for i in range(size // 2 - 1, -1, -1):
        sift_down(H, size, i)
    return size


@helper
def orphan(T, n):
    """``n``'s descendants leave the tree with it (unreachable, as in the model: their rows
    and host tokens are not reclaimed). None under the write policies' invariants (a host
    copy's ancestors have one); kept so that the rows scanned are the tree's."""
    NI, HN, X = T[0], T[3], T[8]
    top = push_children(NI, X, n, 0)
    while top > 0:
        top -= 1
        cur = X[top, X_STACK]
        HN[cur, H_LIVE] = 0
        top = push_children(NI, X, cur, top)


@helper
def push_children(NI, X, n, top):
    """``n``'s children onto the scratch stack ``X[:, X_STACK]`` from ``top``; the new top."""
    c = NI[n, N_FC]
    while c >= 0:
        X[top, X_STACK] = c
        top += 1
        c = NI[c, N_NS]
    return top


@helper
def demote(T, n):
    T[3][n, H_DEV] = 0
    T[1][T_EVICT] -= T[0][n, N_KL]
    return T[0][n, N_KL]


@helper
def delete_tombstones(T, n):
    NI, HN = T[0], T[3]
    while n != 0 and NI[n, N_FC] < 0 and not NI[n, N_LOCK] and not HN[n, H_HLOCK] \
            and not HN[n, H_DEV] and not HN[n, H_HOST]:
        remove(T, n)
        n = NI[n, N_PAR]
