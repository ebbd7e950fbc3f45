"""The ``vllm`` GPU model, replayed literally: vLLM's v1 block allocator, one request at a time.

What the block-lru model (``pipeline.components.block_lru_replay``) leaves out and vLLM does,
read in the vllm wheels (0.11.0, 0.22.1, 0.23.0, 0.24.0, 0.33.0; files under
``vllm/v1/core/``):

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

Further rules kept literally: the lookup (``find_longest_cache_hit``) takes the longest run of
leading block hashes present and, for a hash held by several blocks, the first one inserted
(``BlockHashToBlockMap.get_one_block``); hit blocks leave the free queue (``BlockPool.touch``);
new blocks are popped from the head of the free queue, evicting their hash
(``get_new_blocks`` / ``_maybe_evict_cached_block``); a block that becomes full is cached even
when its hash is already cached by another block (no de-duplication). A request that needs
more blocks than the pool has free is never scheduled: it changes nothing (its lookup is still
reported, as in the block-lru model's oversize rule). vLLM itself refuses to start when a
request cannot fit (max_model_len against the KV cache), so this is a convention for inputs
vLLM never runs. ``scripts/vllm_reference.py`` drives vLLM's own ``KVCacheManager`` (0.11.0,
0.23.0, 0.24.0, 0.33.0 wheels) and finds every request's hit equal to this replay.

Workload as the lab runs it: concurrency 1 (each request finishes before the next arrives),
``max_tokens = output_tokens``: one number for every request, or ``"trace"``, each request's
own length from the trace (``BlockStream.outputs``; 1 where it gives none); a request
computes ``prompt + output - 1`` tokens (the last sampled token is never fed back), so longer
outputs fill and cache the tail block. Blocks that hold output tokens are hashed as vLLM
hashes them when the trace gives the sampled ids (``output_token_ids``, with
``"trace"``): a next turn that re-sends the reply hits them; otherwise they get fresh keys,
placeholders no prompt can match.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.workloads.stream import TAIL_FIRST, TRACE, BlockStream, capacity_blocks
from pipeline.workloads.stream import output_lengths as request_outputs

__all__ = ["DEFAULT_VLLM_VERSION", "PREPEND_SINCE", "VllmRequest", "VllmBlockPool",
           "unhashed_to_head", "usable_blocks", "vllm_requests", "replay_vllm", "replay_gpu",
           "check_gpu_options", "TRACE", "OutputTokens", "request_outputs", "given_output_codes"]

OutputTokens = int | np.ndarray | str

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


def usable_blocks(logged_tokens: int, block_size: int) -> int:
    """Blocks a request can use when vLLM logs a KV cache of ``logged_tokens``: the pool has
    ``logged_tokens // block_size`` blocks and block 0 is the null block."""
    return max(int(logged_tokens) // block_size - 1, 0)


def given_output_codes(stream: BlockStream, output_tokens: OutputTokens = 1
                       ) -> tuple[np.ndarray, np.ndarray] | None:
    """(codes, starts) of the sampled blocks the trace hashes (``RequestOutputs``), used
    with ``"trace"`` only; None when there are none (every output block gets a fresh key)."""
    outputs = stream.outputs
    if not (isinstance(output_tokens, str) and output_tokens == TRACE) or outputs is None \
            or outputs.codes.size == 0:
        return None
    return outputs.codes.astype(np.int64), outputs.starts.astype(np.int64)


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
