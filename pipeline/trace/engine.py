"""A trace through the block engine: summary, capacity points, curves and event frames.

Every figure comes from ``pipeline.blocks`` (the block model and its fast engine): a tier of C
tokens holds C // block_size blocks; a request's GPU hit is its longest cached prefix, the
CPU serves what lies beyond it. This module only groups the engine's per-block and
per-request answers into what ``python -m pipeline trace`` prints, stores and draws.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from pipeline.sizes import grids
from pipeline.blocks import sweep
from pipeline.onepass.bands import SMALL_TOP, band_counts
from pipeline.workloads.stream_limits import model_capacities
from pipeline.catalog.model_api import CPU_MODELS, GPU_MODELS, request_result
from pipeline.onepass.lru_depths import COLD, block_distances
from pipeline.workloads.stream import BlockStream, capacity_blocks
from pipeline.onepass.stack_distance import NOTHING_STORED, band_limits
from pipeline.cache.tiers import served_beyond

__all__ = ["Infinite", "infinite", "points", "gpu_curve", "gpu_crossing", "cpu_curve",
           "block_events", "has_lru_depths", "model_gpu_curve",
           "default_gpu_grid", "default_cpu_grid", "curve_grid", "distinct_cacheable",
           "POINT_SCHEMA", "REQUEST_POINT_SCHEMA"]

#: One row per (capacity point, request): tokens served by each tier and recomputed.
REQUEST_POINT_SCHEMA = pl.Schema({"point": pl.UInt16, "request": pl.UInt32,
                                  "gpu_hit_tokens": pl.UInt32, "cpu_hit_tokens": pl.UInt32,
                                  "miss_tokens": pl.UInt32})
#: One row per capacity point.
POINT_SCHEMA = pl.Schema({
    "point": pl.UInt16, "gpu_capacity": pl.Int64, "cpu_capacity": pl.Int64,
    "gpu_tokens": pl.Int64, "cpu_tokens": pl.Int64, "recomputed_tokens": pl.Int64,
    "hit_blocks": pl.Int64, "block_hit_ratio": pl.Float64, "token_hit_ratio": pl.Float64})


@dataclass(frozen=True)
class Infinite:
    """What an infinite cache gets."""

    repeat_ratio: float        # block accesses whose key was seen before (every block)
    block_hit_ratio: float     # the model: prefix hits of full blocks only
    token_hit_ratio: float
    blocks: int
    distinct_blocks: int
    requests: int
    prompt_tokens: int


def distinct_cacheable(stream: BlockStream) -> int:
    """Distinct keys among the cacheable blocks (what an infinite cache would hold)."""
    seen = np.zeros(stream.n_codes, dtype=bool)
    seen[stream.codes[stream.cacheable_mask()]] = True
    return int(np.count_nonzero(seen))


def infinite(stream: BlockStream) -> Infinite:
    """The infinite-cache figures (one unlimited engine pass)."""
    prefix = block_distances(stream, "tail-first").prefix
    hits = int(np.count_nonzero(prefix != COLD))
    tokens = int(stream.prompt_tokens.sum())
    return Infinite(
        repeat_ratio=1.0 - stream.n_codes / stream.blocks if stream.blocks else 0.0,
        block_hit_ratio=hits / stream.blocks if stream.blocks else 0.0,
        token_hit_ratio=hits * stream.block_size / tokens if tokens else 0.0,
        blocks=stream.blocks, distinct_blocks=stream.n_codes, requests=stream.requests,
        prompt_tokens=tokens)


def default_gpu_grid(stream: BlockStream) -> list[int]:
    """GPU capacities (tokens): 0 and 1/32 .. 1 of the distinct cacheable blocks."""
    return grids.fractions_of(distinct_cacheable(stream), [0, 1 / 32, 1 / 16, 1 / 8, 1 / 4,
                                                           1 / 2, 1], stream.block_size)


def default_cpu_grid(stream: BlockStream) -> list[int]:
    """CPU capacities (tokens): none, 1/4 and all of the distinct cacheable blocks."""
    return grids.fractions_of(distinct_cacheable(stream), [0, 1 / 4, 1], stream.block_size)


def curve_grid(stream: BlockStream, points: int = 120) -> np.ndarray:
    """Capacities (tokens) for a curve: 0 and log-spaced from one block to all distinct."""
    top = max(distinct_cacheable(stream), 1)
    blocks = grids.log_spaced(1, top, points)
    return np.concatenate(([0], blocks)) * stream.block_size


def _run_gpu(stream: BlockStream, capacities: list[int], order: str, model: str,
             options: dict | None) -> np.ndarray:
    """A GPU model's hit tokens (K, R), capacities clipped to what the run can store."""
    clipped = model_capacities(stream, capacities, (options or {}).get("output_tokens", 1))
    return GPU_MODELS[model](stream, clipped, order, **(options or {}))


