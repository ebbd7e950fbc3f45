"""LMCache's local CPU backend under vLLM v1, compiled: the one implementation of its rules,
for every mode (the engine's CPU tier, the block-mode ``lmcache`` model, the tier object;
``pipeline.engine_caches.lmcache``). Read in the lmcache 0.5.6 wheel; the defaults of
``v1/config.py`` (chunk_size 256, max_local_cpu_size 5.0, save_unfull_chunk False) are the
same in the 0.4.2 wheel, and 0.3.5 differs only in save_unfull_chunk True:

* **Keys.** ``v1/token_database.py`` ``ChunkedTokenDatabase``: ``chunk_size`` token chunks,
  each keyed by a hash chained over the previous chunk's (``_prefix_hash``); the partial last
  chunk only with ``save_unfull_chunk``. A caller keys chunk j by the key of its last block
  (chained keys stand for the whole prefix). Here a request is a *run* of ``count`` chunk keys
  ``KEYS[first + j * stride]``, every chunk ``chunk`` tokens but the last, ``last`` tokens.
* **Lookup** (``lookup``). The scheduler's ``LMCacheConnectorV1Impl.get_num_new_matched_tokens``
  (``integration/vllm/vllm_v1_adapter.py``) asks the lookup client, whose server in the
  worker calls ``LMCacheEngine.lookup(pin=True)`` (``v1/cache_engine.py``): the longest run
  of leading chunks present (``StorageManager.batched_contains``), c tokens;
  ``LocalCPUBackend.contains`` pins each hit chunk, then ``touch_cache`` moves them to most
  recent in REVERSE order, so chunk 0 ends most recent (``LRUCachePolicy.update_on_hit``).
  This happens whatever vLLM's own cache holds. vLLM loads ``c - g`` beyond its GPU hit g,
  ``c - 1`` when c is the whole prompt; retrieval does not touch the LRU.
* **Store** (``store``). ``wait_for_save`` releases the lookup's pins, then stores from
  ``num_saved_tokens`` = c (LMCache's own hit, not g), skipping the request when c > 0 and the
  prompt ends before the next chunk boundary (``cdiv(c + 1, chunk) * chunk``); decode tokens
  are not saved. ``LMCacheEngine.store`` allocates every chunk first
  (``LocalCPUBackend.allocate``: while the allocation fails, evict the least recent chunk;
  with nothing to evict the rest of the request is dropped), then ``batched_put`` inserts
  them in prefix order: a key already present is skipped without refreshing it, a new one
  goes to the most-recent end, so a newly stored request's first chunk is its OLDEST.
* **Capacity.** ``max_local_cpu_size`` GB = ``int(size * 2**30)`` bytes; here in tokens of
  KV, a chunk occupying its tokens (the allocator's alignment is not modelled).

These rules are no stack algorithm (a larger tier can hit less), so every capacity is its
own replay. The literal Python port is the test oracle ``tests/oracles/lmcache_cpu.py``.

State ``T = (TS, TT, TN, TNK, TFREE)``: scalars (``pipeline.engine.layout``: ``T_*``), the
key -> node table (rows (key, node, tokens): ``kpool``'s open-addressing table, or, with
``TS[T_MASK]`` < 0, indexed by the key itself for dense keys 0..n-1), the LRU list
(``TN[:, 0]`` prev, ``TN[:, 1]`` next, sentinel last: its next is the least recent), node
keys and the stack of free nodes.
"""

from __future__ import annotations

import numpy as np

from pipeline.engine.kjit import helper, kernel
from pipeline.engine.kpool import table_delete, table_find, table_size, table_slot
from pipeline.engine.layout import (NONE, T_CAPACITY, T_CHUNK, T_COUNT, T_FREE_TOP, T_MASK,
                                    T_ON, T_PER, T_SIZE, T_USED)

__all__ = ["tier_arrays", "no_tier", "lookup", "store", "held_keys", "admit_keys",
           "store_keys", "replay_runs"]


def tier_arrays(capacity_tokens: int, chunk: int, per: int = 1, nodes: int | None = None,
                dense_keys: int = 0) -> tuple:
    """A fresh, empty tier of ``capacity_tokens`` (chunks of ``chunk`` tokens, ``per`` engine
    blocks each); room for ``nodes`` chunks (default: full chunks only); ``dense_keys`` > 0:
    keys are 0..dense_keys-1, indexing the table directly."""
    nodes = int(capacity_tokens) // chunk + 1 if nodes is None else int(nodes)
    size = int(dense_keys) or table_size(nodes)
    TS = np.zeros(T_SIZE, np.int64)
    TS[T_ON], TS[T_CAPACITY], TS[T_CHUNK], TS[T_PER] = 1, capacity_tokens, chunk, per
    TS[T_MASK], TS[T_FREE_TOP] = (-1 if dense_keys else size - 1), nodes
    TN = np.empty((nodes + 1, 2), np.int64)
    TN[nodes] = nodes                                  # an empty list
    return (TS, np.full((size, 3), NONE, np.int64), TN, np.zeros(nodes, np.int64),
            np.arange(nodes - 1, -1, -1, dtype=np.int64))


