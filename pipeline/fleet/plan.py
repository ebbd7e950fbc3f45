"""The smallest fleet memory per router that meets a target, among the swept points.

Memory of a point = replicas x (GPU KV per instance + CPU tier per instance), or replicas x
GPU KV + one shared CPU pool: GPU KV = ``gpu_blocks`` x ``--block-size`` tokens, CPU =
``--cpu``, both in bytes at the step-time model's KV bytes per token (the roofline's
model shape, or a fitted file's ``kv_bytes_per_token``). Points are ranked by total tokens
(GPU + CPU over the fleet: the same order as bytes at one KV size); without a KV size the
byte columns are null. A point meets
``ttft_p90_ms`` when its TTFT p90 is at most the target, ``hit_ratio`` when its hit ratio
is at least it; with both, both. Ties on memory: fewer instances first.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

__all__ = ["Memory", "memory_columns", "best_points", "smallest_memory"]

GIB = float(1 << 30)


@dataclass(frozen=True)
class Memory:
    """What a point's memory is made of: KV bytes per token (None: unknown), tokens per
    block, CPU-tier tokens per instance (or of the shared pool)."""

    kv_bytes_per_token: int | None = None
    block_size: int = 16
    cpu_tokens: int = 0
    cpu_shared: bool = False
    gpus: int = 1


def memory_columns(fleet: pl.DataFrame, memory: Memory) -> pl.DataFrame:
    """``fleet``'s points with their memory: ``total_blocks``, ``gpu_gib``, ``cpu_gib``,
    ``gpu_tokens``, ``cpu_tokens``, ``total_gib``, ``total_tokens`` (the GiB columns null
    without a KV size)."""
    kv = memory.kv_bytes_per_token and memory.kv_bytes_per_token * memory.gpus
    n = pl.col("instances")
    if "decode_instances" in fleet.columns:          # a disaggregated fleet's engines
        n = n + pl.col("decode_instances")
    gpu = (pl.lit(None, pl.Float64) if kv is None
           else n * pl.col("gpu_blocks") * (memory.block_size * kv) / GIB)
    cpu_one = memory.cpu_tokens * (kv or 0) / GIB
    cpu = (pl.lit(None, pl.Float64) if kv is None
           else pl.lit(cpu_one) if memory.cpu_shared else n * cpu_one)
    cpu_tokens = (pl.lit(memory.cpu_tokens, pl.Int64) if memory.cpu_shared
                  else n * memory.cpu_tokens)
    return fleet.with_columns(total_blocks=n * pl.col("gpu_blocks"), gpu_gib=gpu,
                              cpu_gib=cpu,
                              gpu_tokens=n * pl.col("gpu_blocks") * memory.block_size,
                              cpu_tokens=cpu_tokens).with_columns(
        total_gib=pl.col("gpu_gib") + pl.col("cpu_gib"),
        total_tokens=pl.col("gpu_tokens") + pl.col("cpu_tokens"))


def best_points(points: pl.DataFrame, ttft_p90_ms: float | None, hit_ratio: float | None,
                rank: tuple[str, ...], extra: tuple[str, ...] = (),
                every: pl.DataFrame | None = None, tpot_p90_ms: float | None = None
                ) -> pl.DataFrame:
    """Per (router, load) of ``every`` (default ``points``): the first point of ``points``
    in ``rank`` order that meets the targets (a row of nulls when none does)."""
    meets = pl.lit(True)
    if ttft_p90_ms is not None:
        meets &= pl.col("ttft_p90_ms") <= ttft_p90_ms
    if hit_ratio is not None:
        meets &= pl.col("hit_ratio") >= hit_ratio
    if tpot_p90_ms is not None:
        meets &= pl.col("tpot_p90_ms") <= tpot_p90_ms
        extra = (*extra, "tpot_p90_ms")
    best = (points.filter(meets).sort(*rank)
            .group_by("router", "load", maintain_order=True).first()
            .select("router", "load", "total_gib", "gpu_gib", "cpu_gib", "total_blocks",
                    "instances", *(["decode_instances"] if "decode_instances"
                                   in points.columns else []),
                    "gpu_blocks", "total_tokens", "gpu_tokens", "cpu_tokens",
                    "ttft_p90_ms", "hit_ratio", *extra))
    keys = (points if every is None else every).select("router", "load").unique()
    return keys.join(best, on=["router", "load"], how="left").sort(
        "load", rank[0], "router", nulls_last=True)


def smallest_memory(fleet: pl.DataFrame, ttft_p90_ms: float | None = None,
                    hit_ratio: float | None = None, memory: Memory = Memory(),
                    tpot_p90_ms: float | None = None) -> pl.DataFrame:
    """Per (router, load): the point with the least total memory meeting the targets
    (routers with no such point get a row with nulls)."""
    return best_points(memory_columns(fleet, memory), ttft_p90_ms, hit_ratio,
                       rank=("total_tokens", "instances"), tpot_p90_ms=tpot_p90_ms)
