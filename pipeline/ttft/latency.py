"""Latency model: measured TTFT per tier -> predicted TTFT at every simulated capacity.

A request's TTFT is modelled by the tier that serves its prefix: a GPU hit, a CPU reload,
or a recompute (miss). Each tier's latency is the median measured TTFT of the requests the
simulator attributes to it (``pipeline.ttft.attribution.attribute_tiers``), per setup: points
without a CPU tier use the GPU-only config (baseline), points with one use the offload
config (lmcache); a tier one config never shows takes the other config's figure. A pass's
predicted mean TTFT is then

    (gpu_hits * t_gpu + cpu_hits * t_cpu + misses * t_miss) / accesses.

>>> latencies = {"baseline": {"gpu": 30.0, "cpu": 48.0, "miss": 576.0},
...              "lmcache": {"gpu": 30.0, "cpu": 48.0, "miss": 600.0}}
>>> rows = pl.DataFrame({"cpu_capacity": [0, 56000], "accesses": [10, 10],
...                      "gpu_hits": [4, 4], "cpu_hits": [0, 6], "misses": [6, 0]})
>>> predict(rows, latencies)["predicted_ttft_ms"].to_list()
[357.6, 40.8]
"""

from __future__ import annotations

import polars as pl

from pipeline.base.config import BASELINE, CONFIGS, OFFLOADED
from pipeline.base.stats import exact_mean, exact_median
from pipeline.cache.tiers import COUNT_COLUMNS, TIERS

Latencies = dict[str, dict[str, float | None]]


def tier_medians(frame: pl.DataFrame, *keys: str, exact: bool = False) -> pl.DataFrame:
    """keys, tier, n, ttft_ms (the median), sd of the rows with a ``tier``, per keys + tier
    in order of appearance. ``exact``: ``statistics.median`` (the lab's latencies below);
    otherwise polars' median (``pipeline.ttft.model``'s fallback), which can differ from it
    in the last bit on an even-sized group: each output keeps the one it was written with.
    """
    median = exact_median("ttft_ms") if exact else pl.col("ttft_ms").median()
    return (frame.filter(pl.col("tier").is_not_null())
            .group_by(*keys, "tier", maintain_order=True)
            .agg(n=pl.len(), ttft_ms=median, sd=pl.col("ttft_ms").std()))


def latency_model(attributed: pl.DataFrame) -> Latencies:
    """{config: {tier: ms or None}} with the fallback to the other config described above."""
    medians = tier_medians(attributed.filter(pl.col("config").is_in(CONFIGS)), "config",
                           exact=True)
    measured = {(config, tier): ms
                for config, tier, ms in medians.select("config", "tier", "ttft_ms").iter_rows()}
    model: Latencies = {}
    for config, other in ((BASELINE, OFFLOADED), (OFFLOADED, BASELINE)):
        model[config] = {tier: measured.get((config, tier), measured.get((other, tier)))
                         for tier in TIERS}
    return model


def _expected_ttft(latency: dict[str, float | None]) -> pl.Expr:
    """Mean TTFT of a row's accesses under one setup's tier latencies (null if unknown)."""
    parts = [pl.when(pl.col(COUNT_COLUMNS[tier]) == 0).then(0.0)
             .otherwise(pl.col(COUNT_COLUMNS[tier]) * pl.lit(latency[tier], dtype=pl.Float64))
             for tier in TIERS]
    return pl.sum_horizontal(parts, ignore_nulls=False) / pl.col("accesses")


def predict(aggregates: pl.DataFrame, latencies: Latencies) -> pl.DataFrame:
    """``aggregates`` plus ``predicted_ttft_ms``: the predicted mean TTFT of each row."""
    predicted = (pl.when(pl.col("cpu_capacity") == 0).then(_expected_ttft(latencies[BASELINE]))
                 .otherwise(_expected_ttft(latencies[OFFLOADED])))
    return aggregates.with_columns(predicted.round(1).alias("predicted_ttft_ms"))


def model_check(attributed: pl.DataFrame, latencies: Latencies) -> pl.DataFrame:
    """Predicted vs measured mean TTFT per (config, pass) of the measured requests.

    Columns: config, pass, n, measured_ms, predicted_ms, error_pct. A large error means the
    tiers alone do not explain the latencies (queueing, batch effects, a wrong capacity).
    """
    counts = (attributed.filter(pl.col("config").is_in(CONFIGS), pl.col("tier").is_not_null())
              .group_by("config", "pass", maintain_order=True)
              .agg(accesses=pl.len(), measured_ms=exact_mean("ttft_ms"),
                   **{column: (pl.col("tier") == tier).sum()
                      for tier, column in COUNT_COLUMNS.items()}))
    predicted = pl.concat([
        counts.filter(pl.col("config") == config).with_columns(
            predicted_ms=_expected_ttft(latencies[config]))
        for config in CONFIGS])
    return (predicted.select(
        "config", "pass", pl.col("accesses").alias("n"), pl.col("measured_ms").round(1),
        pl.col("predicted_ms").round(1),
        error_pct=(100 * (pl.col("predicted_ms") - pl.col("measured_ms"))
                   / pl.col("measured_ms")).round(1)))
