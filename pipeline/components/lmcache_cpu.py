"""The ``lmcache`` CPU model, replayed literally: LMCache's local CPU backend under vLLM v1.

Read in the lmcache 0.5.6 wheel; the defaults of ``v1/config.py`` (chunk_size 256,
max_local_cpu_size 5.0, save_unfull_chunk False) are the same in the 0.4.2 wheel, and 0.3.5
differs only in save_unfull_chunk True:

* **Keys.** ``v1/token_database.py`` ``ChunkedTokenDatabase``: ``chunk_size`` (256) token
  chunks, each keyed by a hash chained over the previous chunk's (``_prefix_hash``);
  ``_chunk_tokens`` yields the partial last chunk only when ``save_unfull_chunk`` (default
  False in ``v1/config.py``; True in 0.3.5). Here chunk j of a request is blocks
  ``j*m .. (j+1)*m - 1`` of the block stream (m = chunk_size / block_size) and its key is the
  key of its last block (chained keys stand for the whole prefix); a partial chunk is keyed
  by the request's last block.
* **Lookup.** The scheduler's ``LMCacheConnectorV1Impl.get_num_new_matched_tokens``
  (``integration/vllm/vllm_v1_adapter.py``) asks the lookup client (by default
  ``LMCacheLookupClient``, ``v1/lookup_client/factory.py``), whose ``LMCacheLookupServer`` in
  the worker calls ``LMCacheEngine.lookup(pin=True)`` (``v1/cache_engine.py``): the longest run of leading chunks present
  (``StorageManager.batched_contains``), c tokens; ``LocalCPUBackend.contains`` pins each
  hit chunk and records it, then ``touch_cache`` moves them to most recent in REVERSE order,
  so chunk 0 ends most recent (``LRUCachePolicy.update_on_hit`` = ``move_to_end``). This
  happens whatever vLLM's own cache holds.
* **Load.** ``get_num_new_matched_tokens`` returns ``c - g`` (g = vLLM's local hit), minus 1
  when c is the whole prompt, nothing when <= 0; retrieval (``get_blocking``) does not touch
  the LRU. So this model reports ``c`` (``c - 1`` for a whole-prompt hit) as the CPU prefix
  and the block models' ``max(0, cpu - gpu)`` is exactly what vLLM loads.
* **Store.** ``wait_for_save`` first releases the lookup's pins (``lookup_unpin``), then
  stores: ``ReqMeta.from_request_tracker`` starts at ``num_saved_tokens`` = c (LMCache's own
  hit, not g), saves up to the last full chunk (the whole prompt with
  ``save_unfull_chunk``) and skips the request when c > 0 and the prompt ends before the next
  chunk boundary (``cdiv(c + 1, chunk) * chunk``); decode tokens are not saved
  (``save_decode_cache`` False). ``LMCacheEngine.store`` allocates every chunk first
  (``LocalCPUBackend.allocate``: while the allocation fails, evict the least recent evictable
  chunk, one at a time; with nothing to evict the allocation fails and the rest of the request
  is dropped), then ``batched_put`` inserts them in prefix order (``submit_put_task``): a key
  already present is skipped without refreshing it, a new one goes to the most-recent end, so
  a newly stored request's first chunk is its OLDEST.
* **Capacity.** ``max_local_cpu_size`` GB = ``int(size * 2**30)`` bytes. Here the capacity is
  in tokens of KV and a chunk occupies its tokens (the allocator's alignment and
  fragmentation, which only matter for unequal chunks, are not modelled).

Requests run one at a time, prefill in one step (no chunked-prefill partial saves).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.workloads.stream import HEAD_FIRST, BlockStream, capacity_blocks

__all__ = ["DEFAULT_CHUNK_SIZE", "Chunks", "lmcache_chunks", "LocalCpuBackend",
           "replay_lmcache", "replay_cpu", "check_cpu_options", "loadable_prefix"]

DEFAULT_CHUNK_SIZE = 256


def check_cpu_options(stream: BlockStream, order: str, chunk_size: int) -> None:
    """Raise ValueError unless the order is head-first and ``chunk_size`` a positive multiple
    of the stream's block size."""
    if order != HEAD_FIRST:
        raise ValueError(f"the lmcache CPU model is head-first by construction, got {order!r}")
    if isinstance(chunk_size, bool) or int(chunk_size) != chunk_size or chunk_size < 1 \
            or chunk_size % stream.block_size:
        raise ValueError(f"chunk size must be a positive multiple of the block size "
                         f"{stream.block_size}, got {chunk_size!r}")


@dataclass(frozen=True)
class Chunks:
    """Per request r, chunks ``starts[r]:starts[r+1]`` of ``codes`` (dense keys 0..n_codes-1)
    with ``tokens`` each; ``prompt_tokens`` per request."""

    chunk_size: int
    starts: np.ndarray
    codes: np.ndarray
    tokens: np.ndarray
    prompt_tokens: np.ndarray
    n_codes: int


