"""vLLM 0.33.0's ``CPUOffloadingManager`` calls compiled with numba, over the state and
policies of ``vllm_offload_policies``: ``lookup``, ``prepare_load``/``complete_load``,
``prepare_store``/``complete_store`` (with the store threshold's offer counts) and
``request_finished``. ``vllm_offload.NativeOffload`` is their Python face; docs/offloading.md
cites vLLM's lines for each rule.
"""

from __future__ import annotations

import numpy as np

from pipeline.components.vllm_offload_policies import (
    ABSENT, C_CHUNK, C_COUNT, C_EVICT, C_GHOST, C_PROT, C_RANK, C_REF, C_WHERE, GHOST, HIT,
    HIT_PENDING, INSERTED, MISS, MISSED, NO_RANK, RES, REUSED, RQ_DONE, RQ_GEN, RQ_RANK, R_T1,
    R_TRACK, S_ALLOC, S_ARC, S_B1, S_CHUNKS, S_EVICTABLE, S_FREE_TOP, S_GEN, S_PENDING,
    S_SKIPPED, S_STAMP, S_T1, S_THRESHOLD, S_TPC, S_TRACK_MAX, S_TRACK_SIZE, SEEN, SHIFT, T1,
    T2, TRACK, W_CANDIDATE, W_KEY, W_READY, W_RECORDED, append, arc_evict, arc_ghost_hit,
    arc_move, compiled, lru_drop_anchor, lru_evict, lru_group, lru_place, lru_renew,
    lru_rerank, request_rank, touch, unlink)

__all__ = ["lookup", "prepare_load", "complete_load", "prepare_store", "complete_store",
           "request_finished", "touch", "chunk_index", "first_seen"]


# --------------------------------------------------------------------------- key rows

