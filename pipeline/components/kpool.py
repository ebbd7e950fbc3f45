"""vLLM v1's ``BlockPool`` compiled (``vllm/v1/core/block_pool.py``): reference counts, the
free queue (``FreeKVCacheBlockQueue``) and the hash -> blocks map, on arrays. The one
implementation of the pool: the engine loop (``ksched``) drives it step by step, and
``run_alone`` one request at a time (the concurrency-1 ``vllm`` model,
``pipeline.components.vllm_gpu``).

The free queue is a doubly linked list through ``P[:, FPREV]``/``P[:, FNEXT]`` with a
sentinel row (the last row of ``P``); block 0 is the null block, never free. Freed blocks
without a hash are prepended in order (vLLM >= 0.24), or appended like the hashed ones
(before); a hit takes a block out of the queue wherever it stands. The map is an
open-addressing table ``HT`` (linear probing, backward shift deletion; rows (key, first
block, last block), keys as int64 bits) from a block key to the first and last block
holding it, the holders in the order they were cached linked through ``P[:, HPREV]``/
``P[:, HNEXT]``: a key held by several blocks resolves to the first one cached
(``BlockHashToBlockMap.get_one_block``), and the key leaves the map when its last block is
evicted (``_maybe_evict_cached_block``).
"""

from __future__ import annotations

import numpy as np

from pipeline.components.kjit import helper, kernel
from pipeline.components.engine_layout import FNEXT, FPREV, HASHED, HNEXT, HPREV, NONE, P_COLUMNS, REF

__all__ = ["table_size", "table_find", "table_slot", "table_delete", "pool_init",
           "pool_arrays", "get_new_blocks", "cache_one", "cache_full_blocks", "append_free", "touch", "free_blocks",
           "longest_hit", "leading_cached", "run_alone"]

_MIX = np.int64(0x9E3779B97F4A7C15 - (1 << 64))     # as int64 bits


def table_size(entries: int) -> int:
    """A power of two at least twice ``entries`` (and >= 16)."""
    size = 16
    while size < 2 * entries:
        size *= 2
    return size


@helper
def _home(key, mask):
    return ((key * _MIX) >> 20) & mask


@helper
def _probe(HT, mask, key):
    """The slot holding ``key``, or the empty slot where its probe ends."""
    s = _home(key, mask)
    while HT[s, 1] >= 0 and HT[s, 0] != key:
        s = (s + 1) & mask
    return s


@helper
def table_find(HT, mask, key):
    """The slot holding ``key``, or NONE."""
    s = _probe(HT, mask, key)
    return s if HT[s, 1] >= 0 else NONE


@helper
def table_slot(HT, mask, key):
    """The slot holding ``key``, or the empty slot where it goes (its key set)."""
    s = _probe(HT, mask, key)
    HT[s, 0] = key
    return s


@helper
def table_delete(HT, mask, s):
    """Empty slot ``s``, shifting back the entries that probed past it."""
    j = s
    while True:
        j = (j + 1) & mask
        if HT[j, 1] < 0:
            break
        k = _home(HT[j, 0], mask)
        if (j > s and (k <= s or k > j)) or (j < s and k <= s and k > j):
            HT[s, 0] = HT[j, 0]
            HT[s, 1] = HT[j, 1]
            HT[s, 2] = HT[j, 2]
            s = j
    HT[s, 1] = NONE
    HT[s, 2] = NONE


@kernel
def pool_init(P, HT):
    """Every block 1..n-1 free in order, no hashes, an empty map."""
    n = P.shape[0] - 1
    P[:, :] = 0
    P[:, HPREV] = NONE
    P[:, HNEXT] = NONE
    HT[:, :] = NONE
    prev = n
    for b in range(1, n):
        P[prev, FNEXT] = b
        P[b, FPREV] = prev
        prev = b
    P[prev, FNEXT] = n
    P[n, FPREV] = prev
    if n == 1:
        P[n, FNEXT] = n


