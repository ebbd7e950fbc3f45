"""SGLang 0.5.23's scheduler batch loop run unmodified on CPU: its ``Scheduler`` and
``ScheduleBatch`` methods themselves, not a transcription (tests/test_sglang_loop_unmodified.py
holds ``--engine sglang`` equal to it; scripts/sglang_loop_sweep.py sweeps more).

Run as shipped, from ``~/.cache/kvlab/sglang-0.5.23`` (scripts/ensure_sglang_sources.sh):

* ``managers/scheduler.py``: ``get_next_batch_to_run``, ``get_new_batch_prefill`` /
  ``_get_new_batch_prefill_raw``, ``get_num_allocatable_reqs``, ``update_running_batch``,
  ``_reqs_finishing_inflight``, ``stash_chunked_request``, ``process_batch_result``,
  ``is_disable_overlap_for_batch``, ``_add_request_to_queue``, on a ``Scheduler`` made by
  ``object.__new__`` with the attributes these read (``build``);
* ``managers/schedule_batch.py``: ``Req`` (``init_next_round_input``, ``update_finish_state``,
  ``reset_for_retract``...), ``ScheduleBatch`` (``init_new``, ``prepare_for_extend`` /
  ``_decode``, ``filter_batch``, ``merge_batch``, ``check_decode_mem``, ``retract_decode``,
  ``copy``), ``release_req``;
* ``scheduler_components/batch_result_processor.py`` (``process_batch_result_prefill`` /
  ``_decode``), ``new_token_ratio_tracker.py``, ``schedule_policy.py``, ``prefill_budget.py``;
* ``mem_cache/``: ``allocation.py`` (``alloc_for_extend`` / ``_decode``, the torch-native
  paths), ``common.py`` (``release_kv_cache``, ``checkpoint_kv_cache``...),
  ``memory_pool.ReqToTokenPool``, ``allocator/token.py`` ``TokenToKVPoolAllocator`` (page 1) and
  ``allocator/paged.py`` ``PagedTokenToKVPoolAllocator`` (its naive torch path),
  ``radix_cache.RadixCache``; ``environ.py`` (every ``envs`` default);
* ``utils/common.py``'s ``ceil_div``, ``ceil_align``, ``get_num_new_pages`` (compiled from the
  file's source: ``from_source``), ``beam_search/batch_tail.py``, the ``ForwardMode``,
  ``CaptureHiddenMode`` and ``SpeculativeAlgorithm`` enums, ``managers/utils.py``'s
  ``GenerationBatchResult``.

Replaced:

* torch: ``fake_torch`` (numpy arrays with the tensor methods these paths call), installed
  as ``sys.modules["torch"]``: this module runs in a process of its own;
* the TP worker (``run_batch``, ``forward``): the counters ``run_batch`` keeps
  (scheduler.py:4621-4634) and one next token per request, the workload's (``NextTokens``);
* the run-time configuration getters (``get_schedule()``, ``get_memory()``...) and the model
  config: ``Bag``s of SGLang's defaults and this run's settings; reading a field not set fails;
* peripherals that decide nothing (metrics, load publishing, output streaming, tracing,
  health checks, ``on_idle``): ``Inert``; the DP-attention and n-gram adapters: the identity;
  ``scheduler_stage_method``: the identity decorator; the disaggregation / DLLM mixins of
  ``Scheduler`` and ``ScheduleBatch``: empty classes (so an unset attribute fails loudly);
* every other module these files import: ``stub_importer``'s inert stubs (``STUBBED``).

The loops' bodies are a few lines each and are the driver's (``Driver.turn_normal``:
``event_loop_normal``, scheduler.py:2038-2056; ``Driver.turn_overlap``: ``event_loop_overlap``,
:2084-2131), receiving the timed workload's due requests before each turn.

Requests enter through ``Scheduler._add_request_to_queue``; with ``intake=True`` (the tests'
setting) first through ``handle_generate_request``'s ``init_req_max_new_tokens``
(scheduler.py:2693-2740), which clips ``max_new_tokens`` to what an empty pool can hold
(``allocator/base.py:88-105``: ``pool - ceil(prompt to a page) - page - 1``, the pool
page-aligned as pool_configurator.py:646-652 does, ``max_req_len`` as tp_worker.py:568-572
sets it), and ``validate_input_length`` (a prompt of ``max_req_len - 5`` tokens or more is
aborted: ``run`` raises). The lab's engine does the same at its intake
(``pipeline/engine/sglang_intake.py``).

Requests finish by length: no stop tokens, ``ignore_eos`` off (with it on the adder reserves
a running request's whole remaining output, schedule_policy.py:785-795). The ``random``
policy's ``random.shuffle`` uses the global generator, seeded per run. When decoding cannot
fit even one request, SGLang aborts it (``retract_decode``, schedule_batch.py:3509-3530);
``run`` reports that as the refusal the lab's engine raises.

Trees: ``RadixCache`` or (``tree="unified"``) the ``UnifiedRadixCache`` with its Python core and
one full-attention component, what SGLang's registry builds by default. Not covered: HiCache
(``enable_hierarchical_cache``: the cache controller's transfer threads and streams);
scripts/sglang_scheduler_reference.py keeps the transcribed loop for it.

    .venv/bin/python scripts/sglang_scheduler_unmodified.py     # a small demo; prints a run
"""

