"""vLLM's v1 block allocator at concurrency 1 in plain Python, step for step as
``vllm/v1/core/`` does it (``BlockPool``, ``FreeKVCacheBlockQueue``, ``KVCacheManager``): the
test oracle of the compiled pool (``pipeline.components.kpool``, run one request at a time by
``pipeline.components.vllm_gpu``). Tests hold every request's hit equal to it; the rules
and the vLLM releases they were read in are in ``pipeline.components.vllm_gpu``.

``vllm_requests`` is the readable form of ``pipeline.components.vllm_layout`` (what a
request caches, may hit and holds); ``VllmBlockPool.run`` schedules, runs and finishes one:
the lookup takes the first-inserted block of each leading hash, hit blocks leave the free
queue (``touch``), new blocks are popped from the head, evicting their hash, full blocks are
hashed without de-duplication, and ``free`` returns them tail first, unhashed ones to the
head since 0.24 (``prepend_n``) and to the tail before.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.workloads.stream import TAIL_FIRST, BlockStream, capacity_blocks
from pipeline.workloads.stream import output_lengths as request_outputs
from pipeline.components.vllm_gpu import (DEFAULT_VLLM_VERSION, check_gpu_options,
                                             unhashed_to_head)
from pipeline.components.vllm_layout import OutputTokens, given_output_codes

__all__ = ["VllmRequest", "VllmBlockPool", "vllm_requests", "replay_vllm", "replay_gpu"]


@dataclass(frozen=True)
class VllmRequest:
    """One request as the allocator sees it: ``keys`` the hashes of the blocks it caches
    (prompt blocks, then blocks holding output tokens: fresh keys), ``lookup`` the leading
    prompt blocks it may hit (its full prompt blocks, at most ``cap``), ``blocks`` the slots
    it holds while running."""

    keys: tuple[Hashable, ...]
    lookup: int
    blocks: int


def vllm_requests(stream: BlockStream, output_tokens: OutputTokens = 1
                  ) -> list[VllmRequest]:
    """Per request of ``stream``: what vLLM allocates, caches and may hit (``output_tokens``
    one number, one per request, or ``"trace"``)."""
    size = stream.block_size
    codes = stream.codes.tolist()
    outputs = request_outputs(stream, output_tokens).tolist()
    given = given_output_codes(stream, output_tokens)
    sampled, sampled_starts = (given[0].tolist(), given[1].tolist()) if given else ([], None)
    fresh = stream.outputs.n_codes if given else stream.n_codes
    out = []
    for r in range(stream.requests):
        prompt = int(stream.prompt_tokens[r])
        computed = prompt + outputs[r] - 1              # the last sampled token is never fed
        full_prompt = int(stream.cacheable[r])
        hashed = computed // size
        start = int(stream.starts[r])
        keys = codes[start:start + min(full_prompt, hashed)]
        if sampled_starts is not None:                  # the trace's sampled blocks
            keys += sampled[sampled_starts[r]:sampled_starts[r + 1]][:hashed - len(keys)]
        extra = hashed - len(keys)
        keys = tuple(keys) + tuple(range(fresh, fresh + extra))
        fresh += extra
        cap = max(prompt - 1, 0) // size                # get_computed_blocks: num_tokens - 1
        out.append(VllmRequest(keys, min(full_prompt, cap), -(-computed // size)))
    return out


class VllmBlockPool:
    """vLLM's ``BlockPool`` + ``FreeKVCacheBlockQueue`` for requests run one at a time.

    ``free`` is the free queue (head = first = next to be reused), ``block_hash`` each block's
    cached key (None: unhashed), ``cached`` key -> its blocks in insertion order.
    """

    def __init__(self, num_gpu_blocks: int, prepend_unhashed: bool) -> None:
        self.prepend_unhashed = prepend_unhashed
        self.free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(num_gpu_blocks))
        if num_gpu_blocks:
            self.free.popitem(last=False)               # block 0: the null block
        self.block_hash: list[Hashable | None] = [None] * num_gpu_blocks
        self.cached: dict[Hashable, dict[int, None]] = {}

    def longest_hit(self, keys: Sequence[Hashable], limit: int) -> list[int]:
        """find_longest_cache_hit: the first cached block of each leading key, at most
        ``limit`` keys."""
        hit = []
        for key in keys[:limit]:
            blocks = self.cached.get(key)
            if not blocks:
                break
            hit.append(next(iter(blocks)))              # get_one_block: first inserted
        return hit

    def _pop_free(self) -> int:
        """get_new_blocks: pop the head of the free queue and evict its hash."""
        block, _ = self.free.popitem(last=False)
        key = self.block_hash[block]
        if key is not None:                             # _maybe_evict_cached_block
            del self.cached[key][block]
            if not self.cached[key]:
                del self.cached[key]
            self.block_hash[block] = None
        return block

    def _free_blocks(self, ordered: list[int]) -> None:
        """free_blocks(reversed(request blocks)): ``ordered`` is tail first."""
        if self.prepend_unhashed:
            unhashed = [b for b in ordered if self.block_hash[b] is None]
            for block in reversed(unhashed):            # prepend_n keeps the list's order
                self.free[block] = None
                self.free.move_to_end(block, last=False)
            ordered = [b for b in ordered if self.block_hash[b] is not None]
        for block in ordered:                           # append_n
            self.free[block] = None

    def run(self, request: VllmRequest) -> int:
        """Schedule, run and finish one request; return its GPU hit in blocks."""
        hit = self.longest_hit(request.keys, request.lookup)
        if request.blocks > len(self.free):             # allocate_slots returns None
            return len(hit)
        for block in hit:                               # touch
            del self.free[block]
        blocks = hit + [self._pop_free() for _ in range(request.blocks - len(hit))]
        for index in range(len(hit), len(request.keys)):   # cache_full_blocks
            key = request.keys[index]
            self.block_hash[blocks[index]] = key
            self.cached.setdefault(key, {})[blocks[index]] = None
        self._free_blocks(blocks[::-1])
        return len(hit)


def replay_vllm(stream: BlockStream, logged_tokens: int, output_tokens: OutputTokens = 1,
                vllm_version: str = DEFAULT_VLLM_VERSION) -> np.ndarray:
    """GPU hit blocks per request for a vLLM KV cache of ``logged_tokens`` (as vLLM logs it)."""
    pool = VllmBlockPool(max(int(logged_tokens) // stream.block_size, 0),
                         unhashed_to_head(vllm_version))
    return np.array([pool.run(request) for request in vllm_requests(stream, output_tokens)],
                    dtype=np.int64)


def replay_gpu(stream: BlockStream, capacities: object, order: str = TAIL_FIRST, *,
               output_tokens: OutputTokens = 1, vllm_version: str = DEFAULT_VLLM_VERSION
               ) -> np.ndarray:
    """GPU model API (``pipeline.catalog.model_api``): hit tokens per (capacity, request), (K, R);
    capacities are KV cache sizes in tokens as vLLM logs them."""
    check_gpu_options(order, output_tokens, vllm_version)
    tokens = capacity_blocks(capacities, 1)              # validated integer tokens >= 0
    rows = [replay_vllm(stream, int(c), output_tokens, vllm_version) for c in tokens]
    return np.array(rows, dtype=np.int64).reshape(tokens.size, stream.requests) \
        * stream.block_size
