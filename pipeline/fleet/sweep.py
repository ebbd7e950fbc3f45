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
sweep (``Registered``). A point itself (what it is, how it runs and is saved) is
``pipeline.fleet.sweep_point``.
"""

from __future__ import annotations

import concurrent.futures as futures
import multiprocessing as mp
import pickle
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline import catalog as registry
from pipeline.base.errors import CLIError
from pipeline.engine.compiled import compiled_model
from pipeline.engine.engines import ENGINES, added_engines, register_engine
from pipeline.engine.request import EngineRequests
from pipeline.fleet.routers import ROUTERS, added_routers, register_router, router_class
from pipeline.fleet.sweep_point import (Point, Settings, remember_keys, run_point, save_point,
                                        workload_keys)

__all__ = ["Registered", "run_sweep", "EXECUTORS", "run_and_save", "by_cost"]

EXECUTORS = ("local", "ray")


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
    remember_keys(workload, block_size, keys)


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
    remember_keys(workload, block_size, keys)
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
