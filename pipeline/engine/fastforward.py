"""Stretches of pure decode steps at once (sync scheduling): ``EngineSim.advance``."""

from __future__ import annotations

from pipeline.engine.step import Batch, DecodeRun

__all__ = ["advance"]


def _steady(engine) -> bool:
    """Whether every running request is decoding one token per step: sync scheduling with
    its token sampled; async with exactly the running requests' one-token batch in flight
    (one output placeholder each)."""
    running = engine.running
    if engine.queue_size == 1:
        return all(r.num_tokens - r.computed == 1 and r.num_tokens > r.num_prompt
                   for r in running)
    queue = engine.batch_queue
    if len(queue) != 1 or queue[0].record is None:
        return False
    previous = queue[0]
    if len(previous.scheduled) != len(running) or len(previous.samples) != len(running):
        return False
    for req, entry, sampled in zip(running, previous.scheduled, previous.samples):
        if entry[0] is not req or entry[1] != 1 or sampled is not req:
            return False
        if req.placeholders != 1 or req.in_flight != 1 or req.stale \
                or req.computed != req.num_tokens or req.num_tokens <= req.num_prompt:
            return False
    return True


def advance(engine, limit: int) -> DecodeRun | None:
    """Up to ``limit`` steps at once where each would be a pure decode step (every running
    request decoding one token, none finishing, every new block available, the waiting
    queue unable to move: empty, or ``max_num_seqs`` running, or no token budget left).
    The same state and records as that many ``step()`` calls (``DecodeRun.records()``);
    None (nothing done) when the next step is not such a step. With async scheduling the
    batch left in flight is the run's last."""
    running = engine.running
    config = engine.config
    n = len(running)
    if limit < 2 or not n or n > config.max_num_batched_tokens:
        return None
    if engine.waiting and n < config.max_num_seqs and n < config.max_num_batched_tokens:
        return None
    if not _steady(engine):
        return None
    size, max_len = engine.block_size, config.max_model_len
    k = int(limit)
    for req in running:                             # stop before anybody finishes
        tokens = req.num_tokens
        left = min(req.max_tokens + req.num_prompt, max_len) - tokens - 1
        if left < k:
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
    # block m of request i is allocated at step m * size - computed, hashed at step
    # (m + 1) * size - num_tokens (the tokens sampled so far); in running order in a step
    grows, fills = [], []
    for i, req in enumerate(running):
        c, t = req.computed, req.num_tokens
        for m in range(len(req.blocks), -(-(c + k) // size)):
            grows.append((m * size - c, i))
        for m in range(req.num_cached_block or 0, (t + k - 1) // size):
            fills.append(((m + 1) * size - t, i, m))
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
    if engine.queue_size == 2:                      # the run's last batch is in flight
        last = run.records()[-1]
        run.tail = last
        engine.batch_queue[0] = Batch(last.step, [(req, 1, start + k - 1) for req, start
                                                  in zip(running, starts)],
                                      list(running), last)
    engine.step_count += k
    engine.finished_ids = set()
    return run
