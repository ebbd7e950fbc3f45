"""The smallest fleet memory per router that meets a target, among the swept points.

Memory of a point = replicas x (GPU KV per instance + CPU tier per instance), or replicas x
GPU KV + one shared CPU pool (a disaggregated fleet's tier is its prefill engines'): GPU KV = ``gpu_blocks`` x ``--block-size`` tokens, CPU =
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

__all__ = ["Memory", "Targets", "memory_columns", "best_points", "smallest_memory"]

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
    tiered = pl.col("instances")             # the engines with a CPU tier: P/D's prefill side
    cpu = (pl.lit(None, pl.Float64) if kv is None
           else pl.lit(cpu_one) if memory.cpu_shared else tiered * cpu_one)
    cpu_tokens = (pl.lit(memory.cpu_tokens, pl.Int64) if memory.cpu_shared
                  else tiered * memory.cpu_tokens)
    return fleet.with_columns(total_blocks=n * pl.col("gpu_blocks"), gpu_gib=gpu,
                              cpu_gib=cpu,
                              gpu_tokens=n * pl.col("gpu_blocks") * memory.block_size,
                              cpu_tokens=cpu_tokens).with_columns(
        total_gib=pl.col("gpu_gib") + pl.col("cpu_gib"),
        total_tokens=pl.col("gpu_tokens") + pl.col("cpu_tokens"))


@dataclass(frozen=True)
class Targets:
    """What a point must meet: TTFT p90 and TPOT p90 at most, hit ratio and goodput (the
    fraction of requests meeting the SLOs: ``goodput_fraction``) at least; None: no
    target."""

    ttft_p90_ms: float | None = None
    hit_ratio: float | None = None
    tpot_p90_ms: float | None = None
    goodput: float | None = None

    def _bounds(self) -> list[tuple[str, float, bool]]:
        """(column, target, at most) of each target given."""
        return [(column, value, upper) for column, value, upper in (
            ("ttft_p90_ms", self.ttft_p90_ms, True), ("hit_ratio", self.hit_ratio, False),
            ("tpot_p90_ms", self.tpot_p90_ms, True),
            ("goodput_fraction", self.goodput, False)) if value is not None]

    def meets(self) -> pl.Expr:
        """True where a point meets every target (a null figure never does)."""
        expr = pl.lit(True)
        for column, value, upper in self._bounds():
            expr &= (pl.col(column) <= value) if upper else (pl.col(column) >= value)
        return expr.fill_null(False)

    def excess(self) -> pl.Expr:
        """The worst ratio of a point's figure to its target (<= 1: met): the closest miss
        is the least."""
        ratios = [pl.col(column) / value if upper else value / pl.col(column)
                  for column, value, upper in self._bounds()]
        return pl.max_horizontal(ratios) if ratios else pl.lit(0.0)

    def columns(self) -> tuple[str, ...]:
        """The figures an answer shows beyond TTFT p90 and hit ratio."""
        return tuple(column for column, *_ in self._bounds()
                     if column not in ("ttft_p90_ms", "hit_ratio"))


def best_points(points: pl.DataFrame, ttft_p90_ms: float | None, hit_ratio: float | None,
                rank: tuple[str, ...], extra: tuple[str, ...] = (),
                every: pl.DataFrame | None = None, tpot_p90_ms: float | None = None,
                goodput: float | None = None) -> pl.DataFrame:
    """Per (router, load) of ``every`` (default ``points``): the first point of ``points``
    in ``rank`` order that meets the targets (a row of nulls when none does)."""
    targets = Targets(ttft_p90_ms, hit_ratio, tpot_p90_ms, goodput)
    best = (points.filter(targets.meets()).sort(*rank)
            .group_by("router", "load", maintain_order=True).first()
            .select("router", "load", "total_gib", "gpu_gib", "cpu_gib", "total_blocks",
                    "instances", *(["decode_instances"] if "decode_instances"
                                   in points.columns else []),
                    "gpu_blocks", "total_tokens", "gpu_tokens", "cpu_tokens",
                    "ttft_p90_ms", "hit_ratio", *targets.columns(), *extra))
    keys = (points if every is None else every).select("router", "load").unique()
    return keys.join(best, on=["router", "load"], how="left").sort(
        "load", rank[0], "router", nulls_last=True)


def smallest_memory(fleet: pl.DataFrame, ttft_p90_ms: float | None = None,
                    hit_ratio: float | None = None, memory: Memory = Memory(),
                    tpot_p90_ms: float | None = None,
                    goodput: float | None = None) -> pl.DataFrame:
    """Per (router, load): the point with the least total memory meeting the targets
    (routers with no such point get a row with nulls)."""
    return best_points(memory_columns(fleet, memory), ttft_p90_ms, hit_ratio,
                       rank=("total_tokens", "instances"), tpot_p90_ms=tpot_p90_ms,
                       goodput=goodput)
