"""LMCache's local CPU backend under vLLM v1, compiled: the one implementation of its rules,
for every mode (the engine's CPU tier, the block-mode ``lmcache`` model, the tier object;
``pipeline.components.lmcache``). Read in the lmcache 0.5.6 wheel; the defaults of
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
* **Policy.** LRU (the default ``cache_policy``); the tier stack also sets FIFO (a hit
  moves nothing), MRU (evict the most recent) and LFU in ``TS[T_POLICY]``
  (``cache_policy/fifo.py``, ``mru.py``, ``lfu.py``). LFU (``lfu_tier``): a put has
  frequency 1, a hit adds 1; the list is ordered by frequency, then by arrival in the
  frequency (LMCache's ``SortedDict`` of insertion-ordered buckets), so eviction walks it
  from the front as LRU's does; each bucket (its tail, frequency, size) is a row of
  ``TN``'s columns 5-7, a node's bucket its column 4 (O(1) per hit and put).
* **Capacity.** ``max_local_cpu_size`` GB = ``int(size * 2**30)`` bytes; here in tokens of
  KV, a chunk occupying its tokens (the allocator's alignment is not modelled).

These rules are no stack algorithm (a larger tier can hit less), so every capacity is its
own replay. The literal Python port is the test oracle ``tests/oracles/lmcache_cpu.py``.

State ``T = (TS, TT, TN, TNK, TFREE)``: scalars (``pipeline.components.engine_layout``: ``T_*``), the
key -> node table (rows (key, node, -): ``kpool``'s open-addressing table), the chunks as
nodes of an LRU list (``TN[:, 0]`` prev, ``TN[:, 1]`` next, ``TN[:, 2]`` tokens, 0 when not
held, ``TN[:, 3]`` pins: a pinned chunk is not evicted, only the tier stack pins,
``pipeline.components.kstack``; sentinel last: its next is the least recent), node keys and
the stack of free nodes.
Dense keys 0..n-1 (block mode) are their own nodes and ``TT`` is 1-D (no table): the
three primitives that differ (``_node``, ``_add``, ``_drop``) are chosen by that type when
compiling, so neither form pays for the other.
"""

from __future__ import annotations

import numpy as np

from numba.extending import overload

from pipeline.components.kjit import helper, inlined, kernel
from pipeline.components.kpool import table_delete, table_find, table_size, table_slot
from pipeline.components.engine_layout import (NONE, POLICY_FIFO, POLICY_LFU, POLICY_MRU,
                                               T_BTOP, T_CAPACITY, T_CHUNK, T_FREE_TOP,
                                               T_MASK, T_ON, T_PER, T_POLICY, T_SIZE, T_USED)

__all__ = ["tier_arrays", "no_tier", "lfu_tier", "lookup", "store", "allocate", "on_hit",
           "on_put", "held_keys", "admit_keys", "store_keys", "replay_runs"]


def tier_arrays(capacity_tokens: int, chunk: int, per: int = 1, dense_keys: int = 0) -> tuple:
    """A fresh, empty tier of ``capacity_tokens`` (chunks of ``chunk`` tokens, ``per`` engine
    blocks each, full chunks only); ``dense_keys`` > 0: keys are 0..dense_keys-1, chunks of
    any tokens."""
    nodes = int(dense_keys) or int(capacity_tokens) // chunk + 1
    size = table_size(nodes)
    TS = np.zeros(T_SIZE, np.int64)
    TS[T_ON], TS[T_CAPACITY], TS[T_CHUNK], TS[T_PER] = 1, capacity_tokens, chunk, per
    TS[T_MASK], TS[T_FREE_TOP] = (-1 if dense_keys else size - 1), nodes
    TN = np.zeros((nodes + 1, 4), np.int64)
    TN[nodes, :2] = nodes                              # an empty list
    if dense_keys:                                     # no table, no node keys, no free stack
        return TS, np.zeros(1, np.int64), TN, np.zeros(1, np.int64), np.zeros(1, np.int64)
    return (TS, np.full((size, 3), NONE, np.int64), TN, np.zeros(nodes, np.int64),
            np.arange(nodes - 1, -1, -1, dtype=np.int64))


def lfu_tier(arrays: tuple) -> tuple:
    """A fresh tier (``tier_arrays``) made LFU: its list's rows widened by the bucket
    columns (node: 4 its bucket; bucket row b: 5 tail node, 6 frequency, 7 size, 8 the free
    buckets' stack)."""
    TS, TT, TN, TNK, TFREE = arrays
    nodes = TN.shape[0] - 1
    wide = np.zeros((nodes + 1, 9), np.int64)
    wide[:, :4] = TN
    wide[:nodes, 8] = np.arange(nodes)
    TS[T_POLICY], TS[T_BTOP] = POLICY_LFU, nodes
    return TS, TT, wide, TNK, TFREE


