"""A sweep: every (router, instances, GPU blocks per instance, load) point of one workload
is an independent fleet simulation, run on a local process pool or on Ray, written as one
Parquet dataset partitioned by point.

``OUT/requests/point=KEY/part-0.parquet`` holds a point's per-request rows and
``OUT/steps/point=KEY/part-0.parquet`` its batches (hive partitioning: read the folder with
``pyarrow.dataset.dataset(..., partitioning="hive")`` or polars' ``scan_parquet``). A point's
files are written when it finishes (steps first, requests last, each through a temporary
name), so a killed sweep leaves only whole points and ``--resume`` skips the points whose
requests file exists. The executors run the same function on the same inputs, so their
results are equal row for row; the pool's workers (and Ray's, on a cluster of this machine)
write their own points, the driver only records which finished. Components registered at
run time in the driver (a cache model, a router, an engine) travel to the workers with the
sweep (``Registered``).
"""

from __future__ import annotations

import concurrent.futures as futures
import multiprocessing as mp
import os
import pickle
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq

from pipeline.components.lmcache_stack import share_remote
from pipeline.base.errors import CLIError
from pipeline import catalog as registry
from pipeline.engine.compiled import compiled_model
from pipeline.engine.config import SchedulerConfig
from pipeline.engine.engines import DEFAULT_ENGINE, ENGINES, added_engines, engine_class, \
    register_engine
from pipeline.engine.hashing import flat_request_keys
from pipeline.engine.request import EngineRequests
from pipeline.fleet.deciders import Decider
from pipeline.fleet.disaggregated import Link, Side, simulate_disaggregated
from pipeline.fleet.loop import FleetResult, simulate_fleet
from pipeline.fleet.routers import ROUTERS, added_routers, make_router, register_router, \
    router_class
from pipeline.fleet.workload import requests_at_load

__all__ = ["Point", "Settings", "Disaggregation", "Registered", "run_point", "run_sweep",
           "point_path",
           "EXECUTORS", "workload_keys", "run_and_save", "by_cost"]

EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class Point:
    """One simulation of the sweep."""

    router: str
    instances: int
    gpu_blocks: int
    load: float
    decode_instances: int = 0                 # > 0: a disaggregated fleet, ``instances`` prefill

    @property
    def key(self) -> str:
        """The partition value: safe in a path, unique per point."""
        decode = f"_d{self.decode_instances}" if self.decode_instances else ""
        return f"{self.router}_n{self.instances}{decode}_b{self.gpu_blocks}_l{self.load:g}"


@dataclass(frozen=True)
class Settings:
    """What every point shares: scheduler limits (``num_gpu_blocks`` set per point), the
    step-time model, router options and seed, the view's staleness, the CPU tier
    factory (called once per instance, or once for a pool all instances share) or None,
    and the engine's registered name (``pipeline.engine.engines``)."""

    config: SchedulerConfig
    step_model: Any
    router_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    seed: int = 0
    staleness_ms: float = 0.0
    cpu_tier: Callable[[], Any] | None = None
    cpu_shared: bool = False
    engine: str = DEFAULT_ENGINE
    disaggregation: Disaggregation | None = None


@dataclass(frozen=True)
class Disaggregation:
    """A disaggregated fleet's own settings: the prefill-to-decode link, the KV bytes per
    token it moves, and the decode side's router (with its options)."""

    link: Link
    kv_bytes_per_token: int
    decode_router: str = "round-robin"
    max_local_prefill_length: int | None = None
    decider: Decider | None = None


