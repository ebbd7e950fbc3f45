"""Block-mode sweeps: events (one row per block access) and aggregates in tokens, as Parquet.

``block_sweeps(docs, tokens, passes, block_size, events_dir, ...)`` runs the lab's documents
in block mode and writes

* ``blocks_events.parquet``: per GPU order, one row per block access (request, block index)
  with its GPU-tier LRU depth before the request (``stack_distance``, in blocks; null when
  cold or not cacheable), from the unfiltered one-pass (``pipeline.onepass.lru_depths``): exact
  for every capacity of at least one request's cacheable blocks. ``block_hit_steps`` turns it
  into the whole hit curve with polars (``cum_max`` of the depth along each request);
* ``blocks_aggregates.parquet``: per sweep, orders, capacities and pass: prompt, GPU-hit,
  CPU-hit and recomputed tokens and cached blocks (``AGGREGATE_SCHEMA``); every capacity
  exact, oversize bands included. Sweeps: ``gpu_cliff`` (each GPU order, no CPU tier) and
  ``cpu_cliff`` (GPU fixed at ``cpu_sweep_gpu``, each GPU order x CPU order).

Any registered model runs the tiers (``pipeline.catalog.model_api``: ``GPU_MODELS[name](stream,
caps, order, **options)``, ``CPU_MODELS[name](stream, gpu_tokens, caps, order, **options)``;
``block-lru`` by default); the aggregates name them (``gpu_model``, ``cpu_model``), and an engine
model runs only the order it follows (vllm tail-first, lmcache head-first). The events are
always the block-lru model's LRU depths. ``block_frames`` builds both frames in memory (for
``run --block-size``, which stages its outputs); ``block_sweeps`` also writes them.

Capacities are in tokens; a tier of C tokens holds C // block_size blocks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any
from pathlib import Path

import numpy as np
import polars as pl

from pipeline.sizes import grids
from pipeline.onepass import lru_depths
from pipeline.workloads.stream_limits import model_capacities
from pipeline.catalog.model_api import CPU_MODELS, GPU_MODELS
from pipeline.workloads.stream import HEAD_FIRST, ORDERS, BlockStream
from pipeline.catalog.model_options import MODEL_ORDERS
from pipeline.sweeps import write_parquet_atomic
from pipeline.cache.tiers import served_beyond
from pipeline.workloads.documents import documents_workload

__all__ = ["BLOCK_SWEEPS", "EVENT_SCHEMA", "AGGREGATE_SCHEMA", "block_cliff_capacities",
           "block_events", "block_aggregates", "block_frames", "block_sweeps", "block_hit_steps",
           "edges", "model_orders", "lab_block_stream"]

BLOCK_SWEEPS = ("gpu_cliff", "cpu_cliff")
ORDER = pl.Enum(list(ORDERS))
EVENTS_FILE, AGGREGATES_FILE = "blocks_events.parquet", "blocks_aggregates.parquet"
_COLD_U32 = np.iinfo(np.uint32).max

EVENT_SCHEMA = pl.Schema({
    "gpu_order": ORDER, "request": pl.UInt32, "block_index": pl.UInt32,
    "stack_distance": pl.UInt32,
})
AGGREGATE_SCHEMA = pl.Schema({
    "sweep": pl.Enum(list(BLOCK_SWEEPS)), "gpu_order": ORDER, "cpu_order": ORDER,
    "gpu_capacity": pl.Int64, "cpu_capacity": pl.Int64, "pass_index": pl.Int16,
    "pass_order": pl.Enum(["fwd", "rev"]), "prompt_tokens": pl.Int64,
    "gpu_hit_tokens": pl.Int64, "cpu_hit_tokens": pl.Int64, "miss_tokens": pl.Int64,
    "hit_blocks": pl.Int64, "gpu_model": pl.String, "cpu_model": pl.String,
})


def model_orders(model: str, orders: Sequence[str] = ORDERS) -> tuple[str, ...]:
    """The orders a model is swept in: its own for an engine model, else ``orders``."""
    return (MODEL_ORDERS[model],) if model in MODEL_ORDERS else tuple(orders)


def edges(docs: int, tokens: int, block_size: int) -> dict[str, int]:
    """The two edges of the lab's workload: all full blocks (``full_blocks``) and the
    working set (``working_set``), in tokens."""
    return {"full_blocks": docs * (tokens // block_size) * block_size,
            "working_set": docs * tokens}


def block_cliff_capacities(docs: int, tokens: int, block_size: int,
                           spec_points: Sequence[int] = (), points: int = 64,
                           factor: float = 1.25) -> tuple[int, ...]:
    """0..factor x working set: an even grid, both edges and one block/token below each,
    every whole-document edge of full blocks, every block step within one document below
    the full-block edge (where tail-first keeps partial prefixes), and the spec points."""
    edge = edges(docs, tokens, block_size)
    top = math.ceil(factor * edge["working_set"])
    even = grids.even(top, max(points, 2)).tolist()
    full = (tokens // block_size) * block_size
    per_doc = [k * full + d for k in range(docs + 1) for d in (-block_size, 0)]
    marks = [v + d for v in edge.values() for d in (-1, 0, -block_size)]
    fine = range(max(edge["full_blocks"] - full, 0), edge["full_blocks"] + 1, block_size)
    return tuple(sorted({int(v) for v in (*even, *per_doc, *marks, *fine, *spec_points) if v >= 0}))


def lab_block_stream(docs: int, tokens: int, passes: Sequence[str], block_size: int
            ) -> tuple[BlockStream, np.ndarray]:
    """The lab's documents as a block stream, and each request's pass index."""
    stream = documents_workload(docs, tokens, passes, block_size).block_stream()
    return stream, stream.request // max(docs, 1)


def block_events(stream: BlockStream, orders: Sequence[str] = ORDERS) -> pl.DataFrame:
    """One row per (GPU order, block access): request, block index, GPU depth (null = cold)."""
    frames = []
    for order in orders:
        depth = lru_depths.block_distances(stream, order).depth
        distance = np.where(depth == lru_depths.COLD, _COLD_U32, np.minimum(depth, _COLD_U32 - 1))
        frames.append(pl.DataFrame({
            "gpu_order": pl.Series([order] * stream.blocks, dtype=ORDER),
            "request": np.repeat(stream.request, np.diff(stream.starts)).astype(np.uint32),
            "block_index": stream.block_index.astype(np.uint32),
            "stack_distance": pl.Series(distance.astype(np.uint32)).replace(_COLD_U32, None),
        }, schema=EVENT_SCHEMA))
    return pl.concat(frames) if frames else pl.DataFrame(schema=EVENT_SCHEMA)


def block_hit_steps(events: pl.DataFrame | pl.LazyFrame, block_size: int) -> pl.DataFrame:
    """The GPU hit curve per (order, request group) from the events: a block hits at
    capacity C blocks iff the running max of the depths up to it in its request is <= C.
    One row per (gpu_order, capacity step in tokens): ``hit_tokens`` of all requests at
    every capacity from there to the next step (capacities >= the largest request)."""
    prefix = (pl.col("stack_distance").fill_null(_COLD_U32).cast(pl.Int64)
              .cum_max().over("gpu_order", "request", order_by="block_index"))
    return (events.lazy()
            .select("gpu_order", prefix_distance=prefix)
            .filter(pl.col("prefix_distance") < _COLD_U32)
            .group_by("gpu_order", "prefix_distance").agg(blocks=pl.len())
            .sort("gpu_order", "prefix_distance")
            .select("gpu_order", capacity=pl.col("prefix_distance") * block_size,
                    hit_tokens=pl.col("blocks").cum_sum().over("gpu_order") * block_size)
            .collect())


def _summarise(sweep: str, gpu_order: str, cpu_order: str, gpu_caps: np.ndarray,
               cpu_caps: np.ndarray, stream: BlockStream, pass_index: np.ndarray,
               passes: Sequence[str], gpu_tokens: np.ndarray, cpu_tokens: np.ndarray,
               models: tuple[str, str] = ("block-lru", "block-lru"), ttft: pl.Expr | None = None
               ) -> pl.DataFrame:
    """Per (capacity row, pass) sums of (K, R) token matrices; with ``ttft`` (a per-request
    TTFT expression), also its median and mean per pass."""
    k, r = gpu_tokens.shape
    served = served_beyond(gpu_tokens, cpu_tokens)
    long = pl.DataFrame({
        "gpu_capacity": np.repeat(gpu_caps, r), "cpu_capacity": np.repeat(cpu_caps, r),
        "pass_index": np.tile(pass_index, k).astype(np.int16),
        "prompt_tokens": np.tile(stream.prompt_tokens, k),
        "gpu_hit_tokens": gpu_tokens.ravel(), "cpu_hit_tokens": served.ravel(),
    })
    predicted, extra = [], []
    if ttft is not None:
        long = long.with_columns(gpu_tokens=pl.col("gpu_hit_tokens"),
                                 cpu_tokens=pl.col("cpu_hit_tokens"),
                                 miss_tokens=pl.col("prompt_tokens") - pl.col("gpu_hit_tokens")
                                 - pl.col("cpu_hit_tokens")).with_columns(predicted_ms=ttft)
        predicted = [pl.col("predicted_ms").median().alias("predicted_p50_ms"),
                     pl.col("predicted_ms").mean().alias("predicted_mean_ms")]
        extra = ["predicted_p50_ms", "predicted_mean_ms"]
    return (long.group_by("gpu_capacity", "cpu_capacity", "pass_index")
            .agg(pl.col("prompt_tokens", "gpu_hit_tokens", "cpu_hit_tokens").sum(), *predicted)
            .with_columns(miss_tokens=pl.col("prompt_tokens") - pl.col("gpu_hit_tokens")
                          - pl.col("cpu_hit_tokens"),
                          hit_blocks=(pl.col("gpu_hit_tokens") + pl.col("cpu_hit_tokens"))
                          // stream.block_size,
                          pass_order=pl.col("pass_index").map_elements(
                              lambda i: passes[i], return_dtype=pl.String),
                          sweep=pl.lit(sweep), gpu_order=pl.lit(gpu_order),
                          cpu_order=pl.lit(cpu_order), gpu_model=pl.lit(models[0]),
                          cpu_model=pl.lit(models[1]))
            .cast({name: dtype for name, dtype in AGGREGATE_SCHEMA.items()})
            .select(*AGGREGATE_SCHEMA, *extra))


def block_aggregates(stream: BlockStream, pass_index: np.ndarray, passes: Sequence[str],
                     gpu_capacities: Sequence[int], cpu_capacities: Sequence[int],
                     cpu_sweep_gpu: int, orders: Sequence[str] = ORDERS,
                     gpu_model: str = "block-lru", cpu_model: str = "block-lru",
                     gpu_options: dict | None = None, cpu_options: dict | None = None,
                     ttft: pl.Expr | None = None) -> pl.DataFrame:
    """Both sweeps' aggregates (see the module docstring), every capacity exact. Each model
    sees its capacities clipped to what the run can store (``limits.model_capacities``: the
    same answer, bounded work); the aggregates keep the capacities asked for. ``ttft``: a
    per-request TTFT expression over gpu_tokens, cpu_tokens, miss_tokens and cpu_capacity
    (``pipeline.ttft.model.predicted_ttft(models)``) adds ``predicted_p50_ms`` and
    ``predicted_mean_ms`` per pass."""
    gpu_options, cpu_options = gpu_options or {}, cpu_options or {}
    gpu_caps = np.asarray(gpu_capacities, np.int64)
    cpu_caps = np.asarray(cpu_capacities, np.int64)
    output = gpu_options.get("output_tokens", 1)
    clipped = {name: model_capacities(stream, caps, output)
               for name, caps in (("gpu", gpu_caps), ("cpu", cpu_caps),
                                  ("fixed", [cpu_sweep_gpu]))}
    gpu_run, cpu_run = GPU_MODELS[gpu_model], CPU_MODELS[cpu_model]
    models, frames = (gpu_model, cpu_model), []
    for gpu_order in model_orders(gpu_model, orders):
        gpu = gpu_run(stream, clipped["gpu"], gpu_order, **gpu_options)
        frames.append(_summarise("gpu_cliff", gpu_order, HEAD_FIRST, gpu_caps,
                                 np.zeros_like(gpu_caps), stream, pass_index, passes, gpu,
                                 np.zeros_like(gpu), models, ttft))
        fixed = np.asarray(gpu_run(stream, clipped["fixed"], gpu_order, **gpu_options)[0],
                           np.int64)
        for cpu_order in model_orders(cpu_model, orders):
            cpu = cpu_run(stream, fixed, clipped["cpu"], cpu_order, **cpu_options)
            frames.append(_summarise("cpu_cliff", gpu_order, cpu_order,
                                     np.full_like(cpu_caps, cpu_sweep_gpu), cpu_caps, stream,
                                     pass_index, passes, np.broadcast_to(fixed, cpu.shape),
                                     cpu, models, ttft))
    return (pl.concat(frames).sort("sweep", "gpu_order", "cpu_order", "gpu_capacity",
                                   "cpu_capacity", "pass_index"))


def _check(block_size: int, gpu_capacities: Sequence[int] | None,
           cpu_capacities: Sequence[int] | None, gpu_model: str, cpu_model: str) -> None:
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block size must be an integer >= 1, got {block_size!r}")
    for name, values in (("gpu capacities", gpu_capacities),
                         ("cpu capacities", cpu_capacities)):
        if values is not None and (not len(values) or min(values) < 0):
            raise ValueError(f"{name} must be a non-empty list of integers >= 0")
    for name, model, known in (("gpu model", gpu_model, GPU_MODELS),
                               ("cpu model", cpu_model, CPU_MODELS)):
        if model not in known:
            raise ValueError(f"unknown {name} {model!r}; known: {', '.join(known)}")


def block_frames(docs: int, tokens: int, passes: Sequence[str], block_size: int,
                 gpu_capacities: Sequence[int] | None = None,
                 cpu_capacities: Sequence[int] | None = None, cpu_sweep_gpu: int = 21520,
                 spec_points: Sequence[int] = (), gpu_model: str = "block-lru",
                 cpu_model: str = "block-lru", gpu_options: dict | None = None,
                 cpu_options: dict | None = None, ttft: pl.Expr | None = None
                 ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(events, aggregates) of both block sweeps, in memory; inputs validated first
    (ValueError). Default grids: ``block_cliff_capacities`` with ``spec_points``; ``ttft``
    as for ``block_aggregates``."""
    _check(block_size, gpu_capacities, cpu_capacities, gpu_model, cpu_model)
    grid = block_cliff_capacities(docs, tokens, block_size, spec_points)
    stream, pass_index = lab_block_stream(docs, tokens, passes, block_size)
    events = block_events(stream)
    aggregates = block_aggregates(stream, pass_index, passes, gpu_capacities or grid,
                                  cpu_capacities or grid, cpu_sweep_gpu,
                                  gpu_model=gpu_model, cpu_model=cpu_model,
                                  gpu_options=gpu_options, cpu_options=cpu_options, ttft=ttft)
    return events, aggregates


def block_sweeps(docs: int, tokens: int, passes: Sequence[str], block_size: int,
                 events_dir: Path, **options: Any) -> pl.DataFrame:
    """``block_frames`` (``options``: its keyword arguments), its events and aggregates
    written into ``events_dir`` (atomically); returns the aggregates."""
    events, aggregates = block_frames(docs, tokens, passes, block_size, **options)
    events_dir = Path(events_dir)
    events_dir.mkdir(parents=True, exist_ok=True)
    write_parquet_atomic(events, events_dir / EVENTS_FILE)
    write_parquet_atomic(aggregates, events_dir / AGGREGATES_FILE)
    return aggregates