def no_tier() -> tuple:
    """The arrays of an absent tier (same types, so one compiled kernel serves both)."""
    return (np.zeros(T_SIZE, np.int64), np.full((16, 3), NONE, np.int64),
            np.zeros((1, 4), np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64))


def _node(T, key):
    """The node holding ``key``, or NONE."""


def _add(T, key):
    """A node holding ``key`` if it was not held (its tokens still 0), else NONE."""


def _drop(T, node):
    """Forget the key of ``node`` (just unlinked)."""


@helper
def _node_hashed(T, key):
    s = table_find(T[1], T[0][T_MASK], key)
    return T[1][s, 1] if s >= 0 else NONE


@overload(_node, inline="always")
def _node_typed(T, key):
    if T.types[1].ndim == 1:                          # dense keys: each its own node
        return lambda T, key: (key + 1) * (T[2][key, 2] > 0) - 1     # key or NONE
    return lambda T, key: _node_hashed(T, key)


@helper
def _add_hashed(T, key):
    TS, TT, TNK, TFREE = T[0], T[1], T[3], T[4]
    s = table_slot(TT, TS[T_MASK], key)
    node = NONE
    if TT[s, 1] < 0:
        TS[T_FREE_TOP] -= 1
        node = TFREE[TS[T_FREE_TOP]]
        TT[s, 1] = node
        TNK[node] = key
    return node


@overload(_add, inline="always")
def _add_typed(T, key):
    if T.types[1].ndim == 1:
        return lambda T, key: (key + 1) * (T[2][key, 2] == 0) - 1    # key or NONE
    return lambda T, key: _add_hashed(T, key)


@helper
def _drop_hashed(T, node):
    TS, TT, TNK, TFREE = T[0], T[1], T[3], T[4]
    table_delete(TT, TS[T_MASK], table_find(TT, TS[T_MASK], TNK[node]))
    TFREE[TS[T_FREE_TOP]] = node
    TS[T_FREE_TOP] += 1


@overload(_drop, inline="always")
def _drop_typed(T, node):
    if T.types[1].ndim == 1:
        return lambda T, node: None
    return lambda T, node: _drop_hashed(T, node)


@inlined
def _unlink(TN, node):
    p, q = TN[node, 0], TN[node, 1]
    TN[p, 1] = q
    TN[q, 0] = p


@inlined
def _push_back(TN, node):
    sentinel = TN.shape[0] - 1
    last = TN[sentinel, 0]
    TN[last, 1] = node
    TN[node, 0] = last
    TN[node, 1] = sentinel
    TN[sentinel, 0] = node


@inlined
def _insert_after(TN, anchor, node):
    q = TN[anchor, 1]
    TN[node, 0], TN[node, 1] = anchor, q
    TN[anchor, 1] = node
    TN[q, 0] = node


@helper
def _lfu_join(T, b, node):
    """Append ``node`` to bucket ``b`` (after its tail)."""
    TN = T[2]
    _insert_after(TN, TN[b, 5], node)
    TN[b, 5] = node
    TN[b, 7] += 1
    TN[node, 4] = b


@helper
def _lfu_open(T, freq, anchor, node):
    """A new bucket of ``freq`` holding ``node``, placed after ``anchor``."""
    TS, TN = T[0], T[2]
    TS[T_BTOP] -= 1
    b = TN[TS[T_BTOP], 8]
    TN[b, 5], TN[b, 6], TN[b, 7] = node, freq, 1
    TN[node, 4] = b
    _insert_after(TN, anchor, node)


@helper
def _lfu_leave(T, node):
    """Take ``node`` out of its bucket and the list (an emptied bucket is freed); returns
    the node it followed in the bucket order (the bucket's tail, or the node before it)."""
    TS, TN = T[0], T[2]
    b = TN[node, 4]
    anchor = TN[node, 0]
    if TN[b, 7] == 1:
        TN[TS[T_BTOP], 8] = b
        TS[T_BTOP] += 1
    else:
        if TN[b, 5] == node:
            TN[b, 5] = anchor
        TN[b, 7] -= 1
        anchor = TN[b, 5]
    _unlink(TN, node)
    return anchor


