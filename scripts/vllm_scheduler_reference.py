"""Drive vLLM's own v1 ``Scheduler`` (or ``AsyncScheduler``) on CPU with a fake executor.

vLLM's files run unmodified (the 0.33.0 wheel's Python files, extracted by
``scripts/stub_importer.py``'s ``vllm_sources``; torch/CUDA-touching modules and the
config package replaced by inert stubs by its importer). The scheduler gets a plain config
object carrying exactly the fields it reads, with vLLM's defaults; the "model" samples one
token for every scheduled request whose chunk reaches the end of its sequence (the rule of
vLLM's model runner: partial prefills sample nothing), taking the request's next output id
from the workload. The engine loop is ``EngineCore.step`` (sync) or
``step_with_batch_queue`` with a queue of two (async scheduling), as in
``vllm/v1/engine/core.py``. Arrivals follow the step interface of ``pipeline.engine.loop``.

    .venv/bin/python scripts/vllm_scheduler_reference.py --random 50

Used by tests/test_engine_vllm_equal.py; nothing of vLLM is copied into this repository.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from stub_importer import install_importer, vllm_sources  # noqa: E402

DEFAULT_VERSION = "0.33.0"
_LOADED: dict = {}


def source_dir(version: str = DEFAULT_VERSION, cache: Path | None = None) -> Path:
    """Where ``vllm_sources`` keeps the extracted Python files of ``version``."""
    return (cache or Path.home() / ".cache" / "kvlab") / f"vllm-{version}"


def have_sources(version: str = DEFAULT_VERSION, cache: Path | None = None) -> bool:
    return (source_dir(version, cache) / "vllm" / "v1" / "core" / "sched"
            / "scheduler.py").is_file()


def load(source: Path) -> SimpleNamespace:
    """vLLM's Scheduler, AsyncScheduler, Request and the KV cache config classes."""
    key = str(source)
    if key in _LOADED:
        return _LOADED[key]
    install_importer(source)
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.request import Request, RequestStatus
    classes = SimpleNamespace(Scheduler=Scheduler, AsyncScheduler=AsyncScheduler,
                              Request=Request, RequestStatus=RequestStatus,
                              FullAttentionSpec=FullAttentionSpec,
                              KVCacheConfig=KVCacheConfig, KVCacheGroupSpec=KVCacheGroupSpec)
    _LOADED[key] = classes
    return classes


class Strict(SimpleNamespace):
    """A config object: unknown fields raise, so every field vLLM reads is set here."""

    def __getattr__(self, name):
        raise AttributeError(f"config field {name!r} not provided to vLLM's scheduler")


def vllm_config(config) -> Strict:
    """The VllmConfig fields the scheduler reads (vLLM's defaults besides ``config``)."""
    scheduler = Strict(
        max_num_seqs=config.max_num_seqs, max_num_active_seqs=None,
        max_num_scheduled_tokens=None, max_num_batched_tokens=config.max_num_batched_tokens,
        long_prefill_token_threshold=config.long_prefill_token_threshold,
        long_prefill_token_threshold_adaptive=False,
        enable_chunked_prefill=config.chunked_prefill, policy="fcfs",
        scheduler_reserve_full_isl=True, watermark=0.0, prefill_schedule_interval=1,
        async_scheduling=config.async_scheduling)
    cache = Strict(num_gpu_blocks=config.num_gpu_blocks, enable_prefix_caching=True,
                   enable_mamba_shared_prefix_checkpoint=False, mamba_cache_mode="none",
                   block_size=config.block_size)
    model = Strict(max_model_len=config.max_model_len, uses_mrope=False, runner_type="generate",
                   is_diffusion=False, is_encoder_decoder=False,
                   supports_multimodal_inputs=False, return_sampling_mask=False)
    parallel = Strict(decode_context_parallel_size=1, prefill_context_parallel_size=1,
                      pipeline_parallel_size=1, data_parallel_size=1, data_parallel_index=0,
                      data_parallel_rank=0)
    observability = Strict(per_request_spec_decode_metrics="none", kv_cache_metrics=False,
                           kv_cache_metrics_sample=0.0, enable_mfu_metrics=False,
                           enable_logging_iteration_details=False)
    return Strict(scheduler_config=scheduler, cache_config=cache, model_config=model,
                  parallel_config=parallel, observability_config=observability,
                  lora_config=None, kv_events_config=None, kv_transfer_config=None,
                  ec_transfer_config=None, speculative_config=None,
                  num_speculative_tokens=0, num_lookahead_tokens=0,
                  num_hash_lookahead_tokens=0, num_prefill_lookahead_tokens=0,
                  use_v2_model_runner=False, is_mm_encoder_only=False,
                  max_in_flight_tokens=None,
                  max_concurrent_batches=2 if config.async_scheduling else 1,
                  ec_manager_config=Strict(get_encoder_cache_manager_obj=lambda: None),
                  aux_output_config=Strict(enabled=False))


