"""Drive vLLM's own v1 ``Scheduler`` with the ``OffloadingConnector``'s scheduler side
(``OffloadingConnectorScheduler`` + ``CPUOffloadingManager``, vLLM 0.33.0, unmodified) on
CPU, beside a fake worker that moves KV over one timed host link.

vLLM's files run through ``stub_importer`` as in ``vllm_scheduler_reference`` (whose config,
hasher and sampling helpers this reuses). The connector is vLLM's ``OffloadingConnector``
with its scheduler built from a plain offloading spec (one full-attention group, the GPU
block size, ``blocks_per_chunk``, ``offload_prompt_only``, ``sync_load_budget_bytes``) and
vLLM's ``CPUOffloadingManager``; the scheduler's connector factory is pointed at it. Each
engine step feeds a ``KVConnectorOutput`` back through ``update_from_output`` exactly as
vLLM's engine core does, with the worker's completed jobs and finished loads.

The fake worker (the transfer rule of docs/offloading.md): at each step's start it submits
the previous step's store jobs, then this step's load jobs, in job order, FIFO on one link:
a job starts when the link is free and takes ``bytes / link + latency`` (no time on the step
clock); the forward pass waits for the step's synchronous loads; a step reports every job
done by its end. A step that schedules nothing lasts until the next job ends or the next
request arrives (with no batch that scheduled tokens in flight; else at once). With async
scheduling vLLM's ``AsyncScheduler`` and ``step_with_batch_queue``'s queue of two, as in
``vllm_scheduler_reference``; a step's output reports the jobs done by the step's end (on
the step clock: the jobs it and the steps before it submitted). Requests finishing in one
step reach the connector in finish order (an insertion-ordered set: vLLM's own is a ``set``
of ids, hash-ordered).

    .venv/bin/python scripts/vllm_offload_engine_reference.py --random 300

(``--random N``: N random cases, sync and async scheduling, step and time clocks, each
compared with kvlab's engine request by request and step by step.)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import random
import sys
from collections import deque
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import vllm_scheduler_reference as base  # noqa: E402
from stub_importer import vllm_sources  # noqa: E402

DEFAULT_VERSION = base.DEFAULT_VERSION
have_sources = base.have_sources
#: one KV token's bytes in the reference's model (vLLM derives the chunk's bytes from it)
KV_BYTES_PER_TOKEN = 64
#: the time clock's step model: kvlab's fitted ``Linear`` with these coefficients, and
#: ``step_ms`` (the same arithmetic in its kernel's order) for vLLM's run
COEF = dict(fixed_ms=10.0, prefill_token_ms=1.0, context_token_ms=0.0, decode_seq_ms=2.0,
            reload_token_ms=0.0)


def step_ms(prefill: int, decodes: int) -> float:
    """``Linear(COEF).step_ms`` in its kernel's order (``kstep.linear_ms``)."""
    return 0.0 + 10.0 * 1 + 1.0 * prefill + 0.0 * 0 + 2.0 * decodes + 0.0 * 0 + 0.0 * 0


class OrderedSet(dict):
    """A ``set`` that iterates in insertion order (the finish order of requests)."""

    def __init__(self, items=()):
        super().__init__((item, None) for item in items)

    def add(self, item):
        self[item] = None

    def discard(self, item):
        self.pop(item, None)

    def remove(self, item):
        del self[item]

    def update(self, *others):
        for other in others:
            for item in other:
                self[item] = None

    def __or__(self, other):
        out = OrderedSet(self)
        out.update(other)
        return out

    def __sub__(self, other):
        return OrderedSet(item for item in self if item not in other)

    def __and__(self, other):
        return OrderedSet(item for item in self if item in other)

    def isdisjoint(self, other):
        return not any(item in other for item in self)

    def difference_update(self, other):
        for item in other:
            self.pop(item, None)

    def copy(self):
        return OrderedSet(self)


def _load(version: str, cache: Path | None):
    v = base.load(vllm_sources(version, cache or Path.home() / ".cache" / "kvlab"))
    import importlib
    mods = SimpleNamespace(
        connector=importlib.import_module(
            "vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector"),
        scheduler=importlib.import_module(
            "vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler"),
        common=importlib.import_module(
            "vllm.distributed.kv_transfer.kv_connector.v1.offloading.common"),
        manager=importlib.import_module("vllm.v1.kv_offload.cpu.manager"),
        outputs=importlib.import_module("vllm.v1.outputs"),
        core=importlib.import_module("vllm.v1.core.sched.scheduler"))
    logging.disable(logging.WARNING)                # "cannot store chunks": expected here
    mods.core.set = OrderedSet                      # finished_req_ids in finish order
    interface = importlib.import_module("vllm.v1.kv_cache_interface")
    interface.get_dtype_size = lambda dtype: 4      # torch's dtype size, stubbed
    return v, mods