def lmcache_chunks(stream: BlockStream, chunk_size: int = DEFAULT_CHUNK_SIZE,
                   save_unfull_chunk: bool = False) -> Chunks:
    """The chunks LMCache keys for each request of ``stream`` (see the module docstring)."""
    per = chunk_size // stream.block_size
    full = stream.cacheable // per
    prompt = stream.prompt_tokens.astype(np.int64)
    partial = (prompt > full * chunk_size) if save_unfull_chunk else np.zeros_like(full, bool)
    counts = full + partial
    starts = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    owner = np.repeat(np.arange(stream.requests), counts)
    index = np.arange(int(starts[-1])) - starts[owner]
    is_partial = index >= full[owner]
    last_block = stream.starts[owner + 1] - 1
    block = np.where(is_partial, last_block, stream.starts[owner] + (index + 1) * per - 1)
    tokens = np.where(is_partial, prompt[owner] - full[owner] * chunk_size, chunk_size)
    raw = stream.codes[block] if block.size else np.zeros(0, np.int64)
    codes, dense = np.unique(raw, return_inverse=True)
    return Chunks(int(chunk_size), starts, dense.astype(np.int64), tokens.astype(np.int64),
                  prompt, int(codes.size))


def loadable_prefix(hit_tokens: np.ndarray, prompt_tokens: np.ndarray) -> np.ndarray:
    """LMCache's hit as the CPU prefix of the block models: c, or c - 1 when c is the whole
    prompt (vLLM recomputes the last token)."""
    return hit_tokens - (hit_tokens == prompt_tokens)


class LocalCpuBackend:
    """``LocalCPUBackend`` with the LRU policy: ``hot`` key -> tokens, least recent first."""

    def __init__(self, capacity_tokens: int, chunk_size: int) -> None:
        self.capacity = int(capacity_tokens)
        self.chunk_size = chunk_size
        self.hot: OrderedDict[Hashable, int] = OrderedDict()
        self.used = 0

    def lookup(self, keys: Sequence[Hashable], tokens: Sequence[int]) -> tuple[int, int]:
        """lookup(pin=True) + touch_cache: (hit chunks, hit tokens)."""
        hit = 0
        while hit < len(keys) and keys[hit] in self.hot:
            hit += 1
        for key in reversed(keys[:hit]):                # touch_cache: chunk 0 ends newest
            self.hot.move_to_end(key)
        return hit, int(sum(tokens[:hit]))

    def _allocate(self, size: int, in_flight: int) -> bool:
        """allocate: evict the least recent chunk until ``size`` more tokens fit."""
        while self.used + in_flight + size > self.capacity:
            if not self.hot:
                return False
            _, evicted = self.hot.popitem(last=False)
            self.used -= evicted
        return True

    def store(self, keys: Sequence[Hashable], tokens: Sequence[int], prompt: int,
              hit_tokens: int) -> None:
        """wait_for_save -> LMCacheEngine.store for a request whose lookup found
        ``hit_tokens``."""
        boundary = -(-(hit_tokens + 1) // self.chunk_size) * self.chunk_size
        if hit_tokens > 0 and prompt < boundary:
            return                                      # skip_save
        first = hit_tokens // self.chunk_size           # skip_leading_tokens, chunk aligned
        allocated, in_flight = [], 0
        for key, size in zip(keys[first:], tokens[first:]):
            if not self._allocate(size, in_flight):
                break                                   # "store only ... chunks"
            allocated.append((key, size))
            in_flight += size
        for key, size in allocated:                     # batched_put in prefix order
            if key in self.hot:
                continue                                # submit_put_task: already there
            self.hot[key] = size
            self.used += size


def replay_lmcache(chunks: Chunks, capacity_tokens: int) -> np.ndarray:
    """LMCache hit tokens (c) per request for a CPU tier of ``capacity_tokens``."""
    backend = LocalCpuBackend(capacity_tokens, chunks.chunk_size)
    codes, tokens = chunks.codes.tolist(), chunks.tokens.tolist()
    out = np.zeros(chunks.starts.size - 1, np.int64)
    for r in range(out.size):
        span = slice(int(chunks.starts[r]), int(chunks.starts[r + 1]))
        keys, sizes = codes[span], tokens[span]
        _, hit_tokens = backend.lookup(keys, sizes)
        out[r] = hit_tokens
        backend.store(keys, sizes, int(chunks.prompt_tokens[r]), hit_tokens)
    return out


def replay_cpu(stream: BlockStream, gpu_hit_tokens: np.ndarray, capacities: object,
               order: str = HEAD_FIRST, *, chunk_size: int = DEFAULT_CHUNK_SIZE,
               save_unfull_chunk: bool = False) -> np.ndarray:
    """CPU model API (``pipeline.catalog.model_api``): CPU prefix tokens per (capacity, request),
    (K, R). LMCache's state never depends on the GPU tier, so ``gpu_hit_tokens`` is unused:
    the split (what vLLM loads) is ``max(0, cpu - gpu)``."""
    check_cpu_options(stream, order, chunk_size)
    tokens = capacity_blocks(capacities, 1)              # validated integer tokens >= 0
    chunks = lmcache_chunks(stream, chunk_size, save_unfull_chunk)
    rows = [loadable_prefix(replay_lmcache(chunks, int(c)), chunks.prompt_tokens)
            for c in tokens]
    return np.array(rows, dtype=np.int64).reshape(tokens.size, stream.requests)
