"""The ``vllm`` GPU model's fast engine: one pass of block depths, then a scalar per capacity.

Let a request r hold ``n_r`` slots while it runs, cache ``f_r`` hashed blocks (``f_r`` =
``n_r`` or ``n_r - 1``: the partial tail is unhashed) and have K usable blocks (the logged
size // block size, minus the null block). Requests run one at a time, so when one arrives
every block is in the free queue.

**vLLM >= 0.24 (unhashed blocks prepended).** The free queue is always ``[empty slots]
[hashed blocks, least recent first]``: empties are prepended, hashed blocks appended, and the
head is popped first. Take the recency stack S of hashed keys (a request touches its hashed
blocks tail first, as ``free`` appends them in reverse). Claim: the cached keys are always
the top ``l`` of S, with the scalar

    l_after = f_r + min(l_before - p_r, K - n_r),   l = 0 at the start,

where ``p_r`` is the number of r's keys present before it. Proof: r pops ``n_r - h_r`` blocks
from the head, empties first, then the least recent hashed blocks; the ``l - p_r`` other
cached keys are a top segment of S without r's keys, and exactly ``min(l - p_r, K - n_r)`` of
them survive (K - n_r slots are left for them), the most recent ones; r's ``f_r`` keys go on
top. So, with ``depth`` the 1-based rank of a key in S just before its request (one
Fenwick pass, as ``pipeline.onepass.lru_depths``), a prompt block is present iff ``depth <= l``,
and the hit is ``min(#{j : max(depth_0..depth_j) <= l}, cap)``. The partial tail slot is thus
pure bookkeeping: it costs ``K - n_r`` instead of ``K - f_r`` for the others, then returns to
the head as an empty slot.

**vLLM <= 0.23 (everything appended).** The unhashed tail is an ordinary queue entry below the
request's hashed blocks: a phantom item with a fresh key, placed first (tail first). Then the
queue is a plain LRU of K items and the same recurrence holds with ``f_r`` replaced by ``n_r``
(it gives ``l = min(items seen, K)``).

**Where it is not exact, and what happens then.** vLLM does not de-duplicate: when the hit
cap (``num_tokens - 1``) stops a lookup before a block that IS cached (a prompt that is a
multiple of the block size), the request computes that block again into a new slot, and if
the old copy survives the request's own evictions two blocks hold one hash. Later lookups
touch the first-inserted copy, so which copy moves depends on the capacity: no
capacity-independent stack. The old copy at depth d survives iff ``d - h_r <= K - n_r``; the
kernel detects exactly that and the capacity is replayed request by request instead
(``vllm_gpu``: the engine's compiled pool). When the old copy is among the request's own
evictions there is no duplicate and the recurrence holds as is (the key counts in ``p_r``).
Requests with more slots than K are never scheduled; capacities fall into bands between the
distinct ``n_r`` with one depth pass per band (as ``pipeline.onepass.stack_distance``). Output
lengths may differ per request (``n_r``, ``f_r`` per request). When the trace gives the sampled
tokens, a sampled block's key is fresh when its request first computes it (a later turn that
re-sends the reply looks it up like any prompt key); only when an output key was some
earlier block's key (``VllmLayout.repeated``: the same reply sampled again) can it be
cached already, where the lookup never touches it: a duplicate again, so such a run is
replayed (``vllm_gpu``) at every capacity, once for all those that never evict. Tests
hold every capacity equal to that replay and to the plain-Python oracle
(``tests/oracles/vllm_pool.py``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pipeline.workloads.stream import TAIL_FIRST, BlockStream, capacity_blocks
from pipeline.components.vllm_gpu import (DEFAULT_VLLM_VERSION, check_gpu_options,
                                             replay_layout, unhashed_to_head)
from pipeline.components.vllm_layout import OutputTokens, VllmLayout, vllm_layout
from pipeline.onepass.stack_distance_kernels import COLD, lookup_depths, touch

__all__ = ["vllm_gpu", "vllm_hits"]


@njit(cache=True)
def _depth_pass(keys, key_starts, prompt_keys, slots, phantom, limit, n_codes, depth, runmax):
    """Depth (1-based rank in the recency stack before the request) and its running max for
    each request's prompt keys; then requests with at most ``limit`` slots place their hashed
    keys tail first (after a phantom item for an unhashed tail slot when ``phantom``)."""
    n_requests = key_starts.size - 1
    total = n_codes + n_requests
    last = np.full(total, -1, np.int64)
    tree = np.zeros(keys.size + n_requests + 1, np.int64)
    live = 0
    clock = np.int64(0)                 # not a literal 0: touch compiles once, for int64
    for r in range(n_requests):
        start = key_starts[r]
        lookup_depths(tree, last, keys, start, start + prompt_keys[r], live, depth, runmax)
        if slots[r] > limit:
            continue
        end = key_starts[r + 1]
        items = end - start
        extra = 1 if phantom and slots[r] > items else 0
        for t in range(items + extra):
            code = n_codes + r if t < extra else keys[end - 1 - (t - extra)]
            live += touch(tree, last, code, clock)
            clock += 1


@njit(cache=True)
def _scalar_pass(key_starts, prompt_keys, lookup, slots, phantom, depth, runmax, capacity,
                 hits):
    """Fill ``hits`` (blocks) for ``capacity`` usable blocks; return False where the hit cap
    leaves a duplicate block (the capacity must be replayed literally)."""
    held = 0
    for r in range(key_starts.size - 1):
        start = key_starts[r]
        present = 0
        while present < prompt_keys[r] and runmax[start + present] <= held:
            present += 1
        hit = min(present, lookup[r])
        hits[r] = hit
        need = slots[r]
        if need > capacity:
            continue                                    # never scheduled
        if present > hit and depth[start + hit] - hit <= capacity - need:
            return False                                # the old copy survives: duplicate
        keys = key_starts[r + 1] - start
        placed = need if phantom else keys
        held = placed + min(held - present, capacity - need)
    return True


def vllm_hits(stream: BlockStream, capacities: np.ndarray, output_tokens: OutputTokens = 1,
              vllm_version: str = DEFAULT_VLLM_VERSION) -> tuple[np.ndarray, np.ndarray]:
    """Hit blocks per (capacity, request) for capacities in usable blocks, and per capacity
    whether the one-pass form was exact (False: that row is still empty)."""
    return _layout_hits(vllm_layout(stream, output_tokens), np.asarray(capacities, np.int64),
                        not unhashed_to_head(vllm_version))


def _layout_hits(layout: VllmLayout, capacities: np.ndarray, phantom: bool
                 ) -> tuple[np.ndarray, np.ndarray]:
    hits = np.zeros((capacities.size, layout.key_starts.size - 1), np.int64)
    if layout.repeated:                         # duplicates: replayed at every capacity
        return hits, np.zeros(capacities.size, bool)
    exact = np.ones(capacities.size, bool)
    sizes = np.unique(layout.slots)
    bands: dict[int, list[int]] = {}
    for k, capacity in enumerate(capacities):
        fitting = sizes[sizes <= capacity]
        bands.setdefault(int(fitting[-1]) if fitting.size else -1, []).append(k)
    for limit, rows in bands.items():
        depth = np.full(layout.keys.size, COLD, np.int64)
        runmax = np.full(layout.keys.size, COLD, np.int64)
        _depth_pass(layout.keys, layout.key_starts, layout.prompt_keys, layout.slots, phantom,
                    limit, layout.n_codes, depth, runmax)
        for k in rows:
            exact[k] = _scalar_pass(layout.key_starts, layout.prompt_keys, layout.lookup,
                                    layout.slots, phantom, depth, runmax, int(capacities[k]),
                                    hits[k])
    return hits, exact


def vllm_gpu(stream: BlockStream, capacities: object, order: str = TAIL_FIRST, *,
             output_tokens: OutputTokens = 1, vllm_version: str = DEFAULT_VLLM_VERSION
             ) -> np.ndarray:
    """GPU model API (``pipeline.catalog.model_api``): hit tokens per (capacity, request), (K, R),
    for KV cache sizes in tokens as vLLM logs them; a capacity where the one-pass form is not
    exact (a duplicated block, see the module docstring) is replayed request by request in
    the compiled pool (``vllm_gpu.replay_layout``), once for all the capacities that never
    evict (each allocation then finds a block that never held a key)."""
    check_gpu_options(order, output_tokens, vllm_version)
    tokens = capacity_blocks(capacities, 1)              # validated integer tokens >= 0
    layout, prepend = vllm_layout(stream, output_tokens), unhashed_to_head(vllm_version)
    hits, exact = _layout_hits(layout, np.maximum(tokens // stream.block_size - 1, 0),
                               not prepend)
    never_evicts = None       # a pool of sum(slots) usable blocks never pops a cached block
    for k in np.flatnonzero(~exact):
        blocks = int(tokens[k]) // stream.block_size
        if blocks - 1 < layout.slots.sum():
            hits[k] = replay_layout(layout, blocks, prepend)
            continue
        if never_evicts is None:
            never_evicts = replay_layout(layout, blocks, prepend)
        hits[k] = never_evicts
    return hits * stream.block_size
