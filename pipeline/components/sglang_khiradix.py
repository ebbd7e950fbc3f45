"""SGLang 0.5.23's HiCache tree (``UnifiedRadixCache`` with ``init_hicache``) compiled: the
rules of ``sglang_hiradix.HiRadixTree`` (held equal to SGLang's own code by
tests/test_sglang_hiradix.py) over the node table of ``sglang_khinodes``, for the compiled
scheduler (``sglang_ksched`` calls it through ``sglang_ktree``): match with the host run,
insert (restoring evicted nodes, write-through backups), device eviction (demote, delete,
or write back first), host eviction (the write-back registry, then host leaves), the acks
``check_events`` takes, the load back. tests/test_sglang_khisched.py holds it equal to
``HiRadixTree`` in the scheduler loop.
"""

from __future__ import annotations

from pipeline.components.kjit import helper
from pipeline.components.sglang_khinodes import (
    H_DEV, H_HLOCK, H_HOST, H_ID, H_LB, H_WT, HG_CAP, HG_FREED, HG_LOADED, HG_NLA, HG_NWA,
    HG_THRESH, HG_USED, HG_WB, HG_WRITTEN, HG_DHEAD, LOAD_BACK_THRESHOLD, X_BACKUP, X_BELOW,
    X_CHAIN, X_SNAP, X_STACK, H_DNEXT, delete_tombstones, demote, device_leaf, dup_pop,
    dup_track, heap_pop, heap_push, hi_dec_lock, hi_inc_lock, hnew, host_leaf, host_lock,
    hsplit, leaves_heap, orphan, push_children, release_host_lock, remove)
from pipeline.components.sglang_kradix import append_child, find_child, match_len, tick
from pipeline.components.sglang_kradix_layout import (
    N_ACC, N_HIT, N_KL, N_KS, N_LOCK, N_PAR, N_PRIO, T_EVICT, T_PAGE, T_PROT)

__all__ = ["hi_match", "hi_insert", "hi_evict", "hi_evict_host", "hi_check_events",
           "hi_load_back", "hi_checkpoint"]


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
def drop_subtree(T, n):
    NI, TG, HN, HG, X = T[0], T[1], T[3], T[4], T[8]
    if HN[n, H_LB] or NI[n, N_LOCK] or HN[n, H_HLOCK]:
        return 0
    nb = 0
    top = push_children(NI, X, n, 0)
    while top > 0:
        top -= 1
        cur = X[top, X_STACK]
        if HN[cur, H_WT] or HN[cur, H_LB] or NI[cur, N_LOCK] or HN[cur, H_HLOCK]:
            return 0
        X[nb, X_BELOW] = cur
        nb += 1
        top = push_children(NI, X, cur, top)
    for i in range(nb - 1, -1, -1):
        desc = X[i, X_BELOW]
        HG[HG_USED] -= NI[desc, N_KL]
        remove(T, desc)
    TG[T_EVICT] -= NI[n, N_KL]
    remove(T, n)
    delete_tombstones(T, NI[n, N_PAR])
    return NI[n, N_KL]


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
