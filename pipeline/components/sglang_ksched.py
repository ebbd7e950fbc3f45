"""SGLang 0.5.23's scheduler loop over its radix cache, compiled (numba, flat arrays).

The rules of ``tests/oracles/sglang_sched.py`` (the plain-Python transcription that the
equality tests prove equal to SGLang's own ``SchedulePolicy``, ``PrefillAdder``,
``PrefillBudget`` and ``RadixCache`` in the batch loop; docs/sglang.md cites the lines),
over ``sglang_kradix``'s tree. The state is a tuple ``S`` (``SGLangState.state()``):

* ``TOK``: every request's prompt then output tokens, one run per request; tree keys are
  spans of it. ``R[r]``: a request's fields (``R_*``, the oracle's ``Req``).
* ``WQ`` / ``RUN`` / ``LB`` / ``CAN``: the waiting queue, the running batch, the last
  prefill batch, the adder's ``can_run`` (request rows; lengths in ``SG``).
* ``SG`` / ``SF``: the loop's integers and floats (``G_*``, ``F_*``); ``T`` the radix tree,
  ``TB`` the lpm in-batch tree; ``MT`` the random policy's Mersenne Twister (CPython's
  ``random.Random(seed)`` state, so ``shuffle`` draws the same numbers); ``SCR`` scratch.
* ``BQ`` / ``BF`` / ``BX``: the batch just run: (request, new tokens, cached tokens) rows,
  who sampled a first token, who finished.

With HiCache ``T`` is ``sglang_khiradix``'s tree: the tree calls go through ``sglang_ktree``,
typed per tree (a run without HiCache compiles none of it); ``R_HOST`` / ``R_BEST`` the
match's host run and deepest node, ``R_HLOADED`` the host tokens the first admission loaded;
a step row's ``S_LOADED`` / ``S_WRITTEN`` the host tokens moved since the last row.

``step`` is one turn of ``event_loop_normal``; ``run_steps`` a whole run on the step clock
(arrivals by step, the idle jump), writing each step's row, batch rows and events.

With ``G_OVERLAP`` set the turns are ``event_loop_overlap``'s (the oracle's ``overlap``):
``QB`` is the result queue (the requests of the batch launched last turn, ``G_QN`` of them,
``G_QEXT``, ``G_QSTEP``; ``R_QUEUED`` marks them), processed after the next batch is
scheduled. ``BF`` / ``BX`` then hold the launched batch's own samplers and finishes, known
at launch (``launch_outputs``: what the GPU samples, the records' and events' lists; a
request retracted in the next turn has its first token discarded by SGLang, then sampled
again); the requests' outcomes in ``R`` are the processed results. ``R_RETRACTED`` is
``is_retracted``.
"""

from __future__ import annotations

import random

import numpy as np

from pipeline.components.kjit import helper, kernel
from pipeline.components.sglang_khinodes import H_DEV, new_hitree
from pipeline.components.sglang_kradix import (
    N_FC, N_KL, N_NS, T_EVICT, find_child, insert, match_len, match_prefix, new_tree, reset)
from pipeline.components.sglang_ktree import (
    t_check_events, t_checkpoint, t_dec_lock, t_evict, t_inc_lock, t_load_back, t_match,
    t_match_prefix, t_moved)
from pipeline.components.sglang_settings import (
    CLIP_MAX_NEW_TOKENS, DECAY_STEPS, IN_BATCH_CHECK, IN_BATCH_DEPRIORITIZE,
    INIT_NEW_TOKEN_RATIO, MIN_RATIO_FACTOR, RETRACT_DECODE_STEPS,
    WAITING_PREFIX_REFRESH_INTERVAL, WAITING_QUEUE_PREFIX_MATCH_MAX)

__all__ = ["SGLangState", "step", "run_steps", "peek"]

POLICY_CODES = ("fcfs", "lpm", "dfs-weight", "lof", "random")

(R_TOFF, R_N, R_MAXNEW, R_OUT, R_PREFIX, R_NMATCH, R_LAST, R_LOCK, R_EXT, R_KV, R_PROT,
 R_INS, R_MID, R_FIN, R_RETR, R_FSCHED, R_FTOK, R_FINSTEP, R_HIT, R_INDEX, R_DEP,
 R_SEL, R_RETRACTED, R_QUEUED, R_HOST, R_BEST, R_HLOADED) = range(27)
R_COLUMNS = 27
(G_NREQ, G_NWAIT, G_NRUN, G_NLAST, G_NCAN, G_CHUNKED, G_FULL, G_FREE, G_REFRESH, G_STEP,
 G_P, G_POLICY, G_MAXRUN, G_CHUNK, G_MAXPREFILL, G_LRU, G_NTOK, G_EXTEND, G_NB, G_NF, G_NX,
 G_ERROR, G_NEWCHUNK, G_BLOCK, G_NDONE, G_OVERLAP, G_QHAS, G_QN, G_QEXT, G_QSTEP, G_LASTRAN,
 G_POPPED, G_LOADMARK, G_WRITEMARK) = range(34)
G_COLUMNS = 34
F_RATIO, F_MIN, F_DECAY, F_TOTAL = range(4)
#: adder budget states
CONTINUE, NO_TOKEN, OTHER = 0, 1, 2
#: step row columns (``loop.STEP_COLUMNS``)
S_STEP, S_PREFILL, S_DECODE, S_CONTEXT, S_RELOAD, S_NRUN, S_NWAIT, S_FREE, S_LOADED, \
    S_WRITTEN = range(10)
#: a step row: ``loop.STEP_COLUMNS``, then the host tokens loaded and written (HiCache)
S_COLUMNS = 10
DONE, FULL, FAILED, SMALL_TREE = 0, 1, 2, 3
INF_KEY = 2 ** 62


# --------------------------------------------------------------------------- memory

