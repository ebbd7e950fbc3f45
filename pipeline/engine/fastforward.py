"""Stretches of pure decode steps at once (sync scheduling): ``EngineSim.advance``."""

from __future__ import annotations

from pipeline.engine.step import DecodeRun

__all__ = ["advance"]


def advance(engine, limit: int) -> DecodeRun | None:
    """Up to ``limit`` steps at once where each would be a pure decode step (sync
    scheduling, every running request decoding one token, none finishing, every new
    block available, the waiting queue unable to move: empty, or ``max_num_seqs``
    running, or no token budget left). The same state and records as that many
    ``step()`` calls (``DecodeRun.records()``); None (nothing done) when the next step
    is not such a step."""
    running = engine.running
    config = engine.config
    n = len(running)
    if engine.queue_size != 1 or limit < 2 or not n or n > config.max_num_batched_tokens:
        return None
    if engine.waiting and n < config.max_num_seqs and n < config.max_num_batched_tokens:
        return None
    size, max_len = engine.block_size, config.max_model_len
    k = int(limit)
    for req in running:
        tokens = req.num_tokens
        if tokens - req.computed != 1 or tokens <= req.num_prompt:
            return None
        left = min(req.max_tokens - tokens + req.num_prompt, max_len - tokens) - 1
        if left < k:                                # stop before anybody finishes
            if left < 2:
                return None
            k = left
    pool = engine.pool
    free = pool.num_free

    def allocations(steps: int) -> int:
        return sum(max(-(-(r.computed + steps) // size) - len(r.blocks), 0)
                   for r in running)

    if allocations(k) > free:                       # the largest k whose blocks exist
        low, high = 0, k
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if allocations(mid) <= free else (low, mid - 1)
        if low < 2:
            return None
        k = low
    # block m of request i is allocated at step m * size - computed, filled (hashed)
    # at step (m + 1) * size - computed - 1; both in running order within a step
    grows, fills = [], []
    for i, req in enumerate(running):
        c = req.computed
        for m in range(len(req.blocks), -(-(c + k) // size)):
            grows.append((m * size - c, i))
        for m in range(req.num_cached_block or 0, (c + k) // size):
            fills.append(((m + 1) * size - c - 1, i, m))
    if grows:
        grows.sort()
        for (_, i), block in zip(grows, pool.get_new_blocks(len(grows))):
            running[i].blocks.append(block)
    if fills:
        fills.sort()
        for _, i, m in fills:
            req = running[i]
            pool.cache_full_blocks(req.keys, req.blocks, m, m + 1)
            req.num_cached_block = m + 1
    starts = [req.computed for req in running]
    for req in running:
        req.computed += k
        req.num_tokens += k
    frees, g = [], 0
    for j in range(k):
        while g < len(grows) and grows[g][0] <= j:
            g += 1
        frees.append(free - g)
    run = DecodeRun(engine.step_count, k, n, len(engine.waiting), sum(starts) + n, frees,
                    list(running), starts)
    engine.step_count += k
    engine.finished_ids = set()
    return run
