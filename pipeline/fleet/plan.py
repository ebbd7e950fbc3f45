"""The smallest fleet memory per router that meets a target, among the swept points.

Memory of a point = replicas x (GPU KV per instance + CPU tier per instance), or replicas x
GPU KV + one shared CPU pool: GPU KV = ``gpu_blocks`` x ``--block-size`` tokens, CPU =
``--cpu``, both in bytes at the step-time model's KV bytes per token (the roofline's
model shape, or a fitted file's ``kv_bytes_per_token``). Points are ranked by total tokens
(GPU + CPU over the fleet: the same order as bytes at one KV size); without a KV size the
byte columns are null. A point meets
``ttft_p90_ms`` when its TTFT p90 is at most the target, ``hit_ratio`` when its hit ratio
is at least it, ``tpot_p90_ms`` when its TPOT p90 is at most it (the answer then carries
``tpot_p90_ms``); with several, all. Ties on memory: fewer instances first.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

__all__ = ["Memory", "smallest_memory"]

GIB = float(1 << 30)


@dataclass(frozen=True)
class Memory:
    """What a point's memory is made of: KV bytes per token of one GPU (None: unknown),
    tokens per block, CPU-tier tokens per instance (or of the shared pool), GPUs per
    instance (tensor parallelism: each holds its share of every token's KV)."""

    kv_bytes_per_token: int | None = None
    block_size: int = 16
    cpu_tokens: int = 0
    cpu_shared: bool = False
    gpus: int = 1


def smallest_memory(fleet: pl.DataFrame, ttft_p90_ms: float | None = None,
                    hit_ratio: float | None = None, memory: Memory = Memory(),
                    tpot_p90_ms: float | None = None) -> pl.DataFrame:
    """Per (router, load): the point with the least total memory meeting the targets
    (routers with no such point get a row with nulls)."""
    meets = pl.lit(True)
    if ttft_p90_ms is not None:
        meets &= pl.col("ttft_p90_ms") <= ttft_p90_ms
    if hit_ratio is not None:
        meets &= pl.col("hit_ratio") >= hit_ratio
    if tpot_p90_ms is not None:
        meets &= pl.col("tpot_p90_ms") <= tpot_p90_ms
    kv = memory.kv_bytes_per_token and memory.kv_bytes_per_token * memory.gpus
    n = pl.col("instances")
    gpu = (pl.lit(None, pl.Float64) if kv is None
           else n * pl.col("gpu_blocks") * (memory.block_size * kv) / GIB)
    cpu_one = memory.cpu_tokens * (kv or 0) / GIB
    cpu = (pl.lit(None, pl.Float64) if kv is None
           else pl.lit(cpu_one) if memory.cpu_shared else n * cpu_one)
    cpu_tokens = (pl.lit(memory.cpu_tokens, pl.Int64) if memory.cpu_shared
                  else n * memory.cpu_tokens)
    points = fleet.with_columns(total_blocks=n * pl.col("gpu_blocks"), gpu_gib=gpu,
                                cpu_gib=cpu,
                                gpu_tokens=n * pl.col("gpu_blocks") * memory.block_size,
                                cpu_tokens=cpu_tokens).with_columns(
        total_gib=pl.col("gpu_gib") + pl.col("cpu_gib"),
        total_tokens=pl.col("gpu_tokens") + pl.col("cpu_tokens"))
    rank = ["total_tokens"]
    best = (points.filter(meets).sort(*rank, "instances")
            .group_by("router", "load", maintain_order=True).first()
            .select("router", "load", "total_gib", "gpu_gib", "cpu_gib", "total_blocks",
                    "instances", "gpu_blocks", "total_tokens", "gpu_tokens", "cpu_tokens",
                    "ttft_p90_ms", "hit_ratio",
                    *(["tpot_p90_ms"] if tpot_p90_ms is not None else [])))
    every = points.select("router", "load").unique()
    return every.join(best, on=["router", "load"], how="left").sort("load", *rank,
                                                                   "router", nulls_last=True)
