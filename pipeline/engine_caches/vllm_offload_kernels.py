"""vLLM 0.33.0's native CPU offloading manager (``CPUOffloadingManager`` with its ``lru`` and
``arc`` policies) compiled with numba: the state in arrays, one function per manager call.

The rules are vLLM's (docs/offloading.md cites each one); ``vllm_offload.NativeOffload`` is
the Python face. State ``M = (S, F, K, L, FREE, CKEY, HEAP)``:

* ``S`` scalars (``S_*`` below), ``F[0]`` ARC's ``target_t1_size`` (a float, as in vLLM);
* ``K[row]`` one row per key (``C_*`` columns): where it lives (absent, T1 — LRU's one
  set —, T2), ``ref_cnt`` (-1 while its store is in flight), chunk id, LRU rank, LRU
  evictable flag, ARC ghost list, store-threshold offer count, two call stamps;
* ``L[row]`` three doubly linked lists per key: residence (ARC's T1/T2), ghost (B1/B2) and
  the store-threshold tracker, with sentinel rows ``R_*`` (``L[s, prev]`` newest,
  ``L[s, next]`` oldest);
* ``FREE`` the stack of freed chunk ids, ``CKEY`` chunk id -> key row (-1: free);
* ``HEAP`` LRU's lazy min-heap of (rank, key row), as vLLM keeps it (an entry is current
  while its key is evictable with that rank).

An LRU rank ``(major, minor)`` is the integer ``major * 2**32 + minor`` (``minor`` is 0 or
``-position``, positions < 2**31). A request is ``(KEYS, FLAGS, RQ)``: its key rows in chunk
order (position of chunk ``i``: ``(i + 1) * tokens_per_chunk``), a flag byte per chunk
(seen, inserted, reused, store miss) and ``RQ = [rank, rank generation, state generation,
finished]``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

S_CHUNKS, S_ALLOC, S_FREE_TOP, S_EVICTABLE, S_PENDING, S_NEXT_RANK, S_GEN, S_ARC, \
    S_THRESHOLD, S_TRACK_MAX, S_TRACK_SIZE, S_HEAP, S_STAMP, S_SKIPPED, S_TPC, S_T1, S_T2, \
    S_B1, S_B2 = range(19)
S_SIZE = 19
C_WHERE, C_REF, C_CHUNK, C_RANK, C_EVICT, C_GHOST, C_COUNT, C_PROT, C_SEL = range(9)
C_SIZE = 9
ABSENT, T1, T2 = 0, 1, 2
R_T1, R_T2, R_B1, R_B2, R_TRACK = range(5)
FIRST_ROW = 5
RES, GHOST, TRACK = 0, 2, 4                     # column pairs (prev, next) of L
SEEN, INSERTED, REUSED, MISSED = 1, 2, 4, 8
RQ_RANK, RQ_RANK_GEN, RQ_GEN, RQ_DONE = range(4)
MISS, HIT, HIT_PENDING = 0, 1, 2
NO_RANK = -(1 << 62)
SHIFT = 1 << 32


# --------------------------------------------------------------------------- lists, heap

@njit(cache=True)
def _unlink(L, row, c):
    p, q = L[row, c], L[row, c + 1]
    L[p, c + 1] = q
    L[q, c] = p


@njit(cache=True)
def _append(L, row, s, c):
    last = L[s, c]
    L[last, c + 1] = row
    L[row, c] = last
    L[row, c + 1] = s
    L[s, c] = row


@njit(cache=True)
def _less(a_rank, a_key, b_rank, b_key):
    return a_rank < b_rank or (a_rank == b_rank and a_key < b_key)


@njit(cache=True)
def _heap_push(S, HEAP, rank, key):
    i = S[S_HEAP]
    S[S_HEAP] += 1
    while i > 0:
        parent = (i - 1) // 2
        if not _less(rank, key, HEAP[parent, 0], HEAP[parent, 1]):
            break
        HEAP[i, 0], HEAP[i, 1] = HEAP[parent, 0], HEAP[parent, 1]
        i = parent
    HEAP[i, 0], HEAP[i, 1] = rank, key


@njit(cache=True)
def _heap_pop(S, HEAP):
    rank, key = HEAP[0, 0], HEAP[0, 1]
    S[S_HEAP] -= 1
    n = S[S_HEAP]
    r, k = HEAP[n, 0], HEAP[n, 1]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and _less(HEAP[child + 1, 0], HEAP[child + 1, 1],
                                   HEAP[child, 0], HEAP[child, 1]):
            child += 1
        if not _less(HEAP[child, 0], HEAP[child, 1], r, k):
            break
        HEAP[i, 0], HEAP[i, 1] = HEAP[child, 0], HEAP[child, 1]
        i = child
    if n > 0:
        HEAP[i, 0], HEAP[i, 1] = r, k
    return rank, key


@njit(cache=True)
def _push_evictable(S, K, CKEY, HEAP, key):
    """LRU's ``_push_evictable``; a full heap is first rebuilt from the evictable keys
    (vLLM compacts it by its own rule: the current entries, so the order, are the same)."""
    if S[S_HEAP] == HEAP.shape[0]:
        S[S_HEAP] = 0
        for c in range(S[S_ALLOC]):
            row = CKEY[c]
            if row >= 0 and K[row, C_EVICT] == 1:
                _heap_push(S, HEAP, K[row, C_RANK], row)
    _heap_push(S, HEAP, K[key, C_RANK], key)


# --------------------------------------------------------------------------- policies

@njit(cache=True)
def _request_rank(S, RQ):
    """LRU's ``_get_request_rank``: a request's rank, assigned on first use."""
    if RQ[RQ_RANK_GEN] != S[S_GEN] or RQ[RQ_RANK] == 0:
        S[S_NEXT_RANK] += 1
        RQ[RQ_RANK], RQ[RQ_RANK_GEN] = S[S_NEXT_RANK], S[S_GEN]
    return RQ[RQ_RANK]


@njit(cache=True)
def _lru_renew(S, K, CKEY, HEAP, key):
    """LRU's ``_assign_new_rank`` + push: a fresh (next_rank, 0) for a resident key."""
    if K[key, C_WHERE] == ABSENT:
        return
    S[S_NEXT_RANK] += 1
    K[key, C_RANK] = S[S_NEXT_RANK] * SHIFT
    if K[key, C_EVICT] == 1:
        _push_evictable(S, K, CKEY, HEAP, key)


