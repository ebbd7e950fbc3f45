"""Measured TTFT statistics: the measured.json summary and the per-pass and per-tier tables.

``summary(df)`` equals ``kvlab.summarize.summarize(records)``, key order included: medians and
means come from ``pipeline.base.stats`` (Python's ``statistics`` per group, exactly as kvlab
computes them), and only the final decimal rounding is Python's ``round``, because polars'
``round`` is not the correctly rounded decimal rounding (``0.15`` -> ``0.2``; Python gives
``0.1``). ``df`` is a frame as ``pipeline.workloads.measured_file`` loads it (its ``line``
column gives the order of configs and passes).
"""

from __future__ import annotations

import polars as pl

from pipeline.base.config import BASELINE, CONFIGS, OFFLOADED
from pipeline.base.stats import exact_mean, exact_median

__all__ = ["summary", "stats_table", "tier_table", "TTFT", "N", "FIRST_LINE"]

TTFT = pl.col("ttft_ms")
N = pl.len()
P90 = TTFT.quantile(0.9, interpolation="linear")
FIRST_LINE = pl.col("line").min()


def _group_stats(df: pl.DataFrame, keys: list[str], **extra: pl.Expr) -> pl.DataFrame:
    """keys, n, p50_ms, mean_ms, extra aggregations, first_line; ordered by first_line."""
    return (df.group_by(keys)
              .agg(n=N.cast(pl.Int64), p50_ms=exact_median(TTFT), mean_ms=exact_mean(TTFT),
                   **extra, first_line=FIRST_LINE)
              .sort("first_line"))


def _ratio(numerator: str, denominator: str) -> pl.Expr:
    """numerator / denominator, null where the denominator is 0 (as kvlab's _ratio)."""
    return pl.when(pl.col(denominator) != 0).then(pl.col(numerator) / pl.col(denominator))


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _pass_ratios(df: pl.DataFrame, stats: pl.DataFrame) -> pl.DataFrame:
    """pass, p50, mean: baseline / lmcache per pass in both, passes in file order."""
    def side(config: str) -> pl.DataFrame:
        return stats.filter(pl.col("config") == config).select("pass", "p50_ms", "mean_ms")

    pass_order = df.group_by("pass").agg(first_line=FIRST_LINE)
    return (side(BASELINE).join(side(OFFLOADED), on="pass", suffix="_lmcache")
            .join(pass_order, on="pass").sort("first_line")
            .select("pass", p50=_ratio("p50_ms", "p50_ms_lmcache"),
                    mean=_ratio("mean_ms", "mean_ms_lmcache")))


def summary(df: pl.DataFrame) -> dict:
    """The measured.json document; equal (==, key order) to kvlab.summarize.summarize."""
    stats = _group_stats(df.filter(pl.col("config").is_in(CONFIGS)), ["config", "pass"])
    document: dict = {
        config: {row["pass"]: {"n": row["n"], "p50_ms": round(row["p50_ms"], 1),
                               "mean_ms": round(row["mean_ms"], 1)}
                 for row in stats.filter(pl.col("config") == config).iter_rows(named=True)}
        for config in CONFIGS
    }
    document["ratio"] = {row["pass"]: {"p50": _round(row["p50"], 2),
                                       "mean": _round(row["mean"], 2)}
                         for row in _pass_ratios(df, stats).iter_rows(named=True)}
    return document


def stats_table(df: pl.DataFrame) -> pl.DataFrame:
    """TTFT per (config, pass): n, p50/p90/min/mean/max ms, baseline / this ratios.

    Columns: config, pass, n, p50_ms, p90_ms (linear interpolation), min_ms, mean_ms,
    max_ms, ratio_p50, ratio_mean (baseline's statistic for the same pass over this row's;
    null where baseline lacks the pass or this row's is 0). Unrounded; configs and passes
    in first-appearance order.
    """
    stats = _group_stats(df, ["config", "pass"], p90_ms=P90, min_ms=TTFT.min(),
                         max_ms=TTFT.max())
    baseline = (stats.filter(pl.col("config") == BASELINE)
                     .select("pass", base_p50=pl.col("p50_ms"), base_mean=pl.col("mean_ms")))
    return (stats.join(baseline, on="pass", how="left")
                 .sort(pl.col("first_line").min().over("config"), "first_line")
                 .select("config", "pass", "n", "p50_ms", "p90_ms", "min_ms", "mean_ms",
                         "max_ms", ratio_p50=_ratio("base_p50", "p50_ms"),
                         ratio_mean=_ratio("base_mean", "mean_ms")))


def tier_table(attributed: pl.DataFrame) -> pl.DataFrame:
    """TTFT per (config, pass, predicted tier) of ``pipeline.ttft.attribution.attribute_tiers``.

    Columns: config, pass, tier, n, p50_ms, mean_ms, min_ms, max_ms. Configs and passes in
    first-appearance order, tiers fastest first; unattributed rows are left out.
    """
    stats = _group_stats(attributed.filter(pl.col("tier").is_not_null()),
                         ["config", "pass", "tier"], min_ms=TTFT.min(), max_ms=TTFT.max())
    return (stats.sort(pl.col("first_line").min().over("config"),
                       pl.col("first_line").min().over("config", "pass"), "tier")
                 .drop("first_line"))