def run_point(settings: Settings, point: Point,
              workload: EngineRequests) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Simulate ``point``: (per-request frame, per-batch frame), both with the point's
    columns."""
    config = settings.config.with_blocks(point.gpu_blocks) \
        if hasattr(settings.config, "with_blocks") else \
        replace(settings.config, num_gpu_blocks=point.gpu_blocks)       # SGLang's pools
    router = make_router(point.router, point.instances, config.block_size, settings.seed,
                         **settings.router_options.get(point.router, {}))
    if point.decode_instances:
        return _point_columns(point, _run_disaggregated(settings, point, workload, config,
                                                        router))
    result = simulate_fleet(requests_at_load(workload, point.load), config, router,
                            settings.step_model.step_ms,
                            cpu_tiers=instance_tiers(settings, point.instances),
                            staleness_ms=settings.staleness_ms,
                            decode_run_ms=getattr(settings.step_model, "decode_run_ms", None),
                            keys=workload_keys(workload, config.block_size),
                            engine=engine_class(settings.engine))
    return _point_columns(point, result)


def instance_tiers(settings: Settings, instances: int) -> list | None:
    """Fresh CPU tiers for ``instances`` engines (None without a tier): one pool all share
    with ``cpu_shared`` (a block one instance stored, any instance can load), else one
    each (stacks with a shared remote store share it)."""
    if settings.cpu_tier is None:
        return None
    if settings.cpu_shared:
        return [settings.cpu_tier()] * instances
    return share_remote([settings.cpu_tier() for _ in range(instances)])


def _run_disaggregated(settings: Settings, point: Point, workload: EngineRequests,
                       config: SchedulerConfig, router) -> FleetResult:
    """``point`` as ``instances`` prefill and ``decode_instances`` decode engines."""
    pd = settings.disaggregation
    decode_router = make_router(pd.decode_router, point.decode_instances, config.block_size,
                                settings.seed, **settings.router_options.get(
                                    pd.decode_router, {}))
    engine = engine_class(settings.engine)
    return simulate_disaggregated(
        requests_at_load(workload, point.load), Side(
            config, router, settings.step_model, engine,
            cpu_tiers=partial(instance_tiers, settings, point.instances)),
        Side(config, decode_router, settings.step_model, engine), pd.link,
        pd.kv_bytes_per_token, pd.max_local_prefill_length, pd.decider)


def _point_columns(point: Point, result: FleetResult) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The result's frames with the point's columns first (``decode_instances`` only for a
    disaggregated point)."""
    columns = dict(point=pl.lit(point.key), router=pl.lit(point.router),
                   instances=pl.lit(point.instances, pl.Int64))
    if point.decode_instances:
        columns["decode_instances"] = pl.lit(point.decode_instances, pl.Int64)
    columns.update(gpu_blocks=pl.lit(point.gpu_blocks, pl.Int64),
                   load=pl.lit(point.load, pl.Float64))
    first = list(columns)
    return tuple(frame.with_columns(**columns).select(*first, pl.exclude(*first))
                 for frame in (result.requests, result.steps))


_KEYS: list = []          # [(workload, block size, its flat_request_keys)], the last one


def workload_keys(workload: EngineRequests, block_size: int) -> tuple:
    """``flat_request_keys`` of the workload's requests, computed once per workload and
    block size (every point of a sweep routes the same requests; arrivals do not matter)."""
    for known, size, keys in _KEYS:
        if known is workload and size == block_size:
            return keys
    keys = flat_request_keys(workload.requests, block_size)
    _KEYS[:] = [(workload, block_size, keys)]
    return keys


def point_path(out: Path, table: str, point: Point) -> Path:
    """``OUT/<table>/point=KEY/part-0.parquet``."""
    return out / table / f"point={point.key}" / "part-0.parquet"


