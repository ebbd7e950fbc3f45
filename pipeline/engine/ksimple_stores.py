"""The ``SimpleCPUOffloadConnector``'s stores in the engine loop, compiled (vLLM 0.33.0,
``vllm/v1/simple_kv_offload/manager.py``; the state is ``pipeline.engine.ksimple_offload``'s):

* ``build_stores``: ``build_connector_meta`` (540-602) with ``_prepare_eager_store_specs``
  (674-844): the new requests then the cached ones, each block from the request's cursor
  up to its confirmed tokens stored unless unhashed, in flight or already in the pool,
  while slots are free (the LRU slot evicted), its GPU block touched; then the stores
  queued by finished requests; lazy (``_prepare_lazy_store_specs``, 618-672): the GPU
  free queue walked from a cursor, up to ``2 x cdiv(max_num_batched_tokens, block)``
  blocks, each hashed block not in the pool stored; one store and one load event per step;
* ``finished``: ``request_finished_all_groups`` (1250-1289) before the GPU blocks are
  freed: the request's remaining confirmed blocks queued for the next store event.
"""

from __future__ import annotations

from pipeline.components.engine_layout import (
    B_NSAMP, B_NSCHED, B_STEP, BOFF, COMPUTED, FNEXT, FSCHED, G_NFREE, HASHED, HOLDS, NBLK,
    NONE, O_KLEN, O_LOADB, O_NFIN, O_STOREB, REF)
from pipeline.components.kjit import helper, inlined
from pipeline.components.kpool import get_new_blocks, table_find, touch
from pipeline.engine.ksimple_offload import (
    E_COUNT, E_ID, E_START, E_SUB, I_CBH, I_CHT, I_CP, I_GINF, I_RING, I_SC, I_SCR, I_SEV,
    I_SQ, LIVELOCK_SCHEDULES, LOAD, SC_ASYNC, SC_BBYTES, SC_CURSOR, SC_EH0, SC_EL0,
    SC_EMPTY, SC_FREE, SC_ID0, SC_LAZY, SC_QLEN, SC_RHEAD, SC_RLEN, SC_TARGET, SQ_CUR,
    SQ_LEV, SQ_NLOAD, STORE, release_pin, sync_jobs)

__all__ = ["build_stores", "finished"]


