"""The ``lmcache`` CPU model: LMCache's local CPU backend (rules and sources in
``pipeline.components.ktier``, its one implementation) in block mode and as a tier object.

Block mode (``lmcache_cpu``, the model API of ``pipeline.catalog.model_api``): chunk j of a
request is blocks ``j*m .. (j+1)*m - 1`` of the block stream (m = chunk_size / block_size),
keyed by its last block's key; with ``save_unfull_chunk`` (LMCache 0.3.5's default) the
partial last chunk is keyed by the request's last block. Requests run one at a time, prefill
in one step (no chunked-prefill partial saves), one replay per capacity. ``LMCacheTier``: the
same backend for the engine (its ``arrays``) and for callers that drive it from Python
(``lookup`` / ``place``, ``admit`` / ``store``: ``pipeline.engine.cpu_tier.ModelTier``).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.workloads.stream import HEAD_FIRST, BlockStream, capacity_blocks
from pipeline.components.ktier import admit_keys, held_keys, replay_runs, store_keys, tier_arrays
from pipeline.components.engine_layout import T_USED

__all__ = ["DEFAULT_CHUNK_SIZE", "Chunks", "lmcache_chunks", "lmcache_hits", "lmcache_cpu",
           "check_cpu_options", "loadable_prefix", "LMCacheTier", "NumberedKeys", "lru_order"]

DEFAULT_CHUNK_SIZE = 256


def check_chunk_size(chunk_size: object, block_size: int) -> None:
    """Raise ValueError unless ``chunk_size`` is a positive multiple of ``block_size``."""
    if isinstance(chunk_size, bool) or int(chunk_size) != chunk_size or chunk_size < 1 \
            or chunk_size % block_size:
        raise ValueError(f"chunk size must be a positive multiple of the block size "
                         f"{block_size}, got {chunk_size!r}")


def check_cpu_options(stream: BlockStream, order: str, chunk_size: int) -> None:
    """Raise ValueError unless the order is head-first and ``chunk_size`` a positive multiple
    of the stream's block size."""
    if order != HEAD_FIRST:
        raise ValueError(f"the lmcache CPU model is head-first by construction, got {order!r}")
    check_chunk_size(chunk_size, stream.block_size)


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


def lmcache_hits(chunks: Chunks, capacities: np.ndarray) -> np.ndarray:
    """LMCache hit tokens (c) per (capacity in tokens, request)."""
    ends = chunks.starts[1:]
    last = np.where(ends > chunks.starts[:-1], chunks.tokens[np.maximum(ends - 1, 0)]
                    if chunks.tokens.size else 0, chunks.chunk_size)
    out = np.zeros((len(capacities), ends.size), np.int64)
    for k, capacity in enumerate(capacities):
        T = tier_arrays(int(capacity), chunks.chunk_size, 1, max(chunks.n_codes, 1))
        replay_runs(T, chunks.starts, chunks.codes, last, chunks.prompt_tokens, out[k])
    return out


def lmcache_cpu(stream: BlockStream, gpu_hit_tokens: np.ndarray, capacities: object,
                order: str = HEAD_FIRST, *, chunk_size: int = DEFAULT_CHUNK_SIZE,
                save_unfull_chunk: bool = False) -> np.ndarray:
    """CPU model API (``pipeline.catalog.model_api``): CPU prefix tokens per (capacity,
    request), (K, R). LMCache's state never depends on the GPU tier, so ``gpu_hit_tokens`` is
    unused: the split (what vLLM loads) is ``max(0, cpu - gpu)``."""
    check_cpu_options(stream, order, chunk_size)
    tokens = capacity_blocks(capacities, 1)              # validated integer tokens >= 0
    chunks = lmcache_chunks(stream, chunk_size, save_unfull_chunk)
    return loadable_prefix(lmcache_hits(chunks, tokens), chunks.prompt_tokens)


def lru_order(TN: np.ndarray, TNK: np.ndarray) -> list[int]:
    """The keys of one ``ktier`` list (its nodes ``TN``, node keys ``TNK``), least recent
    first."""
    held, node, sentinel = [], TN[-1, 1], TN.shape[0] - 1
    while node != sentinel:
        held.append(int(TNK[node]))
        node = TN[node, 1]
    return held


class NumberedKeys:
    """Any hashable keys as the compiled tiers' int64 keys, each numbered when first seen."""

    def __init__(self) -> None:
        self._ids: dict[Hashable, int] = {}
        self._names: list[Hashable] = []

    def _run(self, keys: Sequence[Hashable]) -> np.ndarray:
        """``keys`` as int64 keys."""
        run = np.empty(len(keys), np.int64)
        for i, key in enumerate(keys):
            run[i] = self._ids.setdefault(key, len(self._ids))
            if run[i] == len(self._names):
                self._names.append(key)
        return run

    def _named(self, numbers: list[int]) -> list:
        return [self._names[n] for n in numbers]


class LMCacheTier(NumberedKeys):
    """LMCache's ``LocalCPUBackend`` (LRU) of ``capacity_tokens`` with ``chunk_size``-token
    chunks of ``chunk_size // block_size`` engine blocks; ``arrays`` its compiled state
    (shared by the engines given it, which key it by their block keys); from Python, keys
    are any hashable keys of full chunks."""

    places_whole_request = True               # it stores from its own hit (``TwoTier``)

    def __init__(self, capacity_tokens: int, block_size: int,
                 chunk_size: int = DEFAULT_CHUNK_SIZE) -> None:
        check_chunk_size(chunk_size, block_size)
        self.capacity = self.capacity_tokens = int(capacity_tokens)
        self.block_size, self.chunk_size = int(block_size), int(chunk_size)
        self.per = self.chunk_size // self.block_size
        self.arrays = tier_arrays(self.capacity, self.chunk_size, self.per)
        super().__init__()

    @property
    def used(self) -> int:
        return int(self.arrays[0][T_USED])

    def lookup(self, keys: Sequence[Hashable]) -> int:
        """Leading chunks of ``keys`` stored now; no change (LMCache's own lookup also
        refreshes them, which ``place`` does)."""
        return int(held_keys(self.arrays, self._run(keys)))

    def place(self, keys: Sequence[Hashable], sizes: int | Sequence[Hashable] | None = None) -> None:
        """One request: LMCache's lookup (refreshing the hit chunks), then its store from its
        own hit; ``sizes``: the chunks' tokens, ``chunk_size`` each (the default)."""
        keys = list(keys)
        if sizes is not None and set([sizes] if isinstance(sizes, int) else sizes) - \
                {self.chunk_size}:
            raise ValueError(f"the lmcache tier holds full chunks of {self.chunk_size} "
                             f"tokens, got sizes {sizes!r}")
        self.store(keys, len(keys) * self.chunk_size, self.admit(keys))

    def admit(self, keys: Sequence[Hashable]) -> int:
        """LMCache's lookup as vLLM's connector asks it at admission: the leading chunks
        present, refreshed (chunk 0 ends most recent); their tokens."""
        return int(admit_keys(self.arrays, self._run(keys), self.chunk_size))

    def store(self, keys: Sequence[Hashable], prompt_tokens: int, hit_tokens: int) -> None:
        """LMCache's store once the request's prompt of ``prompt_tokens`` is computed, from
        its own hit ``hit_tokens`` (``admit``)."""
        store_keys(self.arrays, self._run(keys), self.chunk_size, int(prompt_tokens),
                   int(hit_tokens))

    def keys(self) -> list:
        """The chunks held, least recent first."""
        return self._named(lru_order(self.arrays[2], self.arrays[3]))
