"""Drive vLLM's own v1 ``Scheduler`` with the ``SimpleCPUOffloadConnector``'s scheduler side
(``SimpleCPUOffloadScheduler``, ``vllm/v1/simple_kv_offload/manager.py``, vLLM 0.33.0,
unmodified) on CPU, beside a fake worker.

vLLM's files run through ``stub_importer`` as in ``vllm_offload_engine_reference`` (whose
loader, ordered set and step-time model this reuses). The connector is vLLM's
``SimpleCPUOffloadConnector`` in the scheduler role over one full-attention group: its
manager builds a second ``BlockPool`` (a KV cache coordinator over ``num_cpu_blocks``
offload slots, block 0 the null block) and is bound to the GPU pool; eager or
``lazy_offload`` stores. Each engine step feeds a ``KVConnectorOutput`` back through
``update_from_output`` as vLLM's engine core does: the finished loads as
``finished_recving``, the finished store events in ``SimpleCPUOffloadWorkerMetadata``.

The fake worker (docs/offloading.md, "vLLM's other native connector"): a step's load event
is submitted at the step's start on the load stream, its store event at the step's end on
the store stream (vLLM's ``start_load_kv`` / ``wait_for_save``, two CUDA streams); each
stream is FIFO and an event takes ``blocks x block bytes / rate + latency`` (no time on the
step clock); a step's output reports every event done by its end (on the step clock: every
event submitted by it or an earlier step). Nothing waits for a load: every hit is
asynchronous (``WAITING_FOR_REMOTE_KVS``).

    .venv/bin/python scripts/vllm_simple_offload_reference.py --random 200
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import vllm_offload_engine_reference as native  # noqa: E402
import vllm_scheduler_reference as base  # noqa: E402

DEFAULT_VERSION = base.DEFAULT_VERSION
have_sources = base.have_sources
KV_BYTES_PER_TOKEN = native.KV_BYTES_PER_TOKEN
step_ms = native.step_ms
from pipeline.engine.ksimple_offload import LIVELOCK_SCHEDULES  # noqa: E402


def _bound_lazy_walk(manager) -> None:
    """kvlab's one deliberate change of vLLM's behaviour, made here from outside its code:
    vLLM's lazy stores can cycle forever (a pool smaller than the free-queue walk re-stores
    what it just evicted while the blocks in flight keep a waiting request out); after
    ``LIVELOCK_SCHEDULES`` schedules in a row that scheduled nothing the walk pauses
    (``_target_free`` 0) until a schedule has tokens again, as kvlab's engine does."""
    build, target = manager.build_connector_meta, manager._target_free
    empties = [0]

    def bounded(scheduler_output):
        empty = scheduler_output.total_num_scheduled_tokens == 0
        empties[0] = empties[0] + 1 if empty else 0
        manager._target_free = target if empties[0] <= LIVELOCK_SCHEDULES else 0
        return build(scheduler_output)

    manager.build_connector_meta = bounded


def _load(version: str, cache: Path | None):
    import importlib
    v, mods = native._load(version, cache)
    mods.simple = importlib.import_module(
        "vllm.distributed.kv_transfer.kv_connector.v1.simple_cpu_offload_connector")
    mods.manager = importlib.import_module("vllm.v1.simple_kv_offload.manager")
    mods.meta = importlib.import_module("vllm.v1.simple_kv_offload.metadata")
    mods.interface = importlib.import_module("vllm.v1.kv_cache_interface")
    mods.hit_source = importlib.import_module("vllm.v1.metrics.cache_hit_source")
    # the scheduler's ``SupportsHMA`` comes through the connector package's __init__, which
    # the importer does not run: the real class, so finished requests reach
    # ``request_finished_all_groups`` as in vLLM
    mods.core.SupportsHMA = importlib.import_module(
        "vllm.distributed.kv_transfer.kv_connector.v1.base").SupportsHMA
    return v, mods


