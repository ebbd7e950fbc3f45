"""The fleet page: a one-screen summary; TTFT p50/p90 against request rate per router; hit
ratio, TTFT p90 and imbalance per router against per-instance GPU capacity; the capacity
each router saves over round robin at equal TTFT p90; every point.

Capacity saved: for each (instances, load) and each TTFT p90 t that round robin reaches,
the fewest GPU blocks per instance c' at which a router's TTFT p90 <= t and round robin's
own fewest c; saved = 1 - c'/c (a router that never reaches t has no row). With one GPU
capacity the capacity charts are bars per router, never lone dots; time axes follow
``pipeline.charts.durations``. Charts: altair, saved inline.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING

import polars as pl

from pipeline.base.durations import format_duration
from pipeline.fleet.aggregates import point_columns

if TYPE_CHECKING:                       # altair is imported only when the page is drawn
    import altair as alt

    from pipeline.charts import Section

__all__ = ["capacity_saved", "point_figures", "summary_rows", "report_html"]


def capacity_saved(fleet: pl.DataFrame, baseline: str = "round-robin") -> pl.DataFrame:
    """Per (instances, load), each TTFT p90 the baseline reaches, and per router the fewest
    GPU blocks per instance that reach it; ``saved`` = 1 - router's / baseline's blocks."""
    targets = (fleet.filter(pl.col("router") == baseline)
               .select("instances", "load", target_ms="ttft_p90_ms").unique())
    if targets.height == 0:
        return pl.DataFrame()
    needed = (fleet.join(targets, on=["instances", "load"])
              .filter(pl.col("ttft_p90_ms") <= pl.col("target_ms"))
              .group_by("router", "instances", "load", "target_ms")
              .agg(pl.col("gpu_blocks").min().alias("blocks_needed")))
    base = needed.filter(pl.col("router") == baseline).select(
        "instances", "load", "target_ms", baseline_blocks="blocks_needed")
    return (needed.join(base, on=["instances", "load", "target_ms"])
            .with_columns(saved=1 - pl.col("blocks_needed") / pl.col("baseline_blocks"))
            .select("instances", "load", "target_ms", "router", "blocks_needed",
                    "baseline_blocks", "saved")
            .sort("instances", "load", "target_ms", "router"))


def point_figures(fleet: pl.DataFrame, requests: pl.DataFrame | None) -> pl.DataFrame:
    """``fleet`` plus ``request_rate`` (the overload detector's ``offered_rate`` when the
    rows carry it, else each point's arrivals: n - 1 over their span, per second) and
    ``tpot_ms_p50``/``tpot_ms_p90`` (null when ``requests`` is not given)."""
    from pipeline.steptime.tpot import TPOT_COLUMNS, tpot_ms
    keys = list(point_columns(fleet))
    frame = fleet
    if requests is not None and requests.height:
        figures = [((pl.len() - 1) / ((pl.col("arrival_ms").max() - pl.col("arrival_ms").min())
                                      / 1e3)).alias("arrival_rate")]
        if set(TPOT_COLUMNS) <= set(requests.columns):
            # a disaggregated fleet's rows carry the decode side's own
            tpot = pl.col("tpot_ms") if "tpot_ms" in requests.columns else tpot_ms()
            figures += [tpot.quantile(0.5, "linear").alias("tpot_ms_p50"),
                        tpot.quantile(0.9, "linear").alias("tpot_ms_p90")]
        frame = frame.join(requests.group_by(keys).agg(figures), on=keys, how="left")
    for column in ("arrival_rate", "tpot_ms_p50", "tpot_ms_p90"):
        if column not in frame.columns:
            frame = frame.with_columns(pl.lit(None, pl.Float64).alias(column))
    rate = pl.col("arrival_rate")
    if "offered_rate" in frame.columns:
        rate = pl.col("offered_rate").fill_null(rate)
    return frame.with_columns(request_rate=pl.when(rate.is_finite()).then(rate))


def _rate_section(points: pl.DataFrame, label: str) -> Section:
    from pipeline.charts import Section
    from pipeline.charts.rate import overload_note, ttft_rate_chart
    frame = points.sort("instances", "gpu_blocks", "router", "load").with_columns(
        fleet=pl.format("{} x {} blocks", "instances", "gpu_blocks"))
    shapes = frame["fleet"].n_unique()
    order = sorted(frame["router"].unique().to_list())
    chart = ttft_rate_chart(frame, "router", "router", "request rate (requests/s)"
                            if shapes > 1 else "request rate (the workload's arrivals x "
                            "load, requests/s)", order,
                            facet="fleet" if shapes > 1 else None)
    if frame["request_rate"].drop_nulls().n_unique() < 2:
        return Section("fleet-rate", chart.properties(
            title=f"TTFT p50 and p90 per router ({label})"),
            "One load: TTFT p50 and p90 per router; give --load X,X,... for TTFT against "
            "request rate.")
    heavy = frame.sort("request_rate").tail(1)["request_rate"][0]
    best = frame.filter(pl.col("request_rate") == heavy).sort("ttft_p90_ms").row(0, named=True)
    panels = " (one panel per instances x GPU blocks)" if shapes > 1 else ""
    return Section("fleet-rate", chart.properties(
        title=f"TTFT p50 (solid) and p90 (dashed) against request rate ({label})"),
        f"TTFT against request rate, one line per router{panels}, as a vllm bench serve "
        f"sweep plots it; at {heavy:,.3g} requests/s the lowest TTFT p90 is {best['router']}'s "
        f"at {best['fleet']}, {format_duration(best['ttft_p90_ms'])}{overload_note(frame)}.")


def _by_blocks(frame: pl.DataFrame, y: alt.Y) -> alt.Chart:
    import altair as alt

    return (alt.Chart(alt.Data(values=frame.to_dicts())).mark_line(point=True)
            .encode(x=alt.X("gpu_blocks:Q", title="GPU blocks per instance"), y=y,
                    color=alt.Color("router:N"), strokeDash=alt.StrokeDash("load:N"),
                    shape=alt.Shape("instances:N"))
            .properties(width=560, height=300))


def _bars(frame: pl.DataFrame, field: str, x: alt.X) -> alt.Chart:
    """One capacity: ``field`` per router (and load, instances) as bars."""
    import altair as alt

    frame = frame.with_columns(row=pl.Series([
        f"{r}, {n} instances, load {x:g}"
        for r, n, x in frame.select("router", "instances", "load").iter_rows()]))
    return (alt.Chart(alt.Data(values=frame.to_dicts())).mark_bar()
            .encode(y=alt.Y("row:N", title=None), x=x, color=alt.Color("router:N"),
                    tooltip=["row:N", alt.Tooltip(f"{field}:Q", format=".4g")])
            .properties(width=560, height=min(28 * frame.height + 20, 420)))


def _capacity_sections(points: pl.DataFrame) -> list[Section]:
    import altair as alt

    from pipeline.charts import Section
    from pipeline.charts.durations import time_axis

    one = points["gpu_blocks"].n_unique() < 2
    blocks = f" at {points['gpu_blocks'][0]:,} GPU blocks per instance" if one else \
        " per router against GPU blocks per instance"
    axis = time_axis(points["ttft_p90_ms"].to_list(), "TTFT p90")
    frame = points.with_columns(ttft_p90=pl.col("ttft_p90_ms") / axis.divisor)
    hit = alt.Scale(domain=[0, 1])
    if one:
        charts = [_bars(frame, "hit_ratio", alt.X("hit_ratio:Q", title="prefix hit ratio",
                                                  scale=hit)),
                  _bars(frame, "ttft_p90", axis.x("ttft_p90")),
                  _bars(frame, "imbalance", alt.X("imbalance:Q", title="imbalance"))]
    else:
        charts = [_by_blocks(frame, alt.Y("hit_ratio:Q", title="prefix hit ratio")),
                  _by_blocks(frame, axis.y("ttft_p90")),
                  _by_blocks(frame, alt.Y("imbalance:Q", title="imbalance"))]
    return [Section("fleet-hit", charts[0], "Prefix hit ratio (GPU + CPU tokens)" + blocks
                    + "; " + _best(points, "hit_ratio", True)),
            Section("fleet-ttft", charts[1], "TTFT p90" + blocks + "; "
                    + _best(points, "ttft_p90_ms", False)),
            Section("fleet-imbalance", charts[2], "Imbalance: the busiest instance's "
                    "requests over the mean (1 = even)" + blocks + ".")]


def _best(fleet: pl.DataFrame, field: str, high: bool) -> str:
    row = fleet.sort(field, descending=high).row(0, named=True)
    value = format_duration(row[field]) if field.endswith("_ms") else f"{row[field]:.3g}"
    return (f"best {field}: {row['router']} ({value}) at {row['gpu_blocks']} blocks, "
            f"{row['instances']} instances, load {row['load']:g}.")


_TITLES = {"requests_per_s": "req/s", "overloaded": "overload", "TTFT_p50_ms": "TTFT p50",
           "TTFT_p90_ms": "TTFT p90", "TTFT_p99_ms": "TTFT p99", "TPOT_p50_ms": "TPOT p50",
           "TPOT_p90_ms": "TPOT p90"}


def summary_rows(points: pl.DataFrame) -> pl.DataFrame:
    """Per router and load, at the largest fleet (instances, then GPU blocks): the rate,
    tiers, TTFT and TPOT."""
    largest = points.filter(pl.col("instances") == points["instances"].max())
    largest = largest.filter(pl.col("gpu_blocks") == largest["gpu_blocks"].max())
    prompt = pl.col("prompt_tokens")
    columns = dict(router=pl.col("router"), load=pl.col("load"),
                   requests_per_s=pl.col("request_rate"), GPU=pl.col("gpu_hit_tokens") / prompt,
                   CPU=pl.col("cpu_hit_tokens") / prompt, recomputed=1 - pl.col("hit_ratio"),
                   TTFT_p50_ms=pl.col("ttft_p50_ms"), TTFT_p90_ms=pl.col("ttft_p90_ms"),
                   TTFT_p99_ms=pl.col("ttft_p99_ms"), TPOT_p50_ms=pl.col("tpot_ms_p50"),
                   TPOT_p90_ms=pl.col("tpot_ms_p90"))
    if "overloaded" in largest.columns and largest["overloaded"].drop_nulls().len():
        columns["overloaded"] = pl.col("overloaded")
    return largest.sort("router", "load").select(**columns)


def _summary(points: pl.DataFrame, label: str, model_label: str,
             configuration: Sequence[tuple[str, str]], provenance: str) -> str:
    from pipeline.charts.summary import (NOT_MODELLED, overload_text, summary_html,
                                         table_html, tier_text)
    rows = summary_rows(points)
    heaviest = rows.filter(pl.col("load") == rows["load"].max())
    tiers = "; ".join(f"{r['router']}: {tier_text(r['GPU'], r['CPU'])}"
                      for r in heaviest.iter_rows(named=True))
    first = points.sort("instances", "gpu_blocks").tail(1).row(0, named=True)
    judged = [{**r, "label": f"{r['router']} at load {r['load']:g}, {r['instances']} x "
                             f"{r['gpu_blocks']} blocks"} for r in points.iter_rows(named=True)]
    tpot = NOT_MODELLED if rows["TPOT_p50_ms"].drop_nulls().is_empty() else "in the table"

    def values(column: str) -> str:
        return ", ".join(f"{v:g}" for v in sorted(points[column].unique().to_list()))

    items = [("workload", label), *configuration,
             ("routers", ", ".join(sorted(points["router"].unique().to_list()))),
             ("instances", values("instances")),
             ("GPU blocks per instance", values("gpu_blocks")),
             ("loads (arrival-rate multipliers)", values("load")),
             ("overload", overload_text(judged)),
             (f"hit ratio by tier (load {rows['load'].max():g})", tiers), ("TPOT", tpot),
             ("step time", provenance or model_label)]
    headline = (f"<p>Per router and load at {first['instances']} instances x "
                f"{first['gpu_blocks']:,} GPU blocks (hit ratio by tier: GPU / CPU / "
                f"recomputed):</p>" + table_html(rows, _TITLES))
    return summary_html(items, headline)


def report_html(fleet: pl.DataFrame, label: str, model_label: str,
                requests: pl.DataFrame | None = None,
                configuration: Sequence[tuple[str, str]] = (), provenance: str = "") -> str:
    """A self-contained, offline page of the fleet sweep; ``requests`` (the per-request
    rows) give each point's request rate and TPOT."""
    from pipeline.charts import page_html
    from pipeline.charts.summary import table_html

    points = point_figures(fleet, requests)
    saved = capacity_saved(fleet)
    scheduler = ("SGLang 0.5.23's scheduler" if ("engine", "sglang") in configuration
                 else "vLLM v1's scheduler")
    prelude = (f"<p>Workload: {html.escape(label)}. Step times: {html.escape(model_label)}."
               f" Simulated engines (a model of {scheduler}), not measurements.</p>")
    tables = ("<h3>GPU blocks a router needs for round robin's TTFT p90</h3>"
              + (table_html(saved) if saved.height else "<p>No round-robin points.</p>")
              + "<h3>Every point</h3>"
              + table_html(points.select("router", "instances", "gpu_blocks", "load",
                                         "request_rate", "hit_ratio", "ttft_p50_ms",
                                         "ttft_p90_ms", "ttft_p99_ms", "tpot_ms_p50",
                                         "throughput_rps", "imbalance"),
                           {"request_rate": "requests/s"}))
    return page_html("kvlab fleet", "N simulated engine instances behind each router.",
                     [("Summary", _summary(points, label, model_label, configuration,
                                           provenance), []),
                      ("Routers", prelude, [_rate_section(points, model_label),
                                            *_capacity_sections(points)]),
                      ("Tables", tables, [])])