@helper
def pages(tokens, P):
    return -(-tokens // P)


@helper
def evict_to_free(S, num):
    SG, T = S[5], S[7]
    shortfall = num - SG[G_FREE]
    if shortfall > 0:
        SG[G_FREE] += t_evict(T, shortfall)


@helper
def alloc(S, r, new_len):
    R, SG = S[1], S[5]
    P = SG[G_P]
    SG[G_FREE] -= (pages(new_len, P) - pages(R[r, R_KV], P)) * P
    R[r, R_KV] = new_len


@helper
def unlock(S, r):
    R = S[1]
    if R[r, R_LOCK] >= 0:
        t_dec_lock(S[7], R[r, R_LOCK])
    R[r, R_LOCK] = -1


@helper
def fill_len(R, r):
    return R[r, R_N] + R[r, R_OUT]


@helper
def match(S, r, limit):
    """``match_kv_cache``: the tree's hit on the fill ids becomes the prefix (HiCache: the
    host run below it and the deepest node too)."""
    TOK, R, T = S[0], S[1], S[7]
    n = fill_len(R, r)
    max_len = max(n - 1, 0)
    prefix, host, best, node = t_match(T, TOK, R[r, R_TOFF], max_len if limit else n)
    R[r, R_PREFIX], R[r, R_LAST] = prefix, node
    R[r, R_HOST], R[r, R_BEST] = host, best
    R[r, R_NMATCH] = min(prefix + host, max_len)


@helper
def checkpoint(S, r, up_to):
    """``RadixCache.checkpoint``: insert up to ``up_to`` (whole pages), free duplicates,
    re-match and move the lock (HiCache: the unified checkpoint, the insert's own node)."""
    TOK, R, SG, T = S[0], S[1], S[5], S[7]
    P, start = SG[G_P], R[r, R_TOFF]
    length = min(up_to, fill_len(R, r))
    key_len = length // P * P
    freed, node = t_checkpoint(T, TOK, start, key_len, R[r, R_N] // P * P, R[r, R_INS],
                               R[r, R_PROT])
    R[r, R_INS] = max(R[r, R_INS], key_len)
    SG[G_FREE] += freed
    R[r, R_PROT] = key_len
    unlock(S, r)
    t_inc_lock(T, node)
    R[r, R_LOCK] = R[r, R_LAST] = node


@helper
def release(S, r, keep):
    """``release_kv_cache``: checkpoint (finish) or not (retract), free own pages, unlock."""
    R, SG = S[1], S[5]
    P = SG[G_P]
    if keep:
        checkpoint(S, r, R[r, R_KV])
    SG[G_FREE] += (pages(R[r, R_KV], P) - R[r, R_PROT] // P) * P
    unlock(S, r)


# --------------------------------------------------------------------------- the policy

@helper
def stable_sort(Q, count, keys, asc):
    """Sort ``Q[:count]`` by ``keys`` (row-aligned with Q), stably (insertion: the queue
    is mostly in order from the last pass); ``asc`` False: descending, still stable."""
    for i in range(1, count):
        q, k = Q[i], keys[i]
        j = i - 1
        while j >= 0 and ((keys[j] > k) if asc else (keys[j] < k)):
            Q[j + 1], keys[j + 1] = Q[j], keys[j]
            j -= 1
        Q[j + 1], keys[j + 1] = q, k


@helper
def genrand(MT):
    """CPython's ``genrand_uint32`` on ``MT`` (624 words, then the index)."""
    if MT[624] >= 624:
        for k in range(624):
            y = (MT[k] & 0x80000000) | (MT[(k + 1) % 624] & 0x7fffffff)
            v = MT[(k + 397) % 624] ^ (y >> 1)
            if y & 1:
                v ^= 0x9908b0df
            MT[k] = v
        MT[624] = 0
    y = MT[MT[624]]
    MT[624] += 1
    y ^= y >> 11
    y ^= (y << 7) & 0x9d2c5680
    y ^= (y << 15) & 0xefc60000
    y ^= y >> 18
    return y & 0xffffffff


@helper
def shuffle(MT, Q, count):
    """``random.Random.shuffle`` (``_randbelow_with_getrandbits``)."""
    for i in range(count - 1, 0, -1):
        n = i + 1
        k = 0
        while (n >> k) > 0:
            k += 1
        j = genrand(MT) >> (32 - k)
        while j >= n:
            j = genrand(MT) >> (32 - k)
        Q[i], Q[j] = Q[j], Q[i]


@helper
def calc_priority(S):
    """``SchedulePolicy.calc_priority`` on the waiting queue (in place)."""
    TOK, R, WQ, SG, T, SCR, MT = S[0], S[1], S[2], S[5], S[7], S[9], S[10]
    nw, policy = SG[G_NWAIT], SG[G_POLICY]
    active = 0 if policy == 1 and nw > WAITING_QUEUE_PREFIX_MATCH_MAX else policy
    if active == 1 or active == 2:
        compute_prefix_matches(S)
        keys = SCR[:, 0]
        if active == 1:
            for i in range(nw):
                r = WQ[i]
                keys[i] = INF_KEY if R[r, R_DEP] else -R[r, R_NMATCH]
            stable_sort(WQ, nw, keys, True)
        else:
            dfs_weight_order(S)
        return
    if active == 3:
        keys = SCR[:, 0]
        for i in range(nw):
            keys[i] = -R[WQ[i], R_MAXNEW]
        stable_sort(WQ, nw, keys, True)
    elif active == 4:
        shuffle(MT, WQ, nw)
    if nw > 0 and SG[G_LRU]:                       # _touch_waiting_prefixes
        refresh = SG[G_REFRESH] % WAITING_PREFIX_REFRESH_INTERVAL == 0
        SG[G_REFRESH] += 1
        if refresh:
            for i in range(min(nw, WAITING_QUEUE_PREFIX_MATCH_MAX) - 1, -1, -1):
                r = WQ[i]
                t_match_prefix(T, TOK, R[r, R_TOFF], fill_len(R, r))


@helper
def compute_prefix_matches(S):
    """Match every waiting request (unlimited); flag the in-batch duplicates (``R_DEP``)."""
    TOK, R, WQ, SG, TB = S[0], S[1], S[2], S[5], S[8]
    reset(TB)
    for i in range(SG[G_NWAIT]):
        r = WQ[i]
        match(S, r, False)
        R[r, R_DEP] = 0
        if R[r, R_PREFIX] <= IN_BATCH_CHECK:
            start, n = R[r, R_TOFF], fill_len(R, r)
            if match_prefix(TB, TOK, start, n)[0] >= IN_BATCH_DEPRIORITIZE:
                R[r, R_DEP] = 1
            else:
                insert(TB, TOK, start, n, 0, 0)


@helper
def dfs_weight_order(S):
    """``_dfs_weight_order``: depth first, heavier subtrees first, a node's requests after
    its subtree. SCR columns: 1 weight, 2 first queued request, 3 last, 4 next request,
    5/6 a stack (node, visited), 7 the new queue, 0 sort keys."""
    R, WQ, SG, NI, SCR = S[1], S[2], S[5], S[7][0], S[9]
    used = S[7][1][4]
    nw = SG[G_NWAIT]
    for n in range(used):
        SCR[n, 1], SCR[n, 2], SCR[n, 3] = 0, -1, -1
    for i in range(nw):
        node = R[WQ[i], R_LAST]
        SCR[i, 4] = -1
        if SCR[node, 2] < 0:
            SCR[node, 2] = i
        else:
            SCR[SCR[node, 3], 4] = i
        SCR[node, 3] = i
        SCR[node, 1] += 1
    top = 0                                        # weights, post order
    SCR[0, 5], SCR[0, 6] = 0, 0
    top = 1
    while top > 0:
        top -= 1
        node, visited = SCR[top, 5], SCR[top, 6]
        if visited:
            c = NI[node, N_FC]
            while c >= 0:
                SCR[node, 1] += SCR[c, 1]
                c = NI[c, N_NS]
            continue
        SCR[top, 5], SCR[top, 6] = node, 1
        top += 1
        c = NI[node, N_FC]                          # pushed in reverse: any order works
        while c >= 0:                               # for sums, as the oracle's
            SCR[top, 5], SCR[top, 6] = c, 0
            top += 1
            c = NI[c, N_NS]
    out = 0
    SCR[0, 5], SCR[0, 6] = 0, 0
    top = 1
    while top > 0:
        top -= 1
        node, visited = SCR[top, 5], SCR[top, 6]
        if visited:
            i = SCR[node, 2]
            while i >= 0:
                SCR[out, 7] = WQ[i]
                out += 1
                i = SCR[i, 4]
            continue
        SCR[top, 6] = 1
        top += 1
        first = top                                 # children by weight, descending,
        c = NI[node, N_FC]                          # stable; pushed in reverse
        while c >= 0:
            SCR[top, 5], SCR[top, 6] = c, 0
            SCR[top, 0] = SCR[c, 1]
            top += 1
            c = NI[c, N_NS]
        stable_sort(SCR[first:top, 5], top - first, SCR[first:top, 0], False)
        lo, hi = first, top - 1
        while lo < hi:
            SCR[lo, 5], SCR[hi, 5] = SCR[hi, 5], SCR[lo, 5]
            lo += 1
            hi -= 1
    for i in range(nw):
        WQ[i] = SCR[i, 7]


# --------------------------------------------------------------------------- the adder

@helper
def available(S):
    return S[5][G_FREE] + S[7][1][T_EVICT]


@helper
def budget_state(S, rem_input, rem_chunk):
    SG, SF = S[5], S[6]
    avail = available(S)
    if not (avail - SF[F_TOTAL] > 0 and avail - SG[G_NTOK] > 0):
        return NO_TOKEN
    if rem_input <= 0 or (SG[G_CHUNK] >= 0 and rem_chunk <= 0):
        return OTHER
    return CONTINUE


@helper
def ceil_pages(tokens, P):
    return -(-tokens // P) * P


@helper
def add_can_run(S, r):
    CAN, SG = S[11], S[5]
    S[1][r, R_SEL] = 1
    CAN[SG[G_NCAN]] = r
    SG[G_NCAN] += 1


@helper
def new_prefill_batch(S):
    """``_get_new_batch_prefill_raw`` with ``PrefillAdder``: the batch size (0: none)."""
    R, WQ, SG, SF, T, CAN = S[1], S[2], S[5], S[6], S[7], S[11]
    P = SG[G_P]
    if SG[G_NRUN] == 0:
        SG[G_FULL] = 0
    if (SG[G_FULL] or SG[G_NWAIT] == 0) and SG[G_CHUNKED] < 0:
        return 0
    allocatable = SG[G_MAXRUN] - SG[G_NRUN]
    if allocatable <= 0 and SG[G_CHUNKED] < 0:
        SG[G_FULL] = 1
        return 0
    calc_priority(S)
    rem_input, rem_chunk = SG[G_MAXPREFILL], SG[G_CHUNK]
    total = 0.0
    RUN = S[3]
    for i in range(SG[G_NRUN]):
        r = RUN[i]
        total += min(R[r, R_MAXNEW] - R[r, R_OUT], CLIP_MAX_NEW_TOKENS) * SF[F_RATIO]
    SF[F_TOTAL], SG[G_NTOK], SG[G_NCAN], SG[G_NEWCHUNK] = total, 0, 0, -1
    c = SG[G_CHUNKED]
    if c >= 0:                                      # add_chunked_req
        rem = rem_chunk
        avail = min(rem, int(available(S) - SF[F_TOTAL]))
        rem = avail if avail > 0 else rem
        extend = fill_len(R, c) - R[c, R_PREFIX]
        truncated = extend > rem
        R[c, R_EXT] = R[c, R_PREFIX] + min(extend, rem)
        add_can_run(S, c)
        rem_input, rem_chunk = charge(
            S, R[c, R_EXT] - R[c, R_PREFIX],
            0 if truncated else min(R[c, R_MAXNEW], CLIP_MAX_NEW_TOKENS), rem_input, rem_chunk)
        if not truncated:
            SG[G_CHUNKED] = -1
    for i in range(SG[G_NWAIT]):
        r = WQ[i]
        if budget_state(S, rem_input, rem_chunk) == OTHER:
            break
        if SG[G_NCAN] >= allocatable:
            SG[G_FULL] = 1
        if SG[G_FULL]:
            break
        match(S, r, True)
        R[r, R_PROT] = R[r, R_PREFIX]
        result, rem_input, rem_chunk = add_one_req(S, r, rem_input, rem_chunk)
        if result != CONTINUE:
            if result == NO_TOKEN:
                SG[G_FULL] = 1 if (SG[G_NCAN] > 0 or SG[G_NRUN] > 0) else 0
            break
    count = SG[G_NCAN]
    if count == 0:
        return 0
    kept = 0                                        # the chosen leave the queue
    for i in range(SG[G_NWAIT]):
        r = WQ[i]
        if not R[r, R_SEL]:
            WQ[kept] = r
            kept += 1
    SG[G_NWAIT] = kept
    for i in range(count):
        R[CAN[i], R_SEL] = 0
    if SG[G_NEWCHUNK] >= 0:
        SG[G_CHUNKED] = SG[G_NEWCHUNK]
    if SG[G_CHUNKED] >= 0:
        R[SG[G_CHUNKED], R_MID] += 1
    return prepare_for_extend(S, count)


@helper
def charge(S, extend_len, max_new, rem_input, rem_chunk):
    """``_update_prefill_budget`` + ``PrefillBudget.reserve``."""
    SG, SF = S[5], S[6]
    P = SG[G_P]
    extend = ceil_pages(extend_len, P)
    SF[F_TOTAL] += extend + P + max_new
    SG[G_NTOK] += extend + P
    rem_input -= extend
    if SG[G_CHUNK] >= 0:
        rem_chunk -= extend
    return rem_input, rem_chunk


@helper
def select_admission(S, r, total, host, rem_input, rem_chunk):
    """``_select_prefill_admission``: (verdict or -1, extend, max_new, chunked); ``host``
    tokens a load back would add to the prefix (HiCache)."""
    R, SG, SF = S[1], S[5], S[6]
    P = SG[G_P]
    prefix = R[r, R_PREFIX] + host
    extend = fill_len(R, r) - prefix
    input_tokens = ceil_pages(extend, P)
    if not total < available(S) - SF[F_TOTAL]:
        return NO_TOKEN, 0, 0, False
    if SG[G_CHUNK] < 0 and SG[G_NCAN] > 0 and input_tokens >= rem_input:
        return OTHER, 0, 0, False
    chunked, new_tokens = False, min(R[r, R_MAXNEW], CLIP_MAX_NEW_TOKENS)
    if SG[G_CHUNK] >= 0 and input_tokens > rem_chunk:
        extend = (prefix + rem_chunk // P * P) // P * P - prefix
        if extend <= 0:
            return OTHER, 0, 0, False
        chunked, new_tokens = True, 0
    return -1, extend, new_tokens, chunked


@helper
def add_one_req(S, r, rem_input, rem_chunk):
    """``PrefillAdder.add_one_req`` (HiCache: the admission sized with the host run as
    cached, then the load back; sized again without it when nothing came)."""
    R, SG, T = S[1], S[5], S[7]
    P = SG[G_P]
    max_new = min(max(R[r, R_MAXNEW] - R[r, R_OUT], 0), CLIP_MAX_NEW_TOKENS)
    total = fill_len(R, r) - R[r, R_PREFIX] + max_new + P
    anchor = R[r, R_LAST]
    t_inc_lock(T, anchor)                           # _lock_node
    host = R[r, R_HOST]
    result, extend, new_tokens, chunked = select_admission(S, r, total, host, rem_input,
                                                           rem_chunk)
    if result < 0:
        loaded = 0
        if host > 0:
            loaded, node, evicted = t_load_back(T, R[r, R_BEST], R[r, R_LAST], host,
                                                SG[G_FREE])
            SG[G_FREE] += evicted - loaded
            R[r, R_LAST] = node
            if loaded < host:                       # nothing loaded: size it again
                result, extend, new_tokens, chunked = select_admission(
                    S, r, total, 0, rem_input, rem_chunk)
            if result < 0:
                R[r, R_PREFIX] += loaded
                R[r, R_PROT] = R[r, R_PREFIX]       # load_back_is_cache_owned
        if result < 0:
            if R[r, R_FSCHED] < 0:
                R[r, R_HLOADED] = loaded
            R[r, R_EXT] = R[r, R_PREFIX] + extend   # _commit_prefill_admission
            t_inc_lock(T, R[r, R_LAST])
            R[r, R_LOCK] = R[r, R_LAST]
            add_can_run(S, r)
            if chunked:
                SG[G_NEWCHUNK] = r
            rem_input, rem_chunk = charge(S, extend, new_tokens, rem_input, rem_chunk)
    t_dec_lock(T, anchor)
    if result < 0:
        result = budget_state(S, rem_input, rem_chunk)
    return result, rem_input, rem_chunk


# --------------------------------------------------------------------------- batches

@helper
def prepare_for_extend(S, count):
    """``ScheduleBatch.prepare_for_extend``: allocate every extend (evicting first)."""
    R, SG, CAN, BQ = S[1], S[5], S[11], S[12]
    P = SG[G_P]
    extend = 0
    for i in range(count):
        r = CAN[i]
        extend += R[r, R_EXT] - R[r, R_PREFIX]
    evict_to_free(S, extend if P == 1 else extend + count * P)
    for i in range(count):
        r = CAN[i]
        BQ[i, 0], BQ[i, 1], BQ[i, 2] = r, R[r, R_EXT] - R[r, R_PREFIX], R[r, R_PREFIX]
        R[r, R_KV] = R[r, R_PREFIX]
        R[r, R_RETRACTED] = 0
        alloc(S, r, R[r, R_EXT])
        if R[r, R_FSCHED] < 0:
            R[r, R_FSCHED], R[r, R_HIT] = SG[G_STEP], R[r, R_PREFIX]
    SG[G_NB], SG[G_EXTEND] = count, 1
    return count


@helper
def check_decode_mem(S, Q, count):
    R, SG = S[1], S[5]
    P = SG[G_P]
    num = 0
    for i in range(count):
        if R[Q[i], R_KV] % P == 0:
            num += P
    evict_to_free(S, num)
    return SG[G_FREE] >= num


@helper
def retract_decode(S):
    """``ScheduleBatch.retract_decode`` (policy ``length``): retracted go to the queue."""
    R, WQ, RUN, SG, SF, SCR = S[1], S[2], S[3], S[5], S[6], S[9]
    count = SG[G_NRUN]
    order, keys = SCR[:, 5], SCR[:, 6]
    for i in range(count):                          # sorted by (out, -n), descending:
        r = RUN[i]                                  # one key, out major
        order[i], keys[i] = r, R[r, R_OUT] * (2 ** 31) - R[r, R_N]
    stable_sort(order, count, keys, False)
    first = True
    while first or not check_decode_mem(S, order, count):
        if count == 1:
            break
        first = False
        count -= 1
        r = order[count]
        release(S, r, False)                        # release_req
        evict_to_free(S, count * RETRACT_DECODE_STEPS)
        R[r, R_PREFIX] = R[r, R_PROT] = R[r, R_INS] = R[r, R_KV] = 0
        R[r, R_LAST], R[r, R_EXT], R[r, R_MID] = -1, 0, 0
        R[r, R_RETR] += 1
        R[r, R_RETRACTED] = 1
        WQ[SG[G_NWAIT]] = r
        SG[G_NWAIT] += 1
    if count <= 1 and not check_decode_mem(S, order, count):
        SG[G_ERROR] = 1                             # SGLang aborts: out of memory
        return
    decoded, wanted = 0, 0
    for i in range(count):
        RUN[i] = order[i]
        decoded += R[order[i], R_OUT]
        wanted += R[order[i], R_MAXNEW]
    SG[G_NRUN] = count
    SF[F_RATIO] = min(1.0, (decoded + RETRACT_DECODE_STEPS * count) / (wanted + 1))


@helper
def update_running_batch(S):
    """``update_running_batch``: retract when the next decode does not fit (overlap:
    without the requests the queued result finishes, skipped when some were); the batch."""
    R, RUN, SG, SF, BQ = S[1], S[3], S[5], S[6], S[12]
    initial = SG[G_NRUN]
    finishing = 0
    if SG[G_OVERLAP] and SG[G_QHAS]:                # _reqs_finishing_inflight
        kept = 0
        for i in range(initial):
            r = RUN[i]
            if R[r, R_QUEUED] and R[r, R_OUT] + 1 >= R[r, R_MAXNEW]:
                finishing += 1
            else:
                RUN[kept] = r
                kept += 1
        SG[G_NRUN] = kept
        if kept == 0:
            SG[G_FULL] = 0
            return 0
    full = not check_decode_mem(S, RUN, SG[G_NRUN])
    if full and finishing > 0:                      # decode the rest next turn
        SG[G_FULL] = 0
        return 0
    if full:
        retract_decode(S)
        if SG[G_ERROR]:
            return 0
    else:
        SF[F_RATIO] = max(SF[F_RATIO] - SF[F_DECAY], SF[F_MIN])
    if SG[G_NRUN] < initial:
        SG[G_FULL] = 0
    bs = SG[G_NRUN]
    if bs == 0:
        return 0
    evict_to_free(S, bs * SG[G_P])
    for i in range(bs):
        r = RUN[i]
        BQ[i, 0], BQ[i, 1], BQ[i, 2] = r, 1, R[r, R_KV]
        alloc(S, r, R[r, R_KV] + 1)
    SG[G_NB], SG[G_EXTEND] = bs, 0
    return bs


@helper
def next_batch(S):
    """``get_next_batch_to_run``: the batch's size in ``BQ`` (0: none)."""
    R, RUN, LB, SG = S[1], S[3], S[4], S[5]
    t_check_events(S[7])                            # _process_hicache_events
    c = SG[G_CHUNKED]
    if c >= 0 and R[c, R_EXT] > R[c, R_PREFIX]:
        checkpoint(S, c, R[c, R_EXT])               # stash_chunked_request
        R[c, R_PREFIX] = R[c, R_EXT]
    nl = SG[G_NLAST]
    if nl > 0:
        kept = 0
        for i in range(nl):
            r = LB[i]
            if not R[r, R_FIN] and r != c:
                LB[kept] = r
                kept += 1
        if kept < nl:
            SG[G_FULL] = 0
        SG[G_NLAST] = kept
        if kept > 0:
            if SG[G_NRUN] == 0:
                SG[G_FULL] = 0
            for i in range(kept):
                RUN[SG[G_NRUN]] = LB[i]
                SG[G_NRUN] += 1
    kept = 0
    for i in range(SG[G_NRUN]):
        r = RUN[i]
        if not R[r, R_FIN]:
            RUN[kept] = r
            kept += 1
    if kept < SG[G_NRUN]:
        SG[G_FULL] = 0
    SG[G_NRUN] = kept
    count = new_prefill_batch(S)
    if count > 0:
        return count
    if SG[G_NRUN] > 0:
        return update_running_batch(S)
    return 0


@helper
def process(S, Q, count, extend, step):
    """``process_batch_result`` of requests ``Q[:count]``: sample, finish, checkpoint; first
    tokens in ``BF``, finished in ``BX`` (appended); a request retracted since launch
    skipped."""
    R, SG, BF, BX = S[1], S[5], S[13], S[14]
    for i in range(count):
        r = Q[i]
        if R[r, R_RETRACTED] or (R[r, R_FIN] and R[r, R_MID] <= 0):
            continue
        if extend and R[r, R_MID] > 0:
            R[r, R_MID] -= 1
            continue
        R[r, R_OUT] += 1
        if R[r, R_FTOK] < 0:
            R[r, R_FTOK] = step
            BF[SG[G_NF]] = r
            SG[G_NF] += 1
        if R[r, R_OUT] >= R[r, R_MAXNEW]:
            R[r, R_FIN], R[r, R_FINSTEP] = 1, step
            SG[G_NDONE] += 1
            BX[SG[G_NX]] = r
            SG[G_NX] += 1
            release(S, r, True)
        elif extend:
            checkpoint(S, r, R[r, R_EXT])           # checkpoint_kv_cache
            R[r, R_PREFIX] = R[r, R_EXT]


@helper
def iterate(S):
    """One turn of ``event_loop_normal`` (or ``event_loop_overlap``): the batch's size (0:
    none; -1: out of memory)."""
    SG = S[5]
    if SG[G_OVERLAP]:
        return iterate_overlap(S)
    count = next_batch(S)
    if SG[G_ERROR]:
        return -1
    SG[G_NF] = SG[G_NX] = 0
    if count > 0:
        process(S, S[12][:, 0], count, SG[G_EXTEND], SG[G_STEP])
        SG[G_STEP] += 1
    if count > 0 and SG[G_EXTEND]:                 # the last batch, if a prefill
        LB, BQ = S[4], S[12]
        for i in range(count):
            LB[i] = BQ[i, 0]
        SG[G_NLAST] = count
    else:
        SG[G_NLAST] = 0
    return count


@helper
def launch_outputs(S, count):
    """The launched batch's first tokens (``BF``) and finishes (``BX``), once the last
    result is processed: its rows past their last chunk, a first token where none was
    sampled yet, a finish where the next output reaches ``max_new_tokens``."""
    R, SG, BQ, BF, BX = S[1], S[5], S[12], S[13], S[14]
    SG[G_NF] = SG[G_NX] = 0
    for i in range(count):
        r = BQ[i, 0]
        if SG[G_EXTEND] and R[r, R_MID] > 0:
            continue
        if R[r, R_FTOK] < 0:
            BF[SG[G_NF]] = r
            SG[G_NF] += 1
        if R[r, R_OUT] + 1 >= R[r, R_MAXNEW]:
            BX[SG[G_NX]] = r
            SG[G_NX] += 1


@helper
def iterate_overlap(S):
    """One turn of ``event_loop_overlap``: schedule and launch (queue) a batch, then
    process the last one's result (``G_POPPED``); the batch's size (0: none; -1: out of
    memory)."""
    R, LB, SG, BQ, QB = S[1], S[4], S[5], S[12], S[15]
    count = next_batch(S)
    if SG[G_ERROR]:
        return -1
    SG[G_POPPED] = SG[G_LASTRAN]
    SG[G_NF] = SG[G_NX] = 0                         # (the processed lists: not kept)
    if SG[G_POPPED]:                                # pop_and_process
        process(S, QB, SG[G_QN], SG[G_QEXT], SG[G_QSTEP])
        for i in range(SG[G_QN]):
            R[QB[i], R_QUEUED] = 0
    launch_outputs(S, count)
    SG[G_QHAS] = count > 0
    if count > 0:                                   # the queue: a copy of the batch
        for i in range(count):
            QB[i] = BQ[i, 0]
            R[QB[i], R_QUEUED] = 1
        SG[G_QN], SG[G_QEXT], SG[G_QSTEP] = count, SG[G_EXTEND], SG[G_STEP]
        SG[G_STEP] += 1
    else:
        SG[G_QN] = 0
    SG[G_LASTRAN] = count > 0
    if count > 0 and SG[G_EXTEND]:
        for i in range(count):
            LB[i] = BQ[i, 0]
        SG[G_NLAST] = count
    else:
        SG[G_NLAST] = 0
    return count


@helper
def has_work(S):
    R, RUN, LB, SG = S[1], S[3], S[4], S[5]
    if SG[G_NWAIT] > 0 or SG[G_CHUNKED] >= 0 or SG[G_QHAS]:
        return True
    for i in range(SG[G_NRUN]):
        if not R[RUN[i], R_FIN]:
            return True
    for i in range(SG[G_NLAST]):
        if not R[LB[i], R_FIN]:
            return True
    return False


@helper
def num_running(S):
    R, RUN, LB, SG = S[1], S[3], S[4], S[5]
    count = 0
    for i in range(SG[G_NRUN]):
        count += 1 - R[RUN[i], R_FIN]
    for i in range(SG[G_NLAST]):
        count += 1 - R[LB[i], R_FIN]
    return count


@helper
def step_row(S, row):
    """The executed batch's ``loop.STEP_COLUMNS`` row (after ``iterate``)."""
    R, SG, BQ = S[1], S[5], S[12]
    prefill, context = 0, 0
    for i in range(SG[G_NB]):
        prefill += BQ[i, 1]
        context += BQ[i, 1] + BQ[i, 2]
    row[S_STEP] = SG[G_STEP] - 1
    row[S_PREFILL] = prefill if SG[G_EXTEND] else 0
    row[S_DECODE] = 0 if SG[G_EXTEND] else SG[G_NB]
    row[S_CONTEXT], row[S_RELOAD] = context, 0
    row[S_NRUN], row[S_NWAIT] = num_running(S), SG[G_NWAIT]
    row[S_FREE] = available(S) // SG[G_BLOCK]
    loaded, written = t_moved(S[7])
    row[S_RELOAD] = row[S_LOADED] = loaded - SG[G_LOADMARK]
    row[S_WRITTEN] = written - SG[G_WRITEMARK]
    SG[G_LOADMARK], SG[G_WRITEMARK] = loaded, written


# --------------------------------------------------------------------------- entries

@helper
def batch_tree_fits(S):
    """Room in the in-batch tree for every waiting request (a match may split a node, an
    insert split one and add a leaf)."""
    policy = S[5][G_POLICY]
    if policy != 1 and policy != 2:
        return True
    return 3 * S[5][G_NWAIT] + 8 <= S[8][0].shape[0]


@kernel
def step(S, row):
    """One loop turn from Python: the batch size (0 idle, -1 out of memory, -2 the in-batch
    tree is too small: grow it and call again, -3 no work: nothing done); ``row`` gets the step's ``STEP_COLUMNS``
    when a batch ran."""
    if not has_work(S):
        return -3
    if not batch_tree_fits(S):
        return -2
    count = iterate(S)
    if count == 0 and S[5][G_POPPED]:              # processed only: took no step
        if not has_work(S):
            return -3
        if not batch_tree_fits(S):
            return -2
        count = iterate(S)
    if count > 0:
        step_row(S, row)
    return count


@kernel
def run_steps(S, due, L, STEPS, SCHED, EVENTS):
    """A whole run on the step clock: requests ``L[0]``.. added when ``due`` (arrival
    steps, the idle jump as ``loop.simulate``), steps until done or a buffer is full.
    ``L``: next request, rows of STEPS / SCHED / EVENTS written, the clock, the events'
    count, whether to write SCHED. ``STEPS`` rows ``S_COLUMNS`` + the first SCHED row;
    SCHED (request, new, cached); EVENTS (step, 0 first token / 1 finished, request). DONE, FULL (grow the buffers and call again), SMALL_TREE (grow
    the in-batch tree: ``SGLangState.grow_batch_tree``) or FAILED."""
    SG, BQ, BF, BX = S[5], S[12], S[13], S[14]
    WQ = S[2]
    n = due.shape[0]
    room = SG[G_MAXRUN] + 2
    while True:
        now = L[3]
        while L[0] < n and due[L[0]] <= now:
            WQ[SG[G_NWAIT]] = L[0]
            SG[G_NWAIT] += 1
            L[0] += 1
        if not has_work(S):
            if L[0] >= n:
                return DONE
            L[3] = max(now, due[L[0]])
            continue
        if L[1] >= STEPS.shape[0] or (L[5] and L[2] + room > SCHED.shape[0]) or \
                L[4] + 2 * room > EVENTS.shape[0]:
            return FULL
        if not batch_tree_fits(S):
            return SMALL_TREE
        count = iterate(S)
        if count < 0:
            return FAILED
        if count == 0:
            if SG[G_POPPED]:
                continue                            # overlap: processed only
            return FAILED                           # stuck: work but no batch
        row = STEPS[L[1]]
        step_row(S, row)
        row[S_COLUMNS] = L[2]
        if L[5]:
            for i in range(count):
                SCHED[L[2], 0], SCHED[L[2], 1], SCHED[L[2], 2] = BQ[i, 0], BQ[i, 1], BQ[i, 2]
                L[2] += 1
        for i in range(SG[G_NF]):
            EVENTS[L[4], 0], EVENTS[L[4], 1], EVENTS[L[4], 2] = row[0], 0, BF[i]
            L[4] += 1
        for i in range(SG[G_NX]):
            EVENTS[L[4], 0], EVENTS[L[4], 1], EVENTS[L[4], 2] = row[0], 1, BX[i]
            L[4] += 1
        L[1] += 1
        L[3] = now + 1


@kernel
def has_work_py(S):
    return has_work(S)


@kernel
def num_running_py(S):
    return num_running(S)


@kernel
def peek(NI, TG, TOK, Q, DEV):
    """The cached prefix of ``Q`` (whole pages), touching nothing (a router's look); with
    HiCache (``DEV``: the nodes' device flags, else empty) the device prefix."""
    page = TG[7]
    length = Q.shape[0] // page * page
    node, offset = 0, 0
    while offset < length:
        c = find_child(NI, TOK, page, node, Q, offset)
        if c < 0 or (DEV.shape[0] > 0 and not DEV[c]):
            break
        m = match_len(NI, TOK, page, c, Q, offset, length - offset)
        offset += m
        if m < NI[c, N_KL]:
            break
        node = c
    return offset


class SGLangState:
    """The arrays of one scheduler (``S``), grown from Python as requests arrive."""

    def __init__(self, *, max_total_tokens: int, page_size: int = 1,
                 schedule_policy: str = "fcfs", max_running_requests: int = 256,
                 chunked_prefill_size: int | None = 8192, max_prefill_tokens: int = 16384,
                 schedule_conservativeness: float = 1.0, radix_eviction_policy: str = "lru",
                 seed: int = 0, block_size: int = 1, requests: int = 64,
                 tokens: int = 4096, overlap: bool = False,
                 hicache: tuple | None = None) -> None:
        P = page_size
        self.hicache = hicache is not None             # (write policy, host pool tokens)
        self.tree = new_tree(max_total_tokens // P + 8, P, radix_eviction_policy) \
            if hicache is None else new_hitree(max_total_tokens, hicache[1], P,
                                               radix_eviction_policy, hicache[0])
        self.batch_tree = new_tree(3 * WAITING_QUEUE_PREFIX_MATCH_MAX + 8, 1, "lru")
        self.TOK = np.zeros(max(tokens, 16), np.int64)
        self.ntok = 0
        self.R = np.zeros((0, R_COLUMNS), np.int64)
        self.WQ = self.RUN = self.LB = self.CAN = self.BF = self.BX = self.QB = \
            np.zeros(0, np.int64)
        self.BQ = np.zeros((0, 3), np.int64)
        self.SG = np.zeros(G_COLUMNS, np.int64)
        self.SF = np.zeros(4, np.float64)
        SG, SF = self.SG, self.SF
        SG[G_CHUNKED] = SG[G_NEWCHUNK] = -1
        SG[G_FREE] = max_total_tokens // P * P
        SG[G_P], SG[G_POLICY] = P, POLICY_CODES.index(schedule_policy)
        SG[G_MAXRUN], SG[G_MAXPREFILL] = max_running_requests, max_prefill_tokens
        SG[G_CHUNK] = -1 if chunked_prefill_size is None else chunked_prefill_size
        SG[G_LRU], SG[G_BLOCK] = radix_eviction_policy == "lru", block_size
        SG[G_OVERLAP] = overlap
        init = min(INIT_NEW_TOKEN_RATIO * schedule_conservativeness, 1.0)
        SF[F_MIN] = min(init * MIN_RATIO_FACTOR, 1.0)
        SF[F_DECAY] = (init - SF[F_MIN]) / DECAY_STEPS
        SF[F_RATIO] = init
        state = random.Random(seed).getstate()[1]
        self.MT = np.array(state, np.int64)
        self.SCR = np.zeros((0, 8), np.int64)
        self._state = None
        self._grow_requests(requests)

    def _grow_requests(self, count: int) -> None:
        self._state = None
        old = self.R.shape[0]
        count = max(count, 2 * old, 16)
        R = np.zeros((count, R_COLUMNS), np.int64)
        R[:old] = self.R
        self.R = R
        for name in ("WQ", "RUN", "LB", "CAN", "BF", "BX", "QB"):
            array = np.zeros(count + 2, np.int64)
            array[:old] = getattr(self, name)[:old]
            setattr(self, name, array)
        self.BQ = np.zeros((count + 2, 3), np.int64)
        scratch = max(count + 2, self.tree[0].shape[0] + 2)
        self.SCR = np.zeros((2 * scratch, 8), np.int64)

    def grow_batch_tree(self) -> None:
        """An in-batch tree for every waiting request (``lpm`` / ``dfs-weight``)."""
        nodes = max(3 * int(self.SG[G_NWAIT]) + 8, 2 * self.batch_tree[0].shape[0])
        self.batch_tree = new_tree(nodes, 1, "lru")
        self._state = None

    def add(self, index: int, tokens: np.ndarray, prompt: int, max_new: int,
            queue: bool = True) -> int:
        """A request (its prompt + output tokens); queued unless ``queue`` is False
        (``run_steps`` queues by arrival). Its row."""
        r = int(self.SG[G_NREQ])
        if r >= self.R.shape[0]:
            self._grow_requests(r + 1)
        size = len(tokens)
        if self.ntok + size > self.TOK.shape[0]:
            TOK = np.zeros(max(2 * self.TOK.shape[0], self.ntok + size), np.int64)
            TOK[:self.ntok] = self.TOK[:self.ntok]
            self.TOK = TOK
            self._state = None
        self.TOK[self.ntok:self.ntok + size] = tokens
        row = self.R[r]
        row[R_TOFF], row[R_N], row[R_MAXNEW], row[R_INDEX] = self.ntok, prompt, max_new, index
        row[R_LAST] = row[R_LOCK] = -1
        row[R_FSCHED] = row[R_FTOK] = row[R_FINSTEP] = row[R_HIT] = -1
        self.ntok += size
        self.SG[G_NREQ] = r + 1
        if queue:
            self.WQ[self.SG[G_NWAIT]] = r
            self.SG[G_NWAIT] += 1
        return r

    def add_many(self, indices: np.ndarray, parts: list, sizes: np.ndarray,
                 prompts: np.ndarray, max_new: np.ndarray) -> None:
        """Requests in bulk, not queued (``run_steps`` queues them by arrival): request
        ``indices[i]`` has ``sizes[i]`` tokens, ``parts`` in order (concatenated)."""
        first, count, total = int(self.SG[G_NREQ]), len(indices), int(sizes.sum())
        if first + count > self.R.shape[0]:
            self._grow_requests(first + count)
        if self.ntok + total > self.TOK.shape[0]:
            TOK = np.empty(self.ntok + total + 16, np.int64)
            TOK[:self.ntok] = self.TOK[:self.ntok]
            self.TOK = TOK
            self._state = None
        if parts:
            np.concatenate(parts, out=self.TOK[self.ntok:self.ntok + total], casting="unsafe")
        rows = self.R[first:first + count]
        rows[:] = 0
        rows[:, R_TOFF] = self.ntok + np.concatenate(([0], np.cumsum(sizes)[:-1]))
        rows[:, R_N], rows[:, R_MAXNEW], rows[:, R_INDEX] = prompts, max_new, indices
        for column in (R_LAST, R_LOCK, R_FSCHED, R_FTOK, R_FINSTEP, R_HIT):
            rows[:, column] = -1
        self.ntok += total
        self.SG[G_NREQ] = first + count

    def device_flags(self) -> np.ndarray:
        """``peek``'s ``DEV``: the nodes' device flags with HiCache, else empty."""
        return self.tree[3][:, H_DEV] if self.hicache else np.zeros(0, np.int64)

    def enqueue(self, r: int) -> None:
        """Row ``r`` (added, not queued) joins the waiting queue."""
        self.WQ[self.SG[G_NWAIT]] = r
        self.SG[G_NWAIT] += 1

    def state(self) -> tuple:
        """The kernels' tuple (rebuilt only after an array was replaced)."""
        if self._state is None:
            self._state = self._tuple()
        return self._state

    def _tuple(self) -> tuple:
        return (self.TOK, self.R, self.WQ, self.RUN, self.LB, self.SG, self.SF, self.tree,
                self.batch_tree, self.SCR, self.MT, self.CAN, self.BQ, self.BF, self.BX,
                self.QB)
