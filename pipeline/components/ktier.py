"""LMCache's local CPU backend (LRU over chunks) compiled, for the engine's CPU tier.

The literal rules are ``pipeline.components.lmcache_cpu.LocalCpuBackend``'s (see its module
docstring): ``lookup`` counts the leading chunks present and touches them in reverse order
(chunk 0 ends most recent); ``store`` skips a request whose prompt ends before the chunk
boundary after LMCache's own hit, allocates its chunks from that hit on (evicting the least
recent chunk while one does not fit, stopping at the first that cannot), then inserts them
in prefix order (a key already present is not refreshed). Chunk j of a request is keyed by
the key of its block ``(j + 1) * per - 1``; every chunk holds ``chunk`` tokens.

State ``T = (TS, TT, TN, TNK, TFREE)``: scalars, the key -> node table (rows (key, node,
-)), the LRU list (``TN[:, 0]`` prev, ``TN[:, 1]`` next, sentinel last: its next is the
least recent), node keys and the stack of free nodes.
"""

from __future__ import annotations

import numpy as np

from pipeline.components.kjit import helper
from pipeline.components.kpool import table_delete, table_find, table_size, table_slot
from pipeline.components.engine_layout import (CPUSTATE, KOFF, NONE, NPROMPT, T_CAPACITY, T_CHUNK,
                                    T_COUNT, T_FREE_TOP, T_MASK, T_ON, T_PER, T_SIZE, T_USED)

__all__ = ["tier_arrays", "no_tier", "cpu_lookup", "cpu_store"]


def tier_arrays(capacity_tokens: int, chunk: int, per: int) -> tuple:
    """A fresh, empty CPU tier of ``capacity_tokens`` (chunks of ``chunk`` tokens, ``per``
    blocks each)."""
    nodes = int(capacity_tokens) // chunk + 1
    size = table_size(nodes)
    TS = np.zeros(T_SIZE, np.int64)
    TS[T_ON], TS[T_CAPACITY], TS[T_CHUNK], TS[T_PER] = 1, capacity_tokens, chunk, per
    TS[T_MASK], TS[T_FREE_TOP] = size - 1, nodes
    TN = np.empty((nodes + 1, 2), np.int64)
    TN[nodes] = nodes                                  # an empty list
    return (TS, np.full((size, 3), NONE, np.int64), TN, np.zeros(nodes, np.int64),
            np.arange(nodes - 1, -1, -1, dtype=np.int64))


def no_tier() -> tuple:
    """The arrays of an absent tier (same types, so one compiled kernel serves both)."""
    return (np.zeros(T_SIZE, np.int64), np.full((16, 3), NONE, np.int64),
            np.zeros((1, 2), np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64))


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
def cpu_lookup(T, R, KEYS, slot):
    """lookup(pin=True) + touch_cache for request ``slot``; the tokens vLLM may load
    (LMCache's hit, minus one when it is the whole prompt)."""
    TS, TT, TN, TNK, TFREE = T
    chunk, per, mask = TS[T_CHUNK], TS[T_PER], TS[T_MASK]
    koff, prompt = R[slot, KOFF], R[slot, NPROMPT]
    count = prompt // chunk
    hit = 0
    while hit < count and table_find(TT, mask, KEYS[koff + (hit + 1) * per - 1]) >= 0:
        hit += 1
    for j in range(hit - 1, -1, -1):                  # chunk 0 ends most recent
        node = TT[table_find(TT, mask, KEYS[koff + (j + 1) * per - 1]), 1]
        _unlink(TN, node)
        _push_back(TN, node)
    tokens = hit * chunk
    R[slot, CPUSTATE] = tokens
    return tokens - 1 if tokens == prompt else tokens


@helper
def _allocate(T, size, in_flight):
    """Evict the least recent chunk until ``size`` more tokens fit; False if they never do."""
    TS, TT, TN, TNK, TFREE = T
    sentinel = TN.shape[0] - 1
    while TS[T_USED] + in_flight + size > TS[T_CAPACITY]:
        node = TN[sentinel, 1]
        if node == sentinel:
            return False
        _unlink(TN, node)
        table_delete(TT, TS[T_MASK], table_find(TT, TS[T_MASK], TNK[node]))
        TS[T_USED] -= TS[T_CHUNK]
        TS[T_COUNT] -= 1
        TFREE[TS[T_FREE_TOP]] = node
        TS[T_FREE_TOP] += 1
    return True


@helper
def cpu_store(T, R, KEYS, slot):
    """wait_for_save -> LMCacheEngine.store for request ``slot`` (its prompt computed)."""
    TS, TT, TN, TNK, TFREE = T
    chunk, per, mask = TS[T_CHUNK], TS[T_PER], TS[T_MASK]
    koff, prompt = R[slot, KOFF], R[slot, NPROMPT]
    hit = max(R[slot, CPUSTATE], 0)
    boundary = -(-(hit + 1) // chunk) * chunk
    if hit > 0 and prompt < boundary:
        return                                        # skip_save
    first, count = hit // chunk, prompt // chunk
    allocated, in_flight = 0, np.int64(0)             # int64 from the start: one compile
    for j in range(first, count):
        if not _allocate(T, chunk, in_flight):
            break
        allocated += 1
        in_flight += chunk
    for j in range(first, first + allocated):         # batched_put in prefix order
        key = KEYS[koff + (j + 1) * per - 1]
        s = table_slot(TT, mask, key)
        if TT[s, 1] >= 0:
            continue                                  # already there: not refreshed
        TS[T_FREE_TOP] -= 1
        node = TFREE[TS[T_FREE_TOP]]
        TT[s, 1] = node
        TNK[node] = key
        _push_back(TN, node)
        TS[T_USED] += chunk
        TS[T_COUNT] += 1
