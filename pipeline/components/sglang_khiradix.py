"""SGLang 0.5.23's HiCache tree (``UnifiedRadixCache`` with ``init_hicache``) compiled: the
rules of ``sglang_hiradix.HiRadixTree`` (held equal to SGLang's own code by
tests/test_sglang_hiradix.py) over ``sglang_kradix``'s node table, for the compiled
scheduler (``sglang_ksched`` calls it through ``sglang_ktree``). tests/test_sglang_khiradix.py
holds it equal to ``HiRadixTree`` per operation and in the scheduler loop.

A HiCache tree is the tuple ``(NI, TG, H, HN, HG, WA, LA, HH, X)``: ``NI`` / ``TG`` / ``H`` as
in ``sglang_kradix`` (the node rows, the clock and sizes, an eviction heap; the plain tree's
evictable-leaf flags and lazy heap are not used: eviction takes the device or host leaves of
the moment, as the model does), and

* ``HN[node]``: on device, on host, host lock count, the write-through ack pending (the
  writing node's id), the load back pending (the loading node's id), the node's id, its host
  lock segment id (``host_uuid``), and its place in the write-back registry of nodes on both
  tiers (``full_host_duplicates``: an insertion-ordered list, previous / next);
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
from pipeline.components.sglang_kradix import (
    N_ACC, N_CRE, N_FC, N_HIT, N_KL, N_KS, N_LC, N_LOCK, N_NEXTFREE, N_NS, N_PAR, N_PRIO,
    N_PS, ROOT_PRIORITY, T_EVICT, T_FREE, T_NLEAF, T_PAGE, T_PROT, T_USED, append_child,
    find_child, key_of, match_len, new_node, new_tree, sift_down, sift_up, tick, unlink_child)

__all__ = ["new_hitree", "WRITE_POLICIES", "LOAD_BACK_THRESHOLD"]

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
    parent = NI[c, N_PAR]
    NI[upper, N_HIT], NI[upper, N_LOCK] = NI[c, N_HIT], NI[c, N_LOCK]
    HN[upper, H_HLOCK] = HN[c, H_HLOCK]
    HN[upper, H_UUID], HN[c, H_UUID] = HN[c, H_UUID], 0
    HN[upper, H_DEV], HN[upper, H_HOST] = HN[c, H_DEV], HN[c, H_HOST]
    HN[upper, H_WT], HN[upper, H_LB] = HN[c, H_WT], HN[c, H_LB]
    NI[upper, N_CRE] = NI[c, N_CRE]
    NI[upper, N_KS], NI[upper, N_KL] = NI[c, N_KS], length
    NI[upper, N_PAR] = parent
    prev, nxt = NI[c, N_PS], NI[c, N_NS]         # upper takes c's place among siblings
    NI[upper, N_PS], NI[upper, N_NS] = prev, nxt
    if prev >= 0:
        NI[prev, N_NS] = upper
    else:
        NI[parent, N_FC] = upper
    if nxt >= 0:
        NI[nxt, N_PS] = upper
    else:
        NI[parent, N_LC] = upper
    NI[upper, N_FC] = NI[upper, N_LC] = -1
    append_child(NI, upper, c)
    NI[c, N_KS] += length
    NI[c, N_KL] -= length
    NI[c, N_ACC] = tick(TG)
    dup_track(T, upper)
    return upper


# --------------------------------------------------------------------------- match / insert

@helper
def hi_match(T, TOK, start, length):
    """``match``: (device prefix, host hit, deepest matched node, deepest device node)."""
    NI, TG, HN = T[0], T[1], T[3]
    page = TG[T_PAGE]
    length = length // page * page
    if length <= 0:
        return 0, 0, 0, 0
    access = tick(TG)
    node = best = best_device = 0
    device_len = host_len = offset = 0
    while offset < length:
        child = find_child(NI, TOK, page, node, TOK, start + offset)
        if child < 0 or (not HN[child, H_DEV] and not HN[child, H_HOST]):
            break
        m = match_len(NI, TOK, page, child, TOK, start + offset, length - offset)
        cut = m < NI[child, N_KL]
        node = best = hsplit(T, child, m) if cut else child
        if HN[node, H_DEV]:
            best_device = node
            device_len += m
        else:
            host_len += m
        if cut:
            break
        offset += m
    walk = best
    while walk >= 0:
        NI[walk, N_ACC] = access
        walk = NI[walk, N_PAR]
    return device_len, host_len, best, best_device


@helper
def count_hit(T, n):
    """``_inc_hit_count_and_check``: a hit (none under write_back); copy it now?"""
    NI, HN, HG = T[0], T[3], T[4]
    if HG[HG_WB]:
        return False
    NI[n, N_HIT] += 1
    return not HN[n, H_HOST] and NI[n, N_HIT] >= HG[HG_THRESH]


@helper
def hi_insert(T, TOK, start, length, priority, inserted_len, prev_prefix_len):
    """``insert``: (tokens already cached, node ending the key); ``HG[HG_FREED]`` the
    request's slots freed as duplicates."""
    NI, TG, HN, HG, X = T[0], T[1], T[3], T[4], T[8]
    HG[HG_FREED] = 0
    page = TG[T_PAGE]
    length = length // page * page
    access = tick(TG)
    NI[0, N_ACC] = access
    NI[0, N_PRIO] = max(NI[0, N_PRIO], priority)
    if length <= 0:
        return 0, 0
    node, total, offset, nb = 0, 0, 0, 0
    while offset < length:
        child = find_child(NI, TOK, page, node, TOK, start + offset)
        if child < 0:
            break
        NI[child, N_ACC] = access
        m = match_len(NI, TOK, page, child, TOK, start + offset, length - offset)
        if m < NI[child, N_KL]:
            child = hsplit(T, child, m)
        node = child
        NI[node, N_PRIO] = max(NI[node, N_PRIO], priority)
        if HN[node, H_DEV]:
            HG[HG_FREED] += max(0, m - max(0, prev_prefix_len - total))
        else:                                    # restored from the request's KV
            HN[node, H_DEV] = 1
            if NI[node, N_LOCK]:
                TG[T_PROT] += NI[node, N_KL]
            else:
                TG[T_EVICT] += NI[node, N_KL]
            dup_track(T, node)
        total += m
        offset += m
        if total > inserted_len and count_hit(T, node):
            X[nb, X_BACKUP] = node
            nb += 1
    if offset < length:
        leaf = hnew(T, priority)
        NI[leaf, N_KS], NI[leaf, N_KL] = start + offset, length - offset
        HN[leaf, H_DEV] = 1
        append_child(NI, node, leaf)
        TG[T_EVICT] += length - offset
        node = leaf
        if total + length - offset > inserted_len and count_hit(T, leaf):
            X[nb, X_BACKUP] = leaf
            nb += 1
    for i in range(nb):
        write_through(T, X[i, X_BACKUP])
    return total, node