@njit(cache=True)
def _arc_ghost_hit(S, F, K, L, key):
    """ARC's ``_adapt_to_ghost_hit``."""
    ghost = K[key, C_GHOST]
    if ghost == ABSENT:
        return
    b1, b2 = float(S[S_B1]), float(S[S_B2])
    if ghost == T1:
        F[0] = min(F[0] + max(1.0, b2 / b1), float(S[S_CHUNKS]))
        _unlink(L, key, GHOST)
        _append(L, key, R_B1, GHOST)
    else:
        F[0] = max(F[0] - max(1.0, b1 / b2), 0.0)
        _unlink(L, key, GHOST)
        _append(L, key, R_B2, GHOST)


@njit(cache=True)
def _arc_move(S, K, L, key, where):
    """Move a resident key to the MRU end of T1 (``where`` 1) or T2 (2)."""
    S[S_T1 + K[key, C_WHERE] - 1] -= 1
    _unlink(L, key, RES)
    K[key, C_WHERE] = where
    S[S_T1 + where - 1] += 1
    _append(L, key, R_T1 + where - 1, RES)


@njit(cache=True)
def touch(M, keys):
    """``CPUOffloadingManager.touch``: the policy's touch, keys in reverse order."""
    S, F, K, L, FREE, CKEY, HEAP = M
    for j in range(len(keys) - 1, -1, -1):
        key = keys[j]
        if S[S_ARC] == 0:
            _lru_renew(S, K, CKEY, HEAP, key)
        elif K[key, C_WHERE] == T1:
            _arc_move(S, K, L, key, T1 if K[key, C_REF] < 0 else T2)
        elif K[key, C_WHERE] == T2:
            _arc_move(S, K, L, key, T2)
        else:
            _arc_ghost_hit(S, F, K, L, key)


