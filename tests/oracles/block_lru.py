"""The block-lru model, replayed literally: the test oracle the one-pass engine
(``pipeline/onepass/lru_depths.py``) and the LRU class replay (``block-lru-replay``) must equal.

The rules (README, "Block-level prefix caching"):

* A request is a list of prefix-chained block keys of ``block_size`` tokens; only its
  leading FULL blocks are cacheable (a partial tail is always recomputed).
* Lookup before any update: a tier's prefix hit is the longest run of leading blocks present.
* Update after the lookup: the request's blocks become the most recent in the tier, among
  themselves in the tier's order (tail-first: the head ends most recent; head-first: the
  tail does); the request's own blocks are never evicted while it is placed; least-recent
  other blocks are evicted until it fits. A request with more blocks than the tier holds is
  not stored and evicts nothing.
* Two tiers: GPU prefix g, CPU prefix c (both counted from block 0); the CPU serves
  max(0, c - g) blocks, the rest after max(g, c) is recomputed. The GPU tier places all the
  request's cacheable blocks; the CPU tier places blocks g.. (those it served are refreshed,
  missing ones stored) and leaves the blocks the GPU served alone.

A tier of C tokens holds C // block_size blocks. ``replay`` runs one (GPU, CPU) pair request
by request, in blocks.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import NamedTuple

import numpy as np

from pipeline.workloads.stream import TAIL_FIRST, BlockStream, check_order
from pipeline.cache.tiers import leading_run

__all__ = ["BlockTier", "Replay", "replay"]


class BlockTier:
    """One tier: an LRU list of block keys (least recent first) holding ``capacity`` blocks."""

    def __init__(self, capacity: int, order: str) -> None:
        self.capacity = capacity
        self.order = check_order(order)
        self.blocks: OrderedDict[Hashable, None] = OrderedDict()

    def present(self, keys: Sequence[Hashable]) -> list[bool]:
        """Which of ``keys`` the tier holds."""
        return [key in self.blocks for key in keys]

    def prefix(self, keys: Sequence[Hashable]) -> int:
        """The longest run of leading ``keys`` that the tier holds."""
        return leading_run(keys, self.blocks)

    def place(self, keys: Sequence[Hashable]) -> None:
        """Make ``keys`` the most recent blocks, in the tier's order, and evict to fit."""
        if len(keys) > self.capacity:
            return                                  # not stored, evicts nothing
        touch = reversed(keys) if self.order == TAIL_FIRST else keys
        for key in touch:
            self.blocks[key] = None
            self.blocks.move_to_end(key)
        pinned = set(keys)
        while len(self.blocks) > self.capacity:
            oldest = next(key for key in self.blocks if key not in pinned)
            del self.blocks[oldest]


class Replay(NamedTuple):
    """Per request: GPU and CPU prefix hits (blocks); per block: present before the request."""

    gpu_prefix: np.ndarray     # (R,) int64
    cpu_prefix: np.ndarray     # (R,) int64, counted from block 0
    gpu_present: np.ndarray    # (N,) bool, False for blocks that are not cacheable
    cpu_present: np.ndarray    # (N,) bool


def _requests(stream: BlockStream):
    """(request position, block slice, cacheable keys) per request."""
    codes = stream.codes.tolist()
    for r in range(stream.requests):
        start = int(stream.starts[r])
        end = start + int(stream.cacheable[r])
        yield r, slice(start, end), codes[start:end]


def replay(stream: BlockStream, gpu_blocks: int, cpu_blocks: int, gpu_order: str,
           cpu_order: str, gpu_prefix: np.ndarray | None = None) -> Replay:
    """Replay the stream through a GPU tier of ``gpu_blocks`` and a CPU tier of
    ``cpu_blocks`` blocks. With ``gpu_prefix`` (R,), the CPU tier takes those GPU hits
    instead of this GPU tier's (so any GPU model can feed it)."""
    gpu, cpu = BlockTier(gpu_blocks, gpu_order), BlockTier(cpu_blocks, cpu_order)
    result = Replay(np.zeros(stream.requests, np.int64), np.zeros(stream.requests, np.int64),
                    np.zeros(stream.blocks, bool), np.zeros(stream.blocks, bool))
    for r, span, keys in _requests(stream):
        result.gpu_present[span] = gpu.present(keys)
        result.cpu_present[span] = cpu.present(keys)
        g = gpu.prefix(keys) if gpu_prefix is None else min(int(gpu_prefix[r]), len(keys))
        result.gpu_prefix[r] = g
        result.cpu_prefix[r] = cpu.prefix(keys)
        gpu.place(keys)
        cpu.place(keys[g:])
    return result
