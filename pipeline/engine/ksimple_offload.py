"""vLLM 0.33.0's ``SimpleCPUOffloadConnector`` in the engine loop, compiled: its scheduler
side (``SimpleCPUOffloadScheduler``, ``vllm/v1/simple_kv_offload/manager.py``) over a
second vLLM ``BlockPool`` of offload slots (``pipeline.components.kpool``, the engine's own
pool kernels on a second set of arrays), eager or ``lazy_offload`` stores; its worker and
completions are ``pipeline.engine.ksimple_worker``. docs/offloading.md ("vLLM's other
native connector") gives each rule with vLLM's line.

* ``matched``: ``get_num_new_matched_tokens`` (manager.py:361-423): the previous pin
  released, the longest run of the request's block keys from the GPU hit on cached in the
  offload pool (at most ``num_tokens - 1`` tokens in all), those slots pinned;
* ``after_alloc``: ``update_state_after_alloc`` (427-538): the load's slots and GPU blocks
  touched, the pin released, the request waits for the next load event;
* ``build_stores``: ``build_connector_meta`` (540-602) with ``_prepare_eager_store_specs``
  (674-844): the new requests then the cached ones, each block from the request's cursor
  up to its confirmed tokens stored unless unhashed, in flight or already in the pool,
  while slots are free (the LRU slot evicted), its GPU block touched; then the stores
  queued by finished requests; lazy (``_prepare_lazy_store_specs``, 618-672): the GPU
  free queue walked from a cursor, up to ``2 x cdiv(max_num_batched_tokens, block)``
  blocks, each hashed block not in the pool stored; one store and one load event per step;
* ``finished``: ``request_finished_all_groups`` (1250-1289) before the GPU blocks are
  freed: the request's remaining confirmed blocks queued for the next store event.

The connector's state is the tail of the offload tuple ``O`` (``O[SIMPLE:]``, layout below);
``no_simple()`` is that tail for an engine without it.
"""

from __future__ import annotations

import numpy as np

from pipeline.components.engine_layout import (
    B_NSAMP, B_NSCHED, B_STEP, BOFF, COMPUTED, FNEXT, FSCHED, G_NFREE, HASHED, HOLDS, KOFF,
    NBLK, NKEYS, NONE, NTOK, O_JLEN, O_KLEN, O_LOADB, O_NFIN, O_STOREB, REF, RF_SUBMIT,
    X_LSTEP)
from pipeline.components.kjit import helper, inlined
from pipeline.components.kpool import (free_blocks, get_new_blocks, longest_hit, pool_arrays,
                                       table_find, touch)

__all__ = ["SIMPLE", "SC_SIZE", "SQ_COLUMNS", "no_simple", "simple_arrays", "matched",
           "after_alloc", "build_stores", "finished"]

#: where the connector's arrays start in ``O``: CP, CBH, CHT (the offload pool), SQ (per
#: request), SREG (per-request rows: pinned slots, load GPU blocks, load slots), GINF
#: (GPU blocks with a store in flight), RING (store pairs in flight: GPU, slot; then the
#: finished requests' queued pairs), SEV / SEVT (events: [stream, ring slot] -> start,
#: count, submitted, id / end ms), SC (counters), SF (stream free times), SCR (scratch)
SIMPLE = 15
(I_CP, I_CBH, I_CHT, I_SQ, I_REG, I_GINF, I_RING, I_SEV, I_SEVT, I_SC, I_SF,
 I_SCR) = range(SIMPLE, SIMPLE + 12)
# SQ columns: the region offset, the store cursor (blocks), slots pinned (-1: none), load
# blocks, the load event (-2: awaiting one, -1: none)
SQ_OFF, SQ_CUR, SQ_NPIN, SQ_NLOAD, SQ_LEV = range(5)
SQ_COLUMNS = 5
# SC: on, free slots, block bytes, ring head / length, queued pairs, per stream event head
# / length, next event id per stream, the load events done (watermark), async scheduling
(SC_ON, SC_FREE, SC_BBYTES, SC_RHEAD, SC_RLEN, SC_QLEN, SC_EH0, SC_EL0, SC_EH1, SC_EL1,
 SC_ID0, SC_ID1, SC_LWM, SC_ASYNC) = range(14)
# lazy_offload: on, the GPU blocks to keep free or offloaded per step (``_target_free``),
# the free-queue cursor (the last block walked; NONE: from the queue's front)
SC_LAZY, SC_TARGET, SC_CURSOR = range(14, 17)
# schedules in a row that scheduled nothing
SC_EMPTY = 17
SC_SIZE = 18
#: lazy stores stop after this many schedules in a row that scheduled nothing: vLLM's can
#: cycle forever (a pool smaller than the walk re-stores what it just evicted while the
#: blocks in flight keep a waiting request out), so the run ends as stuck instead
LIVELOCK_SCHEDULES = 4096
# SF: each stream's free time (load, store), the host link's bytes per ms, latency ms per
# event; the disk's bytes per ms, ms per block read or written, staging buffer slots (0:
# the CPU medium)
SF_FREE0, SF_FREE1, SF_RATE, SF_LAT, SF_DRATE, SF_DLAT, SF_SLOTS = range(7)
SF_SIZE = 7
E_START, E_COUNT, E_SUB, E_ID = range(4)
LOAD, STORE = 0, 1