def _hasher(block_size: int):
    """Chained sha256 block hashes of a request's full blocks (any function will do)."""
    def hash_blocks(request) -> list[bytes]:
        tokens = request.all_token_ids
        done = len(request.block_hashes)
        parent = request.block_hashes[-1] if done else b""
        out = []
        while (done + 1) * block_size <= len(tokens):
            block = list(tokens[done * block_size:(done + 1) * block_size])
            parent = hashlib.sha256(parent + repr(block).encode()).digest()
            out.append(parent)
            done += 1
        return out
    return hash_blocks


def _sampling(max_tokens: int) -> Strict:
    return Strict(max_tokens=max_tokens, eos_token_id=None, stop_token_ids=None, min_tokens=0,
                  repetition_detection=None, extra_args=None, structured_outputs=None,
                  prompt_logprobs=None, num_logprobs=None, logprobs=None,
                  skip_reading_prefix_cache=None)


def engine_loop(scheduler, depth: int, add_due, wait, schedule, process) -> None:
    """vLLM's engine core until every request is done: ``EngineCore.step`` (``depth`` 1) or
    ``step_with_batch_queue`` with a queue of ``depth`` batches (async scheduling).
    ``add_due()`` adds the requests arrived; ``wait()`` moves the clock to the next arrival
    when nothing is left to run (False when none is left); ``schedule(queue)`` schedules a
    batch (``queue``: the batches in flight, oldest first; a batch's third item is its step,
    None when it scheduled nothing); ``process(batch)`` feeds its result back, truthy when
    the worker reported progress. Raises RuntimeError after 65 steps in a row with
    neither."""
    queue: list = []
    idle = 0
    while True:
        add_due()
        if not scheduler.has_requests() and not queue:
            if not wait():
                break
            continue
        executed = reported = False
        if scheduler.has_requests():                   # step / step_with_batch_queue
            batch = schedule(queue)
            executed = batch[2] is not None
            queue.append(batch)
            if len(queue) < depth and (executed or scheduler.has_requests()):
                idle = 0 if executed else idle + 1
                if idle > 64:
                    raise RuntimeError("vLLM schedules nothing")
                continue
        reported = process(queue.pop(0))
        idle = 0 if executed or reported else idle + 1
        if idle > 64:
            raise RuntimeError("vLLM schedules nothing")


def update_from_output(scheduler, out, samples, this, outputs, live, rows,
                       kv_output=None) -> None:
    """One batch's result through vLLM's ``update_from_output``: a token sampled for each
    request in ``samples`` (its next output id in ``outputs``), ``kv_output`` as the
    connector's report, and each request's first-token and finish steps (``this``) in
    ``rows``."""
    ids = list(out.num_scheduled_tokens)
    sampled = [[outputs[int(rid)][len(live[int(rid)].output_token_ids)]]
               if rid in samples else [] for rid in ids]
    model_output = SimpleNamespace(
        req_ids=ids, req_id_to_index={rid: i for i, rid in enumerate(ids)},
        sampled_token_ids=sampled, logprobs=None, prompt_logprobs_dict={},
        prompt_token_id_logprobs_dict={}, pooler_output=[], num_nans_in_logits=None,
        kv_connector_output=kv_output, ec_connector_output=None, cudagraph_stats=None,
        aux_output_connector_output=None, sampling_masks=None)
    before = {rid: len(live[int(rid)].output_token_ids) for rid in ids}
    scheduler.update_from_output(out, model_output)
    for rid in ids:
        request, row = live[int(rid)], rows[int(rid)]
        if len(request.output_token_ids) > before[rid]:
            if row["first_token_step"] is None:
                row["first_token_step"] = this
            if request.is_finished() and row["finish_step"] is None:
                row["finish_step"] = this


