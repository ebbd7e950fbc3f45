"""The smallest fleet memory per router that meets a target, among the swept points.

Memory = instances x GPU blocks per instance (KV blocks of ``--block-size`` tokens); the
CPU tier, when given, is the same for every point and reported beside it. A point meets
``ttft_p90_ms`` when its TTFT p90 is at most the target, ``hit_ratio`` when its hit ratio
is at least it; with both, both. Ties on memory: fewer instances first.
"""

from __future__ import annotations

import polars as pl

__all__ = ["smallest_memory"]


def smallest_memory(fleet: pl.DataFrame, ttft_p90_ms: float | None = None,
                    hit_ratio: float | None = None) -> pl.DataFrame:
    """Per (router, load): the point with the fewest total GPU blocks meeting the targets
    (routers with no such point get a row with nulls)."""
    meets = pl.lit(True)
    if ttft_p90_ms is not None:
        meets &= pl.col("ttft_p90_ms") <= ttft_p90_ms
    if hit_ratio is not None:
        meets &= pl.col("hit_ratio") >= hit_ratio
    points = fleet.with_columns(total_blocks=pl.col("instances") * pl.col("gpu_blocks"))
    best = (points.filter(meets).sort("total_blocks", "instances")
            .group_by("router", "load", maintain_order=True).first()
            .select("router", "load", "total_blocks", "instances", "gpu_blocks",
                    "ttft_p90_ms", "hit_ratio"))
    every = points.select("router", "load").unique()
    return every.join(best, on=["router", "load"], how="left").sort("load", "total_blocks",
                                                                   "router", nulls_last=True)
