"""vLLM's block pool and LMCache's CPU backend as tier objects (``lookup`` / ``place``), for
callers that drive a tier one request at a time (``pipeline.cache.tiers.TwoTier``, an engine loop).

``VllmTier`` serves requests of full prompt blocks (the vllm model's partial tail slot,
output blocks and hit cap come with ``vllm_requests`` and ``VllmBlockPool.run``, which the
block-mode models use); ``LMCacheTier`` takes chunk keys and their tokens. LMCache stores
from its own hit, whatever the GPU tier holds, so it places every key of a request
(``places_whole_request``); ``admit`` / ``store`` are the two halves of its ``place``, which
the engine calls at its own points (``pipeline.engine.cpu_tier.ModelTier``).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from pipeline.components.lmcache_cpu import DEFAULT_CHUNK_SIZE, LocalCpuBackend
from pipeline.components.vllm_gpu import (DEFAULT_VLLM_VERSION, VllmBlockPool, VllmRequest,
                                             unhashed_to_head)
from pipeline.cache.tiers import leading_run

__all__ = ["VllmTier", "LMCacheTier"]


class VllmTier:
    """vLLM's v1 block pool of ``capacity`` tokens as vLLM logs them (``capacity //
    block_size`` blocks, block 0 the null block)."""

    places_whole_request = False

    def __init__(self, capacity: int, block_size: int = 16, output_tokens: int = 1,
                 vllm_version: str = DEFAULT_VLLM_VERSION) -> None:
        self.capacity, self.block_size = int(capacity), int(block_size)
        self.pool = VllmBlockPool(max(self.capacity // self.block_size, 0),
                                  unhashed_to_head(vllm_version))

    def lookup(self, keys: Sequence[Hashable]) -> int:
        """Leading blocks of ``keys`` cached now (``find_longest_cache_hit``); no change."""
        return len(self.pool.longest_hit(list(keys), len(keys)))

    def place(self, keys: Sequence[Hashable], sizes: object = None) -> None:
        """Run one request whose prompt is the full blocks ``keys`` (schedule, cache,
        free); a request that needs more blocks than are free changes nothing."""
        keys = tuple(keys)
        self.pool.run(VllmRequest(keys, len(keys), len(keys)))

    def keys(self) -> list:
        return list(self.pool.cached)


class LMCacheTier:
    """LMCache's ``LocalCPUBackend`` (LRU) of ``capacity`` tokens with ``chunk_size``-token
    chunks; keys are chunk keys, ``sizes`` their tokens."""

    places_whole_request = True

    def __init__(self, capacity: int, chunk_size: int = DEFAULT_CHUNK_SIZE) -> None:
        self.backend = LocalCpuBackend(int(capacity), int(chunk_size))
        self.capacity = self.backend.capacity

    @property
    def used(self) -> int:
        return self.backend.used

    def lookup(self, keys: Sequence[Hashable]) -> int:
        """Leading chunks of ``keys`` stored now; no change (LMCache's own lookup also
        refreshes them, which ``place`` does)."""
        return leading_run(keys, self.backend.hot)

    def place(self, keys: Sequence[Hashable], sizes: int | Sequence[int] | None = None) -> None:
        """One request: LMCache's lookup (refreshing the hit chunks), then its store from its
        own hit (``LocalCpuBackend.store``)."""
        keys = list(keys)
        if sizes is None or isinstance(sizes, int):
            sizes = [self.backend.chunk_size if sizes is None else sizes] * len(keys)
        sizes = list(sizes)
        hit_tokens = self.admit(keys, sizes)
        self.store(keys, sizes, sum(sizes), hit_tokens)

    def admit(self, keys: Sequence[Hashable], sizes: Sequence[int]) -> int:
        """LMCache's lookup as vLLM's connector asks it at admission: the leading chunks
        present, refreshed (chunk 0 ends most recent); their tokens."""
        return self.backend.lookup(keys, sizes)[1]

    def store(self, keys: Sequence[Hashable], sizes: Sequence[int], prompt_tokens: int,
              hit_tokens: int) -> None:
        """LMCache's store once the request's prompt of ``prompt_tokens`` is computed, from
        its own hit ``hit_tokens`` (``admit``)."""
        self.backend.store(keys, sizes, prompt_tokens, hit_tokens)

    def keys(self) -> list:
        return list(self.backend.hot)
