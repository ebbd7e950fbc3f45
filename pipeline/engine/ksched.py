"""vLLM v1's scheduler compiled: ``Scheduler.schedule`` / ``update_from_output`` and
``EngineCore.step`` / ``step_with_batch_queue`` (vLLM 0.33.0, ``vllm/v1/core/sched/`` and
``vllm/v1/engine/core.py``), for FCFS text requests without speculative decoding.

Kept literally: running requests first (in order, each up to its remaining tokens, the
``long_prefill_token_threshold`` when more than one request is eligible, the step's token
budget and ``max_model_len``), preemption of the most recently admitted running request
when ``allocate_slots`` finds no room (blocks freed tail first, recomputed on re-admission);
then, only when nothing was preempted, the FCFS waiting queue up to ``max_num_seqs``
running: a prefix-cache lookup of at most ``num_tokens - 1`` tokens, the optional CPU tier
(a KV connector loading synchronously), no chunking without chunked prefill (stop the
queue), the admission check ``scheduler_reserve_full_isl`` (the whole sequence must fit in
the free blocks), blocks hashed as soon as they are allocated full, so a request admitted
later in the same step hits them. A request finishes when its batch samples its
``max_tokens``-th token or it reaches ``max_model_len``; its blocks are freed tail first.
With ``async_scheduling`` the engine keeps two batches in flight: a batch's output is
processed after the next one is scheduled, running requests carry output placeholders,
and a request preempted with output in flight waits in the queue until that output
arrives (``num_stale_output_tokens``).

State ``S = (C, G, R, KEYS, BT, P, BH, HT, RUN, WQ, BQ, BSMP, BMETA, HIT, BUF, EV, REC)``
(``pipeline.components.engine_layout``); the CPU tier ``T`` (``pipeline.components.ktier``, or a Python
tier: ``pipeline.components.kgeneric``).

With vLLM's native offloading (``O``: ``pipeline.engine.knative``) the waiting loop drains
the requests holding KV first (async loads, vLLM's ``kv_holding_waiting``), asks the
connector after the GPU hit, admits an async load into ``WAITING_FOR_REMOTE_KVS`` (its
blocks allocated with the in-flight prefills' blocks kept free, not cached until loaded),
and each schedule ends with the connector's stores; the worker's finished transfers are
processed with the batch's output.
"""

from __future__ import annotations

import numpy as np

from pipeline.components.kjit import helper, inlined
from pipeline.components.kpool import (cache_full_blocks, free_blocks, get_new_blocks,
                                   longest_hit, touch)
from pipeline.components.kgeneric import tier_lookup, tier_store
from pipeline.engine.kconnector import (after_alloc, build_stores, complete, finished,
                                        inflight_reserved, matched, reserve_sync,
                                        step_in_flight, worker_start)
from pipeline.engine.kstep import step_time
from pipeline.components.engine_layout import (
    B_HASREC, B_NSAMP, B_NSCHED, B_STEP, BCAP, BOFF, C_ASYNC, C_BS, C_CHUNKED, C_HMASK,
    C_MAXBATCH, C_MAXLEN, C_MAXSEQS, C_THRESH, COMPUTED, CPUHIT, ERR_BLOCKS, FIN, FINISHED,
    FSCHED, FTOK, G_ERROR, G_EVON, G_FIN, G_NEV, G_NFREE, G_NRUN, G_QHEAD, G_QLEN, G_STEP,
    G_WHEAD, G_WLEN, GPUHIT, HOLDS, INDEX, INFLIGHT, KOFF, LIMIT, MAXTOK, NBLK, NCACHED,
    NONE, NPROMPT, NTOK, PREEMPT, PREEMPTED, REF, RUNNING, STALE, STALEF, STATUS, STORED,
    T_ON, X_CONTEXT, X_DECODE, X_FREE, X_HAS, X_NFIRST, X_NRUN, X_NSCHED, X_NWAIT,
    X_PREFILL, X_Q, X_RELOAD, X_STEP, F_COEF, LOAD_DONE, LOAD_FLIGHT, LOAD_NONE,
    O_DEFER, O_JLEN, O_KLEN, O_MODEL, O_NFIN, O_ON, O_PSEQ, O_SSEQ, O_SYNC_USED, O_TIMED,
    X_INFL, X_LOAD, X_LSEQ)

