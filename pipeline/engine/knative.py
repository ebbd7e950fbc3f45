"""vLLM 0.33.0's native offloading in the engine loop, compiled: the ``OffloadingConnector``'s
scheduler side (``distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py``) over
the CPU manager's kernels (``pipeline.components.vllm_offload_kernels``), and the host link
its transfers queue on. docs/offloading.md gives each rule with vLLM's file and line.

* ``matched``: ``get_num_new_matched_tokens`` (deferral while the request has transfers in
  flight, the prefix lookup from the chunk where the GPU hit ends, HIT_PENDING and chunks
  being loaded defer); ``reserve_sync``: the step's ``sync_load_budget_bytes``;
* ``after_alloc``: ``update_state_after_alloc`` (pin the chunks, one load job, the store
  cursor past the loaded chunks);
* ``build_stores``: ``_build_store_jobs`` for the scheduled then the finished requests
  (from each request's cursor, prompt only), then ``on_request_finished``;
* ``worker_start`` / ``complete``: the transfer rule: at a step's start the previous step's
  stores, then this step's loads, go FIFO on one link (``bytes / rate + latency`` each on
  the time clock, no time on the step clock); the forward pass waits for the step's
  synchronous loads; the step's output reports every job done by its end (on the step
  clock: every job submitted by that step or an earlier one);
* ``step_in_flight``: async scheduling's ``defer_block_free``
  (``v1/core/sched/scheduler.py``'s ``_request_blocks_can_be_freed``): a request that a
  non-empty step still in flight scheduled cannot free its blocks now, so it is not
  preempted (docs/offloading.md says why no free is ever deferred here).

The state tuple O is laid out in ``pipeline.components.engine_layout`` (``O_*``).
"""

from __future__ import annotations

from pipeline.components.kjit import helper, inlined
from pipeline.components.vllm_offload_kernels import (complete_load, complete_store,
                                                      lookup, prepare_load, prepare_store,
                                                      request_finished)
from pipeline.components.vllm_offload_policies import HIT_PENDING, MISS
from pipeline.components.engine_layout import (
    ERR_JOBS, F_END0, F_FREE, F_LATENCY, F_NEXTARR, F_NOW,
    F_RATE, J_A, J_B, J_CHUNKS, J_ID, J_KIND, J_SLOT, J_SUB, JOB_ASYNC, JOB_STORE,
    JOB_SYNC, LOAD_DONE, NBLK, NKEYS, NONE, NPROMPT, NTOK, O_BPC, O_BS,
    O_CHUNK_BYTES, O_DEFER, O_DONE, O_ERROR, O_JHEAD, O_JLEN, O_JNEXT, O_KLEN,
    O_KVBPT, O_LOADB, O_NFIN, O_PSEQ, O_STOREB, O_STOREFROM, O_SYNC_BUDGET,
    O_SYNC_USED, O_TIMED, O_TPC, O_WSEQ, RF_END, RF_START, RF_SUBMIT, X_COFF, X_INFL,
    X_JOBS, X_LDONE, X_LOAD, X_LSEQ, X_LSTEP, X_NEXT, X_SCAP)

__all__ = ["matched", "reserve_sync", "after_alloc", "inflight_reserved", "build_stores",
           "worker_start", "complete", "jobs_in_flight", "step_in_flight"]