def run_vllm(requests, config, version: str = DEFAULT_VERSION, cache: Path | None = None):
    """Run ``requests`` (``pipeline.engine.request.SimRequest``, arrival by step) through
    vLLM's scheduler. Returns (per-request rows, per-step rows) in the shapes of
    ``pipeline.engine.loop``'s frames: request -> (first_scheduled_step, first_token_step,
    finish_step, gpu_hit_tokens, preemptions, output_tokens); steps as (step, scheduled
    [(request, tokens)], num_running, num_waiting, free_blocks)."""
    from pipeline.engine.request import sequence_tokens
    v = load(vllm_sources(version, cache or Path.home() / ".cache" / "kvlab"))
    spec = v.FullAttentionSpec(block_size=config.block_size, num_kv_heads=1, head_size=1,
                               dtype="float32")
    kv_config = v.KVCacheConfig(num_blocks=config.num_gpu_blocks, kv_cache_tensors=[],
                                kv_cache_groups=[v.KVCacheGroupSpec(["layer.0"], spec)])
    cls = v.AsyncScheduler if config.async_scheduling else v.Scheduler
    # no request uses structured output: the manager accepts every token, as vLLM's does
    manager = Strict(accept_tokens=lambda request, tokens: True)
    scheduler = cls(vllm_config(config), kv_config, manager, block_size=config.block_size,
                    hash_block_size=config.block_size, log_stats=False)
    hasher = _hasher(config.block_size)
    outputs = {r.index: [int(t) for t in sequence_tokens(r)[len(r.prompt_token_ids):]]
               for r in requests}
    rows = {r.index: {"first_scheduled_step": None, "first_token_step": None,
                      "finish_step": None, "gpu_hit_tokens": 0} for r in requests}
    live = {}
    steps = []
    pending = sorted(requests, key=lambda r: (r.arrival_step or 0, r.index))
    pointer, step = 0, 0

    def add_due():
        nonlocal pointer
        while pointer < len(pending) and (pending[pointer].arrival_step or 0) <= step:
            r = pending[pointer]
            request = v.Request(str(r.index), [int(t) for t in r.prompt_token_ids],
                                _sampling(r.max_tokens), None, arrival_time=float(r.index),
                                block_hasher=hasher)
            request.structured_output_request = None       # stubbed module: no grammar
            request.status = v.RequestStatus.WAITING
            live[r.index] = request
            scheduler.add_request(request)
            pointer += 1

    def schedule():
        nonlocal step
        out = scheduler.schedule()
        samples = [rid for rid in out.num_scheduled_tokens
                   if not scheduler.requests[rid].is_prefill_chunk]
        this = None
        if out.total_num_scheduled_tokens > 0:
            this = step
            step += 1
            for rid in out.num_scheduled_tokens:
                row = rows[int(rid)]
                if row["first_scheduled_step"] is None:
                    row["first_scheduled_step"] = this
                    row["gpu_hit_tokens"] = live[int(rid)].prefill_stats.num_local_cached_tokens
            running, waiting = scheduler.get_request_counts()
            steps.append((this, [(int(k), n) for k, n in out.num_scheduled_tokens.items()],
                          running, waiting,
                          scheduler.kv_cache_manager.block_pool.get_num_free_blocks()))
        return (out, samples, this)

    def process(batch):
        out, samples, this = batch
        update_from_output(scheduler, out, samples, this, outputs, live, rows)

    def wait() -> bool:
        nonlocal step
        if pointer == len(pending):
            return False
        step = max(step, pending[pointer].arrival_step or 0)
        return True

    engine_loop(scheduler, 2 if config.async_scheduling else 1, add_due, wait,
                lambda queue: schedule(), process)
    result = {}
    for r in requests:
        request = live[r.index]
        result[r.index] = (rows[r.index]["first_scheduled_step"],
                           rows[r.index]["first_token_step"], rows[r.index]["finish_step"],
                           rows[r.index]["gpu_hit_tokens"], request.num_preemptions,
                           len(request.output_token_ids))
    return result, steps


