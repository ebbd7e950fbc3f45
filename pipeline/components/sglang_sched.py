"""SGLang 0.5.23's scheduler loop over its radix cache in plain Python: the test oracle of the
compiled scheduler (``pipeline.components.sglang_ksched``, tests/test_sglang_ksched.py) and
the base of the HiCache loop (``sglang_hisched``), which runs HiCache in the engine.

What one iteration of ``Scheduler.event_loop_normal`` does (``managers/scheduler.py``; the
non-overlap loop, ``--disable-overlap-schedule``), with the pieces it calls
(``managers/schedule_policy.py``, ``schedule_batch.py``, ``mem_cache/common.py``,
``mem_cache/allocation.py``, ``mem_cache/prefill_budget.py``, ``mem_cache/radix_cache.py``;
docs/sglang.md cites the lines):

* ``get_next_batch_to_run``: checkpoint the chunked request's last chunk into the tree
  (``stash_chunked_request``), merge the last prefill batch into the running batch, drop
  finished requests, try a prefill batch; without one, decode the running batch
  (``update_running_batch``: ``check_decode_mem``, retract when it fails, else decay the
  new-token ratio; allocate one token each).
* ``get_new_batch_prefill``: ``SchedulePolicy.calc_priority`` orders the waiting queue
  (``sglang_schedule_policy``), then ``PrefillAdder`` (``sglang_prefill_adder``) admits the
  chunked request and then waiting requests in order against its budgets, up to
  ``max_running_requests``.
* ``process_batch_result``: a prefill samples each finished prompt's first token and
  checkpoints its KV into the tree (``checkpoint_kv_cache``), a decode one token each; a
  request at ``max_tokens`` releases its KV into the tree (``release_kv_cache``).

With ``overlap`` the loop is ``event_loop_overlap`` (SGLang's default, ``scheduler.py:2061-
2130``): a turn schedules batch N+1 before processing batch N's result (a one-deep result
queue, ``self.queued``); ``update_running_batch`` leaves out the running requests whose
queued result finishes them by length (``_reqs_finishing_inflight``, ``:4444-4457``) and,
when the decode does not fit and some were left out, skips the decode for a turn instead of
retracting (``:4466-4472``); the result processors skip a request retracted since its batch
was launched (``batch_result_processor.py:343-345``, ``:1022-1027``). A turn that ran no
batch but processed one took no step. ``first_token`` / ``finish_step`` are the step of the
batch that sampled the token; ``Batch.sampling`` / ``finishing`` are the launched batch's
own first tokens and finishes as known at launch (what the GPU samples; the finishes are
exactly the processed ones, a first token may be discarded by a retraction in the next turn).

Requests finish by length (``max_new_tokens``; ``ignore_eos`` off, so the running requests'
outputs are estimated by the new-token ratio). Not modelled: mixed chunks, priorities and
priority preemption, the ``hrrn`` / ``routing-key`` / ``shortest-prefill-first`` policies,
speculative decoding, LoRA; HiCache is ``sglang_hisched`` (either loop).
"""

from __future__ import annotations

from pipeline.components.sglang_batch import Batch, Req
from pipeline.components.sglang_prefill_adder import CONTINUE, NO_TOKEN, OTHER, Adder
from pipeline.components.sglang_radix import RadixTree
from pipeline.components.sglang_schedule_policy import SchedulePolicy
from pipeline.components.sglang_settings import DECAY_STEPS, INIT_NEW_TOKEN_RATIO, \
    MIN_RATIO_FACTOR, RETRACT_DECODE_STEPS, SchedulerSettings

__all__ = ["Scheduler"]