def simple_arrays(num_slots: int, num_gpu_blocks: int) -> tuple:
    """The connector's arrays for an offload pool of ``num_slots`` slots (vLLM's
    ``num_cpu_blocks``: slot 0 is its null block) beside ``num_gpu_blocks`` GPU blocks."""
    CP, CBH, CHT = pool_arrays(num_slots)
    cap = num_slots + 2
    return (CP, CBH, CHT, np.zeros((0, SQ_COLUMNS), np.int64), np.zeros((3, 1), np.int64),
            np.zeros(num_gpu_blocks + 1, np.int64), np.zeros((4, cap), np.int64),
            np.zeros((2, cap, 4), np.int64), np.zeros((2, cap)), np.zeros(SC_SIZE, np.int64),
            np.zeros(SF_SIZE), np.zeros((3, cap), np.int64))


def no_simple() -> tuple:
    """The connector's arrays of an engine without it (one slot, one GPU block)."""
    return simple_arrays(1, 1)


# ----------------------------------------------------------------------- the pools

@helper
def _free_forward(P, ids, n, BUF, REV):
    """``BlockPool.free_blocks(ids[:n])`` in that order (``kpool.free_blocks`` frees tail
    first: it gets them reversed). Returns how many became free."""
    for i in range(n):
        REV[i] = ids[n - 1 - i]
    return free_blocks(P, REV, 0, n, BUF, np.bool_(True))


@helper
def _free_slots(O, ids, n):
    SC, SCR = O[I_SC], O[I_SCR]
    SC[SC_FREE] += _free_forward(O[I_CP], ids, n, SCR[0], SCR[1])


@helper
def _free_gpu(S, O, ids, n):
    SCR = O[I_SCR]
    S[1][G_NFREE] += _free_forward(S[5], ids, n, SCR[0], SCR[1])


@helper
def _release_pin(O, slot):
    """``_free_pending_cpu_hit``: the slots pinned by the last lookup."""
    SQ, REG = O[I_SQ], O[I_REG]
    n = SQ[slot, SQ_NPIN]
    if n > 0:
        off = SQ[slot, SQ_OFF]
        _free_slots(O, REG[0, off:off + n], n)
    SQ[slot, SQ_NPIN] = -1


@inlined
def _sync_jobs(O):
    """The engine keeps stepping while events are in flight or stores queued
    (``has_pending_push_work``); ``O_JLEN`` counts them."""
    SC = O[I_SC]
    O[0][O_JLEN] = SC[SC_EL0] + SC[SC_EL1] + SC[SC_QLEN]


# ----------------------------------------------------------------------- lookups, loads

@helper
def matched(S, O, slot, local):
    """``get_num_new_matched_tokens(request, local)``: the tokens to load beyond the GPU
    hit ``local`` (every hit is asynchronous)."""
    C, R, KEYS = S[0], S[2], S[3]
    SQ, SC, SCR = O[I_SQ], O[I_SC], O[I_SCR]
    bs = C[0]
    _release_pin(O, slot)
    SQ[slot, SQ_CUR] = 0               # a preemption's build resets it; nothing reads it
    hashes = min(R[slot, NTOK] // bs, R[slot, NKEYS])    # before: it is not scheduled
    skip = local // bs
    if hashes <= skip:
        return 0
    max_hit = R[slot, NTOK] - 1 - local
    if max_hit <= 0:
        return 0
    CHT = O[I_CHT]
    n = longest_hit(CHT, CHT.shape[0] - 1, KEYS, R[slot, KOFF] + skip,
                    min(hashes - skip, max_hit // bs), SCR[2])
    if n == 0:
        return 0
    SC[SC_FREE] -= touch(O[I_CP], SCR[2], n)
    off = SQ[slot, SQ_OFF]
    REG = O[I_REG]
    for i in range(n):
        REG[0, off + i] = SCR[2, i]
    SQ[slot, SQ_NPIN] = n
    return n * bs


@helper
def after_alloc(S, O, slot, local, external, sync, step):
    """``update_state_after_alloc`` of a request loading ``external`` tokens beyond its
    GPU hit ``local``."""
    C, R, BT = S[0], S[2], S[4]
    SQ, SC, REG = O[I_SQ], O[I_SC], O[I_REG]
    bs = C[0]
    n = -(-external // bs)
    off = SQ[slot, SQ_OFF]
    first = R[slot, BOFF] + local // bs
    for i in range(n):
        REG[1, off + i] = BT[first + i]
        REG[2, off + i] = REG[0, off + i]
    SC[SC_FREE] -= touch(O[I_CP], REG[2, off:off + n], n)
    _release_pin(O, slot)
    S[1][G_NFREE] -= touch(S[5], REG[1, off:off + n], n)
    SQ[slot, SQ_NLOAD] = n
    SQ[slot, SQ_LEV] = -2
    RX, RF = O[7], O[8]
    if RX[slot, X_LSTEP] == NONE:
        RX[slot, X_LSTEP] = step
        RF[slot, RF_SUBMIT] = -1.0


# ----------------------------------------------------------------------- stores

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
    _release_pin(O, slot)
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
    _sync_jobs(O)


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
    _sync_jobs(O)


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
