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

import random
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import vllm_connector_driver as driver  # noqa: E402
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

    def begin(self, meta, now: float):
        """``vllm_connector_driver.Side.begin``: loads and stores counted in blocks; the
        forward pass waits for no load."""
        loading = meta.load_event_to_reqs[meta.load_event] if meta.load_event >= 0 else ()
        self.start(meta, now)
        return loading, len(meta.load_gpu_blocks), len(meta.store_gpu_blocks), now

    def end(self, meta, end: float) -> None:
        self.save(meta, end)

    def reported(self, kv_output, loaded) -> bool:
        return bool(loaded or kv_output.kv_connector_worker_meta)

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
    v, mods = _load(version, cache)
    bs = config.block_size
    spec = v.FullAttentionSpec(block_size=bs, num_kv_heads=1, head_size=1, dtype="float32")
    tensor = mods.interface.KVCacheTensor(size=config.num_gpu_blocks * KV_BYTES_PER_TOKEN * bs,
                                          layers=["layer.0"], layer_stride=0,
                                          block_stride=KV_BYTES_PER_TOKEN * bs)
    kv_config = v.KVCacheConfig(num_blocks=config.num_gpu_blocks, kv_cache_tensors=[tensor],
                                kv_cache_groups=[v.KVCacheGroupSpec(["layer.0"], spec)])
    vllm_config = driver.connector_vllm_config(config)
    connector = _connector(mods, vllm_config, kv_config, offload)
    scheduler = driver.build_scheduler(v, mods, config, vllm_config, kv_config, connector)
    worker = SimpleWorker(KV_BYTES_PER_TOKEN * bs, offload.spec, step_ms is not None)
    _bound_lazy_walk(connector.scheduler_manager)
    return driver.drive(v, mods, scheduler, worker, requests, config, step_ms=step_ms)


def run_model(requests, config, offload, *, timed: bool = False):
    """The same shapes from kvlab's engine (``vllm_offload_engine_reference.run_model``'s,
    moved amounts in blocks)."""
    from pipeline.engine.loop import simulate
    from pipeline.steptime.fitted import Linear
    kwargs = dict(clock="time", step_ms=Linear(native.COEF).step_ms) if timed else {}
    result = simulate(requests, config, offload=offload.spec, **kwargs)
    return driver.model_shapes(result, KV_BYTES_PER_TOKEN * config.block_size, timed)


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
    config = driver.tight_pool(rng, requests, config)
    timed = rng.random() < 0.5
    link = {}
    if timed:
        requests = driver.on_time_clock(rng, requests)
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


def _case(rng: random.Random):
    """One random case through both: ``vllm_connector_driver.compare_main``'s shape."""
    requests, config, offload, timed = random_case(rng)
    theirs, ours = _both(requests, config, offload, timed)
    return config, timed, theirs, ours, {"medium": offload.spec.medium, "lazy": offload.lazy}


def main() -> int:
    return driver.compare_main(__doc__.split("\n\n")[0], _case)


if __name__ == "__main__":
    sys.exit(main())