@helper
def _lfu_hit(T, node):
    """LFUCachePolicy.update_on_hit: frequency + 1, at the end of its new bucket."""
    TN = T[2]
    sentinel = TN.shape[0] - 1
    b = TN[node, 4]
    freq = TN[b, 6] + 1
    after = TN[TN[b, 5], 1]                          # the first node of the next bucket
    target = NONE
    if after != sentinel and TN[TN[after, 4], 6] == freq:
        target = TN[after, 4]
    anchor = _lfu_leave(T, node)
    if target != NONE:
        _lfu_join(T, target, node)
    else:
        _lfu_open(T, freq, anchor, node)


@helper
def _lfu_put(T, node):
    """LFUCachePolicy.update_on_put: frequency 1, at the end of bucket 1."""
    TN = T[2]
    sentinel = TN.shape[0] - 1
    first = TN[sentinel, 1]
    if first != sentinel and TN[TN[first, 4], 6] == 1:
        _lfu_join(T, TN[first, 4], node)
    else:
        _lfu_open(T, np.int64(1), sentinel, node)


@helper
def on_hit(T, node):
    """The policy's ``update_on_hit``: LRU and MRU move it to the most recent end, FIFO
    leaves it, LFU counts it."""
    policy = T[0][T_POLICY]
    if policy == POLICY_LFU:
        _lfu_hit(T, node)
    elif policy != POLICY_FIFO:
        _unlink(T[2], node)
        _push_back(T[2], node)


@helper
def on_put(T, node):
    """The policy's ``update_on_put`` of a new chunk: the most recent end (LFU: the end of
    frequency 1)."""
    if T[0][T_POLICY] == POLICY_LFU:
        _lfu_put(T, node)
    else:
        _push_back(T[2], node)


@inlined
def _held(T, KEYS, first, stride, count):
    """The leading chunks of a run stored now."""
    hit = 0
    while hit < count:
        if _node(T, KEYS[first + hit * stride]) < 0:
            break
        hit += 1
    return hit


@inlined
def lookup(T, KEYS, first, stride, count, last):
    """lookup(pin=True) + touch_cache of a run (see the module docstring): LMCache's hit c in
    tokens."""
    hit = _held(T, KEYS, first, stride, count)
    for j in range(hit - 1, -1, -1):                  # chunk 0 ends most recent
        if T[0][T_POLICY] == POLICY_FIFO:             # (FIFO: a hit changes nothing)
            break
        on_hit(T, _node(T, KEYS[first + j * stride]))
    tokens = hit * T[0][T_CHUNK]
    if hit == count and hit > 0:
        tokens += last - T[0][T_CHUNK]
    return tokens


@helper
def allocate(T, size, in_flight):
    """Evict the least recent unpinned chunk (MRU: the most recent; LFU: the first of the
    lowest frequency) until ``size`` more tokens fit; False if they never do."""
    TS, TN = T[0], T[2]
    sentinel = TN.shape[0] - 1
    way = 0 if TS[T_POLICY] == POLICY_MRU else 1      # TN[:, 0] prev, TN[:, 1] next
    while TS[T_USED] + in_flight + size > TS[T_CAPACITY]:
        node = TN[sentinel, way]
        while node != sentinel and TN[node, 3] != 0:
            node = TN[node, way]
        if node == sentinel:
            return False
        if TS[T_POLICY] == POLICY_LFU:
            _lfu_leave(T, node)
        else:
            _unlink(TN, node)
        TS[T_USED] -= TN[node, 2]
        TN[node, 2] = 0
        _drop(T, node)
    return True


@inlined
def store(T, KEYS, first, stride, count, last, prompt, hit):
    """wait_for_save -> LMCacheEngine.store of a run whose prompt of ``prompt`` tokens is
    computed, from LMCache's own hit ``hit`` (``lookup``); returns the end of the chunks
    it allocated (from ``hit // chunk``), -1 when it skips the request."""
    TS, TN = T[0], T[2]
    chunk = TS[T_CHUNK]
    boundary = -(-(hit + 1) // chunk) * chunk
    if hit > 0 and prompt < boundary:
        return -1                                     # skip_save
    start = hit // chunk
    stop, in_flight = start, np.int64(0)              # int64 from the start: one compile
    while stop < count:                               # allocate every chunk first
        size = chunk if stop < count - 1 else last
        if not allocate(T, size, in_flight):
            break                                     # nothing left to evict: drop the rest
        in_flight += size
        stop += 1
    for j in range(start, stop):                      # batched_put in prefix order
        node = _add(T, KEYS[first + j * stride])
        if node < 0:
            continue                                  # already there: not refreshed
        TN[node, 2] = chunk if j < count - 1 else last
        on_put(T, node)
        TS[T_USED] += TN[node, 2]
    return stop


@kernel
def held_keys(T, keys):
    """The leading chunks of the run ``keys`` stored now, no change (from Python)."""
    return _held(T, keys, 0, 1, keys.size)


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