def pool_arrays(num_blocks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A fresh pool of ``num_blocks`` blocks (``pool_init``): ``P`` (a row per block and the
    sentinel), ``BH`` (each block's key) and the map ``HT`` (its mask: ``HT.shape[0] - 1``)."""
    P = np.zeros((num_blocks + 1, P_COLUMNS), np.int64)
    HT = np.empty((table_size(num_blocks), 3), np.int64)
    pool_init(P, HT)
    return P, np.zeros(num_blocks + 1, np.int64), HT


@helper
def _unlink_free(P, b):
    p, q = P[b, FPREV], P[b, FNEXT]
    P[p, FNEXT] = q
    P[q, FPREV] = p


@helper
def _insert_free_after(P, a, b):
    q = P[a, FNEXT]
    P[a, FNEXT] = b
    P[b, FPREV] = a
    P[b, FNEXT] = q
    P[q, FPREV] = b


@helper
def _evict(P, BH, HT, mask, b):
    """_maybe_evict_cached_block: drop ``b`` from its key's holders."""
    if P[b, HASHED] == 0:
        return
    s = table_find(HT, mask, BH[b])
    p, q = P[b, HPREV], P[b, HNEXT]
    if p == NONE:
        HT[s, 1] = q
    else:
        P[p, HNEXT] = q
    if q == NONE:
        HT[s, 2] = p
    else:
        P[q, HPREV] = p
    if HT[s, 1] == NONE:
        table_delete(HT, mask, s)
    P[b, HPREV] = NONE
    P[b, HNEXT] = NONE
    P[b, HASHED] = 0


@helper
def get_new_blocks(P, BH, HT, mask, BT, at, count):
    """popleft_n + _maybe_evict_cached_block: ``count`` blocks from the queue's front to
    ``BT[at:at + count]``, each with one reference. Returns the number of free blocks
    taken (the caller keeps the free count)."""
    sentinel = P.shape[0] - 1
    for i in range(count):
        b = P[sentinel, FNEXT]
        _unlink_free(P, b)
        _evict(P, BH, HT, mask, b)
        P[b, REF] += 1
        BT[at + i] = b
    return count


@helper
def cache_one(P, BH, HT, mask, b, key):
    """Give block ``b`` the key ``key`` (appended to the key's holders)."""
    BH[b] = key
    P[b, HASHED] = 1
    s = table_slot(HT, mask, key)
    tail = HT[s, 2]                                   # NONE for a new key
    if HT[s, 1] < 0:
        HT[s, 1] = b
    else:
        P[tail, HNEXT] = b
    P[b, HPREV] = tail
    P[b, HNEXT] = NONE
    HT[s, 2] = b


@helper
def cache_full_blocks(P, BH, HT, mask, KEYS, koff, BT, boff, start, end):
    """Give blocks ``start..end-1`` of a request their keys (no de-duplication)."""
    for i in range(start, end):
        cache_one(P, BH, HT, mask, BT[boff + i], KEYS[koff + i])


@helper
def append_free(P, b):
    """Block ``b`` (no references left) to the free queue's tail."""
    _insert_free_after(P, P[P.shape[0] - 1, FPREV], b)


@helper
def touch(P, HIT, count):
    """A hit takes a reference; a block with none leaves the free queue. Returns the
    number of blocks taken out of the queue."""
    taken = 0
    for i in range(count):
        b = HIT[i]
        if P[b, REF] == 0:
            _unlink_free(P, b)
            taken += 1
        P[b, REF] += 1
    return taken


@helper
def free_blocks(P, BT, boff, nblk, BUF, prepend):
    """KVCacheManager.free: one reference less each, tail first; blocks at zero go to the
    queue (unhashed ones prepended in that order when ``prepend``, the rest appended).
    Returns the number of blocks that became free."""
    n = 0
    for i in range(nblk - 1, -1, -1):
        b = BT[boff + i]
        P[b, REF] -= 1
        if P[b, REF] == 0:
            BUF[n] = b
            n += 1
    sentinel = P.shape[0] - 1
    at = sentinel
    for i in range(n):
        b = BUF[i]
        if prepend and P[b, HASHED] == 0:
            _insert_free_after(P, at, b)
            at = b
    for i in range(n):
        b = BUF[i]
        if not prepend or P[b, HASHED] != 0:
            _insert_free_after(P, P[sentinel, FPREV], b)
    return n


@helper
def longest_hit(HT, mask, KEYS, koff, limit, HIT):
    """find_longest_cache_hit: the first cached block of each leading key (at most
    ``limit``) into ``HIT``; returns how many."""
    n = 0
    for i in range(limit):
        s = table_find(HT, mask, KEYS[koff + i])
        if s < 0:
            break
        HIT[n] = HT[s, 1]
        n += 1
    return n


@kernel
def leading_cached(HT, mask, keys):
    """How many leading ``keys`` are cached now (no state change)."""
    for i in range(keys.size):
        if table_find(HT, mask, keys[i]) < 0:
            return i
    return keys.size


@kernel
def run_alone(P, BH, HT, KEYS, key_starts, lookup, slots, prepend, free, BT, HIT, BUF, hits):
    """Requests one at a time, each finished before the next: ``get_computed_blocks`` (at
    most ``lookup[r]`` leading keys; how many hit into ``hits[r]``), ``allocate_slots``
    for its ``slots[r]`` blocks (None when more than the ``free[0]`` free blocks: nothing
    changes), its blocks hashed with ``KEYS[key_starts[r]:key_starts[r + 1]]`` (the
    others, a partial tail, stay unhashed), then ``free``. ``BT``, ``HIT`` and ``BUF`` hold
    at least ``max(slots)`` entries; ``free[0]`` is kept for the next call."""
    mask = HT.shape[0] - 1
    for r in range(key_starts.size - 1):
        koff = key_starts[r]
        hit = longest_hit(HT, mask, KEYS, koff, lookup[r], HIT)
        hits[r] = hit
        need = slots[r]
        if need > free[0]:
            continue
        free[0] -= touch(P, HIT, hit)
        for i in range(hit):
            BT[i] = HIT[i]
        free[0] -= get_new_blocks(P, BH, HT, mask, BT, hit, need - hit)
        cache_full_blocks(P, BH, HT, mask, KEYS, koff, BT, 0, hit, key_starts[r + 1] - koff)
        free[0] += free_blocks(P, BT, 0, need, BUF, prepend)