@njit(cache=True)
def _lru_evict(S, K, CKEY, HEAP, n, out):
    """LRU's ``evict``: the n smallest current heap entries not protected, or -1 (no
    change)."""
    stamp = S[S_STAMP]
    selected = np.empty((n, 2), np.int64)
    deferred = np.empty((S[S_HEAP], 2), np.int64)
    count, waiting = 0, 0
    while S[S_HEAP] > 0 and count < n:
        rank, key = _heap_pop(S, HEAP)
        if K[key, C_WHERE] == ABSENT or K[key, C_EVICT] == 0 or K[key, C_RANK] != rank:
            continue
        if K[key, C_SEL] == stamp:
            continue
        if K[key, C_PROT] == stamp:
            deferred[waiting, 0], deferred[waiting, 1] = rank, key
            waiting += 1
            continue
        selected[count, 0], selected[count, 1] = rank, key
        K[key, C_SEL] = stamp
        count += 1
    for j in range(waiting):
        _heap_push(S, HEAP, deferred[j, 0], deferred[j, 1])
    if count < n:
        for j in range(count):
            _heap_push(S, HEAP, selected[j, 0], selected[j, 1])
        return -1
    for j in range(n):
        key = selected[j, 1]
        K[key, C_WHERE], K[key, C_EVICT], K[key, C_RANK] = ABSENT, 0, NO_RANK
        out[j] = key
    return n


@njit(cache=True)
def _arc_next(S, K, L, cursor, sentinel):
    """ARC's ``next_candidate``: the next idle, unprotected key from ``cursor``."""
    while cursor != sentinel:
        key = cursor
        cursor = L[cursor, RES + 1]
        if K[key, C_REF] == 0 and K[key, C_PROT] != S[S_STAMP]:
            return key, cursor
    return -1, cursor


@njit(cache=True)
def _arc_evict(S, F, K, L, n, out):
    """ARC's ``evict``: from T1 while it holds at least int(target) (virtually), else T2,
    else T1; all n or -1 (no change); then the ghost lists are trimmed to capacity."""
    virtual_t1 = S[S_T1]
    c1, c2 = L[R_T1, RES + 1], L[R_T2, RES + 1]
    source = np.empty(n, np.int64)
    for j in range(n):
        key = -1
        if virtual_t1 >= int(F[0]):
            key, c1 = _arc_next(S, K, L, c1, R_T1)
            if key >= 0:
                source[j] = T1
                virtual_t1 -= 1
        if key < 0:
            key, c2 = _arc_next(S, K, L, c2, R_T2)
            source[j] = T2
        if key < 0:
            key, c1 = _arc_next(S, K, L, c1, R_T1)
            if key < 0:
                return -1
            source[j] = T1
            virtual_t1 -= 1
        out[j] = key
    for j in range(n):
        key = out[j]
        S[S_T1 + source[j] - 1] -= 1
        _unlink(L, key, RES)
        K[key, C_WHERE] = ABSENT
        K[key, C_GHOST] = source[j]
        S[S_B1 + source[j] - 1] += 1
        _append(L, key, R_B1 + source[j] - 1, GHOST)
    for g in range(2):
        while S[S_B1 + g] > S[S_CHUNKS]:
            oldest = L[R_B1 + g, GHOST + 1]
            _unlink(L, oldest, GHOST)
            K[oldest, C_GHOST] = ABSENT
            S[S_B1 + g] -= 1
    return n


# --------------------------------------------------------------------------- the manager

@njit(cache=True)
def lookup(M, key):
    """``lookup``: MISS (0), HIT (1: stored and ready), HIT_PENDING (2: store in flight)."""
    K = M[2]
    if K[key, C_WHERE] == ABSENT:
        return MISS
    return HIT if K[key, C_REF] >= 0 else HIT_PENDING


@njit(cache=True)
def _request_state(S, FLAGS, RQ):
    """``_get_request_cache_access``: a request's flags, cleared after a cache reset."""
    if RQ[RQ_GEN] != S[S_GEN]:
        FLAGS[:] = 0
        RQ[RQ_GEN], RQ[RQ_DONE] = S[S_GEN], 0