class Scheduler:
    """SGLang's scheduler state over a ``RadixTree``; ``iterate(step)`` runs one loop turn."""

    def __init__(self, settings: SchedulerSettings, overlap: bool = False) -> None:
        self.s, P = settings, settings.page_size
        self.overlap = overlap                                   # event_loop_overlap
        self.queued: tuple | None = None                         # (batch, reqs, step)
        self.popped = False                                      # this turn processed one
        self.P = P
        self.tree = RadixTree(P, settings.radix_eviction_policy)
        self.free = settings.max_total_tokens // P * P           # allocator.available_size()
        self.waiting: list[Req] = []
        self.running = Batch(False, [])
        self.last_batch: Batch | None = None
        self.chunked: Req | None = None
        init = min(INIT_NEW_TOKEN_RATIO * settings.schedule_conservativeness, 1.0)
        self.ratio_min = min(init * MIN_RATIO_FACTOR, 1.0)
        self.ratio_decay = (init - self.ratio_min) / DECAY_STEPS
        self.ratio = init
        self.policy = SchedulePolicy(settings)

    # ------------------------------------------------------------------ memory

    def _pages(self, tokens: int) -> int:
        return -(-tokens // self.P)

    def evict_to_free(self, num_tokens: int) -> None:
        """``evict_to_free_tokens``: evict the shortfall below ``num_tokens``."""
        shortfall = num_tokens - self.free
        if shortfall > 0:
            self.free += self.tree.evict(shortfall)

    def alloc(self, req: Req, new_len: int) -> None:
        """Grow ``req``'s KV to ``new_len`` tokens (new pages from the allocator)."""
        self.free -= (self._pages(new_len) - self._pages(req.kv_len)) * self.P
        req.kv_len = new_len

    def lock(self, node) -> object:
        self.tree.inc_lock_ref(node)
        return node

    def unlock(self, node) -> None:
        if node is not None:
            self.tree.dec_lock_ref(node)

    # ------------------------------------------------------------------ tree I/O

    def match(self, req: Req, limit: bool) -> None:
        """``match_kv_cache``: the tree's hit on the request's fill ids (``limit``: at most
        len - 1, as ``init_next_round_input``) becomes its prefix."""
        fill = req.fill()
        max_len = max(len(fill) - 1, 0)
        req.prefix_len, req.last_node = self.tree.match_prefix(fill[:max_len] if limit
                                                               else fill)
        req.num_matched = min(req.prefix_len, max_len)

    def checkpoint(self, req: Req, up_to: int) -> None:
        """``RadixCache.checkpoint``: insert the KV up to ``up_to`` (whole pages), free the
        duplicates, re-match and move the request's lock to the key's node."""
        tokens = req.fill()[:up_to]
        key_len = len(tokens) // self.P * self.P
        prefix, _ = self.tree.insert(tokens[:key_len], 0, req.inserted)
        req.inserted = max(req.inserted, key_len)
        prompt = req.n // self.P * self.P
        if 0 < prompt < key_len:
            self.tree.insert(tokens[:prompt], 1, prompt)
        if prefix > req.protected:
            self.free += prefix - req.protected
        _, node = self.tree.match_prefix(tokens[:key_len])
        req.protected = key_len
        self.unlock(req.lock)
        req.lock, req.last_node = self.lock(node), node

    def release(self, req: Req, checkpoint: bool) -> None:
        """``release_kv_cache``: checkpoint (finish) or not (retract), free the request's
        own pages, unlock."""
        if checkpoint:
            self.checkpoint(req, req.kv_len)
        self.free += (self._pages(req.kv_len) - req.protected // self.P) * self.P
        self.unlock(req.lock)
        req.lock = None

    # ------------------------------------------------------------------ one iteration

    def iterate(self, step: int) -> Batch | None:
        """One turn of ``event_loop_normal``: the batch it ran (already processed), or None
        when idle. With ``overlap`` ``event_loop_overlap``'s turns: the batch launched (its
        result processed in the next turn) or None, turns that ran no batch but processed
        the last one repeated at once (they took no step)."""
        if not self.overlap:
            batch = self.next_batch(step)
            if batch is not None:
                self.process(batch, step)
            self.last_batch = batch
            return batch
        batch = self.overlap_turn(step)
        while batch is None and self.popped:
            batch = self.overlap_turn(step)
        return batch

    def overlap_turn(self, step: int) -> Batch | None:
        """One turn of ``event_loop_overlap`` (``scheduler.py:2084-2127``): schedule, launch
        (queue a copy of the batch's requests), then process the last batch's result."""
        batch = self.next_batch(step)
        pending, self.queued = self.queued, None
        if batch is not None:
            self.queued = (batch, list(batch.reqs), step)         # batch.copy()
        self.popped = self.last_batch is not None
        if self.popped:                                          # pop_and_process
            done, reqs, at = pending
            self.process(done, at, reqs)
        if batch is not None:
            past = [r for r in batch.reqs if not batch.extend or r.middle_chunks <= 0]
            batch.sampling = [r.index for r in past if r.first_token < 0]
            batch.finishing = [r.index for r in past if r.out + 1 >= r.max_new]
        self.last_batch = batch
        return batch

    def next_batch(self, step: int) -> Batch | None:
        """``get_next_batch_to_run``."""
        exclude = set()
        if self.chunked is not None:
            exclude.add(id(self.chunked))
            if self.chunked.extend_end > self.chunked.prefix_len:
                self.checkpoint(self.chunked, self.chunked.extend_end)   # stash
                self.chunked.prefix_len = self.chunked.extend_end
        last, running = self.last_batch, self.running
        if last is not None and last.extend:
            kept = [r for r in last.reqs if not r.finished and id(r) not in exclude]
            if len(kept) < len(last.reqs):
                running.batch_is_full = False
            last.reqs = kept
            if kept:
                if not running.reqs:                    # the running batch becomes the
                    running.batch_is_full = False       # new one (its flag unset)
                running.reqs.extend(kept)
        kept = [r for r in running.reqs if not r.finished]
        if len(kept) < len(running.reqs):
            running.batch_is_full = False
        running.reqs = kept
        batch = self.new_prefill_batch(step)
        if batch is not None:
            return batch
        if running.reqs:
            return self.update_running_batch(running)
        return None

    def new_prefill_batch(self, step: int) -> Batch | None:
        """``_get_new_batch_prefill_raw`` with ``PrefillAdder``."""
        running = self.running
        if not running.reqs:
            running.batch_is_full = False
        if (running.batch_is_full or not self.waiting) and self.chunked is None:
            return None
        allocatable = self.s.max_running_requests - len(running.reqs)
        if allocatable <= 0 and self.chunked is None:
            running.batch_is_full = True
            return None
        self.policy.calc_priority(self.waiting, self.tree, self.match)
        adder = self.make_adder(running)
        if self.chunked is not None:
            self.chunked = adder.add_chunked_req(self.chunked)
        for req in self.waiting:
            if adder.budget_state() == OTHER:
                break
            if len(adder.can_run) >= allocatable:
                running.batch_is_full = True
            if running.batch_is_full:
                break
            if not self.ready(req):
                continue
            req.protected = req.prefix_len
            result = adder.add_one_req(req, self.chunked is not None)
            if result != CONTINUE:
                if result == NO_TOKEN:
                    running.batch_is_full = bool(adder.can_run) or bool(running.reqs)
                break
        if not adder.can_run:
            return None
        chosen = {id(r) for r in adder.can_run}
        self.waiting = [r for r in self.waiting if id(r) not in chosen]
        if adder.new_chunked is not None:
            self.chunked = adder.new_chunked
        if self.chunked is not None:
            self.chunked.middle_chunks += 1
        return self.prepare_for_extend(adder.can_run, step)

    def make_adder(self, running: Batch) -> Adder:
        return Adder(self, running)

    def ready(self, req: Req) -> bool:
        """The waiting request's match before its admission (HiCache's storage may hold
        it back)."""
        self.match(req, limit=True)
        return True

    def enqueue(self, req: Req, retracted: bool = False) -> None:
        """``_add_request_to_queue``."""
        self.waiting.append(req)

    def prepare_for_extend(self, reqs: list, step: int) -> Batch:
        """``ScheduleBatch.prepare_for_extend``: allocate every extend (evicting first)."""
        extend_tokens = sum(r.extend_end - r.prefix_len for r in reqs)
        self.evict_to_free(extend_tokens if self.P == 1 else extend_tokens + len(reqs) * self.P)
        batch = Batch(True, list(reqs))
        for r in reqs:
            batch.scheduled.append((r.index, r.extend_end - r.prefix_len, r.prefix_len))
            r.retracted = False
            r.kv_len = r.prefix_len                     # the prefix is the tree's (or, for
            self.alloc(r, r.extend_end)                 # a chunk, its own partial page)
            if r.first_sched < 0:
                r.first_sched, r.hit = step, r.prefix_len
        return batch

    def finishing_inflight(self, batch: Batch) -> list:
        """``_reqs_finishing_inflight``: running requests whose queued result finishes them
        by length (none outside the overlap loop)."""
        if not self.overlap or self.queued is None:
            return []
        queued = {id(r) for r in self.queued[1]}
        return [r for r in batch.reqs if id(r) in queued and r.out + 1 >= r.max_new]

    def update_running_batch(self, batch: Batch) -> Batch | None:
        """``update_running_batch``: retract when the next decode does not fit (overlap:
        without the finishing requests, skipping the decode when some were)."""
        initial = len(batch.reqs)
        finishing = self.finishing_inflight(batch)
        if finishing:
            gone = {id(r) for r in finishing}
            batch.reqs = [r for r in batch.reqs if id(r) not in gone]
            if not batch.reqs:
                batch.batch_is_full = False
                return None
        full = not self.check_decode_mem(batch.reqs)
        if full and finishing:
            batch.batch_is_full = False
            return None
        if full:
            for req in self.retract_decode(batch):
                self.enqueue(req, retracted=True)
        else:
            self.ratio = max(self.ratio - self.ratio_decay, self.ratio_min)
        if len(batch.reqs) < initial:
            batch.batch_is_full = False
        if not batch.reqs:
            return None
        bs = len(batch.reqs)                            # prepare_for_decode
        self.evict_to_free(bs * self.P)
        decode = Batch(False, batch.reqs)
        for r in batch.reqs:
            decode.scheduled.append((r.index, 1, r.kv_len))
            self.alloc(r, r.kv_len + 1)
        return decode

    def check_decode_mem(self, reqs: list) -> bool:
        num = sum(1 for r in reqs if r.kv_len % self.P == 0) * self.P
        self.evict_to_free(num)
        return self.free >= num

    def retract_decode(self, batch: Batch) -> list:
        """``ScheduleBatch.retract_decode`` (retraction policy ``length``)."""
        reqs = batch.reqs
        order = sorted(range(len(reqs)), key=lambda i: (reqs[i].out, -reqs[i].n),
                       reverse=True)
        retracted, first = [], True
        while first or not self.check_decode_mem([reqs[i] for i in order]):
            if len(order) == 1:
                break
            first = False
            req = reqs[order.pop()]
            self.release(req, checkpoint=False)             # release_req
            self.evict_to_free(len(order) * RETRACT_DECODE_STEPS)
            req.prefix_len = req.protected = req.inserted = req.kv_len = 0
            req.last_node, req.extend_end, req.middle_chunks = None, 0, 0
            req.retracted = True
            req.retractions += 1
            retracted.append(req)
        if len(order) <= 1 and not self.check_decode_mem([reqs[i] for i in order]):
            raise RuntimeError("SGLang aborts the last request: out of memory even after "
                               "retracting all others (the pool is too small)")
        batch.reqs = [reqs[i] for i in order]
        decoded = sum(r.out for r in batch.reqs)
        wanted = sum(r.max_new for r in batch.reqs)
        self.ratio = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(batch.reqs))
                         / (wanted + 1))
        return retracted

    def process(self, batch: Batch, step: int, reqs: list | None = None) -> None:
        """``process_batch_result``: sample, finish, checkpoint (``reqs``: the batch's
        requests at launch; a request retracted since is skipped)."""
        batch.first_tokens, batch.finished = [], []
        for r in batch.reqs if reqs is None else reqs:
            if r.retracted or (r.finished and r.middle_chunks <= 0):
                continue
            if batch.extend and r.middle_chunks > 0:
                r.middle_chunks -= 1
                continue
            r.out += 1
            if r.first_token < 0:
                r.first_token = step
                batch.first_tokens.append(r.index)
            if r.out >= r.max_new:
                r.finished, r.finish_step = True, step
                batch.finished.append(r.index)
                self.release(r, checkpoint=True)
            elif batch.extend:
                self.checkpoint(r, r.extend_end)           # checkpoint_kv_cache
                r.prefix_len = r.extend_end