def _run_cpu(stream: BlockStream, gpu_hits: np.ndarray, capacities: list[int], order: str,
             model: str, options: dict | None) -> np.ndarray:
    """A CPU model's prefix tokens (K, R), capacities clipped likewise."""
    return CPU_MODELS[model](stream, gpu_hits, model_capacities(stream, capacities), order,
                             **(options or {}))


def points(stream: BlockStream, gpu: list[int], cpu: list[int], gpu_order: str,
           cpu_order: str, gpu_model: str = "block-lru", cpu_model: str = "block-lru",
           gpu_options: dict | None = None,
           cpu_options: dict | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Every (GPU, CPU) pair: the per-point totals (``POINT_SCHEMA``) and one row per
    (point, request) (``REQUEST_POINT_SCHEMA``). ``gpu_options`` / ``cpu_options``: an
    engine model's keyword arguments (``pipeline.catalog.model_options.run_options``)."""
    gpu_hits = _run_gpu(stream, gpu, gpu_order, gpu_model, gpu_options)     # (G, R) tokens
    per_request = []
    for g in range(len(gpu)):
        cpu_prefix = _run_cpu(stream, gpu_hits[g], cpu, cpu_order, cpu_model,
                              cpu_options)                                   # (C, R)
        for c in range(len(cpu)):
            result = request_result(stream, gpu_hits[g], cpu_prefix[c])
            per_request.append(result.select(
                pl.lit(g * len(cpu) + c).alias("point"), "request", "gpu_hit_tokens",
                "cpu_hit_tokens", "miss_tokens", "hit_blocks"))
    frame = pl.concat(per_request)
    capacities = pl.DataFrame({
        "point": np.arange(len(gpu) * len(cpu)), "gpu_capacity": np.repeat(gpu, len(cpu)),
        "cpu_capacity": np.tile(cpu, len(gpu))})
    prompt, blocks = int(stream.prompt_tokens.sum()), max(stream.blocks, 1)
    totals = (frame.group_by("point").agg(
        gpu_tokens=pl.col("gpu_hit_tokens").sum(), cpu_tokens=pl.col("cpu_hit_tokens").sum(),
        recomputed_tokens=pl.col("miss_tokens").sum(), hit_blocks=pl.col("hit_blocks").sum())
        .join(capacities, on="point").sort("point")
        .with_columns(block_hit_ratio=pl.col("hit_blocks") / blocks,
                      token_hit_ratio=(pl.col("gpu_tokens") + pl.col("cpu_tokens"))
                      / max(prompt, 1)))
    return (totals.select(POINT_SCHEMA.names()).cast(dict(POINT_SCHEMA)),
            frame.select(REQUEST_POINT_SCHEMA.names()).cast(dict(REQUEST_POINT_SCHEMA)))


def _count_within(prefix: np.ndarray, capacities: np.ndarray) -> np.ndarray:
    """Per capacity, the blocks whose running-max depth is <= it (``COLD`` never is): a
    histogram of the depths, not a sort."""
    counts = np.cumsum(np.bincount(prefix[prefix != COLD], minlength=1))
    return counts[np.minimum(capacities, counts.size - 1)]


def gpu_curve(stream: BlockStream, capacities: np.ndarray, order: str) -> np.ndarray:
    """GPU prefix hit blocks per capacity (tokens), summed over requests: one engine pass per
    size band (``pipeline.onepass.lru_depths``; the bands of capacities <= ``bands.SMALL_TOP``
    blocks all in one pass of ``pipeline.onepass.bands``), with no (capacity, request)
    matrix."""
    capacity = capacity_blocks(capacities, stream.block_size)
    out = np.zeros(capacity.size, dtype=np.int64)
    limits = band_limits(np.unique(stream.cacheable), capacity)
    small = []
    for limit in np.unique(limits):
        if limit == NOTHING_STORED:
            continue
        rows = np.flatnonzero(limits == limit)
        if capacity[rows].max() <= SMALL_TOP:
            small.append((limit, rows))
            continue
        prefix = block_distances(stream, order, size_limit=int(limit)).prefix
        out[rows] = _count_within(prefix, capacity[rows])
    if small:
        hist = band_counts(stream, order, np.array([limit for limit, _ in small]),
                           np.array([capacity[rows].max() for _, rows in small]))[0]
        for band, (_, rows) in enumerate(small):
            out[rows] = np.cumsum(hist[band])[capacity[rows]]
    return out


def gpu_crossing(stream: BlockStream, order: str, hit_blocks: int, low: int,
                 high: int) -> int | None:
    """The smallest GPU capacity in blocks in (``low``, ``high``] (blocks) at which
    ``gpu_curve`` counts at least ``hit_blocks`` hits, or None: exact, from the same
    one-pass distances (one pass per size band the interval meets; the bands ending at
    most ``bands.SMALL_TOP`` blocks in one), not a grid point.

    Within a band every capacity stores the same keys, so the hits at C are the band's
    prefix depths <= C and the crossing is the band's ``hit_blocks``-th smallest depth."""
    if hit_blocks <= 0:
        return low + 1 if low < high else None
    distinct = np.unique(stream.cacheable)
    starts = np.unique(np.concatenate(([low + 1], distinct[(distinct > low + 1)
                                                           & (distinct <= high)])))
    ends = np.append(starts[1:] - 1, high)
    limits = band_limits(distinct, starts)
    small = (limits != NOTHING_STORED) & (limits <= ends) & (ends <= SMALL_TOP)
    hist = band_counts(stream, order, limits[small], ends[small])[0] if small.any() else None
    for band, (start, end, limit) in enumerate(zip(starts, ends, limits)):
        if limit == NOTHING_STORED:
            continue
        if small[band]:
            within = np.cumsum(hist[np.count_nonzero(small[:band])])
        else:
            prefix = block_distances(stream, order, size_limit=int(limit)).prefix
            within = np.cumsum(np.bincount(prefix[prefix != COLD], minlength=end + 1))
        if within[end] >= hit_blocks:
            return int(max(start, np.searchsorted(within, hit_blocks)))
    return None


def has_lru_depths(model: str) -> bool:
    """Whether GPU model ``model`` is the block-lru engine (block-lru, its literal replay,
    and a policy whose block mode is that engine: lru): its hits are the one-pass LRU depths
    of ``block_events``, ``gpu_curve`` and ``gpu_crossing``. Other models keep no stack
    depth (a stack algorithm's only): their curves are runs at each capacity."""
    return GPU_MODELS.get(model) in (GPU_MODELS["block-lru"], GPU_MODELS["block-lru-replay"])


def model_gpu_curve(stream: BlockStream, capacities: np.ndarray, order: str, model: str,
                    options: dict | None = None) -> np.ndarray:
    """GPU model ``model``'s hit blocks (no CPU tier) at each capacity (tokens): the model
    run at every capacity; ``gpu_curve`` for block-lru, from its one-pass depths."""
    if has_lru_depths(model):
        return gpu_curve(stream, capacities, order)
    tokens = _run_gpu(stream, [int(c) for c in capacities], order, model, options)
    return tokens.sum(axis=1) // stream.block_size


def cpu_curve(stream: BlockStream, gpu_capacity: int, capacities: np.ndarray,
              gpu_order: str, cpu_order: str, gpu_model: str = "block-lru",
              cpu_model: str = "block-lru", gpu_options: dict | None = None,
              cpu_options: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """At one GPU capacity: (GPU hit tokens, CPU-served tokens per CPU capacity)."""
    gpu_hits = _run_gpu(stream, [gpu_capacity], gpu_order, gpu_model, gpu_options)[0]
    cpu_prefix = _run_cpu(stream, gpu_hits, [int(c) for c in capacities], cpu_order,
                          cpu_model, cpu_options)
    served = [served_beyond(gpu_hits, row).sum() for row in cpu_prefix]   # its CPU column
    return np.full(len(capacities), int(gpu_hits.sum())), np.array(served, dtype=np.int64)


def block_events(stream: BlockStream, order: str) -> pl.DataFrame:
    """One row per block access (``pipeline.blocks.sweep.EVENT_SCHEMA``: gpu_order, request,
    block_index, stack_distance = the block's GPU LRU depth in blocks before its request,
    null when cold or not cacheable), from the unlimited one-pass. A block hits a GPU of C
    blocks iff the running max of the depths up to it in its request is <= C
    (``pipeline.blocks.sweep.block_hit_steps``), exactly for every C >= the largest
    request's cacheable blocks; below that, oversize requests change the stack and
    ``gpu_curve`` runs one pass per band."""
    return sweep.block_events(stream, [order])
