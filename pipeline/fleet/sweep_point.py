"""One point of a fleet sweep (``pipeline.fleet.sweep``): what it is (``Point``), what every
point shares (``Settings``, ``Disaggregation``), how it runs (``run_point``: one fleet
simulation, its frames with the point's columns) and how it is saved
(``OUT/<table>/point=KEY/part-0.parquet``, each file through a temporary name).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq

from pipeline.components.lmcache_stack import share_remote
from pipeline.engine.config import SchedulerConfig
from pipeline.engine.engines import DEFAULT_ENGINE, engine_class
from pipeline.engine.hashing import flat_request_keys
from pipeline.engine.request import EngineRequests
from pipeline.fleet.deciders import Decider
from pipeline.fleet.disaggregated import Link, Side, simulate_disaggregated
from pipeline.fleet.loop import FleetResult, simulate_fleet
from pipeline.fleet.routers import make_router
from pipeline.fleet.workload import requests_at_load

__all__ = ["Point", "Settings", "Disaggregation", "run_point", "instance_tiers",
           "workload_keys", "remember_keys", "point_path", "save_point"]


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
    remember_keys(workload, block_size, keys)
    return keys


def remember_keys(workload: EngineRequests, block_size: int, keys: tuple) -> None:
    """Let ``workload_keys`` answer ``keys`` for this workload and block size (a sweep's
    worker is given them instead of computing them again)."""
    _KEYS[:] = [(workload, block_size, keys)]


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
