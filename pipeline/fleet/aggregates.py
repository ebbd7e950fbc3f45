"""Per-instance and fleet figures of a sweep's per-request rows (polars expressions).

Quantiles are polars' ``nearest``; ``hit_ratio`` = (GPU + CPU hit tokens) / prompt tokens,
where with a tier stack ``cpu_hit_tokens`` counts every token loaded from any tier (CPU,
disk, remote) and ``disk_hit_tokens`` and ``remote_hit_tokens`` are summed beside it;
``imbalance`` = the busiest instance's requests / the mean over instances (1 = even; an
instance that got nothing counts as 0); ``throughput_rps`` = requests / (last finish -
first arrival); TPOT p50/p90/p99 (``pipeline.steptime.tpot``; a disaggregated fleet's
own ``tpot_ms``). Per point, whether the fleet is overloaded (its waiting queue, every
instance's together, grows over the run: ``pipeline.engine.overload``): ``overloaded``,
``offered_rate`` and ``served_rate`` (requests per second), ``queue_at_last_arrival``,
``peak_queue``.
"""

from __future__ import annotations

import polars as pl

from pipeline.base.arguments import plural
from pipeline.engine.overload import overload_of, warning_lines
from pipeline.steptime.tpot import good_request, tpot_ms

__all__ = ["POINT_COLUMNS", "TPOT_SHOWN", "point_columns", "OVERLOAD_COLUMNS", "instance_aggregates",
           "fleet_aggregates",
           "overload_rows", "overload_lines", "json_rows"]

POINT_COLUMNS = ("router", "instances", "gpu_blocks", "load")
#: the TPOT figures a disaggregated fleet prints and --json gives (every fleet.parquet has
#: them; an aggregated fleet's printed table and JSON rows stay as they were)
TPOT_SHOWN = ("tpot_p50_ms", "tpot_p90_ms")
#: the overload figures of a point (rates in requests per second)
OVERLOAD_COLUMNS = pl.Schema({"overloaded": pl.Boolean, "offered_rate": pl.Float64,
                              "served_rate": pl.Float64, "queue_at_last_arrival": pl.Int64,
                              "peak_queue": pl.Int64})


def point_columns(frame: pl.DataFrame) -> tuple[str, ...]:
    """``POINT_COLUMNS``, with ``decode_instances`` after ``instances`` in a disaggregated
    sweep's frames."""
    if "decode_instances" not in frame.columns:
        return POINT_COLUMNS
    return ("router", "instances", "decode_instances", "gpu_blocks", "load")


def _figures(requests: pl.DataFrame) -> list[pl.Expr]:
    ttft = pl.col("ttft_ms")
    per_request = pl.col("tpot_ms") if "tpot_ms" in requests.columns else tpot_ms()
    tpot = [per_request.quantile(p / 100, "nearest").alias(f"tpot_p{p}_ms")
            for p in (50, 90, 99)]
    tiers = [pl.col(name).sum() for name in ("disk_hit_tokens", "remote_hit_tokens")
             if name in requests.columns]
    return [*tpot, pl.len().alias("requests"), pl.col("prompt_tokens").sum(),
            pl.col("gpu_hit_tokens").sum(), pl.col("cpu_hit_tokens").sum(), *tiers,
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
    point = point_columns(requests)
    return (requests.group_by(*point, "instance").agg(_figures(requests))
            .sort(*point, "instance"))


def fleet_aggregates(requests: pl.DataFrame, slo_ttft_ms: float | None = None,
                     slo_tpot_ms: float | None = None) -> pl.DataFrame:
    """One row per point, with ``imbalance``; with an SLO, ``goodput_fraction`` and
    ``request_goodput`` (requests meeting every SLO given, per second: ``tpot.goodput``)."""
    point = point_columns(requests)
    # (a disaggregated fleet's requests prefilled by a decode engine have instance -1)
    per_instance = requests.filter(pl.col("instance") >= 0).group_by(*point, "instance").len()
    imbalance = (per_instance.group_by(*point)
                 .agg(pl.col("len").max().alias("busiest"), pl.col("len").sum().alias("n"))
                 .select(*point, imbalance=pl.col("busiest")
                         / (pl.col("n") / pl.col("instances"))))
    figures = _figures(requests)
    if slo_ttft_ms is not None or slo_tpot_ms is not None:
        good = good_request(slo_ttft_ms, slo_tpot_ms, pl.col("tpot_ms")
                            if "tpot_ms" in requests.columns else None)
        figures += [good.mean().alias("goodput_fraction"),
                    (good.sum() / ((pl.col("finish_ms").max() - pl.col("arrival_ms").min())
                                   / 1000.0)).alias("request_goodput")]
    return (requests.group_by(*point).agg(figures)
            .join(imbalance, on=list(point))
            .join(overload_rows(requests), on=list(point)).sort(*point))


def overload_rows(requests: pl.DataFrame) -> pl.DataFrame:
    """One row per point: its ``OVERLOAD_COLUMNS``, over every instance's requests."""
    point = point_columns(requests)
    keys = requests.select(point).unique(maintain_order=True)
    rows = []
    for key, part in requests.partition_by(point, as_dict=True,
                                           maintain_order=True).items():
        figures = overload_of(part).metrics()
        rows.append({**dict(zip(point, key)),
                     **{name: figures[name] for name in OVERLOAD_COLUMNS}})
    return pl.DataFrame(rows, schema={**keys.schema, **OVERLOAD_COLUMNS})


def overload_lines(fleet: pl.DataFrame) -> list[str]:
    """``warning: overloaded:`` lines of a sweep's points (``warning_lines``)."""
    return warning_lines(fleet.to_dicts(), lambda row: (
        f"{row['router']}, {plural(row['instances'], 'instance')} x {row['gpu_blocks']:,} "
        f"GPU blocks, load {row['load']:g}"))


def json_rows(fleet: pl.DataFrame, cost: bool = False) -> list[dict]:
    """``--json``: one object per (router, point) with its figures (and, with ``cost``,
    ``usd_per_hour``, ``usd_per_million_output_tokens`` and ``fits_gpu``)."""
    keys = (*point_columns(fleet), "prompt_tokens", "gpu_hit_tokens", "cpu_hit_tokens",
            "ttft_p50_ms", "ttft_p90_ms",
            *(TPOT_SHOWN if "decode_instances" in fleet.columns else ()),
            "imbalance", "requests", *OVERLOAD_COLUMNS)
    if cost:
        keys += ("usd_per_hour", "usd_per_million_output_tokens", "fits_gpu")
    return fleet.select(keys).to_dicts()
