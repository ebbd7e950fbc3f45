"""The state of vLLM 0.33.0's native CPU offloading manager in arrays, and its two eviction
policies compiled with numba: ``lru`` (a request's rank; its order kept as one sorted list)
and ``arc`` (T1, T2 and the ghost lists B1, B2), plus ``touch``. ``vllm_offload_kernels``
holds the manager's calls; docs/offloading.md cites vLLM's lines for each rule. (numba's
on-disk cache of those calls does not notice an edit here: delete
``__pycache__/vllm_offload_kernels*.nb?`` after one.)

State ``M = (S, F, K, L, FREE, W)``:

* ``S`` scalars (``S_*`` below), ``F[0]`` ARC's ``target_t1_size`` (a float, as in vLLM);
* ``K[row]`` one row per key (``C_*`` columns): where it lives (absent, T1 — LRU's one
  set —, T2; ``ANCHOR`` for a request's anchor row), ``ref_cnt`` (-1 while its store is in
  flight), chunk id, LRU rank, LRU evictable flag, ARC ghost list, store-threshold offer
  count, the protecting call's stamp;
* ``L[row]`` three doubly linked lists per key: residence (ARC's T1/T2; LRU's order),
  ghost (B1/B2) and the store-threshold tracker, with sentinel rows ``R_*`` (``L[s, prev]``
  newest, ``L[s, next]`` oldest);
* ``FREE`` the stack of freed chunk ids;
* ``W`` scratch rows (``W_*`` columns) for a call's temporaries: no kernel allocates
  (they compile without numba's reference counting, as the engine's kernels do).

An LRU rank ``(major, minor)`` is the integer ``major * 2**32 + minor`` (``minor`` is 0 or
``-position``, positions < 2**31). vLLM keeps its evictable keys in a lazy min-heap of
(rank, key); here LRU's list (the residence pair of ``L``, sentinel ``R_T1``) holds every
resident key in (rank, key row) order, evictable or not, so ``evict`` walks it from the
oldest end, skipping the pinned, the protected and anchors: the same keys in the same
order as vLLM's heap pops, without its stale entries or rebuilds. A renewal's rank
``(next_rank, 0)`` is the largest, so it moves to the newest end; a request's rank ``R``
is the largest when drawn, so the request's anchor row (rank ``R * 2**32 - 2**31``, below
every ``(R, -position)``) is appended there, and a key ranked ``(R, -position)`` later is
linked in after that anchor (its group: a few steps at most, as a request offers its
chunks in position order); ``on_request_finished`` renews the group's keys and unlinks
the anchor. A request is ``(KEYS, FLAGS, RQ)``: its key rows in chunk order (position of
chunk ``i``: ``(i + 1) * tokens_per_chunk``), a flag byte per chunk (seen, inserted,
reused, store miss) and ``RQ = [rank, rank generation, state generation, finished,
anchor row]`` (anchor row 0: none; its keys are then placed from the oldest end).
"""

from __future__ import annotations

from numba import njit

S_CHUNKS, S_ALLOC, S_FREE_TOP, S_EVICTABLE, S_PENDING, S_NEXT_RANK, S_GEN, S_ARC, \
    S_THRESHOLD, S_TRACK_MAX, S_TRACK_SIZE, S_STAMP, S_SKIPPED, S_TPC, S_T1, S_T2, \
    S_B1, S_B2 = range(18)
S_SIZE = 18
C_WHERE, C_REF, C_CHUNK, C_RANK, C_EVICT, C_GHOST, C_COUNT, C_PROT = range(8)
C_SIZE = 8
ABSENT, T1, T2, ANCHOR = 0, 1, 2, 3
R_T1, R_T2, R_B1, R_B2, R_TRACK = range(5)
FIRST_ROW = 5
RES, GHOST, TRACK = 0, 2, 4                     # column pairs (prev, next) of L
SEEN, INSERTED, REUSED, MISSED = 1, 2, 4, 8
RQ_RANK, RQ_RANK_GEN, RQ_GEN, RQ_DONE, RQ_ANCHOR = range(5)
RQ_SIZE = 5
MISS, HIT, HIT_PENDING = 0, 1, 2
NO_RANK = -(1 << 62)
SHIFT = 1 << 32
HALF = 1 << 31                                  # an anchor's rank: R * SHIFT - HALF
W_KEY, W_CANDIDATE, W_RECORDED, W_READY, W_SOURCE = range(5)
W_SIZE = 5