@inlined
def _select(S, O, slot, confirmed, out, at):
    """``_select_eager_blocks_to_store`` from the request's cursor: the GPU blocks to store
    into ``out[at:]`` (while slots are free); the cursor moves past them and past the
    blocks not ready. Returns how many."""
    C, R, BT, P, BH = S[0], S[2], S[4], S[5], S[6]
    SQ, SC, GINF, CHT = O[I_SQ], O[I_SC], O[I_GINF], O[I_CHT]
    mask = CHT.shape[0] - 1
    num_free = SC[SC_FREE]
    if 0 >= num_free:
        return 0
    ready = min(R[slot, NBLK], max(confirmed, 0) // C[0])
    boff = R[slot, BOFF]
    n = 0
    i = SQ[slot, SQ_CUR]
    while i < ready:
        b = BT[boff + i]
        if P[b, HASHED] == 0 or GINF[b] != 0 or table_find(CHT, mask, BH[b]) >= 0:
            SQ[slot, SQ_CUR] += 1
            i += 1
            continue
        if n >= num_free:
            break
        out[at + n] = b
        n += 1
        SQ[slot, SQ_CUR] += 1
        i += 1
    return n


@inlined
def _take(S, O, gpu, slots, n):
    """Slots for the ``n`` GPU blocks ``gpu`` (LRU slots evicted), the blocks marked in
    flight and touched."""
    SC, GINF, CP, CBH, CHT = O[I_SC], O[I_GINF], O[I_CP], O[I_CBH], O[I_CHT]
    SC[SC_FREE] -= get_new_blocks(CP, CBH, CHT, CHT.shape[0] - 1, slots, 0, n)
    for i in range(n):
        GINF[gpu[i]] = 1
    S[1][G_NFREE] -= touch(S[5], gpu, n)


@inlined
def _store_pairs(S, O, n):
    """Slots for the ``n`` GPU blocks in ``SCR[0]`` (``_take``), the pairs appended to the
    ring (the step's store event)."""
    RING, SC, SCR = O[I_RING], O[I_SC], O[I_SCR]
    _take(S, O, SCR[0, :n], SCR[1, :n], n)
    cap = RING.shape[1]
    for i in range(n):
        j = (SC[SC_RHEAD] + SC[SC_RLEN] + i) % cap
        RING[0, j], RING[1, j] = SCR[0, i], SCR[1, i]
    SC[SC_RLEN] += n


@inlined
def _samples(S, q, slot):
    BSMP, BMETA = S[11], S[12]
    for e in range(BMETA[q, B_NSAMP]):
        if BSMP[q, e] == slot:
            return True
    return False


@inlined
def _may_store(S, O, q, e):
    """Whether the scheduled entry ``e`` has blocks past its store cursor that may be ready
    (``_store_entry``'s ``ready`` with at most one hold less): most steps none has, and
    the test is cheaper than the call."""
    C, R, BQ = S[0], S[2], S[10]
    slot = BQ[q, e, 0]
    confirmed = BQ[q, e, 2] - R[slot, HOLDS] + 1
    return O[I_SQ][slot, SQ_CUR] < min(R[slot, NBLK], max(confirmed, 0) // C[0])


@inlined
def _store_entry(S, O, q, e):
    """One scheduled request's eager stores, appended to the ring."""
    R, BQ = S[2], S[10]
    SC, SCR = O[I_SC], O[I_SCR]
    slot, start = BQ[q, e, 0], BQ[q, e, 2]
    holds = R[slot, HOLDS]
    if SC[SC_ASYNC] != 0 and _samples(S, q, slot):
        holds -= 1                                # the placeholder this step added
    n = _select(S, O, slot, start - holds, SCR[0], 0)
    if n == 0:
        return
    _store_pairs(S, O, n)


@helper
def _lazy_stores(S, O):
    """``_prepare_lazy_store_specs``: walk the GPU free queue from the cursor (from its
    front when the cursor's block left it), at most ``target`` blocks and while slots are
    free; each hashed block not in the pool is stored (its GPU block touched: it leaves the
    queue until the store is done)."""
    P, BH = S[5], S[6]
    SC, CHT, SCR = O[I_SC], O[I_CHT], O[I_SCR]
    if SC[SC_TARGET] <= 0:
        return
    mask = CHT.shape[0] - 1
    sentinel = P.shape[0] - 1
    num_free = SC[SC_FREE]
    cursor = SC[SC_CURSOR]
    if cursor != NONE and P[cursor, REF] > 0:
        cursor = NONE
    node = P[sentinel, FNEXT] if cursor == NONE else P[cursor, FNEXT]
    n = 0
    covered = 0
    while node != sentinel:
        if covered >= SC[SC_TARGET] or n >= num_free:
            break
        cursor = node
        if P[node, HASHED] != 0 and table_find(CHT, mask, BH[node]) < 0:
            SCR[0, n] = node
            n += 1
        covered += 1
        node = P[node, FNEXT]
    SC[SC_CURSOR] = cursor
    if n == 0:
        return
    _store_pairs(S, O, n)


@helper
def finished(S, O, slot):
    """``request_finished_all_groups`` before the request's GPU blocks are freed: its
    confirmed blocks not stored yet are queued for the next store event (eager mode)."""
    R = S[2]
    SC, RING, SCR = O[I_SC], O[I_RING], O[I_SCR]
    release_pin(O, slot)
    if SC[SC_LAZY] != 0:
        return
    n = _select(S, O, slot, R[slot, COMPUTED] - R[slot, HOLDS], SCR[0], 0)
    if n == 0:
        return
    _take(S, O, SCR[0, :n], SCR[1, :n], n)
    q = SC[SC_QLEN]
    for i in range(n):
        RING[2, q + i], RING[3, q + i] = SCR[0, i], SCR[1, i]
    SC[SC_QLEN] = q + n
    sync_jobs(O)


@inlined
def _event(O, stream, start, count):
    SC, SEV = O[I_SC], O[I_SEV]
    cap = SEV.shape[1]
    head, length = SC[SC_EH0 + 2 * stream], SC[SC_EL0 + 2 * stream]
    j = (head + length) % cap
    SEV[stream, j, E_START], SEV[stream, j, E_COUNT] = start, count
    SEV[stream, j, E_SUB], SEV[stream, j, E_ID] = 0, SC[SC_ID0 + stream]
    SC[SC_ID0 + stream] += 1
    SC[SC_EL0 + 2 * stream] = length + 1
    return SEV[stream, j, E_ID]


@inlined
def _lazy_may_store(S, O):
    """Whether ``_lazy_stores`` would walk a block (else its cursor bookkeeping, here)."""
    P = S[5]
    SC = O[I_SC]
    if SC[SC_TARGET] <= 0:
        return False
    sentinel = P.shape[0] - 1
    cursor = SC[SC_CURSOR]
    if cursor != NONE and P[cursor, REF] > 0:
        cursor = NONE
    node = P[sentinel, FNEXT] if cursor == NONE else P[cursor, FNEXT]
    if node == sentinel or SC[SC_FREE] <= 0:
        SC[SC_CURSOR] = cursor
        return False
    return True


@inlined
def _eager_may_store(S, O, q):
    for e in range(S[12][q, B_NSCHED]):
        if _may_store(S, O, q, e):
            return True
    return False


@inlined
def _eager_stores(S, O, q):
    """``_prepare_eager_store_specs``: the new requests' stores, then the cached ones'."""
    R, BQ, BMETA = S[2], S[10], S[12]
    step = BMETA[q, B_STEP]
    for e in range(BMETA[q, B_NSCHED]):           # scheduled_new_reqs
        if R[BQ[q, e, 0], FSCHED] == step and _may_store(S, O, q, e):
            _store_entry(S, O, q, e)
    for e in range(BMETA[q, B_NSCHED]):           # scheduled_cached_reqs
        if R[BQ[q, e, 0], FSCHED] != step and _may_store(S, O, q, e):
            _store_entry(S, O, q, e)


@inlined
def build_stores(S, O, q):
    """``build_connector_meta``: the store event (eager: the new requests' stores, the
    cached requests', then the finished requests' queued ones; lazy: the free queue's
    walk) and the load event (the requests admitted with a load since the last one). Its
    steps with nothing to store or load call nothing (the calls cost more than the tests)."""
    BMETA = S[12]
    OC, SC = O[0], O[I_SC]
    first = SC[SC_RHEAD] + SC[SC_RLEN]
    SC[SC_EMPTY] = SC[SC_EMPTY] + 1 if BMETA[q, B_NSCHED] == 0 else 0
    if SC[SC_LAZY] != 0:
        if SC[SC_EMPTY] <= LIVELOCK_SCHEDULES and _lazy_may_store(S, O):
            _lazy_stores(S, O)
    elif SC[SC_FREE] > 0 and _eager_may_store(S, O, q):
        _eager_stores(S, O, q)
    if SC[SC_QLEN] > 0 or SC[SC_RHEAD] + SC[SC_RLEN] != first or OC[O_KLEN] > 0:
        _events(O, first)
    OC[O_NFIN] = 0
    sync_jobs(O)


@inlined
def _events(O, first):
    """The finished requests' queued stores appended to the ring, the step's store event
    (the ring from ``first``) and its load event."""
    OC, RING, SC, SQ, KQ = O[0], O[I_RING], O[I_SC], O[I_SQ], O[11]
    cap = RING.shape[1]
    for i in range(SC[SC_QLEN]):
        j = (SC[SC_RHEAD] + SC[SC_RLEN]) % cap
        RING[0, j], RING[1, j] = RING[2, i], RING[3, i]
        SC[SC_RLEN] += 1
    SC[SC_QLEN] = 0
    count = SC[SC_RHEAD] + SC[SC_RLEN] - first
    if count > 0:
        _event(O, STORE, first % cap, count)
        OC[O_STOREB] += count * SC[SC_BBYTES]
    blocks = 0
    event = SC[SC_ID0]
    for i in range(OC[O_KLEN]):
        slot = KQ[i]
        if SQ[slot, SQ_LEV] == -2:
            SQ[slot, SQ_LEV] = event
            blocks += SQ[slot, SQ_NLOAD]
    if blocks > 0:
        _event(O, LOAD, 0, blocks)
        OC[O_LOADB] += blocks * SC[SC_BBYTES]
