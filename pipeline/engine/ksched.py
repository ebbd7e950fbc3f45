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
(``pipeline.components.engine_layout``); the CPU tier ``T`` (``pipeline.components.ktier``,
or a Python tier: ``pipeline.components.kgeneric``).

With vLLM's native offloading (``O``: ``pipeline.engine.knative``) the waiting loop drains
the requests holding KV first (async loads, vLLM's ``kv_holding_waiting``), asks the
connector after the GPU hit, admits an async load into ``WAITING_FOR_REMOTE_KVS`` (its
blocks allocated with the in-flight prefills' blocks kept free, not cached until loaded),
and each schedule ends with the connector's stores; the worker's finished transfers are
processed with the batch's output.

This module is the engine step and ``update_from_output``; ``schedule`` is
``pipeline.engine.ksched_schedule``, the KV cache manager's calls
``pipeline.engine.ksched_blocks``.
"""

from __future__ import annotations

from pipeline.components.engine_layout import (
    B_NSAMP, B_NSCHED, B_STEP, COMPUTED, C_ASYNC, FIN, FINISHED, FTOK, F_COEF, G_EVON, G_FIN,
    G_NEV, G_NRUN, G_QHEAD, G_QLEN, G_STEP, G_WHEAD, G_WLEN, HOLDS, INDEX, INFLIGHT, LIMIT,
    NONE, NPROMPT, NTOK, O_DEFER, O_JLEN, O_KLEN, O_MODEL, O_NFIN, O_ON, O_PSEQ, O_TIMED,
    PREEMPTED, RUNNING, STALE, STALEF, STATUS, STORED, T_ON, X_HAS, X_INFL, X_NFIRST)
from pipeline.components.kgeneric import tier_store
from pipeline.components.kjit import helper, inlined
from pipeline.engine.kconnector import complete, finished, worker_start
from pipeline.engine.ksched_blocks import ONE, ZERO, cache_blocks, free_request
from pipeline.engine.ksched_schedule import schedule, wait_remove_at
from pipeline.engine.kstep import step_time

__all__ = ["engine_step"]


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
                cache_blocks(S, slot, R[slot, COMPUTED] - R[slot, INFLIGHT])
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
            free_request(S, slot)
            if O[0][O_ON] != 0:                       # its stores: next schedule's
                O[7][slot, X_INFL] = 0
                O[12][O[0][O_NFIN]] = slot
                O[0][O_NFIN] += 1
            if before == RUNNING:
                stopped = True
            else:
                for p in range(G[G_WLEN]):
                    if WQ[(G[G_WHEAD] + p) % WQ.size] == slot:
                        wait_remove_at(G, WQ, p)
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
        schedule(S, T, O, q)
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
