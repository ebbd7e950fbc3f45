"""The ``lmcache`` CPU model, fast: the literal replay's rules compiled with numba.

**Why no one-pass form.** A one-pass (stack-distance) engine needs the inclusion property:
what a tier of C holds, a tier of C + 1 holds too, at every step. LMCache's rules break it:
a store skips a chunk that is already present *without refreshing it*, but stores (as most
recent) one that is missing, and its allocation may evict chunks of the very range it is
about to store. So a chunk can end up MORE recent in the smaller tier than in the larger one,
and outlive it there. ``tests/test_engine_caches_lmcache.py`` keeps a concrete stream where a
larger CPU tier hits less than a smaller one; a stack algorithm cannot do that.

So this is the same replay, request by request and chunk by chunk, over a doubly linked LRU
list in arrays (O(1) per touch, eviction and insert), one pass per capacity.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pipeline.workloads.stream import HEAD_FIRST, BlockStream, capacity_blocks
from pipeline.components.lmcache_cpu import (DEFAULT_CHUNK_SIZE, Chunks, check_cpu_options,
                                                lmcache_chunks, loadable_prefix)

__all__ = ["lmcache_cpu", "lmcache_hits"]


@njit(cache=True)
def _unlink(code, prev, nxt):
    nxt[prev[code]] = nxt[code]
    prev[nxt[code]] = prev[code]


@njit(cache=True)
def _append(code, head, prev, nxt):
    """Link ``code`` at the most-recent end (just before the sentinel ``head``)."""
    last = prev[head]
    nxt[last] = code
    prev[code] = last
    nxt[code] = head
    prev[head] = code


@njit(cache=True)
def _replay(starts, codes, code_tokens, prompt, chunk_size, capacity, out):
    """Fill ``out`` with each request's LMCache hit tokens for a tier of ``capacity``."""
    n_codes = code_tokens.size
    head = n_codes                                      # sentinel: nxt[head] = least recent
    prev = np.full(n_codes + 1, head, np.int64)
    nxt = np.full(n_codes + 1, head, np.int64)
    present = np.zeros(n_codes, np.bool_)
    used = 0
    for r in range(starts.size - 1):
        s, e = starts[r], starts[r + 1]
        hit, hit_tokens = 0, 0
        while s + hit < e and present[codes[s + hit]]:
            hit_tokens += code_tokens[codes[s + hit]]
            hit += 1
        for j in range(hit - 1, -1, -1):                # touch_cache: reversed, chunk 0 newest
            code = codes[s + j]
            _unlink(code, prev, nxt)
            _append(code, head, prev, nxt)
        out[r] = hit_tokens
        boundary = (hit_tokens + chunk_size) // chunk_size * chunk_size
        if hit_tokens > 0 and prompt[r] < boundary:
            continue                                    # skip_save
        first = s + hit_tokens // chunk_size
        stop = first
        in_flight = 0
        while stop < e:                                 # allocate every chunk first
            size = code_tokens[codes[stop]]
            while used + in_flight + size > capacity and nxt[head] != head:
                oldest = nxt[head]                      # evict the least recent chunk
                _unlink(oldest, prev, nxt)
                present[oldest] = False
                used -= code_tokens[oldest]
            if used + in_flight + size > capacity:
                break                                   # nothing left to evict: drop the rest
            in_flight += size
            stop += 1
        for b in range(first, stop):                    # batched_put in prefix order
            code = codes[b]
            if present[code]:
                continue                                # already there: not refreshed
            present[code] = True
            _append(code, head, prev, nxt)
            used += code_tokens[code]


def lmcache_hits(chunks: Chunks, capacities: np.ndarray) -> np.ndarray:
    """LMCache hit tokens (c) per (capacity in tokens, request)."""
    code_tokens = np.zeros(chunks.n_codes, np.int64)
    code_tokens[chunks.codes] = chunks.tokens
    out = np.zeros((len(capacities), chunks.starts.size - 1), np.int64)
    for k, capacity in enumerate(capacities):
        _replay(chunks.starts, chunks.codes, code_tokens, chunks.prompt_tokens,
                chunks.chunk_size, int(capacity), out[k])
    return out


def lmcache_cpu(stream: BlockStream, gpu_hit_tokens: np.ndarray, capacities: object,
                order: str = HEAD_FIRST, *, chunk_size: int = DEFAULT_CHUNK_SIZE,
                save_unfull_chunk: bool = False) -> np.ndarray:
    """CPU model API (``pipeline.catalog.model_api``), equal to ``lmcache_cpu.replay_cpu``: CPU
    prefix tokens per (capacity, request); ``gpu_hit_tokens`` is unused (LMCache's state
    never depends on vLLM's cache)."""
    check_cpu_options(stream, order, chunk_size)
    tokens = capacity_blocks(capacities, 1)              # validated integer tokens >= 0
    chunks = lmcache_chunks(stream, chunk_size, save_unfull_chunk)
    return loadable_prefix(lmcache_hits(chunks, tokens), chunks.prompt_tokens)
