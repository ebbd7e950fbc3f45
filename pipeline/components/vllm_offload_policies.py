"""The state of vLLM 0.33.0's native CPU offloading manager in arrays, and its two eviction
policies compiled with numba: ``lru`` (a request's rank, a lazy min-heap) and ``arc`` (T1,
T2 and the ghost lists B1, B2), plus ``touch``. ``vllm_offload_kernels`` holds the manager's
calls; docs/offloading.md cites vLLM's lines for each rule. (numba's on-disk cache of those
calls does not notice an edit here: delete ``__pycache__/vllm_offload_kernels*.nb?`` after one.)

State ``M = (S, F, K, L, FREE, CKEY, HEAP, W)``:

* ``S`` scalars (``S_*`` below), ``F[0]`` ARC's ``target_t1_size`` (a float, as in vLLM);
* ``K[row]`` one row per key (``C_*`` columns): where it lives (absent, T1 — LRU's one
  set —, T2), ``ref_cnt`` (-1 while its store is in flight), chunk id, LRU rank, LRU
  evictable flag, ARC ghost list, store-threshold offer count, two call stamps;
* ``L[row]`` three doubly linked lists per key: residence (ARC's T1/T2), ghost (B1/B2) and
  the store-threshold tracker, with sentinel rows ``R_*`` (``L[s, prev]`` newest,
  ``L[s, next]`` oldest);
* ``FREE`` the stack of freed chunk ids, ``CKEY`` chunk id -> key row (-1: free);
* ``HEAP`` LRU's lazy min-heap of (rank, key row), as vLLM keeps it (an entry is current
  while its key is evictable with that rank);
* ``W`` scratch rows (``W_*`` columns) for a call's temporaries: no kernel allocates
  (they compile without numba's reference counting, as the engine's kernels do).

An LRU rank ``(major, minor)`` is the integer ``major * 2**32 + minor`` (``minor`` is 0 or
``-position``, positions < 2**31). A request is ``(KEYS, FLAGS, RQ)``: its key rows in chunk
order (position of chunk ``i``: ``(i + 1) * tokens_per_chunk``), a flag byte per chunk
(seen, inserted, reused, store miss) and ``RQ = [rank, rank generation, state generation,
finished]``.
"""

from __future__ import annotations

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
W_KEY, W_CANDIDATE, W_RECORDED, W_READY, W_A, W_B, W_C, W_D = range(8)
W_SIZE = 8

#: Every kernel allocates nothing (no reference counting: numba refuses an allocation), so
#: the engine's own ``_nrt=False`` kernels can call them; temporaries live in ``W``.
compiled = njit(cache=True, error_model="numpy", _nrt=False)


# --------------------------------------------------------------------------- lists, heap

@compiled
def unlink(L, row, c):
    p, q = L[row, c], L[row, c + 1]
    L[p, c + 1] = q
    L[q, c] = p


@compiled
def append(L, row, s, c):
    last = L[s, c]
    L[last, c + 1] = row
    L[row, c] = last
    L[row, c + 1] = s
    L[s, c] = row


@compiled
def _less(a_rank, a_key, b_rank, b_key):
    return a_rank < b_rank or (a_rank == b_rank and a_key < b_key)


@compiled
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


@compiled
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


@compiled
def push_evictable(S, K, CKEY, HEAP, key):
    """LRU's ``push_evictable``; a full heap is first rebuilt from the evictable keys
    (vLLM compacts it by its own rule: the current entries, so the order, are the same)."""
    if S[S_HEAP] == HEAP.shape[0]:
        S[S_HEAP] = 0
        for c in range(S[S_ALLOC]):
            row = CKEY[c]
            if row >= 0 and K[row, C_EVICT] == 1:
                _heap_push(S, HEAP, K[row, C_RANK], row)
    _heap_push(S, HEAP, K[key, C_RANK], key)


# --------------------------------------------------------------------------- policies