def run_model(requests, config):
    """The same shapes from ``pipeline.engine`` (the model under test)."""
    from pipeline.engine.loop import simulate
    result = simulate(requests, config)
    rows = {row["request"]: (row["first_scheduled_step"], row["first_token_step"],
                             row["finish_step"], row["gpu_hit_tokens"], row["preemptions"],
                             row["output_tokens"])
            for row in result.requests.iter_rows(named=True)}
    return rows, result.steps


def random_workload(rng: random.Random):
    """A random timed workload and config (shared prefixes, re-sent replies, bursts)."""
    from pipeline.engine.config import SchedulerConfig
    from pipeline.engine.request import SimRequest, sequence_tokens
    block_size = rng.choice([1, 2, 4, 16])
    requests = []
    step = 0
    for index in range(rng.randint(1, 12)):
        kind = rng.random()
        if requests and kind < 0.3:                      # a chat turn re-sending a reply
            base = requests[rng.randrange(len(requests))]
            tokens = [int(t) for t in sequence_tokens(base)[:-1]][:200]
        elif requests and kind < 0.6:                    # a shared prefix
            base = requests[rng.randrange(len(requests))]
            tokens = list(base.prompt_token_ids)[:rng.randint(1, len(base.prompt_token_ids))]
        else:
            tokens = []
        tokens = tokens + [rng.randint(0, 50) for _ in range(rng.randint(1 if not tokens
                                                                          else 0, 40))]
        tokens = tokens or [rng.randint(0, 50)]
        step += rng.choice([0, 0, 0, 1, 2, 5])
        requests.append(SimRequest(index, tokens, rng.randint(1, 12), arrival_step=step))
    longest = max(len(r.prompt_token_ids) + r.max_tokens for r in requests)
    max_model_len = longest + rng.choice([0, 5, 100])
    need = max(-(-(min(len(r.prompt_token_ids) + r.max_tokens, max_model_len) - 1)
                 // block_size) for r in requests)
    chunked = rng.random() < 0.7
    batched = rng.choice([8, 16, 32, 64, 2048])
    if not chunked:
        batched = max(batched, max_model_len)
    config = SchedulerConfig(
        num_gpu_blocks=need + 1 + rng.choice([0, 0, 1, 3, 10, 200]),
        max_model_len=max_model_len, block_size=block_size,
        max_num_seqs=rng.choice([1, 2, 3, 256]), max_num_batched_tokens=batched,
        chunked_prefill=chunked,
        long_prefill_token_threshold=rng.choice([0, 0, 3, 8]),
        async_scheduling=rng.random() < 0.5)
    return requests, config


def model_steps(frame):
    return [(row["step"], row["num_running"], row["num_waiting"], row["free_blocks"])
            for row in frame.iter_rows(named=True)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", default=DEFAULT_VERSION)
    parser.add_argument("--random", type=int, default=50)
    parser.add_argument("--seed", type=int, default=20261201)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    mismatches = []
    for case in range(args.random):
        requests, config = random_workload(rng)
        theirs, their_steps = run_vllm(requests, config, args.version)
        ours, our_steps = run_model(requests, config)
        steps_theirs = [(s, r, w, f) for s, _, r, w, f in their_steps]
        if theirs != ours or steps_theirs != model_steps(our_steps):
            mismatches.append({"case": case, "config": repr(config)})
    print(json.dumps({"version": args.version, "cases": args.random,
                      "mismatches": mismatches}, indent=2))
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
