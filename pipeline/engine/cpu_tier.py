"""The LMCache CPU tier under the engine model, composed as the ``lmcache`` model does.

``pipeline.engines.lmcache_cpu.LocalCpuBackend`` (LMCache's local CPU backend, LRU) keyed
by chunks of ``chunk_size`` tokens: chunk j of a prompt is keyed by the chained key of its
last block (only full chunks: ``save_unfull_chunk`` False). Lookup at admission (every
time the scheduler tries the request, as vLLM asks its connector): LMCache's hit c, of
which vLLM loads ``c - g`` beyond its own GPU hit g (``c - 1`` when c is the whole
prompt). Store once the request's prompt is computed, from LMCache's own hit on.
"""

from __future__ import annotations

from pipeline.engines.lmcache_cpu import DEFAULT_CHUNK_SIZE, LocalCpuBackend

__all__ = ["LMCacheTier"]


class LMCacheTier:
    """``lookup(req, gpu_hit) -> loadable tokens`` and ``store(req)`` for ``EngineSim``."""

    def __init__(self, capacity_tokens: int, block_size: int,
                 chunk_size: int = DEFAULT_CHUNK_SIZE) -> None:
        if chunk_size < 1 or chunk_size % block_size:
            raise ValueError(f"chunk size must be a positive multiple of the block size "
                             f"{block_size}, got {chunk_size}")
        self.backend = LocalCpuBackend(capacity_tokens, chunk_size)
        self.per = chunk_size // block_size
        self.chunk_size = chunk_size

    def _chunks(self, req) -> tuple[list[int], list[int]]:
        count = req.num_prompt // self.chunk_size
        keys = [req.keys[(j + 1) * self.per - 1] for j in range(count)]
        return keys, [self.chunk_size] * count

    def lookup(self, req, gpu_hit: int) -> int:
        keys, sizes = self._chunks(req)
        _, hit = self.backend.lookup(keys, sizes)
        req.cpu_state = hit
        return hit - 1 if hit == req.num_prompt else hit

    def store(self, req) -> None:
        keys, sizes = self._chunks(req)
        self.backend.store(keys, sizes, req.num_prompt, req.cpu_state or 0)