def _write(frame: pl.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    os.close(fd)
    try:
        pq.write_table(frame.drop("point").to_arrow(), tmp, compression="zstd")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_point(out: Path, point: Point, frames: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    """A point's steps, then its requests (the marker of a finished point)."""
    _write(frames[1], point_path(out, "steps", point))
    _write(frames[0], point_path(out, "requests", point))


@dataclass(frozen=True)
class Registered:
    """What the driver registered at run time (``registry.register``,
    ``routers.register_router``, ``engines.register_engine``), for the worker processes,
    which import the built-in components only: a policy as its ``policy_entry`` arguments,
    another cache model as its entry, a router or an engine as its class. Classes and
    kernels travel by reference: the module that defines them must be importable in the
    workers (it is, on this machine)."""

    policies: tuple = ()
    models: tuple = ()
    routers: tuple = ()
    engines: tuple = ()

    @classmethod
    def now(cls) -> Registered:
        """What is registered now beyond the built-in components."""
        added = registry.added()
        return cls(tuple((m.name, m.tier, m.summary, m.onepass, m.replay_kernel,
                          m.block_kernel) for m in added if m.policy),
                   tuple(m for m in added if not m.policy), tuple(added_routers()),
                   tuple(added_engines()))

    def apply(self) -> None:
        """Register here what this process lacks."""
        for arguments in self.policies:
            if arguments[0] not in registry.MODELS:
                registry.register(registry.policy_entry(*arguments))
        for model in self.models:
            if model.name not in registry.MODELS:
                registry.register(model)
        for router in self.routers:
            if router.NAME not in ROUTERS:
                register_router(router)
        for engine in self.engines:
            if engine.NAME not in ENGINES:
                register_engine(engine)

    def check_sendable(self) -> None:
        """CLIError naming the component that cannot be sent to a worker process."""
        for item in (*self.policies, *self.models, *self.routers, *self.engines):
            try:
                pickle.dumps(item)
            except Exception as exc:                     # noqa: BLE001 - named below
                name = getattr(item, "NAME", None) or getattr(item, "name", None) or item[0]
                raise CLIError(f"{name}, registered at run time, cannot be sent to the "
                               f"worker processes ({exc}); define it at the top level of "
                               f"an importable module, or run with --jobs 1") from None


# ------------------------------------------------------------------ executors
_WORKLOAD: EngineRequests | None = None


def _init_worker(workload: EngineRequests, block_size: int, keys: tuple,
                 settings: Settings, registered: Registered) -> None:
    global _WORKLOAD
    registered.apply()
    _WORKLOAD = workload
    if compiled_model(settings.step_model.step_ms) is not None:
        try:                     # load the compiled kernels now, not in the first point
            run_point(settings, Point("round-robin", 1, settings.config.num_gpu_blocks,
                                      1.0), EngineRequests("warm-up", workload.requests[:1]))
        except Exception:        # noqa: BLE001 - a real point reports it
            pass
    _KEYS[:] = [(workload, block_size, keys)]


def run_and_save(settings: Settings, point: Point, workload: EngineRequests,
                 out: Path | None) -> tuple[float, Any]:
    """``run_point`` where the point runs: (its CPU seconds, its frames, or None once
    saved under ``out``). Saving there spares the frames a trip to the driver."""
    started = time.process_time()
    frames = run_point(settings, point, workload)
    if out is not None:
        save_point(out, point, frames)
        frames = None
    return time.process_time() - started, frames


def _run_in_worker(settings: Settings, point: Point, out: Path):
    return run_and_save(settings, point, _WORKLOAD, out)


def _ray_point(settings: Settings, point: Point, shared: tuple, out: Path | None):
    workload, block_size, keys, registered = shared
    registered.apply()
    _KEYS[:] = [(workload, block_size, keys)]
    return run_and_save(settings, point, workload, out)


def by_cost(points: list[Point]) -> list[Point]:
    """The points, the likely slowest first (more instances; a router with more state:
    the whole-trace benchmark's order, oblivious routers last; fewer GPU blocks: more
    batches), so that the workers finish together."""
    def weight(name: str) -> int:
        cls = router_class(name)
        return 0 if cls.OBLIVIOUS else cls.COST
    return sorted(points, key=lambda p: (-p.instances, -weight(p.router), p.gpu_blocks))


def _local(settings: Settings, points: list[Point], workload: EngineRequests, jobs: int,
           out: Path, skip: Callable[[Point], bool] | None = None
           ) -> Iterator[tuple[Point, Any, BaseException | None]]:
    """Run ``points`` on a process pool (one workload copy per worker; each worker saves
    its points); in this process with ``jobs`` <= 1 (frames returned, saved here).
    ``skip``: points in the given order, and after each result the points not started
    yet for which ``skip`` says so are cancelled (never yielded)."""
    if jobs <= 1:
        for point in points:
            if skip is not None and skip(point):
                continue
            try:
                yield point, run_and_save(settings, point, workload, None), None
            except Exception as exc:                       # reported by point
                yield point, None, exc
        return
    block_size = settings.config.block_size
    registered = Registered.now()
    registered.check_sendable()
    # spawn, not fork: a forked child of a process whose polars thread pool runs can
    # deadlock (polars' documentation says so)
    with futures.ProcessPoolExecutor(
            max_workers=jobs, mp_context=mp.get_context("spawn"), initializer=_init_worker,
            initargs=(workload, block_size, workload_keys(workload, block_size),
                      settings, registered)) as pool:
        target = Path(out).resolve()
        pending = {pool.submit(_run_in_worker, settings, point, target): point
                   for point in (by_cost(points) if skip is None else points)}
        for future in futures.as_completed(pending):
            point = pending[future]
            if future.cancelled():
                continue
            try:
                yield point, future.result(), None
            except Exception as exc:                       # incl. a killed worker
                yield point, None, exc
            if skip is not None:
                for other, waiting in pending.items():
                    if not other.done() and skip(waiting):
                        other.cancel()                     # False once it started


def _ray_is_local() -> bool:
    """Every node of the connected Ray cluster is this machine (its workers can write
    the driver's folder)."""
    import ray

    here = ray.util.get_node_ip_address()
    return all(node.get("NodeManagerAddress") == here for node in ray.nodes()
               if node.get("Alive"))


def _ray(settings: Settings, points: list[Point], workload: EngineRequests, retries: int,
         out: Path, skip: Callable[[Point], bool] | None = None
         ) -> Iterator[tuple[Point, Any, BaseException | None]]:
    """Run ``points`` as Ray tasks (``ray.init`` already done); a task that raises or whose
    worker dies is retried ``retries`` times by Ray itself. On a cluster of this machine
    only, the tasks save their points; else their frames come back to be saved here."""
    import ray

    remote = ray.remote(max_retries=retries, retry_exceptions=True)(_ray_point)
    block_size = settings.config.block_size
    shared = ray.put((workload, block_size, workload_keys(workload, block_size),
                      Registered.now()))
    target = Path(out).resolve() if _ray_is_local() else None    # workers: other cwd
    order = by_cost(points) if skip is None else points
    pending: dict = {}
    # with skip: at most twice the cluster's CPUs in flight, cheapest first, so that a
    # point found skippable is not started
    window = len(order) if skip is None else max(2, 2 * int(ray.cluster_resources()
                                                            .get("CPU", 1)))
    queue = list(order)
    while queue or pending:
        while queue and len(pending) < window:
            point = queue.pop(0)
            if skip is None or not skip(point):
                pending[remote.remote(settings, point, shared, target)] = point
        if not pending:
            break
        done, _ = ray.wait(list(pending), num_returns=1)
        ref = done[0]
        point = pending.pop(ref)
        try:
            yield point, ray.get(ref), None
        except Exception as exc:                           # RayTaskError, WorkerCrashedError
            yield point, None, exc


def run_sweep(settings: Settings, points: list[Point], workload: EngineRequests, out: Path, *,
              executor: str = "local", jobs: int = 2, retries: int = 1,
              on_saved: Callable[[Point], None] | None = None,
              cpu: dict[Point, float] | None = None,
              skip: Callable[[Point], bool] | None = None) -> dict[Point, BaseException]:
    """Run and save every point. A failed point is tried again up to ``retries`` times
    (local: in a fresh pool; Ray: by Ray, when its worker died); the others are kept.
    Returns point -> its last error for the points that never finished. ``cpu``: filled
    with each point's CPU seconds where it ran (saving included where it saved).
    ``skip``: the points run in the order given, and a point not started yet is dropped
    once ``skip(point)`` is true (asked after each saved point: ``on_saved`` may change
    its answer)."""
    todo, failed = list(points), {}
    for _ in range(1 if executor == "ray" else retries + 1):
        results = (_ray(settings, todo, workload, retries, out, skip) if executor == "ray"
                   else _local(settings, todo, workload, jobs, out, skip))
        failed = {}
        for point, outcome, error in results:
            if error is None:
                if cpu is not None:
                    cpu[point] = outcome[0]
                if outcome[1] is not None:
                    save_point(out, point, outcome[1])
                if on_saved is not None:
                    on_saved(point)
            else:
                failed[point] = error
        todo = [point for point in todo if point in failed]
        if not todo:
            break
    return failed
