"""vLLM 0.33.0's ``SimpleCPUOffloadConnector`` in the engine loop, compiled: its scheduler
side (``SimpleCPUOffloadScheduler``, ``vllm/v1/simple_kv_offload/manager.py``) over a
second vLLM ``BlockPool`` of offload slots (``pipeline.components.kpool``, the engine's own
pool kernels on a second set of arrays), eager or ``lazy_offload`` stores. This module holds
the connector's state (its layout and arrays), the pools' frees, and the lookups and loads;
its stores are ``pipeline.engine.ksimple_stores``, its worker and completions
``pipeline.engine.ksimple_worker``. docs/offloading.md ("vLLM's other native connector")
gives each rule with vLLM's line.

* ``matched``: ``get_num_new_matched_tokens`` (manager.py:361-423): the previous pin
  released, the longest run of the request's block keys from the GPU hit on cached in the
  offload pool (at most ``num_tokens - 1`` tokens in all), those slots pinned;
* ``after_alloc``: ``update_state_after_alloc`` (427-538): the load's slots and GPU blocks
  touched, the pin released, the request waits for the next load event.

The connector's state is the tail of the offload tuple ``O`` (``O[SIMPLE:]``, layout below);
``no_simple()`` is that tail for an engine without it.
"""

from __future__ import annotations

import numpy as np

from pipeline.components.engine_layout import (
    BOFF, G_NFREE, KOFF, NKEYS, NONE, NTOK, O_JLEN, RF_SUBMIT, X_LSTEP)
from pipeline.components.kjit import helper, inlined
from pipeline.components.kpool import free_blocks, longest_hit, pool_arrays, touch

__all__ = ["SIMPLE", "SC_SIZE", "SQ_COLUMNS", "no_simple", "simple_arrays", "matched",
           "after_alloc", "free_slots", "free_gpu", "release_pin", "sync_jobs"]

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
def free_slots(O, ids, n):
    SC, SCR = O[I_SC], O[I_SCR]
    SC[SC_FREE] += _free_forward(O[I_CP], ids, n, SCR[0], SCR[1])


@helper
def free_gpu(S, O, ids, n):
    SCR = O[I_SCR]
    S[1][G_NFREE] += _free_forward(S[5], ids, n, SCR[0], SCR[1])


@helper
def release_pin(O, slot):
    """``_free_pending_cpu_hit``: the slots pinned by the last lookup."""
    SQ, REG = O[I_SQ], O[I_REG]
    n = SQ[slot, SQ_NPIN]
    if n > 0:
        off = SQ[slot, SQ_OFF]
        free_slots(O, REG[0, off:off + n], n)
    SQ[slot, SQ_NPIN] = -1


@inlined
def sync_jobs(O):
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
    release_pin(O, slot)
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
    release_pin(O, slot)
    S[1][G_NFREE] -= touch(S[5], REG[1, off:off + n], n)
    SQ[slot, SQ_NLOAD] = n
    SQ[slot, SQ_LEV] = -2
    RX, RF = O[7], O[8]
    if RX[slot, X_LSTEP] == NONE:
        RX[slot, X_LSTEP] = step
        RF[slot, RF_SUBMIT] = -1.0
