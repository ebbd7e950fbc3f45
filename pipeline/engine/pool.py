"""vLLM v1's ``BlockPool`` with reference counts (``vllm/v1/core/block_pool.py``).

The free queue (``FreeKVCacheBlockQueue``) is a stack of prepended blocks (``head``, top =
next reused) in front of an ordered dict (``body``); block 0 is the null block, never free.
Only unhashed blocks are prepended and only hashed blocks are touched, so a touch never
looks in ``head``. A block's hash is set when it
becomes full (``cache_full_blocks``) and evicted when the block is reused
(``_maybe_evict_cached_block``); a hash held by several blocks resolves to the first one
cached (``BlockHashToBlockMap.get_one_block``). ``free_blocks`` prepends unhashed blocks
(LIFO, in list order) and appends hashed ones (FIFO).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

__all__ = ["BlockPool"]


class BlockPool:
    """Blocks 1..n-1 with ``ref_cnt``, ``block_hash`` and the hash -> blocks map."""

    def __init__(self, num_gpu_blocks: int) -> None:
        self.head: list[int] = []
        self.body: OrderedDict[int, None] = OrderedDict.fromkeys(range(1, num_gpu_blocks))
        self.ref_cnt = [0] * num_gpu_blocks
        self.block_hash: list[int | None] = [None] * num_gpu_blocks
        self.cached: dict[int, dict[int, None]] = {}

    @property
    def num_free(self) -> int:
        return len(self.head) + len(self.body)

    def get_cached_block(self, key: int) -> int | None:
        blocks = self.cached.get(key)
        return next(iter(blocks)) if blocks else None

    def longest_hit(self, keys: Sequence[int], limit: int) -> list[int]:
        """find_longest_cache_hit: the cached block of each leading key, at most ``limit``."""
        hit = []
        cached = self.cached
        for key in keys[:limit]:
            blocks = cached.get(key)
            if not blocks:
                break
            hit.append(next(iter(blocks)))
        return hit

    def leading_cached(self, keys: Sequence[int]) -> int:
        """How many leading ``keys`` are cached now (no state change)."""
        count = 0
        for key in keys:
            if not self.cached.get(key):
                break
            count += 1
        return count

    def get_new_blocks(self, count: int) -> list[int]:
        """popleft_n + _maybe_evict_cached_block: ``count`` blocks from the head."""
        out = []
        head, body, block_hash, cached, ref_cnt = (self.head, self.body, self.block_hash,
                                                   self.cached, self.ref_cnt)
        popitem = body.popitem
        for _ in range(count):
            block = head.pop() if head else popitem(last=False)[0]
            key = block_hash[block]
            if key is not None:
                holders = cached[key]
                del holders[block]
                if not holders:
                    del cached[key]
                block_hash[block] = None
            ref_cnt[block] += 1
            out.append(block)
        return out

    def get_new_block(self) -> int:
        """Pop the head of the free queue, evicting its hash, and take a reference."""
        block = self.head.pop() if self.head else self.body.popitem(last=False)[0]
        key = self.block_hash[block]
        if key is not None:
            holders = self.cached[key]
            del holders[block]
            if not holders:
                del self.cached[key]
            self.block_hash[block] = None
        self.ref_cnt[block] += 1
        return block

    def touch(self, blocks: Iterable[int]) -> None:
        """A hit takes a reference; a block with none leaves the free queue."""
        ref_cnt, body = self.ref_cnt, self.body
        for block in blocks:
            if ref_cnt[block] == 0:
                del body[block]
            ref_cnt[block] += 1

    def free_blocks(self, ordered: Iterable[int]) -> None:
        """Drop one reference each; blocks at zero go to the free queue (unhashed ones
        prepended in order, hashed ones appended)."""
        ref_cnt, block_hash = self.ref_cnt, self.block_hash
        first, last = [], []
        for block in ordered:
            ref_cnt[block] -= 1
            if ref_cnt[block] == 0:
                (first if block_hash[block] is None else last).append(block)
        if first:
            self.head.extend(reversed(first))             # prepend_n keeps the list order
        body = self.body
        for block in last:
            body[block] = None

    def cache_full_blocks(self, keys: Sequence[int], blocks: Sequence[int], start: int,
                          end: int) -> None:
        """Give blocks ``start..end-1`` of a request their hashes (no de-duplication)."""
        block_hash, cached = self.block_hash, self.cached
        for index in range(start, end):
            block, key = blocks[index], keys[index]
            block_hash[block] = key
            holders = cached.get(key)
            if holders is None:
                cached[key] = {block: None}
            else:
                holders[block] = None