@helper
def write_through(T, n):
    """``_write_through``: copy ``n`` and its uncopied ancestors, ancestors first, each
    locked until its ack; stop at the first that does not fit."""
    NI, HN, HG, WA, X = T[0], T[3], T[4], T[5], T[8]
    nc = 1
    X[0, X_CHAIN] = n
    a = NI[n, N_PAR]
    while a != 0 and not HN[a, H_HOST]:
        X[nc, X_CHAIN] = a
        nc += 1
        a = NI[a, N_PAR]
    for i in range(nc - 1, -1, -1):
        t = X[i, X_CHAIN]
        if HN[t, H_HOST]:
            continue
        if not host_write(T, t):
            return
        hi_inc_lock(T, t)
        HN[t, H_WT] = HN[t, H_ID]
        WA[HG[HG_NWA], 0], WA[HG[HG_NWA], 1] = t, 1
        HG[HG_NWA] += 1


@helper
def host_write(T, n):
    """``_write``: a device -> host copy of ``n``, host eviction for room; False if none."""
    NI, HN, HG = T[0], T[3], T[4]
    size = NI[n, N_KL]
    free = HG[HG_CAP] - HG[HG_USED]
    if free < size and hi_evict_host(T, size - free) < size - free:
        return False
    HG[HG_USED] += size
    HG[HG_WRITTEN] += size
    HN[n, H_HOST] = 1
    return True


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
def hi_evict(T, num_tokens):
    """Device eviction (``_evict_components``); the device tokens freed."""
    NI, TG, H, HN, HG, WA = T[0], T[1], T[2], T[3], T[4], T[5]
    size = leaves_heap(T, H, False)
    seq = size
    freed, last = 0, -1
    while True:
        if last >= 0 and device_leaf(T, NI[last, N_PAR]):
            size = heap_push(NI, TG, H, size, seq, NI[last, N_PAR])
            seq += 1
        last = victim = -1
        while freed < num_tokens and size > 0:
            n, size = heap_pop(H, size)
            if device_leaf(T, n):
                victim = n
                break
        if victim < 0:
            break
        last = victim
        if HN[victim, H_HOST]:
            freed += demote(T, victim)
        elif not HG[HG_WB]:
            freed += NI[victim, N_KL]
            TG[T_EVICT] -= NI[victim, N_KL]
            orphan(T, victim)
            remove(T, victim)
            delete_tombstones(T, NI[victim, N_PAR])
        elif host_write(T, victim):              # acked at once, no lock
            HN[victim, H_WT] = HN[victim, H_ID]
            WA[HG[HG_NWA], 0], WA[HG[HG_NWA], 1] = victim, 0
            HG[HG_NWA] += 1
            check_write_acks(T)
            freed += demote(T, victim)
        else:
            freed += drop_subtree(T, victim)
    return freed