__all__ = ["engine_step", "wait_append"]

#: Constant arguments as int64, not numba literals: a literal 0 or 1 at a call site compiled
#: its callee (and everything under it) once more for that value; one type, one compile.
ZERO, ONE = np.int64(0), np.int64(1)


@helper
def wait_append(G, WQ, slot):
    WQ[(G[G_WHEAD] + G[G_WLEN]) % WQ.size] = slot
    G[G_WLEN] += 1


@helper
def _wait_remove_at(G, WQ, p):
    """Remove the p-th waiting request (the p before it move one place back)."""
    cap, head = WQ.size, G[G_WHEAD]
    for j in range(p, 0, -1):
        WQ[(head + j) % cap] = WQ[(head + j - 1) % cap]
    G[G_WHEAD] = (head + 1) % cap
    G[G_WLEN] -= 1


@helper
def _blocks_needed(S, slot, num_tokens, nhit):
    """SingleTypeKVCacheManager.get_num_blocks_to_allocate (full attention)."""
    C, R, P, HIT = S[0], S[2], S[5], S[13]
    required = -(-num_tokens // C[C_BS])
    if R[slot, NCACHED] != NONE:
        return max(required - R[slot, NBLK], 0)
    evictable = 0
    for i in range(nhit):
        if P[HIT[i], REF] == 0:
            evictable += 1
    return max(required - nhit - R[slot, NBLK], 0) + evictable


@helper
def _grow(S, slot, count):
    C, G, R, BT, P, BH, HT = S[0], S[1], S[2], S[4], S[5], S[6], S[7]
    if count <= 0:
        return
    if R[slot, NBLK] + count > R[slot, BCAP]:
        G[G_ERROR] = ERR_BLOCKS
        return
    get_new_blocks(P, BH, HT, C[C_HMASK], BT, R[slot, BOFF] + R[slot, NBLK], count)
    R[slot, NBLK] += count
    G[G_NFREE] -= count


@helper
def _cache_blocks(S, slot, num_tokens):
    """FullAttentionManager.cache_blocks: hash the newly full blocks."""
    C, R, KEYS, BT, P, BH, HT = S[0], S[2], S[3], S[4], S[5], S[6], S[7]
    cached = max(R[slot, NCACHED], 0)
    full = min(num_tokens, R[slot, NTOK]) // C[C_BS]
    if cached >= full:
        return
    cache_full_blocks(P, BH, HT, C[C_HMASK], KEYS, R[slot, KOFF], BT, R[slot, BOFF],
                      cached, full)
    R[slot, NCACHED] = full


@helper
def _allocate_slots(S, slot, num_new, nhit, external, admission, reserved, delay):
    """KVCacheManager.allocate_slots; False (nothing changed) when it returns None.
    ``reserved``: blocks to leave free (an async load's admission); ``delay``: blocks
    not cached yet (an async load: cached when it is in)."""
    C, G, R, BT, P, HIT = S[0], S[1], S[2], S[4], S[5], S[13]
    size, max_len = C[C_BS], C[C_MAXLEN]
    local = R[slot, COMPUTED] + nhit * size
    total = min(local + external, max_len)
    if admission:                                     # scheduler_reserve_full_isl
        if _blocks_needed(S, slot, min(R[slot, NTOK], max_len), nhit) > G[G_NFREE]:
            return False
    need = min(total + num_new, max_len)
    if _blocks_needed(S, slot, need, nhit) > G[G_NFREE] - reserved:
        return False
    if (nhit > 0 or external > 0) and R[slot, NCACHED] == NONE:
        G[G_NFREE] -= touch(P, HIT, nhit)
        boff = R[slot, BOFF]
        for i in range(nhit):
            BT[boff + i] = HIT[i]
        R[slot, NBLK] = nhit
        R[slot, NCACHED] = nhit
        if external > 0:
            _grow(S, slot, max(0, -(-(local + external) // size) - R[slot, NBLK]))
    _grow(S, slot, -(-need // size) - R[slot, NBLK])
    if not delay:
        _cache_blocks(S, slot, min(total + num_new, R[slot, NTOK]))
    return True


@helper
def _free_request(S, slot):
    """KVCacheManager.free: tail first (unhashed blocks prepended, as since vLLM 0.24)."""
    G, R, BT, P, BUF = S[1], S[2], S[4], S[5], S[14]
    G[G_NFREE] += free_blocks(P, BT, R[slot, BOFF], R[slot, NBLK], BUF, np.bool_(True))
    R[slot, NBLK] = 0
    R[slot, NCACHED] = NONE


@inlined
def _preempt(S, O, slot):
    """Scheduler._preempt_request: to the front of the waiting queue."""
    G, R, WQ = S[1], S[2], S[9]
    _free_request(S, slot)
    if O[0][O_ON] != 0:
        O[7][slot, X_INFL] = 0
    R[slot, STATUS] = PREEMPTED
    R[slot, COMPUTED] = 0
    R[slot, STALE] = R[slot, INFLIGHT]
    R[slot, HOLDS] = 0
    R[slot, PREEMPT] += 1
    G[G_WHEAD] = (G[G_WHEAD] - 1) % WQ.size
    WQ[G[G_WHEAD]] = slot
    G[G_WLEN] += 1


@helper
def _started(S, O, native, q, slot, num_new, start, step):
    """Add the entry to batch ``q`` and run _update_after_schedule for it."""
    C, R, BQ, BSMP, BMETA, REC = S[0], S[2], S[10], S[11], S[12], S[16]
    RX = O[7]
    if native and O[0][O_DEFER] != 0:                 # last_sched_seq: this step's
        RX[slot, X_LSEQ] = O[0][O_SSEQ] + 1
    e = BMETA[q, B_NSCHED]
    BQ[q, e, 0], BQ[q, e, 1], BQ[q, e, 2] = slot, num_new, start
    BMETA[q, B_NSCHED] = e + 1
    computed = start + num_new
    R[slot, COMPUTED] = computed
    asynchronous = C[C_ASYNC] != 0
    if asynchronous:                                  # sync: processed before the next one
        R[slot, INFLIGHT] += num_new
    if R[slot, FSCHED] == NONE:
        R[slot, FSCHED] = step
    if computed >= R[slot, NTOK] + R[slot, HOLDS]:    # not a prefill chunk: it samples
        if native:                                    # no longer an in-flight prefill
            RX[slot, X_INFL] = 0
        BSMP[q, BMETA[q, B_NSAMP]] = slot
        BMETA[q, B_NSAMP] += 1
        if asynchronous:
            R[slot, HOLDS] += 1
    if num_new == 1 and start >= R[slot, NPROMPT]:
        REC[X_DECODE] += 1
    else:
        REC[X_PREFILL] += num_new
    REC[X_CONTEXT] += computed


@inlined
def _schedule_holding(S, O, q, budget, threshold, step):
    """The requests holding KV in the waiting queue (vLLM's ``kv_holding_waiting``: async
    loads), drained first: a load still in flight is skipped, a finished one caches its
    blocks and is scheduled (the last token recomputed when the whole prompt was loaded).
    Returns (budget left, True when the waiting loop stops here)."""
    C, G, R, RUN = S[0], S[1], S[2], S[8]
    OC, RX, KQ = O[0], O[7], O[11]
    p = ZERO
    while budget > 0 and p < OC[O_KLEN]:
        if G[G_NRUN] >= C[C_MAXSEQS]:
            return budget, True
        slot = KQ[p]
        if RX[slot, X_LOAD] == LOAD_FLIGHT:
            p += 1
            continue
        if RX[slot, X_LOAD] == LOAD_DONE:            # _update_waiting_for_remote_kv
            _cache_blocks(S, slot, R[slot, COMPUTED])
            if R[slot, COMPUTED] == R[slot, NTOK]:
                R[slot, COMPUTED] = R[slot, NTOK] - 1
            RX[slot, X_LOAD] = LOAD_NONE
        computed = R[slot, COMPUTED]
        num_new = R[slot, NTOK] - computed
        if 0 < threshold < num_new:
            num_new = threshold
        if C[C_CHUNKED] == 0 and num_new > budget:
            return budget, True
        num_new = min(num_new, budget)
        if not _allocate_slots(S, slot, num_new, ZERO, ZERO, np.bool_(True), ZERO,
                               np.bool_(False)):
            return budget, True
        OC[O_KLEN] -= 1
        for j in range(p, OC[O_KLEN]):
            KQ[j] = KQ[j + 1]
        RUN[G[G_NRUN]] = slot
        G[G_NRUN] += 1
        R[slot, STATUS] = RUNNING
        _started(S, O, O[0][O_ON] != 0, q, slot, num_new, computed, step)
        budget -= num_new
    return budget, False


@inlined
def _schedule_waiting(S, T, O, q, budget, threshold, step):
    """The waiting-queue half of schedule(); returns the tokens reloaded."""
    C, G, R, KEYS, HT, RUN, WQ, HIT = S[0], S[1], S[2], S[3], S[7], S[8], S[9], S[13]
    size = C[C_BS]
    reloads = 0
    native = O[0][O_ON] != 0
    if native:
        budget, stop = _schedule_holding(S, O, q, budget, threshold, step)
        if stop:
            return 0
    p = ZERO                                          # stale requests skipped at the front
    while budget > 0 and p < G[G_WLEN]:
        if G[G_NRUN] >= C[C_MAXSEQS]:
            break
        slot = WQ[(G[G_WHEAD] + p) % WQ.size]
        if R[slot, STALE] > 0:
            p += 1
            continue
        nhit = 0
        external = 0
        local = 0
        loading = False
        if R[slot, COMPUTED] == 0:
            nhit = longest_hit(HT, C[C_HMASK], KEYS, R[slot, KOFF],
                               (R[slot, NTOK] - 1) // size, HIT)
            local = nhit * size
            if T[0][T_ON] != 0:
                external = max(tier_lookup(T, R, KEYS, slot, local) - local, 0)
            elif native:
                external = matched(S, O, slot, local)
                if external < 0:                      # the connector asks again later
                    p += 1
                    continue
                loading = external > 0 and not reserve_sync(S, O, slot, local, external)
            computed = local + external
            if R[slot, PREEMPT] <= 0:
                R[slot, GPUHIT], R[slot, CPUHIT] = local, external
        else:
            computed = R[slot, COMPUTED]
        if loading:                                   # WAITING_FOR_REMOTE_KVS
            if not _allocate_slots(S, slot, ZERO, nhit, external, np.bool_(True),
                                   inflight_reserved(S, O), np.bool_(True)):
                break
            after_alloc(S, O, slot, local, external, False, step)
            _wait_remove_at(G, WQ, p)
            R[slot, COMPUTED] = computed
            O[7][slot, X_LOAD], O[7][slot, X_INFL] = LOAD_FLIGHT, 1
            O[11][O[0][O_KLEN]] = slot
            O[0][O_KLEN] += 1
            continue
        num_new = R[slot, NTOK] - computed
        if 0 < threshold < num_new:
            num_new = threshold
        if C[C_CHUNKED] == 0 and num_new > budget:
            break
        num_new = min(num_new, budget)
        if not _allocate_slots(S, slot, num_new, nhit, external, np.bool_(True), ZERO,
                               np.bool_(False)):
            break
        if native:
            if external > 0:                          # a synchronous load
                after_alloc(S, O, slot, local, external, True, step)
            if computed + num_new < R[slot, NTOK]:
                O[7][slot, X_INFL] = 1
        _wait_remove_at(G, WQ, p)
        RUN[G[G_NRUN]] = slot
        G[G_NRUN] += 1
        R[slot, STATUS] = RUNNING
        R[slot, COMPUTED] = computed
        _started(S, O, O[0][O_ON] != 0, q, slot, num_new, computed, step)
        budget -= num_new
        if not native:
            reloads += external
    return reloads


@inlined
def _schedule(S, T, O, q):
    """Scheduler.schedule into batch slot ``q``, then _update_after_schedule; the record
    totals in REC (``REC[X_HAS]`` 0 when it scheduled nothing)."""
    C, G, R, RUN, BMETA, REC = S[0], S[1], S[2], S[8], S[12], S[16]
    for j in range(BMETA.shape[1]):                   # (loops: a slice is a new view)
        BMETA[q, j] = 0
    for j in range(REC.size):
        REC[j] = 0
    budget = C[C_MAXBATCH]
    threshold = C[C_THRESH] if G[G_NRUN] + G[G_WLEN] + O[0][O_KLEN] > 1 else 0
    max_len, size = C[C_MAXLEN], C[C_BS]
    step = G[G_STEP]
    preempted = False
    i = 0
    while i < G[G_NRUN]:                   # the list only shrinks at its end (preemption)
        if budget <= 0:
            break
        slot = RUN[i]
        computed, holds = R[slot, COMPUTED], R[slot, HOLDS]
        i += 1
        if holds > 0 and computed + 2 - holds >= R[slot, NPROMPT] + R[slot, MAXTOK]:
            continue
        num_new = R[slot, NTOK] + holds - computed
        if num_new == 1 and computed + 1 < max_len:
            # a decode: allocate_slots gives it one more block when its last one is full
            # (when one is free; else the general path below preempts), and caches the
            # block it fills (num_tokens <= computed + 1 here)
            held = R[slot, NBLK] * size
            if computed < held or (computed == held and G[G_NFREE] > 0):
                if computed == held:
                    _grow(S, slot, ONE)
                if R[slot, NTOK] >= (max(R[slot, NCACHED], 0) + 1) * size:
                    _cache_blocks(S, slot, R[slot, NTOK])
                _started(S, O, O[0][O_ON] != 0, q, slot, ONE, computed, step)
                budget -= 1
                continue
        if 0 < threshold < num_new:
            num_new = threshold
        num_new = max(min(num_new, budget, max_len - computed - 1), 0)
        if num_new == 0:
            continue
        ok = False
        while True:
            if _allocate_slots(S, slot, num_new, ZERO, ZERO, np.bool_(False), ZERO,
                               np.bool_(False)):
                ok = True
                break
            victim = RUN[G[G_NRUN] - 1]
            if step_in_flight(O, victim):             # a deferred free would not help
                break
            G[G_NRUN] -= 1
            _preempt(S, O, victim)
            preempted = True
            if victim == slot:
                break
        if not ok:
            break
        _started(S, O, O[0][O_ON] != 0, q, slot, num_new, computed, step)
        budget -= num_new
    reloads = 0
    if not preempted:
        reloads = _schedule_waiting(S, T, O, q, budget, threshold, step)
    G[G_FIN] = 0
    BMETA[q, B_STEP] = step
    REC[X_Q] = q
    if O[0][O_ON] != 0:                               # build_connector_meta
        build_stores(S, O, q)
        O[0][O_SYNC_USED] = 0
    if BMETA[q, B_NSCHED] == 0:
        return
    if O[0][O_DEFER] != 0:                            # sched_step_seq
        O[0][O_SSEQ] += 1
    G[G_STEP] += 1
    BMETA[q, B_HASREC] = 1
    REC[X_HAS], REC[X_STEP], REC[X_RELOAD] = 1, step, reloads
    REC[X_NRUN], REC[X_NWAIT], REC[X_FREE] = G[G_NRUN], G[G_WLEN] + O[0][O_KLEN], \
        G[G_NFREE]
    REC[X_NSCHED] = BMETA[q, B_NSCHED]


@helper
def _event(G, EV, step, kind, index):
    if G[G_EVON] != 0:
        n = G[G_NEV]
        if n < EV.shape[0]:
            EV[n, 0], EV[n, 1], EV[n, 2] = step, kind, index
            G[G_NEV] = n + 1


@inlined
def _update_from_output(S, T, O, q):
    """Scheduler.update_from_output with one sampled token per finished chunk."""
    C, G, R, KEYS, RUN, WQ, BQ, BSMP, BMETA, EV, REC = S[0], S[1], S[2], S[3], S[8], \
        S[9], S[10], S[11], S[12], S[15], S[16]
    asynchronous = C[C_ASYNC] != 0
    n, step = BMETA[q, B_NSCHED], BMETA[q, B_STEP]
    if n > 0 and O[0][O_DEFER] != 0:                  # processed_step_seq
        O[0][O_PSEQ] += 1
    any_stale = False
    if asynchronous:
        for e in range(n):
            slot = BQ[q, e, 0]
            if R[slot, STATUS] != FINISHED:
                R[slot, INFLIGHT] -= BQ[q, e, 1]
                if R[slot, STALE] > 0:                # output of a preempted request
                    R[slot, STALE] -= BQ[q, e, 1]
                    R[slot, STALEF] = 1
                    any_stale = True
    if T[0][T_ON] != 0:
        for e in range(n):
            slot = BQ[q, e, 0]
            if R[slot, STORED] == 0 and R[slot, STATUS] != PREEMPTED \
                    and R[slot, COMPUTED] - R[slot, INFLIGHT] >= R[slot, NPROMPT]:
                R[slot, STORED] = 1
                tier_store(T, R, KEYS, slot)
    stopped = False
    for e in range(BMETA[q, B_NSAMP]):
        slot = BSMP[q, e]
        before = R[slot, STATUS]
        if before == FINISHED:
            continue
        holds = R[slot, HOLDS]
        R[slot, NTOK] += 1
        if holds > 0 and not (any_stale and R[slot, STALEF] != 0):
            R[slot, HOLDS] = holds - 1
            if before == RUNNING:
                _cache_blocks(S, slot, R[slot, COMPUTED] - R[slot, INFLIGHT])
        if R[slot, FTOK] == NONE:
            R[slot, FTOK] = step
            _event(G, EV, step, ZERO, R[slot, INDEX])
            if not asynchronous:
                REC[X_NFIRST] += 1
        if R[slot, NTOK] >= R[slot, LIMIT]:           # max_model_len or max_tokens reached
            R[slot, STATUS] = FINISHED
            R[slot, FIN] = step
            _event(G, EV, step, ONE, R[slot, INDEX])
            G[G_FIN] = 1
            if O[0][O_ON] != 0:                       # the connector, before the free
                finished(S, O, slot)
            _free_request(S, slot)
            if O[0][O_ON] != 0:                       # its stores: next schedule's
                O[7][slot, X_INFL] = 0
                O[12][O[0][O_NFIN]] = slot
                O[0][O_NFIN] += 1
            if before == RUNNING:
                stopped = True
            else:
                for p in range(G[G_WLEN]):
                    if WQ[(G[G_WHEAD] + p) % WQ.size] == slot:
                        _wait_remove_at(G, WQ, p)
                        break
    if any_stale:
        for e in range(n):
            R[BQ[q, e, 0], STALEF] = 0
    if O[0][O_ON] != 0 and O[0][O_JLEN] > 0:          # the worker's finished transfers
        complete(S, O, q, G[G_STEP])
    if stopped:
        kept = 0
        for i in range(G[G_NRUN]):
            slot = RUN[i]
            if R[slot, STATUS] != FINISHED:
                RUN[kept] = slot
                kept += 1
        G[G_NRUN] = kept


@helper
def engine_step(S, T, O):
    """One engine iteration (``EngineCore.step`` or ``step_with_batch_queue``); returns 1
    when it scheduled > 0 tokens (its totals in REC, its batch slot ``REC[X_Q]``), else 0.
    Outputs processed by this call go to EV (when ``G[G_EVON]``)."""
    C, G, REC = S[0], S[1], S[16]
    OC = O[0]
    native = OC[O_ON] != 0
    has = G[G_NRUN] > 0 or G[G_WLEN] > 0 or G[G_FIN] != 0 or (
        native and (OC[O_KLEN] > 0 or OC[O_JLEN] > 0))
    asynchronous = C[C_ASYNC] != 0
    REC[X_HAS] = 0
    if has:                                           # (one call site each: inlined)
        q = (G[G_QHEAD] + G[G_QLEN]) % 2 if asynchronous else ZERO
        _schedule(S, T, O, q)
        if native:                                    # the worker starts the step
            ms = 0.0
            if REC[X_HAS] != 0 and OC[O_TIMED] != 0:
                ms = step_time(S, OC[O_MODEL], O[1][F_COEF:])
            worker_start(O, ms, q, REC[X_HAS] == 0,    # a batch with tokens in flight
                         G[G_QLEN] > 0 and S[12][G[G_QHEAD], B_NSCHED] > 0)
        if asynchronous:
            G[G_QLEN] += 1
            if G[G_QLEN] < 2 and (REC[X_HAS] != 0 or G[G_NRUN] > 0 or G[G_WLEN] > 0 or (
                    native and (OC[O_KLEN] > 0 or OC[O_JLEN] > 0))):
                return REC[X_HAS]
    elif not asynchronous or G[G_QLEN] == 0:
        return 0
    q = ZERO
    if asynchronous:
        q = G[G_QHEAD]
        G[G_QHEAD] = (q + 1) % 2
        G[G_QLEN] -= 1
    _update_from_output(S, T, O, q)
    return REC[X_HAS]