def _connector(mods, vllm_config, kv_config, offload):
    """vLLM's SimpleCPUOffloadConnector (scheduler role) with ``offload.num_cpu_blocks``
    slots (its ``num_cpu_blocks`` override; the byte budget allows it)."""
    bs = vllm_config.cache_config.block_size
    cls = mods.simple.SimpleCPUOffloadConnector
    connector = cls.__new__(cls)
    block_bytes = KV_BYTES_PER_TOKEN * bs
    connector.__dict__.update(
        _kv_cache_config=kv_config, _vllm_config=vllm_config, _role=None,
        _connector_metadata=None, _kv_cache_manager=None, worker_handler=None,
        _cache_hit_source=mods.hit_source.CacheHitSource.HOST,
        scheduler_manager=mods.manager.SimpleCPUOffloadScheduler(
            vllm_config, kv_config, cpu_capacity_bytes=offload.num_cpu_blocks * block_bytes,
            scheduler_block_size=bs, hash_block_size=bs, lazy_offload=offload.lazy,
            num_cpu_blocks=offload.num_cpu_blocks))
    return connector


class SimpleWorker:
    """The fake worker (module docstring): a load stream and a store stream, FIFO each."""

    def __init__(self, block_bytes: int, spec, timed: bool):
        self.block_bytes, self.spec, self.timed = block_bytes, spec, timed
        self.free = [0.0, 0.0]                         # load stream, store stream
        self.starts = 0
        self.flight: list = []                          # (end, kind, event, req ids)
        self.loads: dict[str, tuple[float, float, float]] = {}

    def _submit(self, stream, blocks, start, kind, event, reqs=()):
        begin = max(start, self.free[stream])
        end = begin + (self.spec.event_ms(blocks, self.block_bytes) if self.timed else 0.0)
        self.free[stream] = end
        self.flight.append((end, kind, event, tuple(reqs)))
        return begin, end

    def clock(self, end: float) -> float:
        return end if self.timed else float(self.starts)

    def start(self, meta, start: float) -> None:
        """The step's load event, at its start."""
        if not self.timed:
            self.starts += 1
            start = float(self.starts)
        if meta.load_event >= 0:
            reqs = meta.load_event_to_reqs[meta.load_event]
            begin, end = self._submit(0, len(meta.load_gpu_blocks), start, "load",
                                      meta.load_event, reqs)
            for rid in reqs:
                self.loads.setdefault(rid, (start, begin, end))

    def save(self, meta, end: float) -> None:
        """The step's store event, at its end."""
        if meta.store_event >= 0:
            self._submit(1, len(meta.store_gpu_blocks),
                         end if self.timed else float(self.starts), "store", meta.store_event)

    def next_end(self) -> float | None:
        return min((f[0] for f in self.flight), default=None)

    def finished(self, mods, end: float):
        """The KVConnectorOutput of a step that ended at ``end``; the requests loaded."""
        recving, stores, loaded, keep = native.OrderedSet(), {}, [], []
        for item in self.flight:
            if item[0] <= end:
                if item[1] == "load":
                    recving.update(item[3])
                    loaded.extend(item[3])
                else:
                    stores[item[2]] = 1
            else:
                keep.append(item)
        self.flight = keep
        meta = mods.meta.SimpleCPUOffloadWorkerMetadata(completed_store_events=stores) \
            if stores else None
        return mods.outputs.KVConnectorOutput(finished_recving=recving or None,
                                              kv_connector_worker_meta=meta), loaded