#: Every kernel allocates nothing (no reference counting: numba refuses an allocation), so
#: the engine's own ``_nrt=False`` kernels can call them; temporaries live in ``W``.
compiled = njit(cache=True, error_model="numpy", _nrt=False)


# --------------------------------------------------------------------------- lists

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
def lru_place(K, L, key, start):
    """Link ``key`` (its rank set, unlinked) into LRU's list at its (rank, row) place,
    walking toward the newest end from ``start`` (a node before that place, or R_T1)."""
    rank = K[key, C_RANK]
    at = start
    after = L[at, RES + 1]
    while after != R_T1 and _less(K[after, C_RANK], after, rank, key):
        at = after
        after = L[at, RES + 1]
    L[key, RES], L[key, RES + 1] = at, after
    L[at, RES + 1] = key
    L[after, RES] = key


@compiled
def lru_group(K, RQ):
    """Where a key ranked by the request ``RQ`` is placed from: its linked anchor, else
    the oldest end."""
    anchor = RQ[RQ_ANCHOR]
    if anchor > 0 and K[anchor, C_WHERE] == ANCHOR:
        return anchor
    return R_T1


@compiled
def lru_rerank(K, L, RQ, key, rank):
    """A resident key's new rank ``(request rank, -position)`` (larger than its old)."""
    K[key, C_RANK] = rank
    unlink(L, key, RES)
    lru_place(K, L, key, lru_group(K, RQ))


# --------------------------------------------------------------------------- policies

@compiled
def request_rank(S, K, L, RQ):
    """LRU's ``_get_request_rank``: a request's rank, assigned on first use (its anchor
    then linked at the newest end)."""
    if RQ[RQ_RANK_GEN] != S[S_GEN] or RQ[RQ_RANK] == 0:
        S[S_NEXT_RANK] += 1
        RQ[RQ_RANK], RQ[RQ_RANK_GEN] = S[S_NEXT_RANK], S[S_GEN]
        anchor = RQ[RQ_ANCHOR]
        if anchor > 0:
            if K[anchor, C_WHERE] == ANCHOR:
                unlink(L, anchor, RES)
            K[anchor, C_WHERE], K[anchor, C_RANK] = ANCHOR, RQ[RQ_RANK] * SHIFT - HALF
            append(L, anchor, R_T1, RES)
    return RQ[RQ_RANK]


@compiled
def lru_drop_anchor(K, L, RQ):
    """Unlink the request's anchor (its group emptied: ``on_request_finished``)."""
    anchor = RQ[RQ_ANCHOR]
    if anchor > 0 and K[anchor, C_WHERE] == ANCHOR:
        unlink(L, anchor, RES)
        K[anchor, C_WHERE] = ABSENT


@compiled
def lru_renew(S, K, L, key):
    """LRU's ``_assign_new_rank``: a fresh (next_rank, 0) for a resident key, the
    largest rank: to the newest end."""
    if K[key, C_WHERE] == ABSENT:
        return
    S[S_NEXT_RANK] += 1
    K[key, C_RANK] = S[S_NEXT_RANK] * SHIFT
    unlink(L, key, RES)
    append(L, key, R_T1, RES)


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
    S, F, K, L, FREE, W = M
    for j in range(len(keys) - 1, -1, -1):
        key = keys[j]
        if S[S_ARC] == 0:
            lru_renew(S, K, L, key)
        elif K[key, C_WHERE] == T1:
            arc_move(S, K, L, key, T1 if K[key, C_REF] < 0 else T2)
        elif K[key, C_WHERE] == T2:
            arc_move(S, K, L, key, T2)
        else:
            arc_ghost_hit(S, F, K, L, key)


@compiled
def lru_evict(S, K, L, n, out):
    """LRU's ``evict``: the n oldest evictable, unprotected keys (its heap's pops), or -1
    (no change)."""
    stamp = S[S_STAMP]
    count = 0
    key = L[R_T1, RES + 1]
    while key != R_T1 and count < n:
        if K[key, C_EVICT] == 1 and K[key, C_PROT] != stamp:   # (anchors: never)
            out[count] = key
            count += 1
        key = L[key, RES + 1]
    if count < n:
        return -1
    for j in range(n):
        key = out[j]
        unlink(L, key, RES)
        K[key, C_WHERE], K[key, C_EVICT], K[key, C_RANK] = ABSENT, 0, NO_RANK
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
    source = W[:, W_SOURCE]
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
