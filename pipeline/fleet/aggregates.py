"""Per-instance and fleet figures of a sweep's per-request rows (polars expressions).

Quantiles are polars' ``nearest``; ``hit_ratio`` = (GPU + CPU hit tokens) / prompt tokens;
``imbalance`` = the busiest instance's requests / the mean over instances (1 = even; an
instance that got nothing counts as 0); ``throughput_rps`` = requests / (last finish -
first arrival).
"""

from __future__ import annotations

import polars as pl

__all__ = ["POINT_COLUMNS", "instance_aggregates", "fleet_aggregates", "json_rows"]

POINT_COLUMNS = ("router", "instances", "gpu_blocks", "load")


def _figures() -> list[pl.Expr]:
    ttft = pl.col("ttft_ms")
    return [pl.len().alias("requests"), pl.col("prompt_tokens").sum(),
            pl.col("gpu_hit_tokens").sum(), pl.col("cpu_hit_tokens").sum(),
            ((pl.col("gpu_hit_tokens").sum() + pl.col("cpu_hit_tokens").sum())
             / pl.col("prompt_tokens").sum()).alias("hit_ratio"),
            ttft.quantile(0.5, "nearest").alias("ttft_p50_ms"),
            ttft.quantile(0.9, "nearest").alias("ttft_p90_ms"),
            ttft.quantile(0.99, "nearest").alias("ttft_p99_ms"),
            pl.col("queue_ms").quantile(0.9, "nearest").alias("queue_p90_ms"),
            pl.col("output_tokens").sum(),
            (pl.len() / ((pl.col("finish_ms").max() - pl.col("arrival_ms").min()) / 1000.0))
            .alias("throughput_rps")]


def instance_aggregates(requests: pl.DataFrame) -> pl.DataFrame:
    """One row per (point, instance)."""
    return (requests.group_by(*POINT_COLUMNS, "instance").agg(_figures())
            .sort(*POINT_COLUMNS, "instance"))


def fleet_aggregates(requests: pl.DataFrame) -> pl.DataFrame:
    """One row per point, with ``imbalance``."""
    per_instance = requests.group_by(*POINT_COLUMNS, "instance").len()
    imbalance = (per_instance.group_by(*POINT_COLUMNS)
                 .agg(pl.col("len").max().alias("busiest"), pl.col("len").sum().alias("n"))
                 .select(*POINT_COLUMNS, imbalance=pl.col("busiest")
                         / (pl.col("n") / pl.col("instances"))))
    return (requests.group_by(*POINT_COLUMNS).agg(_figures())
            .join(imbalance, on=list(POINT_COLUMNS)).sort(*POINT_COLUMNS))


def json_rows(fleet: pl.DataFrame) -> list[dict]:
    """``--json``: one object per (router, point) with the fields the issue names."""
    keys = ("router", "instances", "gpu_blocks", "load", "prompt_tokens", "gpu_hit_tokens",
            "cpu_hit_tokens", "ttft_p50_ms", "ttft_p90_ms", "imbalance")
    return fleet.select(keys).to_dicts()