def run_vllm(requests, config, offload, *, step_ms=None, version: str = DEFAULT_VERSION,
             cache: Path | None = None):
    """Run ``requests`` through vLLM's scheduler + SimpleCPUOffloadConnector (``offload``:
    ``offload_config``; on the time clock, ``step_ms(prefill, decodes)``, its events timed
    as ``offload.spec.event_ms``). Returns (rows, steps[, loads]) in the shapes of
    ``vllm_offload_engine_reference.run_vllm`` (steps' moved amounts in blocks)."""
    from pipeline.engine.request import sequence_tokens
    v, mods = _load(version, cache)
    timed = step_ms is not None
    bs = config.block_size
    spec = v.FullAttentionSpec(block_size=bs, num_kv_heads=1, head_size=1, dtype="float32")
    tensor = mods.interface.KVCacheTensor(size=config.num_gpu_blocks * KV_BYTES_PER_TOKEN * bs,
                                          layers=["layer.0"], layer_stride=0,
                                          block_stride=KV_BYTES_PER_TOKEN * bs)
    kv_config = v.KVCacheConfig(num_blocks=config.num_gpu_blocks, kv_cache_tensors=[tensor],
                                kv_cache_groups=[v.KVCacheGroupSpec(["layer.0"], spec)])
    vllm_config = base.vllm_config(config)
    vllm_config.kv_transfer_config = base.Strict(kv_load_failure_policy="recompute",
                                                 is_kv_consumer=True, is_kv_producer=True)
    vllm_config.cache_config.prefix_cache_retention_interval = None
    vllm_config.parallel_config.world_size = 1
    connector = _connector(mods, vllm_config, kv_config, offload)
    factory = mods.core.KVConnectorFactory
    mods.core.KVConnectorFactory = SimpleNamespace(create_connector=lambda **_: connector)
    try:
        manager = base.Strict(accept_tokens=lambda request, tokens: True)
        cls = v.AsyncScheduler if config.async_scheduling else v.Scheduler
        scheduler = cls(vllm_config, kv_config, manager, block_size=bs, hash_block_size=bs,
                        log_stats=False)
    finally:
        mods.core.KVConnectorFactory = factory
    worker = SimpleWorker(KV_BYTES_PER_TOKEN * bs, offload.spec, timed)
    hasher = base._hasher(bs)
    outputs = {r.index: [int(t) for t in sequence_tokens(r)[len(r.prompt_token_ids):]]
               for r in requests}
    rows = {r.index: dict(first_scheduled_step=None, first_token_step=None, finish_step=None,
                          gpu=0, cpu=0, load_step=None, load_done=None) for r in requests}
    live, steps = {}, []
    pending = sorted(requests, key=lambda r: ((r.arrival_s or 0.0) if timed
                                              else (r.arrival_step or 0), r.index))
    pointer, step, idle, now = 0, 0, 0, 0.0
    moved = [0, 0]

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

    _bound_lazy_walk(connector.scheduler_manager)

    def schedule():
        nonlocal step, now, moved
        out = scheduler.schedule()
        meta = out.kv_connector_metadata
        this = step if out.total_num_scheduled_tokens > 0 else None
        if meta.load_event >= 0:
            for rid in meta.load_event_to_reqs[meta.load_event]:
                if rows[int(rid)]["load_step"] is None:
                    rows[int(rid)]["load_step"] = step
        moved[0] += len(meta.load_gpu_blocks)
        moved[1] += len(meta.store_gpu_blocks)
        worker.start(meta, now)
        prefill = decodes = 0
        samples = []
        for rid, n in out.num_scheduled_tokens.items():
            request = scheduler.requests[rid]
            if n == 1 and request.num_computed_tokens - n >= request.num_prompt_tokens:
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
            end = now + (step_ms(prefill, decodes) if timed else 0.0)
            steps.append((this, running, waiting,
                          scheduler.kv_cache_manager.block_pool.get_num_free_blocks(),
                          *moved) + ((now, end) if timed else ()))
            moved = [0, 0]
        else:
            end = now
            if timed and not (queue and queue[-1][2] is not None):
                wake = [t for t in (worker.next_end(),
                                    due(pending[pointer]) if pointer < len(pending)
                                    else None) if t is not None]
                end = max(now, min(wake)) if wake else now
        worker.save(meta, end)
        if timed:
            now = end
        return out, samples, this, worker.clock(end)

    def process(batch) -> bool:
        kv_output, loaded = native.apply_output(scheduler, worker, mods, batch, rows, live,
                                                outputs, step)
        return bool(loaded or kv_output.kv_connector_worker_meta)

    queue: list = []
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
        if scheduler.has_requests():
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