def no_tier() -> tuple:
    """The arrays of an absent tier (same types, so one compiled kernel serves both)."""
    return (np.zeros(T_SIZE, np.int64), np.full((16, 3), NONE, np.int64),
            np.zeros((1, 2), np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64))


@helper
def _find(TT, mask, key):
    """The table row holding ``key``, or NONE."""
    if mask < 0:
        return key if TT[key, 1] >= 0 else NONE
    return table_find(TT, mask, key)


@helper
def _unlink(TN, node):
    p, q = TN[node, 0], TN[node, 1]
    TN[p, 1] = q
    TN[q, 0] = p


@helper
def _push_back(TN, node):
    sentinel = TN.shape[0] - 1
    last = TN[sentinel, 0]
    TN[last, 1] = node
    TN[node, 0] = last
    TN[node, 1] = sentinel
    TN[sentinel, 0] = node


@helper
def _held(TT, mask, KEYS, first, stride, count):
    """The leading chunks of a run stored now."""
    hit = 0
    while hit < count and _find(TT, mask, KEYS[first + hit * stride]) >= 0:
        hit += 1
    return hit


@helper
def lookup(T, KEYS, first, stride, count, last):
    """lookup(pin=True) + touch_cache of a run (see the module docstring): LMCache's hit c in
    tokens."""
    TS, TT, TN = T[0], T[1], T[2]
    chunk, mask = TS[T_CHUNK], TS[T_MASK]
    hit = _held(TT, mask, KEYS, first, stride, count)
    for j in range(hit - 1, -1, -1):                  # chunk 0 ends most recent
        node = TT[_find(TT, mask, KEYS[first + j * stride]), 1]
        _unlink(TN, node)
        _push_back(TN, node)
    if hit == count and hit > 0:
        return (hit - 1) * chunk + last
    return hit * chunk


@helper
def _allocate(T, size, in_flight):
    """Evict the least recent chunk until ``size`` more tokens fit; False if they never do."""
    TS, TT, TN, TNK, TFREE = T
    sentinel, mask = TN.shape[0] - 1, TS[T_MASK]
    while TS[T_USED] + in_flight + size > TS[T_CAPACITY]:
        node = TN[sentinel, 1]
        if node == sentinel:
            return False
        _unlink(TN, node)
        s = _find(TT, mask, TNK[node])
        TS[T_USED] -= TT[s, 2]
        if mask < 0:
            TT[s, 1] = NONE
        else:
            table_delete(TT, mask, s)
        TS[T_COUNT] -= 1
        TFREE[TS[T_FREE_TOP]] = node
        TS[T_FREE_TOP] += 1
    return True


@helper
def store(T, KEYS, first, stride, count, last, prompt, hit):
    """wait_for_save -> LMCacheEngine.store of a run whose prompt of ``prompt`` tokens is
    computed, from LMCache's own hit ``hit`` (``lookup``)."""
    TS, TT, TN, TNK, TFREE = T
    chunk, mask = TS[T_CHUNK], TS[T_MASK]
    boundary = -(-(hit + 1) // chunk) * chunk
    if hit > 0 and prompt < boundary:
        return                                        # skip_save
    start = hit // chunk
    stop, in_flight = start, np.int64(0)              # int64 from the start: one compile
    while stop < count:                               # allocate every chunk first
        size = chunk if stop < count - 1 else last
        if not _allocate(T, size, in_flight):
            break                                     # nothing left to evict: drop the rest
        in_flight += size
        stop += 1
    for j in range(start, stop):                      # batched_put in prefix order
        key = KEYS[first + j * stride]
        s = key if mask < 0 else table_slot(TT, mask, key)
        if TT[s, 1] >= 0:
            continue                                  # already there: not refreshed
        TS[T_FREE_TOP] -= 1
        node = TFREE[TS[T_FREE_TOP]]
        TT[s, 1] = node
        TT[s, 2] = chunk if j < count - 1 else last
        TNK[node] = key
        _push_back(TN, node)
        TS[T_USED] += TT[s, 2]
        TS[T_COUNT] += 1


@kernel
def held_keys(T, keys):
    """The leading chunks of the run ``keys`` stored now, no change (from Python)."""
    return _held(T[1], T[0][T_MASK], keys, 0, 1, keys.size)


@kernel
def admit_keys(T, keys, last):
    """``lookup`` of the run ``keys`` (from Python)."""
    return lookup(T, keys, 0, 1, keys.size, last)


@kernel
def store_keys(T, keys, last, prompt, hit):
    """``store`` of the run ``keys`` (from Python)."""
    store(T, keys, 0, 1, keys.size, last, prompt, hit)


@kernel
def replay_runs(T, starts, keys, last, prompt, out):
    """Requests one at a time, prefill in one step: request r is the run
    ``keys[starts[r]:starts[r + 1]]`` (its last chunk ``last[r]`` tokens) of a prompt of
    ``prompt[r]`` tokens; ``out[r]`` its hit c."""
    for r in range(starts.size - 1):
        first, count = starts[r], starts[r + 1] - starts[r]
        out[r] = lookup(T, keys, first, 1, count, last[r])
        store(T, keys, first, 1, count, last[r], prompt[r], out[r])