@helper
def orphan(T, n):
    """``n``'s descendants leave the tree with it (unreachable, as in the model: their rows
    and host tokens are not reclaimed). None under the write policies' invariants (a host
    copy's ancestors have one); kept so that the rows scanned are the tree's."""
    NI, HN, X = T[0], T[3], T[8]
    top = 0
    c = NI[n, N_FC]
    while c >= 0:
        X[top, X_STACK] = c
        top += 1
        c = NI[c, N_NS]
    while top > 0:
        top -= 1
        cur = X[top, X_STACK]
        HN[cur, H_LIVE] = 0
        c = NI[cur, N_FC]
        while c >= 0:
            X[top, X_STACK] = c
            top += 1
            c = NI[c, N_NS]


@helper
def demote(T, n):
    T[3][n, H_DEV] = 0
    T[1][T_EVICT] -= T[0][n, N_KL]
    return T[0][n, N_KL]


@helper
def drop_subtree(T, n):
    NI, TG, HN, HG, X = T[0], T[1], T[3], T[4], T[8]
    if HN[n, H_LB] or NI[n, N_LOCK] or HN[n, H_HLOCK]:
        return 0
    nb, top = 0, 0
    c = NI[n, N_FC]
    while c >= 0:
        X[top, X_STACK] = c
        top += 1
        c = NI[c, N_NS]
    while top > 0:
        top -= 1
        cur = X[top, X_STACK]
        if HN[cur, H_WT] or HN[cur, H_LB] or NI[cur, N_LOCK] or HN[cur, H_HLOCK]:
            return 0
        X[nb, X_BELOW] = cur
        nb += 1
        c = NI[cur, N_FC]
        while c >= 0:
            X[top, X_STACK] = c
            top += 1
            c = NI[c, N_NS]
    for i in range(nb - 1, -1, -1):
        desc = X[i, X_BELOW]
        HG[HG_USED] -= NI[desc, N_KL]
        remove(T, desc)
    TG[T_EVICT] -= NI[n, N_KL]
    remove(T, n)
    delete_tombstones(T, NI[n, N_PAR])
    return NI[n, N_KL]


@helper
def delete_tombstones(T, n):
    NI, HN = T[0], T[3]
    while n != 0 and NI[n, N_FC] < 0 and not NI[n, N_LOCK] and not HN[n, H_HLOCK] \
            and not HN[n, H_DEV] and not HN[n, H_HOST]:
        remove(T, n)
        n = NI[n, N_PAR]


@helper
def hi_evict_host(T, num_tokens):
    """Host eviction (``drive_host_eviction``); the host tokens freed."""
    NI, TG, HN, HG, HH, X = T[0], T[1], T[3], T[4], T[7], T[8]
    freed = 0
    if HG[HG_WB]:
        count, n = 0, HG[HG_DHEAD]              # the registry's snapshot
        while n >= 0:
            X[count, X_SNAP] = n
            count += 1
            n = HN[n, H_DNEXT]
        for spare in (True, False):
            if freed >= num_tokens:
                break
            for i in range(count):
                if freed >= num_tokens:
                    break
                n = X[i, X_SNAP]
                if not HN[n, H_DEV] or not HN[n, H_HOST]:
                    X[i, X_SNAP] = -1 - n        # swept: leaves the registry after
                    continue
                if spare and device_leaf(T, n):
                    continue
                if HN[n, H_WT] or HN[n, H_LB] or HN[n, H_HLOCK]:
                    continue
                HN[n, H_HOST] = 0
                HG[HG_USED] -= NI[n, N_KL]
                freed += NI[n, N_KL]
                X[i, X_SNAP] = -1 - n
        for i in range(count):
            if X[i, X_SNAP] < 0:
                dup_pop(T, -1 - X[i, X_SNAP])
    if freed >= num_tokens:                      # the host leaves' heap goes unused
        return freed
    size = leaves_heap(T, HH, True)
    seq = size
    while freed < num_tokens and size > 0:
        n, size = heap_pop(HH, size)
        if not host_leaf(T, n):
            continue
        HN[n, H_HOST] = 0
        HG[HG_USED] -= NI[n, N_KL]
        freed += NI[n, N_KL]
        parent = NI[n, N_PAR]
        remove(T, n)
        delete_tombstones(T, parent)
        if host_leaf(T, parent):
            size = heap_push(NI, TG, HH, size, seq, parent)
            seq += 1
    return freed


