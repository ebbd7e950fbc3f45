"""Tier attribution: which tier kvlab's simulator predicts served each measured request.

Each modelled config's requests are replayed through kvlab's own ``TwoTierCache``:
baseline = ``TwoTierCache(gpu, 0)``, lmcache = ``TwoTierCache(gpu, cpu)``; keys are the doc
numbers, ``tokens`` per doc, one cache per config kept across passes, requests in the order
``pipeline.workloads.measured_file`` numbers them.
"""

from __future__ import annotations

import polars as pl

from kvlab.kvsim import TwoTierCache
from pipeline.base.config import BASELINE, LAB_CPU, LAB_GPU, LAB_TOKENS, OFFLOADED
from pipeline.cache.tiers import TIER

__all__ = ["tier_models", "attribute_tiers"]


def tier_models(gpu_capacity: int, cpu_capacity: int) -> dict[str, TwoTierCache]:
    """A fresh simulator per modelled config: baseline GPU only, lmcache GPU + CPU."""
    return {BASELINE: TwoTierCache(gpu_capacity, 0),
            OFFLOADED: TwoTierCache(gpu_capacity, cpu_capacity)}


def _replay(df: pl.DataFrame, config: str, cache: TwoTierCache, tokens: int) -> pl.DataFrame:
    """config, request, tier: one config's requests replayed in request order."""
    requests = df.filter(pl.col("config") == config).sort("request")
    tiers = [cache.access(doc, tokens) for doc in requests["doc"]]   # stateful: one by one
    return requests.select("config", "request", tier=pl.Series(tiers, dtype=TIER))


def attribute_tiers(df: pl.DataFrame, gpu_capacity: int = LAB_GPU, cpu_capacity: int = LAB_CPU,
                    tokens: int = LAB_TOKENS, configs: dict | None = None,
                    measured: str | None = None) -> pl.DataFrame:
    """df plus ``tier`` (TIER): the tier kvlab's simulator predicts for each request.

    ``configs`` (a measured setup's, ``pipeline.ttft.configs``; ``measured`` the file's
    path) gives a cache model per config and then also ``lru_tier``, plain LRU's prediction;
    without one, configs other than baseline and lmcache are not modelled: their tier is null.
    """
    if configs:
        from pipeline.ttft.configs import attribute_configs
        return df.join(attribute_configs(df, measured, configs, tokens),
                       on=["config", "request"], how="left", maintain_order="left")
    predicted = [_replay(df, config, cache, tokens)
                 for config, cache in tier_models(gpu_capacity, cpu_capacity).items()]
    schema = {"config": pl.String, "request": pl.Int64, "tier": TIER}
    return df.join(pl.concat([pl.DataFrame(schema=schema), *predicted]),
                   on=["config", "request"], how="left", maintain_order="left")