def _connector(v, mods, vllm_config, kv_config, offload):
    """vLLM's OffloadingConnector (scheduler role) over a plain offloading spec."""
    bs = vllm_config.cache_config.block_size
    spec = SimpleNamespace(
        config=SimpleNamespace(groups=[SimpleNamespace(
            group_id=0, tokens_per_block=bs, sliding_window_size_in_chunks=None)]),
        blocks_per_chunk=offload.blocks_per_chunk, tokens_per_hash=bs,
        tokens_per_block=[bs], offload_prompt_only=True,
        kv_events_config=SimpleNamespace(enable_kv_cache_events=False,
                                         self_describing_kv_events=False),
        extra_config={"sync_load_budget_bytes": offload.sync_load_budget_bytes},
        get_manager=lambda: mods.manager.CPUOffloadingManager(
            num_chunks=offload.num_chunks, cache_policy=offload.policy,
            store_threshold=offload.store_threshold))
    cls = mods.connector.OffloadingConnector
    connector = cls.__new__(cls)
    connector.__dict__.update(
        _bounding_group_ids=(), connector_worker=None, _kv_cache_manager=None,
        _kv_cache_config=kv_config, _vllm_config=vllm_config, _role=None,
        _connector_metadata=None,
        connector_scheduler=mods.scheduler.OffloadingConnectorScheduler(
            spec, vllm_config, kv_config))
    return connector


class FakeWorker:
    """The transfer rule (module docstring): one FIFO link, stores submitted a step late."""

    def __init__(self, chunk_bytes: int, link_bytes_per_ms: float, latency_ms: float,
                 timed: bool) -> None:
        self.chunk_bytes, self.rate, self.latency = chunk_bytes, link_bytes_per_ms, latency_ms
        self.timed, self.free, self.starts = timed, 0.0, 0
        self.stores: list = []                          # (job, chunks) not yet submitted
        self.flight: deque = deque()                     # (end, job, loading request, sync)
        self.loads: dict[str, tuple[float, float, float]] = {}   # request -> submit/start/end

    def duration(self, chunks: int) -> float:
        if not self.timed:
            return 0.0
        return chunks * self.chunk_bytes / self.rate + self.latency

    def _submit(self, job, chunks, start, request=None, sync=False):
        begin = max(start, self.free)
        end = begin + self.duration(chunks)
        self.free = end
        self.flight.append((end, job, request, sync))
        return begin, end

    def clock(self, end: float) -> float:
        """A step's end on the worker's clock (the step clock: its start's number)."""
        return end if self.timed else float(self.starts)

    def start(self, meta, jobs, start: float) -> float:
        """Submit at a step's start; the time its forward pass may begin. On the step clock
        a step starts at its number: its output reports the jobs it and earlier steps
        submitted."""
        if not self.timed:
            self.starts += 1
            start = float(self.starts)
        forward = start
        for job, chunks in self.stores:
            self._submit(job, chunks, start)
        for job, entry in meta.load_jobs.items():
            chunks = len(jobs[job].keys)
            begin, end = self._submit(job, chunks, start, entry.req_id, entry.sync)
            self.loads.setdefault(entry.req_id, (start, begin, end))
            if entry.sync:
                forward = max(forward, end)
        self.stores = [(job, len(jobs[job].keys)) for job in meta.store_jobs]
        return forward

    def next_end(self) -> float | None:
        return self.flight[0][0] if self.flight else None

    def finished(self, mods, end: float):
        """(The KVConnectorOutput of a step that ended at ``end``: its jobs done, its
        asynchronous loads as finished_recving; every request whose load is done)."""
        meta = mods.common.OffloadingWorkerMetadata()
        recving, loaded = set(), []
        while self.flight and self.flight[0][0] <= end:
            _, job, request, sync = self.flight.popleft()
            meta.mark_completed(job)
            if request is not None:
                loaded.append(request)
                if not sync:
                    recving.add(request)
        return mods.outputs.KVConnectorOutput(
            finished_recving=recving or None,
            kv_connector_worker_meta=meta if meta.completed_jobs else None), loaded