def run_model(requests, config, offload, *, timed: bool = False):
    """The same shapes from kvlab's engine (``vllm_offload_engine_reference.run_model``'s,
    moved amounts in blocks)."""
    from pipeline.engine.loop import simulate
    from pipeline.steptime.fitted import Linear
    kwargs = dict(clock="time", step_ms=Linear(native.COEF).step_ms) if timed else {}
    result = simulate(requests, config, offload=offload.spec, **kwargs)
    block = KV_BYTES_PER_TOKEN * config.block_size
    rows = {x["request"]: (x["first_scheduled_step"], x["first_token_step"], x["finish_step"],
                           x["gpu_hit_tokens"], x["cpu_hit_tokens"], x["preemptions"],
                           x["output_tokens"], x["load_step"], x["load_done_step"])
            for x in result.requests.iter_rows(named=True)}
    steps = [(x["step"], x["num_running"], x["num_waiting"], x["free_blocks"],
              x["cpu_load_bytes"] // block, x["cpu_store_bytes"] // block)
             + ((x["start_ms"], x["start_ms"] + x["duration_ms"]) if timed else ())
             for x in result.steps.iter_rows(named=True)]
    loads = {x["request"]: (x["load_end_s"] * 1000 - x["load_ms"], x["load_start_s"] * 1000,
                            x["load_end_s"] * 1000)
             for x in result.requests.iter_rows(named=True)
             if timed and x["load_ms"] is not None}
    return rows, steps, loads


def offload_config(num_cpu_blocks: int, lazy: bool = False, **link):
    """``num_cpu_blocks`` offload slots (block 0 of them vLLM's null block) and kvlab's
    ``SimpleSpec`` of them (``link``: its medium and transfer figures)."""
    from pipeline.engine.simple_offload_tier import SimpleSpec
    return SimpleNamespace(num_cpu_blocks=num_cpu_blocks, lazy=lazy, spec=SimpleSpec(
        num_slots=num_cpu_blocks, kv_bytes_per_token=KV_BYTES_PER_TOKEN, lazy=lazy, **link))


def random_case(rng: random.Random):
    """A random workload (``vllm_scheduler_reference.random_workload``), often with a
    GPU pool of the largest request + 0-2 blocks, a pool of 2-64 slots, eager or lazy
    stores; half on the time clock (slow links and disks, a disk medium half the time). Returns (requests, config,
    offload, timed)."""
    requests, config = base.random_workload(rng)
    if rng.random() < 0.6:
        need = max(-(-(min(len(r.prompt_token_ids) + r.max_tokens, config.max_model_len) - 1)
                     // config.block_size) for r in requests)
        config = dataclasses.replace(config, num_gpu_blocks=need + 1 + rng.choice([0, 1, 2]))
    timed = rng.random() < 0.5
    link = {}
    if timed:
        scale = rng.choice([0.005, 0.02, 0.1])
        requests = [dataclasses.replace(r, arrival_s=r.arrival_step * scale,
                                        arrival_step=None) for r in requests]
        link = dict(rate_gbps=rng.choice([1e-6, 1e-5, 1e-4, 50.0]),
                    latency_ms=rng.choice([0.0, 3.0]))
        if rng.random() < 0.5:
            link.update(medium="disk", disk_gbps=rng.choice([1e-6, 1e-5, 7.0]),
                        disk_latency_ms=rng.choice([0.0, 0.1, 2.0]),
                        buffer_slots=rng.choice([1, 2, 4]))
    return requests, config, offload_config(rng.choice([2, 3, 5, 16, 64]),
                                            rng.random() < 0.4, **link), timed


def _both(requests, config, offload, timed):
    """(vLLM's run, kvlab's run) of one case."""
    return (run_vllm(requests, config, offload, step_ms=step_ms if timed else None),
            run_model(requests, config, offload, timed=timed))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--random", type=int, default=10)
    parser.add_argument("--seed", type=int, default=20261206)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    differ = 0
    for case in range(args.random):
        requests, config, offload, timed = random_case(rng)
        theirs, ours = _both(requests, config, offload, timed)
        same = theirs[:2] == ours[:2] and (not timed or theirs[2].keys() == ours[2].keys()
                                           and all(abs(a - b) <= 1e-9 * max(1.0, abs(a))
                                                   for request, times in theirs[2].items()
                                                   for a, b in zip(times, ours[2][request])))
        differ += not same
        print(json.dumps({"case": case, "async": config.async_scheduling, "timed": timed,
                          "medium": offload.spec.medium, "lazy": offload.lazy,
                          "requests": len(theirs[0]), "steps": len(theirs[1]),
                          "cpu_hits": sum(r[4] for r in theirs[0].values()),
                          "equal": same}))
    print(json.dumps({"cases": args.random, "differ": differ}))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
