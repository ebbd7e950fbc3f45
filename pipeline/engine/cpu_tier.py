"""The LMCache CPU tier under the engine model, composed as the ``lmcache`` model does.

LMCache's local CPU backend (LRU, the rules of ``pipeline.engine_caches.lmcache_cpu.
LocalCpuBackend``, compiled in ``pipeline.engine.ktier``) keyed by chunks of ``chunk_size``
tokens: chunk j of a prompt is keyed by the chained key of its last block (only full
chunks: ``save_unfull_chunk`` False). Lookup at admission (every time the scheduler tries
the request, as vLLM asks its connector): LMCache's hit c, of which vLLM loads ``c - g``
beyond its own GPU hit g (``c - 1`` when c is the whole prompt). Store once the request's
prompt is computed, from LMCache's own hit on. Engines given the same tier share it.
"""

from __future__ import annotations

from pipeline.engine.ktier import tier_arrays
from pipeline.engine_caches.lmcache_cpu import DEFAULT_CHUNK_SIZE

__all__ = ["LMCacheTier"]


class LMCacheTier:
    """A CPU tier of ``capacity_tokens``; ``arrays`` its compiled state (``ktier``)."""

    def __init__(self, capacity_tokens: int, block_size: int,
                 chunk_size: int = DEFAULT_CHUNK_SIZE) -> None:
        if chunk_size < 1 or chunk_size % block_size:
            raise ValueError(f"chunk size must be a positive multiple of the block size "
                             f"{block_size}, got {chunk_size}")
        self.capacity_tokens = int(capacity_tokens)
        self.block_size = block_size
        self.chunk_size = chunk_size
        self.per = chunk_size // block_size
        self.arrays = tier_arrays(self.capacity_tokens, chunk_size, self.per)