# --------------------------------------------------------------------------- acks, load back

@helper
def check_write_acks(T):
    NI, HN, HG, WA = T[0], T[3], T[4], T[5]
    for i in range(HG[HG_NWA]):
        n, locked = WA[i, 0], WA[i, 1]
        ack = HN[n, H_ID]
        walk = n                                 # the node and its split-off uppers
        while walk > 0:
            if HN[walk, H_WT] == ack:
                HN[walk, H_WT] = 0
                dup_track(T, walk)
            walk = NI[walk, N_PAR]
        if locked:
            hi_dec_lock(T, n)
    HG[HG_NWA] = 0


@helper
def hi_check_events(T):
    """``check_hicache_events``: every write and load acked (transfers finish at once)."""
    NI, HN, HG, LA = T[0], T[3], T[4], T[6]
    check_write_acks(T)
    for i in range(HG[HG_NLA]):
        n, receipt = LA[i, 0], LA[i, 1]
        hi_dec_lock(T, n)
        release_host_lock(T, n, receipt)
        walk = n
        while walk != 0:
            if HG[HG_WB]:
                if HN[walk, H_LB] == HN[n, H_ID]:
                    HN[walk, H_LB] = 0
                    dup_track(T, walk)
            else:
                dup_track(T, walk)
            walk = NI[walk, N_PAR]
    HG[HG_NLA] = 0


@helper
def init_load_back(T, best, last, host_hit, available):
    """``init_load_back``: (tokens loaded, the request's last node, device tokens evicted
    for room), ``available`` device tokens free before."""
    NI, TG, HN, HG, LA = T[0], T[1], T[3], T[4], T[6]
    if HN[best, H_DEV] and host_hit == 0:
        return 0, last, 0
    receipt = host_lock(T, best)
    hi_inc_lock(T, best)
    n, pinned, walk = 0, False, best
    while not HN[walk, H_DEV]:
        if HN[walk, H_LB] != 0 and HN[walk, H_LB] != HN[best, H_ID]:
            pinned = True                        # pinned by another load back
        n += NI[walk, N_KL]
        walk = NI[walk, N_PAR]
    if pinned:
        n = 0
    if n < LOAD_BACK_THRESHOLD:
        hi_dec_lock(T, best)
        release_host_lock(T, best, receipt)
        return 0, last, 0
    evicted = 0
    if available < n:
        evicted = hi_evict(T, n - available)
        if available + evicted < n:
            hi_dec_lock(T, best)
            release_host_lock(T, best, receipt)
            return 0, last, evicted
    HG[HG_LOADED] += n
    hi_dec_lock(T, best)
    walk = best
    while not HN[walk, H_DEV]:
        if HG[HG_WB]:
            HN[walk, H_LB] = HN[best, H_ID]
        HN[walk, H_DEV] = 1
        if NI[walk, N_LOCK]:
            TG[T_PROT] += NI[walk, N_KL]
        else:
            TG[T_EVICT] += NI[walk, N_KL]
        walk = NI[walk, N_PAR]
    hi_inc_lock(T, best)
    LA[HG[HG_NLA], 0], LA[HG[HG_NLA], 1] = best, receipt
    HG[HG_NLA] += 1
    return n, best, evicted


@helper
def hi_load_back(T, best, last, host_hit, available):
    """``PrefillAdder.add_one_req``'s load back: the host node locked on both tiers around
    ``init_load_back``."""
    receipt = host_lock(T, best)
    hi_inc_lock(T, best)
    loaded, node, evicted = init_load_back(T, best, last, host_hit, available)
    hi_dec_lock(T, best)
    release_host_lock(T, best, receipt)
    return loaded, node, evicted


@helper
def hi_checkpoint(T, TOK, start, key_len, prompt, inserted, protected):
    """The unified checkpoint's tree part: (slots freed as duplicates, the key's node)."""
    _, node = hi_insert(T, TOK, start, key_len, 0, inserted, protected)
    freed = T[4][HG_FREED]
    if 0 < prompt < key_len:
        hi_insert(T, TOK, start, prompt, 1, prompt, prompt)
    return freed, node
