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

import logging
import random
import sys
from collections import deque
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import vllm_connector_driver as driver  # noqa: E402
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
                 timed: bool, scheduler=None) -> None:
        self.scheduler = scheduler                      # the connector's scheduler side
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

    def begin(self, meta, now: float):
        """``vllm_connector_driver.Side.begin``: loads and stores counted in chunks."""
        jobs = self.scheduler._jobs
        loading = [entry.req_id for entry in meta.load_jobs.values()]
        loaded = sum(len(jobs[j].keys) for j in meta.load_jobs)
        stored = sum(len(jobs[j].keys) for j in meta.store_jobs)
        return loading, loaded, stored, self.start(meta, jobs, now)

    def end(self, meta, end: float) -> None:
        """Stores are submitted at the next step's start: nothing at a step's end."""

    def reported(self, kv_output, loaded) -> bool:
        return bool(kv_output.kv_connector_worker_meta)

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


def run_vllm(requests, config, offload, *, step_ms=None, link_bytes_per_ms: float = 1.0,
             latency_ms: float = 0.0, version: str = DEFAULT_VERSION,
             cache: Path | None = None):
    """Run ``requests`` through vLLM's scheduler + offloading connector
    (``vllm_connector_driver.drive``: its clocks and shapes; moved amounts in chunks, over a
    link of ``link_bytes_per_ms`` and ``latency_ms`` a job)."""
    v, mods = _load(version, cache)
    spec = v.FullAttentionSpec(block_size=config.block_size, num_kv_heads=1, head_size=1,
                               dtype="float32")
    kv_config = v.KVCacheConfig(num_blocks=config.num_gpu_blocks, kv_cache_tensors=[],
                                kv_cache_groups=[v.KVCacheGroupSpec(["layer.0"], spec)])
    vllm_config = driver.connector_vllm_config(config)
    connector = _connector(v, mods, vllm_config, kv_config, offload)
    connector.connector_scheduler.config = connector.connector_scheduler.config._replace(
        kv_bytes_per_token=KV_BYTES_PER_TOKEN)
    scheduler = driver.build_scheduler(v, mods, config, vllm_config, kv_config, connector)
    chunk_bytes = KV_BYTES_PER_TOKEN * config.block_size * offload.blocks_per_chunk
    worker = FakeWorker(chunk_bytes, link_bytes_per_ms, latency_ms, step_ms is not None,
                        connector.connector_scheduler)
    return driver.drive(v, mods, scheduler, worker, requests, config, step_ms=step_ms)


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
    return driver.model_shapes(result, chunk, timed)


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
    config = driver.tight_pool(rng, requests, config)
    offload = offload_config(rng.choice([1, 2, 4, 16, 64]), rng.choice(["lru", "arc"]),
                             rng.choice([0, 0, 2, 3]), rng.choice([1, 1, 2, 4]),
                             rng.choice([0, 0, KV_BYTES_PER_TOKEN * 8, 10**9]))
    timed = rng.random() < 0.5
    if timed:
        requests = driver.on_time_clock(rng, requests)
    link = dict(link_gbps=rng.choice([1e-6, 1e-5, 1e-4, 50.0]),
                latency_ms=rng.choice([0.0, 3.0])) if timed else {}
    return requests, config, offload, timed, link


def _case(rng: random.Random):
    """One random case through both: ``vllm_connector_driver.compare_main``'s shape."""
    requests, config, offload, timed, link = random_case(rng)
    kwargs = dict(step_ms=step_ms, link_bytes_per_ms=link["link_gbps"] * 1e6,
                  latency_ms=link["latency_ms"]) if timed else {}
    return (config, timed, run_vllm(requests, config, offload, **kwargs),
            run_model(requests, config, offload, timed=timed, **link), {})


def main() -> int:
    return driver.compare_main(__doc__.split("\n\n")[0], _case)


if __name__ == "__main__":
    sys.exit(main())
