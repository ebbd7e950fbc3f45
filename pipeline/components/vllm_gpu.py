"""The ``vllm`` GPU model at concurrency 1: vLLM's v1 block pool, one request at a time.

The pool is the engine's (``pipeline.components.kpool``, compiled), run here by ``run_alone``:
each request looks up its prefix, takes its blocks, hashes the full ones and frees them
before the next arrives. What the block-lru model (``pipeline.onepass.lru_depths``)
leaves out and vLLM does, read in the vllm wheels (0.11.0, 0.22.1, 0.23.0, 0.24.0, 0.33.0;
files under ``vllm/v1/core/``):

1. **The partial tail block holds a slot.** ``KVCacheManager.allocate_slots`` gives a running
   request ``ceil(tokens / block_size)`` blocks; only full ones get a hash
   (``BlockPool.cache_full_blocks``). On finish ``SingleTypeKVCacheManager.free`` hands the
   blocks to ``BlockPool.free_blocks`` in reverse (tail first). Since **vLLM 0.24.0** (PR
   #42656, "Apply LRU policy only to proper cache entries") ``free_blocks`` *prepends* blocks
   without a hash to the free queue (``FreeKVCacheBlockQueue.prepend_n``), so the empty slot
   is the next one reused; up to 0.23.0 every freed block is appended at the tail
   (0.23.0 prepends unhashed blocks only in ``SlidingWindowManager.free``), which parks empty
   slots among the cached blocks. ``--vllm-version`` picks the placement.
2. **The null block.** ``BlockPool.__init__`` pops block 0 off the free queue as
   ``null_block``; the "GPU KV cache size: N tokens" vLLM logs is ``num_gpu_blocks *
   block_size``, so a logged size of N tokens leaves ``N // block_size - 1`` usable blocks.
3. **The hit cap.** ``KVCacheManager.get_computed_blocks`` looks up at most
   ``request.num_tokens - 1`` tokens (the last prompt token must be computed to sample), so a
   prompt that is an exact multiple of the block size hits at most all but its last block.

Further rules kept: the lookup (``find_longest_cache_hit``) takes the longest run of leading
block hashes present and, for a hash held by several blocks, the first one inserted
(``BlockHashToBlockMap.get_one_block``); hit blocks leave the free queue (``BlockPool.touch``);
new blocks are popped from the head of the free queue, evicting their hash
(``get_new_blocks`` / ``_maybe_evict_cached_block``); a block that becomes full is cached even
when its hash is already cached by another block (no de-duplication). A request that needs
more blocks than the pool has free is never scheduled: it changes nothing (its lookup is still
reported, as in the block-lru model's oversize rule). vLLM itself refuses to start when a
request cannot fit (max_model_len against the KV cache), so this is a convention for inputs
vLLM never runs. ``scripts/vllm_reference.py`` drives vLLM's own ``KVCacheManager`` (0.11.0,
0.23.0, 0.24.0, 0.33.0 wheels) and finds every request's hit equal to this replay; the tests
hold it equal to a plain-Python port (``tests/oracles/vllm_pool.py``).

Workload as the lab runs it (``vllm_layout``): ``max_tokens = output_tokens``, one number for
every request, or ``"trace"``, each request's own length from the trace
(``BlockStream.outputs``; 1 where it gives none); longer outputs fill and cache the tail
block, hashed as vLLM hashes them when the trace gives the sampled ids.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from pipeline.workloads.stream import TAIL_FIRST, TRACE, BlockStream, capacity_blocks
from pipeline.components.kpool import leading_cached, pool_arrays, run_alone
from pipeline.components.vllm_layout import OutputTokens, VllmLayout, vllm_layout

__all__ = ["DEFAULT_VLLM_VERSION", "PREPEND_SINCE", "unhashed_to_head", "check_gpu_options", "VllmPool", "replay_layout", "replay_vllm", "replay_gpu",
           "VllmTier"]

DEFAULT_VLLM_VERSION = "0.33.0"
#: First release whose ``BlockPool.free_blocks`` prepends unhashed blocks (PR #42656).
PREPEND_SINCE = (0, 24, 0)


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = str(version).split(".")
    try:
        numbers = tuple(int(part) for part in parts)
    except ValueError:
        numbers = ()
    if len(numbers) < 2:
        raise ValueError(f"vllm version must look like 0.33.0, got {version!r}")
    return numbers


def unhashed_to_head(version: str) -> bool:
    """True when vLLM ``version`` puts freed unhashed blocks at the head of the free queue."""
    return _version_tuple(version) >= PREPEND_SINCE


def check_gpu_options(order: str, output_tokens: OutputTokens, vllm_version: str) -> None:
    """Raise ValueError on an order other than tail-first, output < 1 (one number, one per
    request, or ``"trace"``) or a bad version."""
    if order != TAIL_FIRST:
        raise ValueError(f"the vllm GPU model is tail-first by construction, got {order!r}")
    if isinstance(output_tokens, str):
        if output_tokens != TRACE:
            raise ValueError(f"output tokens must be an integer >= 1 or {TRACE!r}, "
                             f"got {output_tokens!r}")
    elif np.ndim(output_tokens) == 1:
        values = np.asarray(output_tokens)
        if values.dtype.kind not in "iu" or values.size == 0 or values.min() < 1:
            raise ValueError("per-request output tokens must be integers >= 1")
    elif isinstance(output_tokens, bool) or int(output_tokens) != output_tokens \
            or output_tokens < 1:
        raise ValueError(f"output tokens must be an integer >= 1, got {output_tokens!r}")
    _version_tuple(vllm_version)


class VllmPool:
    """vLLM's block pool of ``num_blocks`` blocks (block 0 the null block), its state kept
    between ``run`` calls; ``prepend_unhashed`` as ``unhashed_to_head``."""

    def __init__(self, num_blocks: int, prepend_unhashed: bool) -> None:
        self.P, self.BH, self.HT = pool_arrays(max(int(num_blocks), 0))
        self.prepend = np.bool_(prepend_unhashed)
        self.free = np.array([max(int(num_blocks) - 1, 0)], np.int64)
        self._buffers = np.zeros((3, 0), np.int64)           # BT, HIT, BUF

    def run(self, keys: np.ndarray, key_starts: np.ndarray, lookup: np.ndarray,
            slots: np.ndarray) -> np.ndarray:
        """Run requests one at a time (``kpool.run_alone``; request r caches
        ``keys[key_starts[r]:key_starts[r + 1]]``, may hit ``lookup[r]`` leading blocks,
        holds ``slots[r]``); the hit blocks of each."""
        hits = np.zeros(key_starts.size - 1, np.int64)
        need = int(slots.max()) if slots.size else 0
        if need > self._buffers.shape[1]:
            self._buffers = np.zeros((3, need), np.int64)
        run_alone(self.P, self.BH, self.HT, keys, key_starts, lookup, slots, self.prepend,
                  self.free, *self._buffers, hits)
        return hits

    def cached_prefix(self, keys: np.ndarray) -> int:
        """How many leading ``keys`` are cached now (no change)."""
        return int(leading_cached(self.HT, self.HT.shape[0] - 1, keys)) if keys.size else 0

    def cached_keys(self) -> np.ndarray:
        return self.HT[self.HT[:, 1] >= 0, 0]


def replay_layout(layout: VllmLayout, num_blocks: int, prepend_unhashed: bool) -> np.ndarray:
    """GPU hit blocks per request of ``layout`` in a fresh pool of ``num_blocks`` blocks."""
    return VllmPool(num_blocks, prepend_unhashed).run(layout.keys, layout.key_starts,
                                                      layout.lookup, layout.slots)


def replay_vllm(stream: BlockStream, logged_tokens: int, output_tokens: OutputTokens = 1,
                vllm_version: str = DEFAULT_VLLM_VERSION) -> np.ndarray:
    """GPU hit blocks per request for a vLLM KV cache of ``logged_tokens`` (as vLLM logs it)."""
    return replay_layout(vllm_layout(stream, output_tokens),
                         int(logged_tokens) // stream.block_size, unhashed_to_head(vllm_version))


def replay_gpu(stream: BlockStream, capacities: object, order: str = TAIL_FIRST, *,
               output_tokens: OutputTokens = 1, vllm_version: str = DEFAULT_VLLM_VERSION
               ) -> np.ndarray:
    """GPU model API (``pipeline.catalog.model_api``): hit tokens per (capacity, request), (K, R),
    each capacity (KV cache sizes in tokens as vLLM logs them) replayed request by request."""
    check_gpu_options(order, output_tokens, vllm_version)
    tokens = capacity_blocks(capacities, 1)              # validated integer tokens >= 0
    layout, prepend = vllm_layout(stream, output_tokens), unhashed_to_head(vllm_version)
    hits = np.zeros((tokens.size, stream.requests), np.int64)
    for k, capacity in enumerate(tokens.tolist()):
        hits[k] = replay_layout(layout, capacity // stream.block_size, prepend)
    return hits * stream.block_size


class VllmTier:
    """vLLM's v1 block pool of ``capacity`` tokens as vLLM logs them (``capacity //
    block_size`` blocks, block 0 the null block) as a tier object (``lookup``/``place``),
    for callers that drive a tier one request at a time (``pipeline.cache.tiers.TwoTier``).
    A request is its full prompt blocks ``keys`` (any hashable keys; the vllm model's partial
    tail slot, output blocks and hit cap come with ``vllm_layout``)."""

    places_whole_request = False

    def __init__(self, capacity: int, block_size: int = 16, output_tokens: int = 1,
                 vllm_version: str = DEFAULT_VLLM_VERSION) -> None:
        self.capacity, self.block_size = int(capacity), int(block_size)
        self.pool = VllmPool(self.capacity // self.block_size, unhashed_to_head(vllm_version))
        self.codes: dict[Hashable, int] = {}
        self.names: list[Hashable] = []

    def _codes(self, keys: Sequence[Hashable]) -> np.ndarray:
        for key in keys:
            if key not in self.codes:
                self.codes[key] = len(self.names)
                self.names.append(key)
        return np.array([self.codes[key] for key in keys], np.int64)

    def lookup(self, keys: Sequence[Hashable]) -> int:
        """Leading blocks of ``keys`` cached now (``find_longest_cache_hit``); no change."""
        known = next((i for i, key in enumerate(keys) if key not in self.codes), len(keys))
        return self.pool.cached_prefix(self._codes(list(keys)[:known]))

    def place(self, keys: Sequence[Hashable], sizes: object = None) -> None:
        """Run one request whose prompt is the full blocks ``keys`` (schedule, cache,
        free); a request that needs more blocks than are free changes nothing."""
        codes = self._codes(list(keys))
        count = np.array([codes.size], np.int64)
        self.pool.run(codes, np.array([0, codes.size], np.int64), count, count)

    def keys(self) -> list:
        return [self.names[code] for code in self.pool.cached_keys().tolist()]
