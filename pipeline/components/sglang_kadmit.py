"""The compiled SGLang scheduler's admission: ``SchedulePolicy.calc_priority`` on the waiting
queue (fcfs, lpm, dfs-weight, lof, random) and ``PrefillAdder`` choosing the prefill batch,
then ``prepare_for_extend`` (over ``sglang_kstate``'s state ``S``; the loop is
``sglang_ksched``)."""

from __future__ import annotations

from pipeline.components.kjit import helper
from pipeline.components.sglang_kradix import insert, match_prefix, reset
from pipeline.components.sglang_kradix_layout import N_FC, N_NS, T_EVICT
from pipeline.components.sglang_kstate import (
    CONTINUE, F_RATIO, F_TOTAL, G_CHUNK, G_CHUNKED, G_EXTEND, G_FREE, G_FULL, G_LRU,
    G_MAXPREFILL, G_MAXRUN, G_NB, G_NCAN, G_NEWCHUNK, G_NRUN, G_NTOK, G_NWAIT, G_P, G_POLICY,
    G_REFRESH, G_STEP, INF_KEY, NO_TOKEN, OTHER, R_BEST, R_DEP, R_EXT, R_FSCHED, R_HIT,
    R_HLOADED, R_HOST, R_KV, R_LAST, R_LOCK, R_MAXNEW, R_MID, R_NMATCH, R_OUT, R_PREFIX,
    R_PROT, R_RETRACTED, R_SEL, R_TOFF, alloc, evict_to_free, fill_len, match)
from pipeline.components.sglang_ktree import t_dec_lock, t_inc_lock, t_load_back, t_match_prefix
from pipeline.components.sglang_settings import (
    CLIP_MAX_NEW_TOKENS, IN_BATCH_CHECK, IN_BATCH_DEPRIORITIZE,
    WAITING_PREFIX_REFRESH_INTERVAL, WAITING_QUEUE_PREFIX_MATCH_MAX)

__all__ = ["calc_priority", "new_prefill_batch", "available", "stable_sort"]


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