def apply_output(scheduler, worker, mods, batch, rows, live, outputs, step):
    """One batch's result through vLLM's ``update_from_output``: the worker's report of
    finished transfers (``load_done`` of the requests whose loads ended, at ``step``), the
    step's sampled tokens, and each request's first-token and finish steps in ``rows``;
    (the worker's ``KVConnectorOutput``, the request ids whose loads finished)."""
    out, samples, this, end = batch
    kv_output, loaded = worker.finished(mods, end)
    for rid in loaded:
        if rows[int(rid)]["load_done"] is None:
            rows[int(rid)]["load_done"] = step
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
    return kv_output, loaded


def run_vllm(requests, config, offload, *, step_ms=None, link_bytes_per_ms: float = 1.0,
             latency_ms: float = 0.0, version: str = DEFAULT_VERSION,
             cache: Path | None = None):
    """Run ``requests`` through vLLM's scheduler + offloading connector. ``step_ms(prefill,
    decodes)``: the time clock (arrivals by ``arrival_s``), else the step clock. Returns
    (rows, steps): request -> (first_scheduled_step, first_token_step, finish_step,
    gpu_hit_tokens, cpu_hit_tokens, preemptions, output_tokens, load_step, load_done_step)
    and per step (step, running, waiting, free blocks, load chunks, store chunks, and on
    the time clock its start and end ms); with the time clock also request -> its first
    load's (submit, start, end) ms."""
    from pipeline.engine.request import sequence_tokens
    v, mods = _load(version, cache)
    timed = step_ms is not None
    spec = v.FullAttentionSpec(block_size=config.block_size, num_kv_heads=1, head_size=1,
                               dtype="float32")
    kv_config = v.KVCacheConfig(num_blocks=config.num_gpu_blocks, kv_cache_tensors=[],
                                kv_cache_groups=[v.KVCacheGroupSpec(["layer.0"], spec)])
    vllm_config = base.vllm_config(config)
    vllm_config.kv_transfer_config = base.Strict(kv_load_failure_policy="recompute",
                                                 is_kv_consumer=True, is_kv_producer=True)
    vllm_config.cache_config.prefix_cache_retention_interval = None
    vllm_config.parallel_config.world_size = 1
    connector = _connector(v, mods, vllm_config, kv_config, offload)
    connector.connector_scheduler.config = connector.connector_scheduler.config._replace(
        kv_bytes_per_token=KV_BYTES_PER_TOKEN)
    factory = mods.core.KVConnectorFactory
    mods.core.KVConnectorFactory = SimpleNamespace(create_connector=lambda **_: connector)
    try:
        manager = base.Strict(accept_tokens=lambda request, tokens: True)
        cls = v.AsyncScheduler if config.async_scheduling else v.Scheduler
        scheduler = cls(vllm_config, kv_config, manager, block_size=config.block_size,
                        hash_block_size=config.block_size, log_stats=False)
    finally:
        mods.core.KVConnectorFactory = factory
    sched = connector.connector_scheduler
    chunk_bytes = KV_BYTES_PER_TOKEN * config.block_size * offload.blocks_per_chunk
    worker = FakeWorker(chunk_bytes, link_bytes_per_ms, latency_ms, timed)
    hasher = base._hasher(config.block_size)
    outputs = {r.index: [int(t) for t in sequence_tokens(r)[len(r.prompt_token_ids):]]
               for r in requests}
    rows = {r.index: dict(first_scheduled_step=None, first_token_step=None, finish_step=None,
                          gpu=0, cpu=0, load_step=None, load_done=None) for r in requests}
    live, steps = {}, []
    pending = sorted(requests, key=lambda r: ((r.arrival_s or 0.0) if timed
                                              else (r.arrival_step or 0), r.index))
    pointer, step, idle, now = 0, 0, 0, 0.0
    moved = [0, 0]                     # chunks loaded / stored since the last executed step

    def due(r):
        return (r.arrival_s or 0.0) * 1000.0 if timed else (r.arrival_step or 0)

    def add_due():
        nonlocal pointer
        clock = now if timed else step
        while pointer < len(pending) and due(pending[pointer]) <= clock:
            r = pending[pointer]
            request = v.Request(str(r.index), [int(t) for t in r.prompt_token_ids],
                                base._sampling(r.max_tokens), None,
                                arrival_time=float(r.index), block_hasher=hasher)
            request.structured_output_request = None
            request.status = v.RequestStatus.WAITING
            live[r.index] = request
            scheduler.add_request(request)
            pointer += 1

    def schedule():
        """schedule(), the worker's start of the step; returns the batch in flight."""
        nonlocal step, now, moved
        out = scheduler.schedule()
        meta = out.kv_connector_metadata
        this = step if out.total_num_scheduled_tokens > 0 else None
        for job, entry in meta.load_jobs.items():
            row = rows[int(entry.req_id)]
            if row["load_step"] is None:
                row["load_step"] = step
        moved[0] += sum(len(sched._jobs[j].keys) for j in meta.load_jobs)
        moved[1] += sum(len(sched._jobs[j].keys) for j in meta.store_jobs)
        forward = worker.start(meta, sched._jobs, now)
        prefill = decodes = 0
        samples = []
        for rid, n in out.num_scheduled_tokens.items():
            request = scheduler.requests[rid]
            start = request.num_computed_tokens - n
            if n == 1 and start >= request.num_prompt_tokens:
                decodes += 1
            else:
                prefill += n
            if not request.is_prefill_chunk:
                samples.append(rid)
        if this is not None:
            step += 1
            for rid in out.num_scheduled_tokens:
                row = rows[int(rid)]
                if row["first_scheduled_step"] is None:
                    row["first_scheduled_step"] = this
                    stats = live[int(rid)].prefill_stats
                    row["gpu"] = stats.num_local_cached_tokens
                    row["cpu"] = stats.num_external_cached_tokens
            running, waiting = scheduler.get_request_counts()
            end = forward + (step_ms(prefill, decodes) if timed else 0.0)
            steps.append((this, running, waiting,
                          scheduler.kv_cache_manager.block_pool.get_num_free_blocks(),
                          *moved) + ((now, end) if timed else ()))
            moved = [0, 0]
        else:
            end = forward
            if timed and not (queue and queue[-1][2] is not None):   # none in flight
                wake = [t for t in (worker.next_end(),
                                    due(pending[pointer]) if pointer < len(pending)
                                    else None) if t is not None]
                end = max(forward, min(wake)) if wake else forward
        if timed:
            now = end
        return out, samples, this, worker.clock(end)

    def process(batch) -> bool:
        """update_from_output with the step's sampled tokens and the worker's report;
        True when it reported a finished job."""
        kv_output, _ = apply_output(scheduler, worker, mods, batch, rows, live, outputs, step)
        return bool(kv_output.kv_connector_worker_meta)

    queue: list = []                                   # batches in flight, oldest first
    depth = 2 if config.async_scheduling else 1
    while True:
        add_due()
        if not scheduler.has_requests() and not queue:
            if pointer == len(pending):
                break
            if timed:
                now = max(now, due(pending[pointer]))
            else:
                step = max(step, due(pending[pointer]))
            continue
        executed = reported = False
        if scheduler.has_requests():                   # step / step_with_batch_queue
            batch = schedule()
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
    result = {r.index: (rows[r.index]["first_scheduled_step"],
                        rows[r.index]["first_token_step"], rows[r.index]["finish_step"],
                        rows[r.index]["gpu"], rows[r.index]["cpu"],
                        live[r.index].num_preemptions, len(live[r.index].output_token_ids),
                        rows[r.index]["load_step"], rows[r.index]["load_done"])
              for r in requests}
    loads = {int(k): t for k, t in worker.loads.items()}
    return (result, steps, loads) if timed else (result, steps)