@njit(cache=True)
def _record(M, KEYS, FLAGS, RQ, chunks, recorded, reused):
    """``_record_request_cache_access``: chunks first seen (in ``chunks`` order, where
    ``recorded``) go to the policy's ``on_request_access`` (LRU: the request's rank, tails
    before heads); ``reused`` ones not inserted by this request are marked reused."""
    S, F, K, L, FREE, CKEY, HEAP = M
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
            _request_rank(S, RQ)
            first = False
        key = KEYS[i]
        if K[key, C_WHERE] == ABSENT:
            continue
        rank = RQ[RQ_RANK] * SHIFT - (i + 1) * S[S_TPC]
        if K[key, C_RANK] >= rank:
            continue
        K[key, C_RANK] = rank
        if K[key, C_EVICT] == 1:
            _push_evictable(S, K, CKEY, HEAP, key)
    for j in range(len(chunks)):
        i = chunks[j]
        if reused[j] and not FLAGS[i] & INSERTED:
            FLAGS[i] |= REUSED


@njit(cache=True)
def prepare_load(M, KEYS, FLAGS, RQ, chunks):
    """``prepare_load``: pin each chunk (ref_cnt + 1; an idle one stops being evictable)
    and record the request's reuse."""
    S, F, K, L, FREE, CKEY, HEAP = M
    for j in range(len(chunks)):
        key = KEYS[chunks[j]]
        assert K[key, C_WHERE] != ABSENT and K[key, C_REF] >= 0
        if K[key, C_REF] == 0:
            K[key, C_EVICT] = 0
            S[S_EVICTABLE] -= 1
        K[key, C_REF] += 1
    every = np.ones(len(chunks), np.bool_)
    _record(M, KEYS, FLAGS, RQ, chunks, every, every)


@njit(cache=True)
def complete_load(M, keys):
    """``complete_load``: unpin; a chunk back at ref_cnt 0 is evictable again."""
    S, F, K, L, FREE, CKEY, HEAP = M
    for key in keys:
        assert K[key, C_WHERE] != ABSENT and K[key, C_REF] > 0
        K[key, C_REF] -= 1
        if K[key, C_REF] == 0:
            S[S_EVICTABLE] += 1
            if S[S_ARC] == 0:
                K[key, C_EVICT] = 1
                _push_evictable(S, K, CKEY, HEAP, key)


@njit(cache=True)
def _count_offers(M, keys):
    """``_record_accesses``: the store-threshold tracker, an LRU table of offer counts of
    at most ``max_tracker_size`` keys (keys offered in this call are never dropped)."""
    S, F, K, L, FREE, CKEY, HEAP = M
    tracked = 0
    for key in keys:
        if K[key, C_COUNT] > 0:
            _unlink(L, key, TRACK)
            _append(L, key, R_TRACK, TRACK)
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
            _unlink(L, oldest, TRACK)
            K[oldest, C_COUNT] = 0
            S[S_TRACK_SIZE] -= 1
            unprotected -= 1
        K[key, C_COUNT] = 1
        _append(L, key, R_TRACK, TRACK)
        S[S_TRACK_SIZE] += 1


