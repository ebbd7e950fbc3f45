"""vLLM v1's ``Scheduler.schedule`` compiled (vLLM 0.33.0, ``vllm/v1/core/sched/
scheduler.py``; the rules are ``pipeline.engine.ksched``'s docstring): the running requests
first (preempting when ``allocate_slots`` finds no room), then, when nothing was
preempted, the waiting queue (with vLLM's native offloading, the requests holding KV
first), each scheduled request's ``_update_after_schedule``; and the waiting queue itself.
"""

from __future__ import annotations

import numpy as np

from pipeline.components.engine_layout import (
    B_HASREC, B_NSAMP, B_NSCHED, B_STEP, COMPUTED, CPUHIT, C_ASYNC, C_BS, C_CHUNKED, C_HMASK,
    C_MAXBATCH, C_MAXLEN, C_MAXSEQS, C_THRESH, FSCHED, GPUHIT, G_FIN, G_NFREE, G_NRUN, G_STEP,
    G_WHEAD, G_WLEN, HOLDS, INFLIGHT, KOFF, LOAD_DONE, LOAD_FLIGHT, LOAD_NONE, MAXTOK, NBLK,
    NCACHED, NONE, NPROMPT, NTOK, O_DEFER, O_KLEN, O_ON, O_SSEQ, O_SYNC_USED, PREEMPT,
    PREEMPTED, RUNNING, STALE, STATUS, T_ON, X_CONTEXT, X_DECODE, X_FREE, X_HAS, X_INFL, X_LOAD,
    X_LSEQ, X_NRUN, X_NSCHED, X_NWAIT, X_PREFILL, X_Q, X_RELOAD, X_STEP)
from pipeline.components.kgeneric import tier_lookup
from pipeline.components.kjit import helper, inlined
from pipeline.components.kpool import longest_hit
from pipeline.engine.kconnector import (after_alloc, build_stores, inflight_reserved, matched,
                                        reserve_sync, step_in_flight)
from pipeline.engine.ksched_blocks import (ONE, ZERO, allocate_slots, cache_blocks,
                                           free_request, grow)

__all__ = ["schedule", "wait_append", "wait_remove_at"]


@helper
def wait_append(G, WQ, slot):
    WQ[(G[G_WHEAD] + G[G_WLEN]) % WQ.size] = slot
    G[G_WLEN] += 1


@helper
def wait_remove_at(G, WQ, p):
    """Remove the p-th waiting request (the p before it move one place back)."""
    cap, head = WQ.size, G[G_WHEAD]
    for j in range(p, 0, -1):
        WQ[(head + j) % cap] = WQ[(head + j - 1) % cap]
    G[G_WHEAD] = (head + 1) % cap
    G[G_WLEN] -= 1


@inlined
def _preempt(S, O, slot):
    """Scheduler._preempt_request: to the front of the waiting queue."""
    G, R, WQ = S[1], S[2], S[9]
    free_request(S, slot)
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
            cache_blocks(S, slot, R[slot, COMPUTED])
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
        if not allocate_slots(S, slot, num_new, ZERO, ZERO, np.bool_(True), ZERO,
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
            if not allocate_slots(S, slot, ZERO, nhit, external, np.bool_(True),
                                   inflight_reserved(S, O), np.bool_(True)):
                break
            after_alloc(S, O, slot, local, external, False, step)
            wait_remove_at(G, WQ, p)
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
        if not allocate_slots(S, slot, num_new, nhit, external, np.bool_(True), ZERO,
                               np.bool_(False)):
            break
        if native:
            if external > 0:                          # a synchronous load
                after_alloc(S, O, slot, local, external, True, step)
            if computed + num_new < R[slot, NTOK]:
                O[7][slot, X_INFL] = 1
        wait_remove_at(G, WQ, p)
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
def schedule(S, T, O, q):
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
                    grow(S, slot, ONE)
                if R[slot, NTOK] >= (max(R[slot, NCACHED], 0) + 1) * size:
                    cache_blocks(S, slot, R[slot, NTOK])
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
            if allocate_slots(S, slot, num_new, ZERO, ZERO, np.bool_(False), ZERO,
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
