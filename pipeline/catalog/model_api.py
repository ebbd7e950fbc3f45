"""The block-mode model API and its registries.

A **GPU model** is ``f(stream, capacities, order) -> hits``: for a ``BlockStream``, GPU
capacities in tokens (K,) and an order, the GPU prefix hit in tokens per (capacity,
request), int64 of shape (K, R). The GPU tier's content never depends on the CPU tier.

A **CPU model** is ``f(stream, gpu_hit_tokens, capacities, order) -> hits``: given each
request's GPU hit (R,) from any GPU model and CPU capacities in tokens (K,), the CPU prefix
hit in tokens counted from the request's first token, shape (K, R). The CPU serves what
lies beyond the GPU hit: max(0, cpu - gpu).

``two_tier`` combines one of each into the per-request result (``RESULT_SCHEMA``). The
models are the registry's (``pipeline.catalog``: one entry per model name, ``GPU_MODELS``
and ``CPU_MODELS`` are views of it); add a model by registering an entry.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import polars as pl

from pipeline.workloads.stream import BlockStream, check_order
from pipeline.catalog import CPU_MODELS, GPU_MODELS
from pipeline.cache.tiers import served_beyond

__all__ = ["GPU_MODELS", "CPU_MODELS", "RESULT_SCHEMA", "GpuModel", "CpuModel", "two_tier",
           "request_result"]

GpuModel = Callable[[BlockStream, object, str], np.ndarray]
CpuModel = Callable[[BlockStream, np.ndarray, object, str], np.ndarray]

#: One row per request of a two-tier run.
RESULT_SCHEMA = pl.Schema({
    "request": pl.Int64, "prompt_tokens": pl.Int64, "gpu_hit_tokens": pl.Int64,
    "cpu_hit_tokens": pl.Int64, "miss_tokens": pl.Int64, "hit_blocks": pl.Int64,
})


def request_result(stream: BlockStream, gpu_hit_tokens: np.ndarray,
                   cpu_prefix_tokens: np.ndarray) -> pl.DataFrame:
    """Per request: GPU hit, CPU-served tokens (beyond the GPU hit), recomputed tokens and
    blocks served from either tier."""
    served = served_beyond(gpu_hit_tokens, cpu_prefix_tokens)
    cached = gpu_hit_tokens + served
    return pl.DataFrame({
        "request": stream.request, "prompt_tokens": stream.prompt_tokens,
        "gpu_hit_tokens": gpu_hit_tokens, "cpu_hit_tokens": served,
        "miss_tokens": stream.prompt_tokens - cached, "hit_blocks": cached // stream.block_size,
    }, schema=RESULT_SCHEMA)


def two_tier(stream: BlockStream, gpu_capacity: int, cpu_capacity: int,
             gpu_order: str, cpu_order: str, gpu_model: str = "block-lru",
             cpu_model: str = "block-lru", gpu_options: dict | None = None,
             cpu_options: dict | None = None) -> pl.DataFrame:
    """Run a GPU model and a CPU model on one (GPU, CPU) pair; one row per request.
    ``gpu_options`` / ``cpu_options``: keyword arguments of an engine model."""
    check_order(gpu_order)
    check_order(cpu_order)
    gpu = GPU_MODELS[gpu_model](stream, [gpu_capacity], gpu_order, **(gpu_options or {}))[0]
    cpu = CPU_MODELS[cpu_model](stream, gpu, [cpu_capacity], cpu_order,
                                **(cpu_options or {}))[0]
    return request_result(stream, gpu, cpu)

