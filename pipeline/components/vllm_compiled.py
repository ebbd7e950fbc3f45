"""``vllm_gpu.VllmBlockPool`` compiled with numba: the literal allocator over arrays.

The same steps as the readable replay (lookup of the first-inserted block per hash, touch,
pops from the free-queue head that evict, caching without de-duplication, free in reverse
with unhashed blocks prepended or appended), with the free queue and each hash's blocks as
doubly linked lists in arrays, so every step is O(1). ``vllm_fast`` uses it for the
capacities its one-pass form cannot do (duplicated blocks); tests prove it equal to
``vllm_gpu.replay_vllm`` per request.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pipeline.workloads.stream import BlockStream
from pipeline.components.vllm_gpu import DEFAULT_VLLM_VERSION, OutputTokens, unhashed_to_head
from pipeline.components.vllm_layout import vllm_layout

__all__ = ["replay_vllm_compiled"]


@njit(cache=True)
def _unlink(b, prev, nxt):
    nxt[prev[b]] = nxt[b]
    prev[nxt[b]] = prev[b]


@njit(cache=True)
def _link_after(b, at, prev, nxt):
    """Insert ``b`` right after ``at``."""
    prev[b] = at
    nxt[b] = nxt[at]
    prev[nxt[at]] = b
    nxt[at] = b


@njit(cache=True)
def _replay(keys, key_starts, lookup, slots, num_blocks, n_codes, prepend, hits):
    head = num_blocks                            # free-queue sentinel: nxt[head] = first
    prev = np.empty(num_blocks + 1, np.int64)
    nxt = np.empty(num_blocks + 1, np.int64)
    prev[head] = head
    nxt[head] = head
    free = 0
    for b in range(1, num_blocks):               # block 0 is the null block
        _link_after(b, prev[head], prev, nxt)
        free += 1
    block_key = np.full(num_blocks, -1, np.int64)
    key_first = np.full(n_codes, -1, np.int64)   # each hash's blocks, insertion order
    key_last = np.full(n_codes, -1, np.int64)
    same_next = np.full(num_blocks, -1, np.int64)
    same_prev = np.full(num_blocks, -1, np.int64)
    blocks = np.empty(slots.max() if slots.size else 0, np.int64)
    for r in range(key_starts.size - 1):
        start = key_starts[r]
        hit = 0
        while hit < lookup[r] and key_first[keys[start + hit]] >= 0:
            blocks[hit] = key_first[keys[start + hit]]
            hit += 1
        hits[r] = hit
        need = slots[r]
        if need > free:
            continue                             # allocate_slots returns None
        for j in range(hit):                     # touch
            _unlink(blocks[j], prev, nxt)
        for j in range(hit, need):               # get_new_blocks: pop the head, evict
            b = nxt[head]
            _unlink(b, prev, nxt)
            k = block_key[b]
            if k >= 0:
                if same_prev[b] >= 0:
                    same_next[same_prev[b]] = same_next[b]
                else:
                    key_first[k] = same_next[b]
                if same_next[b] >= 0:
                    same_prev[same_next[b]] = same_prev[b]
                else:
                    key_last[k] = same_prev[b]
                block_key[b] = -1
            blocks[j] = b
        for j in range(hit, key_starts[r + 1] - start):     # cache_full_blocks
            b = blocks[j]
            k = keys[start + j]
            block_key[b] = k
            same_next[b] = -1
            same_prev[b] = key_last[k]
            if key_last[k] >= 0:
                same_next[key_last[k]] = b
            else:
                key_first[k] = b
            key_last[k] = b
        at = head                                # free_blocks(reversed(blocks))
        for j in range(need - 1, -1, -1):
            b = blocks[j]
            if prepend and block_key[b] < 0:
                _link_after(b, at, prev, nxt)    # prepend_n keeps the list's order
                at = b
            else:
                _link_after(b, prev[head], prev, nxt)


def replay_vllm_compiled(stream: BlockStream, logged_tokens: int,
                         output_tokens: OutputTokens = 1,
                         vllm_version: str = DEFAULT_VLLM_VERSION) -> np.ndarray:
    """Equal to ``vllm_gpu.replay_vllm``: GPU hit blocks per request."""
    layout = vllm_layout(stream, output_tokens)
    hits = np.zeros(stream.requests, np.int64)
    num_blocks = max(int(logged_tokens) // stream.block_size, 0)
    if num_blocks == 0:
        return hits
    _replay(layout.keys, layout.key_starts, layout.lookup, layout.slots, num_blocks,
            max(layout.n_codes, 1), unhashed_to_head(vllm_version), hits)
    return hits