from __future__ import annotations

import random
import sys
import types
from array import array
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import sglang_reference as ref  # noqa: E402,F401  (the sources' location, for callers)
from sglang_loop_env import (Bag, Inert, _identity, configure, load,  # noqa: E402,F401
                             unpatched)


class NextTokens:
    """The forward's next token per request (``GenerationBatchResult.next_token_ids``): the
    workload's token after each request's current output, read when the result is
    processed (``tolist`` or iteration; under overlap that is a turn after launch)."""

    def __init__(self, batch) -> None:
        self.reqs = list(batch.reqs)

    def tolist(self) -> list:
        return [r.tokens[min(len(r.origin_input_ids) + len(r.output_ids), len(r.tokens) - 1)]
                for r in self.reqs]

    def __iter__(self):
        return iter(self.tolist())


def forward(S, batch):
    """``Scheduler.run_batch`` with the TP worker stubbed: the scheduler state it updates
    (``forward_ct``, ``processed_tokens_counter``, scheduler.py:4621-4634) and SGLang's
    ``GenerationBatchResult`` with ``NextTokens``."""
    from sglang.srt.managers.utils import GenerationBatchResult
    S.forward_ct += 1
    batch.forward_iter = S.forward_ct
    if batch.extend_num_tokens:
        S.processed_tokens_counter += batch.extend_num_tokens
    return GenerationBatchResult(next_token_ids=NextTokens(batch))


