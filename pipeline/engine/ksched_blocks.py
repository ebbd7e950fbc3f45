"""The KV cache manager's part of vLLM v1's scheduler, compiled (vLLM 0.33.0
``vllm/v1/core/kv_cache_manager.py`` and ``single_type_kv_cache_manager.py``, full
attention): the blocks a request needs, ``allocate_slots``, ``cache_blocks`` (blocks hashed
as soon as they are full) and ``free`` (tail first), over the engine's block pool
(``pipeline.components.kpool``). The scheduler is ``pipeline.engine.ksched``.
"""

from __future__ import annotations

import numpy as np

from pipeline.components.engine_layout import (
    BCAP, BOFF, COMPUTED, C_BS, C_HMASK, C_MAXLEN, ERR_BLOCKS, G_ERROR, G_NFREE, KOFF, NBLK,
    NCACHED, NONE, NTOK, REF)
from pipeline.components.kjit import helper
from pipeline.components.kpool import cache_full_blocks, free_blocks, get_new_blocks, touch

__all__ = ["ZERO", "ONE", "grow", "cache_blocks", "allocate_slots", "free_request"]

#: Constant arguments as int64, not numba literals: a literal 0 or 1 at a call site compiled
#: its callee (and everything under it) once more for that value; one type, one compile.
ZERO, ONE = np.int64(0), np.int64(1)


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
def grow(S, slot, count):
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
def cache_blocks(S, slot, num_tokens):
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
def allocate_slots(S, slot, num_new, nhit, external, admission, reserved, delay):
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
            grow(S, slot, max(0, -(-(local + external) // size) - R[slot, NBLK]))
    grow(S, slot, -(-need // size) - R[slot, NBLK])
    if not delay:
        cache_blocks(S, slot, min(total + num_new, R[slot, NTOK]))
    return True


@helper
def free_request(S, slot):
    """KVCacheManager.free: tail first (unhashed blocks prepended, as since vLLM 0.24)."""
    G, R, BT, P, BUF = S[1], S[2], S[4], S[5], S[14]
    G[G_NFREE] += free_blocks(P, BT, R[slot, BOFF], R[slot, NBLK], BUF, np.bool_(True))
    R[slot, NBLK] = 0
    R[slot, NCACHED] = NONE
