"""LMCache's local CPU backend under vLLM v1, ported literally (the oracle of the compiled
``pipeline.components.ktier``, whose docstring cites each rule to LMCache's sources; compared
with LMCache's own code by ``scripts/lmcache_reference.py``).

``LocalCpuBackend`` is ``LocalCPUBackend`` with the LRU policy over an ``OrderedDict``;
``replay_cpu`` its block-mode CPU model, ``LiteralLMCacheTier`` its tier object and
``ENTRY`` the registry entry ``lmcache-replay`` that tests register to run it through the
commands and the engine's Python tier path.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence

import numpy as np

from pipeline.workloads.stream import HEAD_FIRST, BlockStream, capacity_blocks
from pipeline.catalog import CacheModel
from pipeline.components.entries import LMCACHE_OPTIONS
from pipeline.cache.tiers import leading_run
from pipeline.components.lmcache import (DEFAULT_CHUNK_SIZE, Chunks, check_cpu_options,
                                            lmcache_chunks, loadable_prefix)

__all__ = ["LocalCpuBackend", "replay_lmcache", "replay_cpu", "LiteralLMCacheTier", "ENTRY"]


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
    """CPU model API (``pipeline.catalog.model_api``): CPU prefix tokens per (capacity,
    request), (K, R); ``gpu_hit_tokens`` unused."""
    check_cpu_options(stream, order, chunk_size)
    tokens = capacity_blocks(capacities, 1)              # validated integer tokens >= 0
    chunks = lmcache_chunks(stream, chunk_size, save_unfull_chunk)
    rows = [loadable_prefix(replay_lmcache(chunks, int(c)), chunks.prompt_tokens)
            for c in tokens]
    return np.array(rows, dtype=np.int64).reshape(tokens.size, stream.requests)


class LiteralLMCacheTier:
    """``LocalCpuBackend`` as a tier object, with ``LMCacheTier``'s protocol (full chunks of
    ``chunk_size`` tokens)."""

    places_whole_request = True

    def __init__(self, capacity: int, chunk_size: int = DEFAULT_CHUNK_SIZE,
                 save_unfull_chunk: bool = False) -> None:
        self.backend = LocalCpuBackend(int(capacity), int(chunk_size))
        self.capacity, self.chunk_size = self.backend.capacity, int(chunk_size)

    def lookup(self, keys: Sequence[Hashable]) -> int:
        return leading_run(keys, self.backend.hot)

    def place(self, keys: Sequence[Hashable], sizes: object = None) -> None:
        keys = list(keys)
        self.store(keys, len(keys) * self.chunk_size, self.admit(keys))

    def admit(self, keys: Sequence[Hashable]) -> int:
        return self.backend.lookup(list(keys), [self.chunk_size] * len(keys))[1]

    def store(self, keys: Sequence[Hashable], prompt_tokens: int, hit_tokens: int) -> None:
        self.backend.store(list(keys), [self.chunk_size] * len(keys), prompt_tokens,
                           hit_tokens)

    def keys(self) -> list:
        return list(self.backend.hot)


ENTRY = CacheModel("lmcache-replay", "LMCache's local CPU backend replayed literally (test "
                   "oracle)", "chunk", tier=LiteralLMCacheTier, cpu=replay_cpu,
                   order=HEAD_FIRST, options=LMCACHE_OPTIONS)