def build(size: int, policy: str = "fcfs", max_running: int = 256, chunk=8192,
          max_prefill: int = 16384, conservativeness: float = 1.0, page: int = 1,
          overlap: bool = False, tree: str = "radix", context: int = 1 << 12):
    """A ``Scheduler`` made by ``object.__new__`` with the attributes its batch loop reads:
    SGLang's own ``RadixCache`` (``tree="unified"``: ``UnifiedRadixCache``), a
    ``ReqToTokenPool`` of ``max_running`` rows of ``context`` tokens, the token allocator of
    ``size`` tokens, ``SchedulePolicy``, ``NewTokenRatioTracker`` and
    ``SchedulerBatchResultProcessor``; inert peripherals."""
    m = load()
    configure(policy, max_running, chunk, max_prefill, conservativeness, page)
    sched, sb, rc, mp = m["sched"], m["sb"], m["rc"], m["mp"]
    import fake_torch
    req_pool = mp.ReqToTokenPool(max_running, context, "cpu", False)
    if page == 1:
        allocator = m["tok"].TokenToKVPoolAllocator(size, fake_torch.int64, "cpu", Inert(),
                                                    False)
    else:
        allocator = m["paged"].PagedTokenToKVPoolAllocator(size, page, fake_torch.int64,
                                                           "cpu", Inert(), False)
    if tree == "unified":       # what the registry builds (mem_cache/registry.py:146)
        from sglang.srt.mem_cache.unified_cache.components import ComponentType
        cache = m["urc"].UnifiedRadixCache(m["cip"].CacheInitParams(
            disable=False, req_to_token_pool=req_pool, token_to_kv_pool_allocator=allocator,
            page_size=page, eviction_policy="lru", tree_components=(ComponentType.FULL,),
            tree_core_backend="python"))
    else:
        cache = rc.RadixCache(rc.CacheInitParams(
            disable=False, req_to_token_pool=req_pool, token_to_kv_pool_allocator=allocator,
            page_size=page, eviction_policy="lru"))
    import sglang.srt.speculative.spec_info as spec
    from sglang.srt.environ import envs
    model_config = Bag("model_config", vocab_size=1 << 30, is_encoder_decoder=False,
                       is_multimodal=False, self_opened_think_start_ids=None)
    S = object.__new__(sched.Scheduler)
    fields = dict(
        page_size=page, tree_cache=cache, req_to_token_pool=req_pool,
        token_to_kv_pool_allocator=allocator, waiting_queue=[],
        running_batch=sb.ScheduleBatch(reqs=[], batch_is_full=False), last_batch=None,
        chunked_req=None, max_running_requests=max_running, chunked_prefill_size=chunk,
        max_prefill_tokens=max_prefill, schedule_policy=policy, enable_overlap=overlap,
        enable_hierarchical_cache=False, enable_priority_scheduling=False,
        schedule_low_priority_values_first=False, enable_priority_preemption=False,
        is_hybrid_swa=False, dllm_config=None, enable_hisparse=False,
        enable_unified_cache_external_linker=False, enable_lmcache=False,
        enable_hicache_storage=False, enable_lora=False, is_mixed_chunk=False,
        min_free_slots_delayer=None, prefill_delayer=None, dynamic_chunk_sizer=None,
        _pending_chunked_abort_req=None, _prefill_decode_interval_remaining=0,
        prefill_decode_interval=0, require_mlp_sync=False, processed_tokens_counter=0,
        priority_scheduling_preemption_threshold=10, max_prefill_bs=0,
        truncation_align_size=None, disaggregation_mode=sb.DisaggregationMode.NULL,
        is_generation=True, hisparse_coordinator=None, decode_offload_manager=None,
        forward_ct=0, model_config=model_config, spec_algorithm=spec.SpeculativeAlgorithm.NONE,
        enable_skip_finishing_decode=False, max_queued_requests=None, enable_fpm=False,
        max_new_tokens_limit=envs.SGLANG_MAX_NEW_TOKENS_LIMIT.get(),
        max_req_len=min(context - 1, size // page * page - 1),      # tp_worker.py:568-571
        max_total_num_tokens=size // page * page, sliding_window_size=None,  # page-aligned
        grammar_manager=types.SimpleNamespace(has_waiting_grammars=lambda: False),
        beam_coordinator=types.SimpleNamespace(pending_member_rows=lambda batch: 0),
        metrics_reporter=Inert(),
        load_inquirer=Inert(), load_publisher=Inert(), output_streamer=Inert(),
        tp_worker=types.SimpleNamespace(model_runner=types.SimpleNamespace(
            attn_backend=object(), prefill_aware_swa=False)),   # block_m: 64 (:4151-4155)
        ngram_embedding_manager=types.SimpleNamespace(prepare_for_forward=_identity),
        dp_attn_adapter=types.SimpleNamespace(maybe_prepare_mlp_sync_batch=_identity,
                                              maybe_convert_decode_to_extend=_identity))
    S.__dict__.update(fields)
    S.policy = m["sp"].SchedulePolicy(policy, cache, False, False, False)
    from sglang.srt.managers.scheduler_components.new_token_ratio_tracker import (
        NewTokenRatioTracker)
    S.new_token_ratio_tracker = NewTokenRatioTracker.from_config()
    S.batch_result_processor = m["brp"].SchedulerBatchResultProcessor(
        is_generation=True, disaggregation_mode=sb.DisaggregationMode.NULL,
        enable_overlap=overlap, enable_overlap_mlx=False, model_config=model_config,
        token_to_kv_pool_allocator=allocator, tree_cache=cache, hisparse_coordinator=None,
        req_to_token_pool=req_pool, decode_offload_manager=None, metrics_collector=Inert(),
        metrics_reporter=Inert(), draft_worker=None, model_worker=Inert(),
        logprob_result_processor=Inert(), output_streamer=Inert(),
        beam_coordinator=Inert(), abort_request=Inert())
    for peripheral in ("publish_load_snapshot", "_record_step_counters",
                       "_maybe_clear_mm_inputs", "maybe_send_health_check_signal",
                       "on_idle", "send_abort_output"):
        setattr(S, peripheral, Inert())
    S.run_batch = types.MethodType(forward, S)
    if overlap:                                  # event_loop_overlap (scheduler.py:2063-2066)
        import collections
        S.enable_skip_finishing_decode = True
        S.result_queue = collections.deque()
    return S


def make_req(index: int, tokens: list, n: int, max_new: int):
    """SGLang's own ``Req`` for a plain generation request: no stop tokens, no tokenizer,
    so it finishes by length (``max_new_tokens``); ``ignore_eos`` off, as the lab's engines
    assume (with it on, ``PrefillAdder`` reserves a running request's whole remaining
    output instead of the new-token ratio's share, schedule_policy.py:785-795)."""
    sb = load()["sb"]
    params = Bag("sampling_params", max_new_tokens=max_new, ignore_eos=False,
                 stop_token_ids=None, stop_strs=[], stop_regex_strs=[], custom_params=None,
                 min_new_tokens=0)
    req = sb.Req(str(index), "", array("q", tokens[:n]), params)
    req.tokens, req.index = tokens, index
    return req


class Driver:
    """SGLang's event loop bodies over the ``Scheduler`` (``build``), turn by turn, with the
    steps and per-request rows the lab's tests compare."""

    def __init__(self, S, reqs: list) -> None:
        self.S, self.reqs = S, reqs
        self.rows = [[-1, -1, -1, -1] for _ in reqs]  # first scheduled, token, finish, hit
        self.steps: list = []

    def busy(self) -> bool:
        S = self.S
        return bool(S.waiting_queue) or S.chunked_req is not None or \
            not S.running_batch.is_empty() or S.last_batch is not None or \
            bool(getattr(S, "result_queue", None))

    def launch(self, batch):
        """Record ``batch`` as the next step and run it (the TP worker stub)."""
        step = len(self.steps)
        record = scheduled(batch)
        for i, _, cached in record:
            if self.rows[i][0] < 0:
                self.rows[i][0], self.rows[i][3] = step, cached
        self.steps.append((batch.forward_mode.is_extend(), record, [], []))
        return self.S.run_batch(batch), step

    def process(self, batch, result, step: int) -> None:
        """``process_batch_result``, noting who got a first token and who finished."""
        before = {id(r): (len(r.output_ids), r.finished()) for r in batch.reqs}
        self.S.process_batch_result(batch, result)
        _, _, first, done = self.steps[step]
        first += [r.index for r in batch.reqs
                  if before[id(r)][0] == 0 and len(r.output_ids) > 0]
        done += [r.index for r in batch.reqs if not before[id(r)][1] and r.finished()]
        for i in first:
            self.rows[i][1] = step
        for i in done:
            self.rows[i][2] = step

    def turn_normal(self) -> bool:
        """``event_loop_normal``'s body (scheduler.py:2038-2056): whether a batch ran."""
        S = self.S
        plan = S.get_next_batch_to_run(running_batch=S.running_batch,
                                       last_batch=S.last_batch)
        S.running_batch = plan.running_batch
        batch = plan.batch_to_run
        if batch:
            result, step = self.launch(batch)
            self.process(batch, result, step)
        elif S.waiting_queue:
            raise RuntimeError("stuck")
        S.last_batch = batch
        return bool(batch)

    def turn_overlap(self) -> bool:
        """``event_loop_overlap``'s body (scheduler.py:2084-2131): launch batch N+1, then
        process batch N's result (``pop_and_process``, :2068-2071)."""
        S = self.S

        def pop_and_process():
            batch, (result, step) = S.result_queue.popleft()
            self.process(batch, result, step)

        plan = S.get_next_batch_to_run(running_batch=S.running_batch,
                                       last_batch=S.last_batch)
        S.running_batch = plan.running_batch
        batch = plan.batch_to_run
        disable_overlap_for_batch = S.is_disable_overlap_for_batch(
            batch, last_batch=S.last_batch)
        if disable_overlap_for_batch:
            pop_and_process()
        launched = None
        if batch:
            launched = self.launch(batch)
            S.result_queue.append((batch.copy(), launched))
        popped = False
        if S.last_batch:
            if not disable_overlap_for_batch:
                pop_and_process()
                popped = True
        if not batch and S.waiting_queue and not popped:
            raise RuntimeError("stuck")
        S.launch_batch_sample_if_needed(launched and launched[0], batch)
        S.last_batch = batch
        return bool(batch)


def run(requests: list[tuple[list, int, int, int]], size: int, **settings) -> dict:
    """``sglang_scheduler_reference.run``'s contract over SGLang's own loop methods:
    ``requests`` (tokens, prompt length, max_new_tokens, arrival step); per request (first
    scheduled, first token, finish, hit, retractions), per step (is_extend, scheduled,
    first, finished; under overlap the latter two filled when the step's result is
    processed, a turn later). The step clock is the lab engines': arrivals due by the
    current step join the waiting queue before each turn; an idle loop jumps to the next
    arrival."""
    import logging
    logging.disable(logging.WARNING)          # retraction notices
    random.seed(settings.pop("seed", 0))     # the random policy: random.shuffle
    intake = settings.pop("intake", False)
    overlap = settings.get("overlap", False)
    S = build(size, context=max(len(tokens) for tokens, *_ in requests) + 8, **settings)
    reqs = [make_req(i, tokens, n, m) for i, (tokens, n, m, _) in enumerate(requests)]
    driver = Driver(S, reqs)
    due = [a for *_, a in requests]
    now, pointer = 0, 0
    while pointer < len(reqs) or driver.busy():
        if not driver.busy():
            now = max(now, due[pointer])
        while pointer < len(reqs) and due[pointer] <= now:     # recv_requests
            if intake:                        # handle_generate_request's clamp and check
                S.init_req_max_new_tokens(reqs[pointer])
                error = load()["sched"].validate_input_length(     # tp_worker.py:572
                    reqs[pointer], S.max_req_len - 5, False)
                if error:
                    raise RuntimeError(f"aborted: {error}")
            S._add_request_to_queue(reqs[pointer])
            pointer += 1
        if driver.turn_overlap() if overlap else driver.turn_normal():
            now += 1
    if any(r.to_finish is not None for r in reqs):     # retract_decode's last-request abort
        raise RuntimeError("out of memory even after retracting all others")
    return {"requests": [(*row, r.retraction_count) for row, r in zip(driver.rows, reqs)],
            "steps": driver.steps}


def scheduled(batch) -> list:
    """(request, new tokens, cached tokens) of each request in ``batch``."""
    if batch.forward_mode.is_extend():
        return [(r.index, e, p) for r, e, p in zip(batch.reqs, batch.extend_lens,
                                                   batch.prefix_lens)]
    return [(r.index, 1, n - 1) for r, n in zip(batch.reqs, batch.seq_lens_cpu.tolist())]


if __name__ == "__main__":
    shared = list(range(100, 140))
    demo = [(shared + [i] * 5 + [1000 + i * 100 + j for j in range(6)], 45, 6, i // 2)
            for i in range(6)]
    print(run(demo, 200, policy="lpm"))