def run_model(requests, config, offload, *, timed: bool = False, link_gbps: float = 50.0,
              latency_ms: float = 0.0):
    """The same shapes from kvlab's engine (the model under test; the time clock priced by
    ``Linear(COEF)``), and request -> its load's (submit, start, end) ms on the time
    clock."""
    from pipeline.engine.loop import simulate
    from pipeline.engine.native_tier import NativeSpec
    from pipeline.steptime.fitted import Linear
    spec = NativeSpec(num_chunks=offload.num_chunks, kv_bytes_per_token=KV_BYTES_PER_TOKEN,
                      policy=offload.policy, store_threshold=offload.store_threshold,
                      blocks_per_chunk=offload.blocks_per_chunk,
                      sync_load_budget_bytes=offload.sync_load_budget_bytes,
                      link_gbps=link_gbps, latency_ms=latency_ms)
    kwargs = dict(clock="time", step_ms=Linear(COEF).step_ms) if timed else {}
    result = simulate(requests, config, offload=spec, **kwargs)
    chunk = KV_BYTES_PER_TOKEN * config.block_size * offload.blocks_per_chunk
    rows = {x["request"]: (x["first_scheduled_step"], x["first_token_step"], x["finish_step"],
                           x["gpu_hit_tokens"], x["cpu_hit_tokens"], x["preemptions"],
                           x["output_tokens"], x["load_step"], x["load_done_step"])
            for x in result.requests.iter_rows(named=True)}
    steps = [(x["step"], x["num_running"], x["num_waiting"], x["free_blocks"],
              x["cpu_load_bytes"] // chunk, x["cpu_store_bytes"] // chunk)
             + ((x["start_ms"], x["start_ms"] + x["duration_ms"]) if timed else ())
             for x in result.steps.iter_rows(named=True)]
    loads = {x["request"]: (x["load_end_s"] * 1000 - x["load_ms"], x["load_start_s"] * 1000,
                            x["load_end_s"] * 1000)
             for x in result.requests.iter_rows(named=True)
             if timed and x["load_ms"] is not None}
    return rows, steps, loads


def offload_config(num_chunks: int, policy: str = "lru", store_threshold: int = 0,
                   blocks_per_chunk: int = 1, sync_load_budget_bytes: int = 0):
    return SimpleNamespace(num_chunks=num_chunks, policy=policy,
                           store_threshold=store_threshold,
                           blocks_per_chunk=blocks_per_chunk,
                           sync_load_budget_bytes=sync_load_budget_bytes)


def random_case(rng: random.Random):
    """A random workload (``vllm_scheduler_reference.random_workload``: shared prefixes,
    re-sent replies, bursts, sync or async scheduling; often a GPU pool of the largest
    request + 1-3 blocks), offload settings and clock."""
    requests, config = base.random_workload(rng)
    if rng.random() < 0.6:                             # a tight GPU pool: CPU hits
        need = max(-(-(min(len(r.prompt_token_ids) + r.max_tokens, config.max_model_len) - 1)
                     // config.block_size) for r in requests)
        config = dataclasses.replace(config, num_gpu_blocks=need + 1 + rng.choice([0, 1, 2]))
    offload = offload_config(rng.choice([1, 2, 4, 16, 64]), rng.choice(["lru", "arc"]),
                             rng.choice([0, 0, 2, 3]), rng.choice([1, 1, 2, 4]),
                             rng.choice([0, 0, KV_BYTES_PER_TOKEN * 8, 10**9]))
    timed = rng.random() < 0.5
    if timed:
        scale = rng.choice([0.005, 0.02, 0.1])
        requests = [dataclasses.replace(r, arrival_s=r.arrival_step * scale,
                                        arrival_step=None) for r in requests]
    link = dict(link_gbps=rng.choice([1e-6, 1e-5, 1e-4, 50.0]),
                latency_ms=rng.choice([0.0, 3.0])) if timed else {}
    return requests, config, offload, timed, link


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--random", type=int, default=10)
    parser.add_argument("--seed", type=int, default=20261206)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    differ = 0
    for case in range(args.random):
        requests, config, offload, timed, link = random_case(rng)
        kwargs = dict(step_ms=step_ms, link_bytes_per_ms=link["link_gbps"] * 1e6,
                      latency_ms=link["latency_ms"]) if timed else {}
        theirs = run_vllm(requests, config, offload, **kwargs)
        ours = run_model(requests, config, offload, timed=timed, **link)
        same = theirs[:2] == ours[:2] and (not timed or all(
            abs(a - b) <= 1e-9 * max(1.0, abs(a))
            for request, times in theirs[2].items()
            for a, b in zip(times, ours[2].get(request, (float("nan"),) * 3))))
        differ += not same
        print(json.dumps({"case": case, "async": config.async_scheduling, "timed": timed,
                          "requests": len(theirs[0]), "steps": len(theirs[1]),
                          "cpu_hits": sum(r[4] for r in theirs[0].values()),
                          "equal": same}))
    print(json.dumps({"cases": args.random, "differ": differ}))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