@compiled
def _intern(key, table, bits, unique, count):
    """``key``'s index among the distinct keys seen so far (``unique[:count]``, first-seen
    order; appended when new) via ``table``, an open-addressed hash (2**bits slots) of
    indices + 1. Returns (index, count)."""
    mask = table.size - 1
    h = (np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(64 - bits)
    slot = np.int64(h) & mask
    while True:
        at = table[slot]
        if at == 0:
            unique[count] = key
            table[slot] = count + 1
            return count, count + 1
        if unique[at - 1] == key:
            return at - 1, count
        slot = (slot + 1) & mask


@compiled
def _bits(table):
    bits = 0
    while (1 << bits) < table.size:
        bits += 1
    return bits


@compiled
def first_seen(keys, table, unique, index):
    """The distinct ``keys`` in order of first appearance into ``unique``, each key's
    position there into ``index``; ``table`` (zeros, a power of two of at least twice
    ``keys``' size). Returns how many."""
    bits = _bits(table)
    count = 0
    for i in range(keys.size):
        index[i], count = _intern(keys[i], table, bits, unique, count)
    return count


@compiled
def chunk_index(keys, koff, counts, per, table, unique, out):
    """``first_seen`` of each request's chunk keys in order (chunk j keyed by its last
    block's key: block ``koff + (j + 1) * per - 1``), read in place: each chunk's index
    into ``out``. Returns how many are distinct."""
    bits = _bits(table)
    count = 0
    t = 0
    for r in range(koff.size):
        for j in range(counts[r]):
            out[t], count = _intern(keys[koff[r] + (j + 1) * per - 1], table, bits, unique,
                                    count)
            t += 1
    return count


# --------------------------------------------------------------------------- the manager

@compiled
def lookup(M, key):
    """``lookup``: MISS (0), HIT (1: stored and ready), HIT_PENDING (2: store in flight)."""
    K = M[2]
    if K[key, C_WHERE] == ABSENT:
        return MISS
    return HIT if K[key, C_REF] >= 0 else HIT_PENDING


@compiled
def _request_state(S, FLAGS, RQ):
    """``_get_request_cache_access``: a request's flags, cleared after a cache reset."""
    if RQ[RQ_GEN] != S[S_GEN]:
        FLAGS[:] = 0
        RQ[RQ_GEN], RQ[RQ_DONE] = S[S_GEN], 0


@compiled
def _record(M, KEYS, FLAGS, RQ, chunks, recorded, reused):
    """``_record_request_cache_access``: chunks first seen (in ``chunks`` order, where
    ``recorded``) go to the policy's ``on_request_access`` (LRU: the request's rank, tails
    before heads); ``reused`` ones not inserted by this request are marked reused."""
    S, F, K, L, FREE, W = M
    _request_state(S, FLAGS, RQ)
    first = True
    for j in range(len(chunks)):
        i = chunks[j]
        if not recorded[j] or FLAGS[i] & SEEN:
            continue
        FLAGS[i] |= SEEN
        if S[S_ARC] == 1:
            continue
        if first:
            request_rank(S, K, L, RQ)
            first = False
        key = KEYS[i]
        if K[key, C_WHERE] == ABSENT:
            continue
        rank = RQ[RQ_RANK] * SHIFT - (i + 1) * S[S_TPC]
        if K[key, C_RANK] < rank:
            lru_rerank(K, L, RQ, key, rank)
    for j in range(len(chunks)):
        i = chunks[j]
        if reused[j] and not FLAGS[i] & INSERTED:
            FLAGS[i] |= REUSED


@compiled
def prepare_load(M, KEYS, FLAGS, RQ, chunks):
    """``prepare_load``: pin each chunk (ref_cnt + 1; an idle one stops being evictable)
    and record the request's reuse."""
    S, F, K, L, FREE, W = M
    for j in range(len(chunks)):
        key = KEYS[chunks[j]]
        assert K[key, C_WHERE] != ABSENT and K[key, C_REF] >= 0
        if K[key, C_REF] == 0:
            K[key, C_EVICT] = 0
            S[S_EVICTABLE] -= 1
        K[key, C_REF] += 1
    every = W[:len(chunks), W_RECORDED]
    every[:] = 1
    _record(M, KEYS, FLAGS, RQ, chunks, every, every)


@compiled
def complete_load(M, keys):
    """``complete_load``: unpin; a chunk back at ref_cnt 0 is evictable again."""
    S, F, K, L, FREE, W = M
    for key in keys:
        assert K[key, C_WHERE] != ABSENT and K[key, C_REF] > 0
        K[key, C_REF] -= 1
        if K[key, C_REF] == 0:
            S[S_EVICTABLE] += 1
            if S[S_ARC] == 0:
                K[key, C_EVICT] = 1


@compiled
def _count_offers(M, keys):
    """``_record_accesses``: the store-threshold tracker, an LRU table of offer counts of
    at most ``max_tracker_size`` keys (keys offered in this call are never dropped)."""
    S, F, K, L, FREE, W = M
    tracked = 0
    for key in keys:
        if K[key, C_COUNT] > 0:
            unlink(L, key, TRACK)
            append(L, key, R_TRACK, TRACK)
            K[key, C_COUNT] += 1
            tracked += 1
    unprotected = S[S_TRACK_SIZE] - tracked
    for key in keys:
        if K[key, C_COUNT] > 0:
            continue
        if S[S_TRACK_SIZE] >= S[S_TRACK_MAX]:
            if unprotected == 0:
                continue
            oldest = L[R_TRACK, TRACK + 1]
            unlink(L, oldest, TRACK)
            K[oldest, C_COUNT] = 0
            S[S_TRACK_SIZE] -= 1
            unprotected -= 1
        K[key, C_COUNT] = 1
        append(L, key, R_TRACK, TRACK)
        S[S_TRACK_SIZE] += 1


@compiled
def prepare_store(M, KEYS, FLAGS, RQ, chunks, stored, evicted):
    """``prepare_store`` of a request's ``chunks``: fills ``stored`` (chunk indices) and
    ``evicted`` (key rows); returns (stored, evicted) counts, or (-1, -1) for vLLM's None
    (no room: nothing allocated, but the offers, misses and accesses stay recorded)."""
    S, F, K, L, FREE, W = M
    n = len(chunks)
    keys, candidate = W[:n, W_KEY], W[:n, W_CANDIDATE]
    recorded, ready = W[:n, W_RECORDED], W[:n, W_READY]
    for j in range(n):
        keys[j] = KEYS[chunks[j]]
    if S[S_THRESHOLD] >= 2:
        _count_offers(M, keys)
    candidate[:] = 0
    recorded[:] = 0
    ready[:] = 0
    count = 0
    for j in range(n):
        key = keys[j]
        if K[key, C_WHERE] == ABSENT:
            if S[S_THRESHOLD] < 2 or K[key, C_COUNT] >= S[S_THRESHOLD]:
                candidate[j] = recorded[j] = 1
                count += 1
            else:
                S[S_SKIPPED] += 1
        elif K[key, C_REF] >= 0:
            ready[j] = recorded[j] = 1
    _request_state(S, FLAGS, RQ)
    if S[S_ARC] == 1:                                  # on_store_miss (LRU's is a no-op)
        for j in range(n - 1, -1, -1):
            if candidate[j] and not FLAGS[chunks[j]] & MISSED:
                arc_ghost_hit(S, F, K, L, keys[j])
    for j in range(n):
        if candidate[j]:
            FLAGS[chunks[j]] |= MISSED
    _record(M, KEYS, FLAGS, RQ, chunks, recorded, ready)
    if count == 0:
        return 0, 0
    need = count - (S[S_FREE_TOP] + S[S_CHUNKS] - S[S_ALLOC])
    victims = 0
    if need > 0:
        if need > S[S_EVICTABLE]:
            return -1, -1
        S[S_STAMP] += 1
        for key in keys:
            K[key, C_PROT] = S[S_STAMP]
        if S[S_ARC] == 1:
            victims = arc_evict(S, F, K, L, W, need, evicted)
        else:
            victims = lru_evict(S, K, L, need, evicted)
        if victims < 0:
            return -1, -1
        S[S_EVICTABLE] -= victims
        for j in range(victims):
            FREE[S[S_FREE_TOP]] = K[evicted[j], C_CHUNK]
            S[S_FREE_TOP] += 1
    done = 0
    for j in range(n):
        if not candidate[j]:
            continue
        key = keys[j]
        if S[S_ALLOC] < S[S_CHUNKS]:
            chunk = S[S_ALLOC]
            S[S_ALLOC] += 1
        else:
            S[S_FREE_TOP] -= 1
            chunk = FREE[S[S_FREE_TOP]]
        K[key, C_CHUNK], K[key, C_REF] = chunk, -1
        if S[S_ARC] == 1:                              # insert into T1, out of the ghosts
            K[key, C_WHERE] = T1
            S[S_T1] += 1
            append(L, key, R_T1, RES)
            if K[key, C_GHOST] != ABSENT:
                S[S_B1 + K[key, C_GHOST] - 1] -= 1
                unlink(L, key, GHOST)
                K[key, C_GHOST] = ABSENT
        else:                                          # insert: (request rank, -position)
            K[key, C_WHERE], K[key, C_EVICT] = T1, 0
            K[key, C_RANK] = request_rank(S, K, L, RQ) * SHIFT - (chunks[j] + 1) * S[S_TPC]
            lru_place(K, L, key, lru_group(K, RQ))
        FLAGS[chunks[j]] |= INSERTED
        stored[done] = chunks[j]
        done += 1
    S[S_PENDING] += count
    return count, victims


@compiled
def complete_store(M, keys, success):
    """``complete_store``: chunks still in flight become ready and evictable, or (failed)
    leave the cache and free their chunk."""
    S, F, K, L, FREE, W = M
    for key in keys:
        if K[key, C_WHERE] == ABSENT or K[key, C_REF] >= 0:
            continue
        S[S_PENDING] -= 1
        if success:
            K[key, C_REF] = 0
            S[S_EVICTABLE] += 1
            if S[S_ARC] == 0:
                K[key, C_EVICT] = 1
        else:
            if S[S_ARC] == 1:
                S[S_T1 + K[key, C_WHERE] - 1] -= 1
            unlink(L, key, RES)                        # (LRU's list or ARC's T1/T2)
            K[key, C_WHERE], K[key, C_EVICT], K[key, C_RANK] = ABSENT, 0, NO_RANK
            FREE[S[S_FREE_TOP]] = K[key, C_CHUNK]
            S[S_FREE_TOP] += 1


@compiled
def request_finished(M, KEYS, FLAGS, RQ):
    """``on_request_finished``: the request's accesses, tail to head. LRU: each resident
    key a fresh rank; ARC: a chunk only inserted keeps its list (moved to its MRU end), a
    reused one moves to T2's MRU end."""
    S, F, K, L, FREE, W = M
    if RQ[RQ_GEN] != S[S_GEN] or RQ[RQ_DONE] == 1:
        return
    RQ[RQ_DONE] = 1
    for i in range(len(KEYS) - 1, -1, -1):
        flags = FLAGS[i]
        key = KEYS[i]
        if not flags & SEEN:
            continue
        if S[S_ARC] == 0:
            lru_renew(S, K, L, key)
        elif flags & INSERTED and not flags & REUSED:
            if K[key, C_WHERE] != ABSENT:
                arc_move(S, K, L, key, K[key, C_WHERE])
        elif flags & REUSED and K[key, C_WHERE] != ABSENT:
            arc_move(S, K, L, key, T2)
    if S[S_ARC] == 0:                                  # its group is empty now
        lru_drop_anchor(K, L, RQ)