@njit(cache=True)
def prepare_store(M, KEYS, FLAGS, RQ, chunks, stored, evicted):
    """``prepare_store`` of a request's ``chunks``: fills ``stored`` (chunk indices) and
    ``evicted`` (key rows); returns (stored, evicted) counts, or (-1, -1) for vLLM's None
    (no room: nothing allocated, but the offers, misses and accesses stay recorded)."""
    S, F, K, L, FREE, CKEY, HEAP = M
    n = len(chunks)
    keys = np.empty(n, np.int64)
    for j in range(n):
        keys[j] = KEYS[chunks[j]]
    if S[S_THRESHOLD] >= 2:
        _count_offers(M, keys)
    candidate = np.zeros(n, np.bool_)
    recorded = np.zeros(n, np.bool_)
    ready = np.zeros(n, np.bool_)
    count = 0
    for j in range(n):
        key = keys[j]
        if K[key, C_WHERE] == ABSENT:
            if S[S_THRESHOLD] < 2 or K[key, C_COUNT] >= S[S_THRESHOLD]:
                candidate[j] = recorded[j] = True
                count += 1
            else:
                S[S_SKIPPED] += 1
        elif K[key, C_REF] >= 0:
            ready[j] = recorded[j] = True
    _request_state(S, FLAGS, RQ)
    if S[S_ARC] == 1:                                  # on_store_miss (LRU's is a no-op)
        for j in range(n - 1, -1, -1):
            if candidate[j] and not FLAGS[chunks[j]] & MISSED:
                _arc_ghost_hit(S, F, K, L, keys[j])
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
            victims = _arc_evict(S, F, K, L, need, evicted)
        else:
            victims = _lru_evict(S, K, CKEY, HEAP, need, evicted)
        if victims < 0:
            return -1, -1
        S[S_EVICTABLE] -= victims
        for j in range(victims):
            chunk = K[evicted[j], C_CHUNK]
            CKEY[chunk] = -1
            FREE[S[S_FREE_TOP]] = chunk
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
        CKEY[chunk] = key
        K[key, C_CHUNK], K[key, C_REF] = chunk, -1
        if S[S_ARC] == 1:                              # insert into T1, out of the ghosts
            K[key, C_WHERE] = T1
            S[S_T1] += 1
            _append(L, key, R_T1, RES)
            if K[key, C_GHOST] != ABSENT:
                S[S_B1 + K[key, C_GHOST] - 1] -= 1
                _unlink(L, key, GHOST)
                K[key, C_GHOST] = ABSENT
        else:                                          # insert: (request rank, -position)
            K[key, C_WHERE], K[key, C_EVICT] = T1, 0
            K[key, C_RANK] = _request_rank(S, RQ) * SHIFT - (chunks[j] + 1) * S[S_TPC]
        FLAGS[chunks[j]] |= INSERTED
        stored[done] = chunks[j]
        done += 1
    S[S_PENDING] += count
    return count, victims


@njit(cache=True)
def complete_store(M, keys, success):
    """``complete_store``: chunks still in flight become ready and evictable, or (failed)
    leave the cache and free their chunk."""
    S, F, K, L, FREE, CKEY, HEAP = M
    for key in keys:
        if K[key, C_WHERE] == ABSENT or K[key, C_REF] >= 0:
            continue
        S[S_PENDING] -= 1
        if success:
            K[key, C_REF] = 0
            S[S_EVICTABLE] += 1
            if S[S_ARC] == 0:
                K[key, C_EVICT] = 1
                _push_evictable(S, K, CKEY, HEAP, key)
        else:
            if S[S_ARC] == 1:
                S[S_T1 + K[key, C_WHERE] - 1] -= 1
                _unlink(L, key, RES)
            K[key, C_WHERE], K[key, C_EVICT], K[key, C_RANK] = ABSENT, 0, NO_RANK
            chunk = K[key, C_CHUNK]
            CKEY[chunk] = -1
            FREE[S[S_FREE_TOP]] = chunk
            S[S_FREE_TOP] += 1


@njit(cache=True)
def request_finished(M, KEYS, FLAGS, RQ):
    """``on_request_finished``: the request's accesses, tail to head. LRU: each resident
    key a fresh rank; ARC: a chunk only inserted keeps its list (moved to its MRU end), a
    reused one moves to T2's MRU end."""
    S, F, K, L, FREE, CKEY, HEAP = M
    if RQ[RQ_GEN] != S[S_GEN] or RQ[RQ_DONE] == 1:
        return
    RQ[RQ_DONE] = 1
    for i in range(len(KEYS) - 1, -1, -1):
        flags = FLAGS[i]
        key = KEYS[i]
        if not flags & SEEN:
            continue
        if S[S_ARC] == 0:
            _lru_renew(S, K, CKEY, HEAP, key)
        elif flags & INSERTED and not flags & REUSED:
            if K[key, C_WHERE] != ABSENT:
                _arc_move(S, K, L, key, K[key, C_WHERE])
        elif flags & REUSED and K[key, C_WHERE] != ABSENT:
            _arc_move(S, K, L, key, T2)