@compiled
def request_rank(S, RQ):
    """LRU's ``_get_request_rank``: a request's rank, assigned on first use."""
    if RQ[RQ_RANK_GEN] != S[S_GEN] or RQ[RQ_RANK] == 0:
        S[S_NEXT_RANK] += 1
        RQ[RQ_RANK], RQ[RQ_RANK_GEN] = S[S_NEXT_RANK], S[S_GEN]
    return RQ[RQ_RANK]


@compiled
def lru_renew(S, K, CKEY, HEAP, key):
    """LRU's ``_assign_new_rank`` + push: a fresh (next_rank, 0) for a resident key."""
    if K[key, C_WHERE] == ABSENT:
        return
    S[S_NEXT_RANK] += 1
    K[key, C_RANK] = S[S_NEXT_RANK] * SHIFT
    if K[key, C_EVICT] == 1:
        push_evictable(S, K, CKEY, HEAP, key)


@compiled
def arc_ghost_hit(S, F, K, L, key):
    """ARC's ``_adapt_to_ghost_hit``."""
    ghost = K[key, C_GHOST]
    if ghost == ABSENT:
        return
    b1, b2 = float(S[S_B1]), float(S[S_B2])
    if ghost == T1:
        F[0] = min(F[0] + max(1.0, b2 / b1), float(S[S_CHUNKS]))
        unlink(L, key, GHOST)
        append(L, key, R_B1, GHOST)
    else:
        F[0] = max(F[0] - max(1.0, b1 / b2), 0.0)
        unlink(L, key, GHOST)
        append(L, key, R_B2, GHOST)


@compiled
def arc_move(S, K, L, key, where):
    """Move a resident key to the MRU end of T1 (``where`` 1) or T2 (2)."""
    S[S_T1 + K[key, C_WHERE] - 1] -= 1
    unlink(L, key, RES)
    K[key, C_WHERE] = where
    S[S_T1 + where - 1] += 1
    append(L, key, R_T1 + where - 1, RES)


@compiled
def touch(M, keys):
    """``CPUOffloadingManager.touch``: the policy's touch, keys in reverse order."""
    S, F, K, L, FREE, CKEY, HEAP, W = M
    for j in range(len(keys) - 1, -1, -1):
        key = keys[j]
        if S[S_ARC] == 0:
            lru_renew(S, K, CKEY, HEAP, key)
        elif K[key, C_WHERE] == T1:
            arc_move(S, K, L, key, T1 if K[key, C_REF] < 0 else T2)
        elif K[key, C_WHERE] == T2:
            arc_move(S, K, L, key, T2)
        else:
            arc_ghost_hit(S, F, K, L, key)


@compiled
def lru_evict(S, K, CKEY, HEAP, W, n, out):
    """LRU's ``evict``: the n smallest current heap entries not protected, or -1 (no
    change)."""
    stamp = S[S_STAMP]
    selected, deferred = W[:, W_A:W_B + 1], W[:, W_C:W_D + 1]
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


@compiled
def _arc_next(S, K, L, cursor, sentinel):
    """ARC's ``next_candidate``: the next idle, unprotected key from ``cursor``."""
    while cursor != sentinel:
        key = cursor
        cursor = L[cursor, RES + 1]
        if K[key, C_REF] == 0 and K[key, C_PROT] != S[S_STAMP]:
            return key, cursor
    return -1, cursor


@compiled
def arc_evict(S, F, K, L, W, n, out):
    """ARC's ``evict``: from T1 while it holds at least int(target) (virtually), else T2,
    else T1; all n or -1 (no change); then the ghost lists are trimmed to capacity."""
    virtual_t1 = S[S_T1]
    c1, c2 = L[R_T1, RES + 1], L[R_T2, RES + 1]
    source = W[:, W_A]
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
        unlink(L, key, RES)
        K[key, C_WHERE] = ABSENT
        K[key, C_GHOST] = source[j]
        S[S_B1 + source[j] - 1] += 1
        append(L, key, R_B1 + source[j] - 1, GHOST)
    for g in range(2):
        while S[S_B1 + g] > S[S_CHUNKS]:
            oldest = L[R_B1 + g, GHOST + 1]
            unlink(L, oldest, GHOST)
            K[oldest, C_GHOST] = ABSENT
            S[S_B1 + g] -= 1
    return n