@inlined
def _chunks(O, R, slot):
    """The request's chunks now (``len(offload_keys)``: whole chunks of its full blocks)."""
    OC = O[0]
    return min(R[slot, NTOK] // OC[O_BS], R[slot, NKEYS]) // OC[O_BPC]


@inlined
def _rows(O, R, slot):
    """The request's chunk key rows (every chunk its keys reach) and its flags."""
    OC, CROW, CFL, RX = O[0], O[3], O[4], O[7]
    base = RX[slot, X_COFF]
    count = R[slot, NKEYS] // OC[O_BPC]
    return CROW[base:base + count], CFL[base:base + count]


@helper
def matched(S, O, slot, local):
    """``get_num_new_matched_tokens(request, local)``: tokens to load beyond the GPU hit
    ``local``; -1 for vLLM's None (ask again next step)."""
    R = S[2]
    OC, M, CROW, RX, CBL = O[0], O[2], O[3], O[7], O[13]
    RX[slot, X_NEXT] = 0                          # restarting at token 0: offer every chunk
    if RX[slot, X_JOBS] > 0:
        return -1
    tpc = OC[O_TPC]
    keys = _chunks(O, R, slot)
    max_hit = min(R[slot, NTOK], keys * tpc)
    if max_hit - local < tpc:
        return 0
    end = min(-(-max_hit // tpc), keys)
    start = local // tpc
    base = RX[slot, X_COFF]
    hits = 0
    pending = False
    for c in range(start, end):
        result = lookup(M, CROW[base + c])
        if result == MISS:
            break
        hits += 1
        if result == HIT_PENDING:
            pending = True
    if pending:
        return -1
    if hits == 0:
        return 0
    new = min(max_hit, tpc * (start + hits)) - local
    if new < tpc:
        return 0
    for c in range(start, -(-(local + new) // tpc)):
        if CBL[CROW[base + c]] != 0:              # another request is loading it
            return -1
    return new


@helper
def reserve_sync(S, O, slot, local, hit):
    """``_reserve_sync_load``: True when the hit fits the step's sync-load budget (and
    leaves a token to compute)."""
    R, OC = S[2], O[0]
    if OC[O_SYNC_BUDGET] == 0 or hit <= 0 or local + hit >= R[slot, NTOK]:
        return False
    nbytes = hit * OC[O_KVBPT]
    if OC[O_SYNC_USED] + nbytes > OC[O_SYNC_BUDGET]:
        return False
    OC[O_SYNC_USED] += nbytes
    return True


@inlined
def _new_job(O, slot, kind, a, b, chunks):
    OC, JOB = O[0], O[9]
    if OC[O_JLEN] >= JOB.shape[0]:
        OC[O_ERROR] = ERR_JOBS
        return -1
    j = (OC[O_JHEAD] + OC[O_JLEN]) % JOB.shape[0]
    OC[O_JLEN] += 1
    JOB[j, J_SLOT], JOB[j, J_KIND], JOB[j, J_A], JOB[j, J_B] = slot, kind, a, b
    JOB[j, J_ID], JOB[j, J_SUB], JOB[j, J_CHUNKS] = OC[O_JNEXT], 0, chunks
    OC[O_JNEXT] += 1
    O[7][slot, X_JOBS] += 1
    return JOB[j, J_ID]


@helper
def after_alloc(S, O, slot, local, external, sync, step):
    """``update_state_after_alloc`` of a request loading ``external`` tokens beyond its GPU
    hit ``local``: pin the chunks from the one holding token ``local`` on, one load job."""
    R = S[2]
    OC, M, RQ, RX, RF, CBL, SCR = O[0], O[2], O[6], O[7], O[8], O[13], O[14]
    first = (local // OC[O_BS]) // OC[O_BPC]
    end = -(-(local + external) // OC[O_TPC])
    n = end - first
    chunks = SCR[0, :n]
    for i in range(n):
        chunks[i] = first + i
    rows, flags = _rows(O, R, slot)
    prepare_load(M, rows, flags, RQ[slot], chunks)
    RX[slot, X_NEXT] = end                        # CHUNK_LEVEL: hits are not stored again
    _new_job(O, slot, JOB_SYNC if sync else JOB_ASYNC, first, end, n)
    OC[O_LOADB] += n * OC[O_CHUNK_BYTES]
    if RX[slot, X_LSTEP] == NONE:
        RX[slot, X_LSTEP] = step
        RF[slot, RF_SUBMIT] = -1.0
    if not sync:
        for i in range(n):
            CBL[rows[first + i]] = 1


@helper
def inflight_reserved(S, O):
    """``_inflight_prefill_reserved_blocks``: the blocks the in-flight prefills (running
    prefills, requests holding KV in the waiting queue) still need for their sequences."""
    C, R, RUN = S[0], S[2], S[8]
    OC, RX, KQ = O[0], O[7], O[11]
    size, total = C[0], 0
    for i in range(S[1][2]):                      # G[G_NRUN]
        slot = RUN[i]
        if RX[slot, X_INFL] != 0:
            total += max(-(-min(R[slot, NTOK], C[4]) // size) - R[slot, NBLK], 0)
    for i in range(OC[O_KLEN]):
        slot = KQ[i]
        if RX[slot, X_INFL] != 0:
            total += max(-(-min(R[slot, NTOK], C[4]) // size) - R[slot, NBLK], 0)
    return total


@inlined
def _store_cap(O, R, slot):
    """1 + the most chunks ``_store`` can ever offer for the request (its prompt's whole
    chunks, within its keys), cached in ``X_SCAP``: from that cursor on ``_store`` does
    nothing, so the decode steps skip it."""
    RX = O[7]
    cap = RX[slot, X_SCAP]
    if cap == 0:
        OC = O[0]
        cap = min(R[slot, NPROMPT] // OC[O_TPC], R[slot, NKEYS] // OC[O_BPC]) + 1
        RX[slot, X_SCAP] = cap
    return cap


@inlined
def _store(S, O, slot, tokens, step):
    """``_build_store_jobs`` for one request whose computed tokens reach ``tokens``."""
    R = S[2]
    OC, M, CJOB, RQ, RX, SCR = O[0], O[2], O[5], O[6], O[7], O[14]
    tokens = min(tokens, R[slot, NTOK], R[slot, NPROMPT])     # offload_prompt_only
    storable = min(tokens // OC[O_TPC], _chunks(O, R, slot))
    start = RX[slot, X_NEXT]
    if storable <= start:
        RX[slot, X_NEXT] = max(start, storable)
        return
    n = storable - start
    chunks, stored, evicted = SCR[0, :n], SCR[1, :n], SCR[2, :n]
    for i in range(n):
        chunks[i] = start + i
    rows, flags = _rows(O, R, slot)
    count, _ = prepare_store(M, rows, flags, RQ[slot], chunks, stored, evicted)
    if count < 0:                                  # no room: offered again next step
        return
    RX[slot, X_NEXT] = storable
    if count == 0:
        return
    job = _new_job(O, slot, JOB_STORE, start, storable, count)
    base = RX[slot, X_COFF]
    for i in range(count):
        CJOB[base + stored[i]] = job
    OC[O_STOREB] += count * OC[O_CHUNK_BYTES]


@inlined
def build_stores(S, O, q):
    """``build_connector_meta``'s stores: the batch's requests in order, then the requests
    finished since the last schedule (``max(prompt, tokens - 1)``), then each finished
    request's ``on_request_finished``."""
    R, BQ, BMETA = S[2], S[10], S[12]
    OC, M, RQ, FINQ = O[0], O[2], O[6], O[12]
    step = BMETA[q, 0]
    OC[O_STOREFROM] = OC[O_JNEXT]
    RX = O[7]
    for e in range(BMETA[q, 1]):
        slot = BQ[q, e, 0]
        if RX[slot, X_NEXT] + 1 >= _store_cap(O, R, slot):
            continue                              # its prompt's chunks all offered
        _store(S, O, slot, BQ[q, e, 2] + BQ[q, e, 1], step)
    for i in range(OC[O_NFIN]):
        slot = FINQ[i]
        _store(S, O, slot, max(R[slot, NPROMPT], R[slot, NTOK] - 1), step)
    for i in range(OC[O_NFIN]):
        slot = FINQ[i]
        rows, flags = _rows(O, R, slot)
        request_finished(M, rows, flags, RQ[slot])
    OC[O_NFIN] = 0


@helper
def jobs_in_flight(O):
    return O[0][O_JLEN]


@inlined
def worker_start(O, step_ms, q, empty, in_flight):
    """The fake worker at the start of the step in batch slot ``q`` (clock ``OF[F_NOW]``):
    submit every job not yet submitted but this step's stores (FIFO on the link); the
    step ends ``step_ms`` after its synchronous loads are in (an empty step: at once while
    a batch with tokens is in flight, else when the next job ends or the next request
    arrives).
    Returns the step's end."""
    OC, OF, JOB, JT = O[0], O[1], O[9], O[10]
    timed = OC[O_TIMED] != 0
    now = OF[F_NOW]
    if not timed:                                 # the step clock: the starts' count
        OC[O_WSEQ] += 1
        now = float(OC[O_WSEQ])
    forward = now
    cap = JOB.shape[0]
    for k in range(OC[O_JLEN]):
        j = (OC[O_JHEAD] + k) % cap
        if JOB[j, J_SUB] != 0:
            continue
        if JOB[j, J_KIND] == JOB_STORE and JOB[j, J_ID] >= OC[O_STOREFROM]:
            break                                 # this step's stores: submitted next step
        begin = max(now, OF[F_FREE])
        end = begin
        if timed:
            end = begin + float(JOB[j, J_CHUNKS] * OC[O_CHUNK_BYTES]) / OF[F_RATE] \
                + OF[F_LATENCY]
        OF[F_FREE] = end
        JOB[j, J_SUB] = 1
        JT[j, 0], JT[j, 1] = now, end
        if JOB[j, J_KIND] != JOB_STORE:
            RF = O[8]
            slot = JOB[j, J_SLOT]
            if RF[slot, RF_SUBMIT] == -1.0:
                RF[slot, RF_SUBMIT], RF[slot, RF_START], RF[slot, RF_END] = now, begin, end
        if JOB[j, J_KIND] == JOB_SYNC:
            forward = max(forward, end)
    if not empty:
        end = forward + step_ms
    else:
        end = forward
        if timed and OC[O_JLEN] > 0 and not in_flight:
            head = OC[O_JHEAD] % cap
            if JOB[head, J_SUB] != 0:
                end = max(forward, min(JT[head, 1], OF[F_NEXTARR]))
    OF[F_END0 + q] = end
    return end


@inlined
def complete(S, O, q, step):
    """``update_connector_output`` of the step in batch slot ``q``: every submitted job
    done by its end (FIFO), loads unpinned and their requests marked loaded, stores made
    readable. Returns how many jobs completed."""
    R = S[2]
    OC, OF, M, CROW, CJOB, RX, JOB, JT, CBL, SCR = O[0], O[1], O[2], O[3], O[5], O[7], \
        O[9], O[10], O[13], O[14]
    cap = JOB.shape[0]
    end = OF[F_END0 + q]
    timed = OC[O_TIMED] != 0
    done = 0
    while OC[O_JLEN] > 0:
        j = OC[O_JHEAD] % cap
        if JOB[j, J_SUB] == 0 or JT[j, 1] > end:
            break
        OC[O_JHEAD] = (j + 1) % cap
        OC[O_JLEN] -= 1
        done += 1
        slot, a, b = JOB[j, J_SLOT], JOB[j, J_A], JOB[j, J_B]
        base = RX[slot, X_COFF]
        n = 0
        keys = SCR[0]
        if JOB[j, J_KIND] == JOB_STORE:
            for c in range(a, b):
                if CJOB[base + c] == JOB[j, J_ID]:
                    keys[n] = CROW[base + c]
                    n += 1
            complete_store(M, keys[:n], True)
        else:
            for c in range(a, b):
                keys[n] = CROW[base + c]
                n += 1
            complete_load(M, keys[:n])
            if JOB[j, J_KIND] == JOB_ASYNC:
                for i in range(n):
                    CBL[keys[i]] = 0
                RX[slot, X_LOAD] = LOAD_DONE
            if RX[slot, X_LDONE] == NONE:
                RX[slot, X_LDONE] = step
        RX[slot, X_JOBS] -= 1
    if OC[O_JLEN] == 0:                           # empty: restart at the ring's first rows
        OC[O_JHEAD] = 0                           # (touch a few pages, not all of them)
    OC[O_DONE] += done
    return done


@helper
def step_in_flight(O, slot):
    """``not _request_blocks_can_be_freed``: with ``defer_block_free``, a non-empty step
    that scheduled the request is not processed yet (its ``last_sched_seq`` is past
    ``processed_step_seq``)."""
    return O[0][O_DEFER] != 0 and O[7][slot, X_LSEQ] > O[0][O_PSEQ]
