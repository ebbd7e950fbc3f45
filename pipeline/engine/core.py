"""vLLM v1's engine loop, step by step: ``Scheduler.schedule`` / ``update_from_output`` and
``EngineCore.step`` / ``step_with_batch_queue`` (vLLM 0.33.0, ``vllm/v1/core/sched/`` and
``vllm/v1/engine/core.py``), for FCFS text requests without speculative decoding.

Kept literally: running requests first (in order, each up to its remaining tokens, the
``long_prefill_token_threshold`` when more than one request is eligible, the step's token
budget and ``max_model_len``), preemption of the most recently admitted running request
when ``allocate_slots`` finds no room (blocks freed tail first, recomputed on re-admission);
then, only when nothing was preempted, the FCFS waiting queue up to ``max_num_seqs``
running: a prefix-cache lookup of at most ``num_tokens - 1`` tokens, the optional CPU tier
(a KV connector loading synchronously), no chunking without chunked prefill (stop the
queue), the admission check ``scheduler_reserve_full_isl`` (the whole sequence must fit in
the free blocks), blocks hashed as soon as they are allocated full, so a request admitted
later in the same step hits them. A request finishes when its batch samples its
``max_tokens``-th token or it reaches ``max_model_len``; its blocks are freed tail first.
With ``async_scheduling`` the engine keeps two batches in flight: a batch's output is
processed after the next one is scheduled, running requests carry output placeholders,
and a request preempted with output in flight waits in the queue until that output
arrives (``num_stale_output_tokens``).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from pipeline.engine.config import SchedulerConfig
from pipeline.engine.fastforward import advance
from pipeline.engine.hashing import block_keys
from pipeline.engine.pool import BlockPool
from pipeline.engine.request import SimRequest
from pipeline.engine.state import FINISHED, PREEMPTED, RUNNING, RequestState
from pipeline.engine.step import Batch, DecodeRun, Rows, StepRecord

__all__ = ["EngineSim", "StepRecord", "DecodeRun"]


class EngineSim:
    """vLLM's scheduler + KV cache manager (+ an optional CPU tier) for ``config``.

    ``cpu_tier``: an object with ``lookup(req) -> tokens`` (the connector's matched tokens,
    LMCache's rule) and ``store(req)``, see ``pipeline.engine.cpu_tier``.
    """

    def __init__(self, config: SchedulerConfig, cpu_tier=None) -> None:
        self.config = config
        self.cpu_tier = cpu_tier
        self.pool = BlockPool(config.num_gpu_blocks)
        self.block_size = config.block_size
        self.running: list[RequestState] = []
        self.waiting: deque[RequestState] = deque()
        self.requests: dict[int, RequestState] = {}
        self.done: dict[int, RequestState] = {}
        self.finished_ids: set[int] = set()
        self.batch_queue: deque[Batch] = deque()
        self.queue_size = 2 if config.async_scheduling else 1
        self.step_count = 0

    # ------------------------------------------------------------------ public API

    def add_request(self, request: SimRequest, keys: list[int] | None = None) -> None:
        """Queue ``request`` (vLLM's ``add_request``): FCFS at the back of the queue.
        ``keys``: its ``hashing.request_keys``, if computed already."""
        if request.index in self.requests or request.index in self.done:
            raise ValueError(f"request {request.index} added twice")
        state = RequestState(request, self.block_size, keys)
        state.limit = min(state.limit, self.config.max_model_len)
        self.requests[request.index] = state
        self.waiting.append(state)

    def has_unfinished(self) -> bool:
        return bool(self.running or self.waiting)

    def has_work(self) -> bool:
        """Anything left for ``step()``: requests, finished ids not yet flushed by a
        ``schedule()``, or batches in flight."""
        return bool(self.running or self.waiting or self.finished_ids or self.batch_queue)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def free_blocks(self) -> int:
        return self.pool.num_free

    def outstanding(self) -> int:
        return len(self.running) + len(self.waiting)

    def request_block_hashes(self, request: SimRequest) -> list[int]:
        """The block keys of ``request``'s prompt, as the engine computes them."""
        if request.prompt_keys is not None:
            return [int(k) for k in request.prompt_keys[:len(request.prompt_token_ids)
                                                        // self.block_size]]
        tokens = np.asarray(request.prompt_token_ids, dtype=np.int64)
        return block_keys(tokens, self.block_size)

    def cached_prefix_blocks(self, block_hashes: list[int]) -> int:
        """Leading blocks of ``block_hashes`` in the GPU prefix cache now (no change)."""
        return self.pool.leading_cached(block_hashes)

    def result(self, index: int) -> RequestState:
        """The state of request ``index`` (finished or not)."""
        return self.done.get(index) or self.requests[index]

    def step(self) -> StepRecord | None:
        """One engine iteration (``EngineCore.step`` or ``step_with_batch_queue``).

        Returns the record of the batch this call scheduled when it scheduled > 0 tokens,
        else None. Outputs of a batch are applied to its record when processed (at once
        in sync mode, one call later with async scheduling)."""
        record = None
        if self.queue_size == 1:
            if not (self.running or self.waiting or self.finished_ids):
                return None
            batch = self._schedule()
            self._update_from_output(batch)
            return batch.record
        queue = self.batch_queue
        if self.running or self.waiting or self.finished_ids:
            batch = self._schedule()
            record = batch.record
            queue.appendleft(batch)
            if len(queue) < self.queue_size and (record is not None or self.running
                                                 or self.waiting or self.finished_ids):
                return record
        elif not queue:
            return None
        self._update_from_output(queue.pop())
        return record

    def advance(self, limit: int) -> DecodeRun | None:
        """Up to ``limit`` pure decode steps at once (``fastforward.advance``); None when
        the next step is not one."""
        return advance(self, limit)

    # ------------------------------------------------------------------ allocation

    def _blocks_needed(self, req: RequestState, num_tokens: int, hit: list[int]) -> int:
        """SingleTypeKVCacheManager.get_num_blocks_to_allocate (full attention)."""
        required = -(-num_tokens // self.block_size)
        if req.num_cached_block is not None:
            return max(required - len(req.blocks), 0)
        ref_cnt = self.pool.ref_cnt
        evictable = sum(1 for block in hit if ref_cnt[block] == 0)
        return max(required - len(hit) - len(req.blocks), 0) + evictable

    def _allocate_slots(self, req: RequestState, num_new: int, hit: list[int] | None = None,
                        external: int = 0, admission: bool = False) -> bool:
        """KVCacheManager.allocate_slots; False (nothing changed) when it returns None."""
        size = self.block_size
        hit = hit or []
        local = req.computed + len(hit) * size
        total = min(local + external, self.config.max_model_len)
        pool = self.pool
        if admission:                                 # scheduler_reserve_full_isl
            full = min(req.num_tokens, self.config.max_model_len)
            if self._blocks_needed(req, full, hit) > pool.num_free:
                return False
        need = min(total + num_new, self.config.max_model_len)
        if self._blocks_needed(req, need, hit) > pool.num_free:
            return False
        if (hit or external) and req.num_cached_block is None:
            pool.touch(hit)
            req.blocks = list(hit)
            req.num_cached_block = len(hit)
            if external > 0:
                more = max(0, -(-(local + external) // size) - len(req.blocks))
                req.blocks.extend(pool.get_new_blocks(more))
        more = -(-need // size) - len(req.blocks)
        if more > 0:
            req.blocks.extend(pool.get_new_blocks(more))
        self._cache_blocks(req, min(total + num_new, req.num_tokens))
        return True

    def _cache_blocks(self, req: RequestState, num_tokens: int) -> None:
        """FullAttentionManager.cache_blocks: hash the newly full blocks."""
        cached = req.num_cached_block or 0
        full = min(num_tokens, req.num_tokens) // self.block_size
        if cached >= full:
            return
        self.pool.cache_full_blocks(req.keys, req.blocks, cached, full)
        req.num_cached_block = full

    def _free_blocks(self, req: RequestState) -> None:
        """KVCacheManager.free: tail first."""
        blocks = req.blocks
        req.blocks = []
        req.num_cached_block = None
        self.pool.free_blocks(reversed(blocks))

    def _preempt(self, req: RequestState) -> None:
        """Scheduler._preempt_request."""
        self._free_blocks(req)
        req.status = PREEMPTED
        req.computed = 0
        req.stale = req.in_flight
        req.placeholders = 0
        req.preemptions += 1
        self.waiting.appendleft(req)

    # ------------------------------------------------------------------ schedule

    def _schedule(self) -> Batch:
        """Scheduler.schedule, then _update_after_schedule."""
        config = self.config
        budget = config.max_num_batched_tokens
        eligible = len(self.running) + len(self.waiting)
        threshold = config.long_prefill_token_threshold if eligible > 1 else 0
        max_len = config.max_model_len
        size = self.block_size
        pool = self.pool
        scheduled: list[tuple[RequestState, int, int]] = []     # (request, new tokens, computed)
        reloads = 0
        preempted = False
        running = self.running
        step = self.step_count
        samples: list[RequestState] = []
        async_mode = config.async_scheduling
        prefill = decode = context = 0
        for req in running:                    # the list only shrinks at its end (preemption)
            if budget <= 0:
                break
            computed, holds = req.computed, req.placeholders
            if holds > 0 and computed + 2 - holds >= req.num_prompt + req.max_tokens:
                continue
            num_new = req.num_tokens + holds - computed
            if num_new == 1 and computed + 1 < max_len:
                # a decode: allocate_slots gives it one more block when its last one is full
                # (when one is free; else the general path below preempts), and caches the
                # block it fills (num_tokens <= computed + 1 here)
                held = len(req.blocks) * size
                if computed < held or (computed == held and pool.num_free):
                    if computed == held:
                        req.blocks.append(pool.get_new_block())
                    full = req.num_tokens // size
                    cached = req.num_cached_block or 0
                    if full > cached:
                        pool.cache_full_blocks(req.keys, req.blocks, cached, full)
                        req.num_cached_block = full
                    scheduled.append((req, 1, computed))
                    budget -= 1
                    # _update_after_schedule for it at once (a running request is scheduled
                    # once and never preempted after; samples keep the scheduled order)
                    req.computed = computed + 1
                    context += computed + 1
                    if computed >= req.num_prompt:
                        decode += 1
                    else:
                        prefill += 1
                    if async_mode:
                        req.in_flight += 1
                    if computed + 1 < req.num_tokens + holds:
                        req.is_prefill_chunk = True
                    else:
                        req.is_prefill_chunk = False
                        samples.append(req)
                        if async_mode:
                            req.placeholders = holds + 1
                    continue
            if 0 < threshold < num_new:
                num_new = threshold
            num_new = max(min(num_new, budget, max_len - computed - 1), 0)
            if num_new == 0:
                continue
            while True:
                if self._allocate_slots(req, num_new):
                    ok = True
                    break
                ok = False
                victim = running.pop()
                self._preempt(victim)
                preempted = True
                if victim is req:
                    break
            if not ok:
                break
            scheduled.append((req, num_new, computed))
            budget -= num_new
            p, d, c = self._started(req, num_new, computed, step, samples)
            prefill, decode, context = prefill + p, decode + d, context + c
        first_waiting = len(scheduled)
        if not preempted:
            budget, reloads = self._schedule_waiting(budget, threshold, scheduled)
        self.finished_ids = set()
        if not scheduled:
            return Batch(None, scheduled, (), None)
        self.step_count += 1
        for req, num_new, start in scheduled[first_waiting:]:
            p, d, c = self._started(req, num_new, start, step, samples)
            prefill, decode, context = prefill + p, decode + d, context + c
        record = StepRecord(step, Rows(scheduled), prefill, decode, context, reloads,
                            len(running), len(self.waiting), pool.num_free)
        return Batch(step, scheduled, samples, record)

    def _started(self, req: RequestState, num_new: int, start: int, step: int,
                 samples: list) -> tuple[int, int, int]:
        """_update_after_schedule for one scheduled request; (prefill tokens, decodes,
        context tokens) it adds to the record."""
        async_mode = self.config.async_scheduling
        computed = start + num_new
        req.computed = computed
        if async_mode:                          # sync: processed before the next one
            req.in_flight += num_new
        if req.first_scheduled_step is None:
            req.first_scheduled_step = step
        req.is_prefill_chunk = computed < req.num_tokens + req.placeholders
        if not req.is_prefill_chunk:
            samples.append(req)
            if async_mode:
                req.placeholders += 1
        if num_new == 1 and start >= req.num_prompt:
            return 0, 1, computed
        return num_new, 0, computed

    def _schedule_waiting(self, budget: int, threshold: int,
                          scheduled: list) -> tuple[int, int]:
        """The waiting-queue half of schedule(); returns (budget left, reloaded tokens)."""
        config = self.config
        size = self.block_size
        waiting, running, pool = self.waiting, self.running, self.pool
        skipped: deque[RequestState] = deque()
        reloads = 0
        while budget > 0 and waiting:
            if len(running) >= config.max_num_seqs:
                break
            req = waiting[0]
            if req.stale:
                skipped.appendleft(waiting.popleft())
                continue
            hit: list[int] = []
            external = 0
            if req.computed == 0:
                hit = pool.longest_hit(req.keys, (req.num_tokens - 1) // size)
                local = len(hit) * size
                if self.cpu_tier is not None:
                    external = max(self.cpu_tier.lookup(req, local) - local, 0)
                computed = local + external
                if req.preemptions <= 0:
                    req.gpu_hit, req.cpu_hit = local, external
            else:
                computed = req.computed
            num_new = req.num_tokens - computed
            if 0 < threshold < num_new:
                num_new = threshold
            if not config.chunked_prefill and num_new > budget:
                break
            num_new = min(num_new, budget)
            if not self._allocate_slots(req, num_new, hit, external, admission=True):
                break
            waiting.popleft()
            running.append(req)
            req.status = RUNNING
            req.computed = computed
            scheduled.append((req, num_new, computed))
            budget -= num_new
            reloads += external
        if skipped:
            waiting.extendleft(skipped)
        return budget, reloads

    # ------------------------------------------------------------------ outputs

    def _update_from_output(self, batch: Batch) -> None:
        """Scheduler.update_from_output with one sampled token per finished chunk."""
        record = batch.record
        stale = set()
        for req, num_new, _ in (batch.scheduled if self.queue_size > 1 else ()):
            if req.status != FINISHED:
                req.in_flight -= num_new
                if req.stale > 0:                   # output of a preempted request
                    req.stale -= num_new
                    stale.add(req)
        if self.cpu_tier is not None:
            for req, _, _ in batch.scheduled:
                if not req.stored and req.status != PREEMPTED \
                        and req.computed - req.in_flight >= req.num_prompt:
                    req.stored = True
                    self.cpu_tier.store(req)
        stopped = []
        for req in batch.samples:
            status_before = req.status
            if status_before == FINISHED:
                continue
            holds = req.placeholders
            req.num_tokens += 1
            if holds > 0 and not (stale and req in stale):
                req.placeholders = holds - 1
                if status_before == RUNNING:
                    self._cache_blocks(req, req.computed - req.in_flight)
            if req.first_token_step is None:
                req.first_token_step = batch.step
                record.first_tokens.append(req.index)
            if req.num_tokens >= req.limit:         # max_model_len or max_tokens reached
                req.status = FINISHED
                req.finish_step = batch.step
                record.finished.append(req.index)
                self.finished_ids.add(req.index)
                self._free_blocks(req)
                req.keys = req.sim = None           # a finished request keeps its counters
                del self.requests[req.index]
                self.done[req.index] = req
                if status_before == RUNNING:
                    stopped.append(req)
                else:
                    self.waiting.remove(req)
        if stopped:
            gone = set(stopped)
            self.running = [r for r in self.running if r not in gone]
