"""The ``simulate --gpu CAPS --report`` page: a one-screen summary, then the curves under load.

Summary: configuration, overload (the detector's keys when the points carry them), hit
ratio by tier, TTFT and TPOT percentiles per load at the largest capacity, and where the
step times come from. Charts: TTFT p50/p90 against request rate (one line per capacity, a
point per load); hit ratio and TTFT against GPU capacity (one line per load, the
concurrency-1 one-pass line dashed black). A single capacity is drawn as bars, never as a
lone dot; time axes follow ``pipeline.charts.durations``. Every title and caption names
the step-time model.
"""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import numpy as np
import polars as pl

from pipeline.charts import Section, page_html
from pipeline.charts.durations import format_duration, time_axis
from pipeline.charts.parts import HEIGHT, WIDTH, tooltips
from pipeline.charts.rate import overload_note, ttft_rate_chart
from pipeline.charts.summary import (NOT_MODELLED, overload_text, percent, summary_html, table_html,
                                     tier_text)
from pipeline.steptime.curves import UPPER
from pipeline.steptime.roofline import roofline_caveat

__all__ = ["curve_sections", "curves_page", "summary_rows", "RATE_TITLES", "MAX_RATE_LINES"]

#: The request-rate axis per load kind: what "requests/s" means for it.
RATE_TITLES = {"rate": "request rate (Poisson arrivals, requests/s)",
               "speed": "request rate (the trace's arrivals x speed, requests/s)",
               "concurrency": "served request rate (closed loop, requests/s)"}
MAX_RATE_LINES = 6          # capacities drawn on the rate chart (spread geometrically)


def _order(curves: pl.DataFrame) -> list[str]:
    upper = curves.filter(pl.col("curve") == UPPER)["load"].unique().to_list()
    loads = (curves.filter(pl.col("curve") != UPPER).select("load", "load_value")
             .unique().sort("load_value")["load"].to_list())
    return [*upper, *loads]


def _x() -> alt.X:
    return alt.X("gpu_capacity:Q", title="GPU KV capacity (tokens, log scale)",
                 scale=alt.Scale(type="log", nice=False))


def _layers(frame: pl.DataFrame, y: alt.Y, order: list[str], extra: tuple = ()) -> alt.LayerChart:
    """Loaded curves coloured by load; the upper line black and dashed on top."""
    tooltip = tooltips("load", *extra, "gpu_capacity", alt.Tooltip(f"{y.shorthand}", format=".4g"))
    loaded = alt.Chart(frame.filter(pl.col("curve") != UPPER)).mark_line(point=True).encode(
        x=_x(), y=y, color=alt.Color("load:N", sort=order[1:] if order else None,
                                     title="load"), tooltip=tooltip)
    upper = alt.Chart(frame.filter(pl.col("curve") == UPPER)).mark_line(
        color="black", strokeDash=[6, 4], strokeWidth=2.5).encode(
        x=_x(), y=y, tooltip=tooltip)
    return alt.layer(loaded, upper)


def _hit_caption(curves: pl.DataFrame) -> str:
    loaded = curves.filter(pl.col("curve") != UPPER)
    upper = curves.filter(pl.col("curve") == UPPER)
    heaviest = loaded.sort("load_value").tail(1)["load"].to_list()
    if upper.is_empty() or not heaviest:
        return "Hit ratio against GPU capacity at each load."
    worst = (loaded.filter(pl.col("load") == heaviest[0])
             .join(upper.select("gpu_capacity", top=pl.col("hit_ratio")), on="gpu_capacity")
             .with_columns(gap=pl.col("top") - pl.col("hit_ratio")).sort("gap").tail(1).row(
                 0, named=True))
    verb = "erodes" if worst["gap"] >= 0.01 else "barely moves"
    return (f"Load {verb} the curve (dashed black: one request at a time): at "
            f"{worst['gpu_capacity']:,} tokens the hit ratio is {percent(worst['top'])} one "
            f"request at a time and {percent(worst['hit_ratio'])} at {worst['load']}, the "
            f"largest gap over the {upper.height} capacities.")


def _ttft_caption(curves: pl.DataFrame, label: str) -> str:
    loaded = curves.filter(pl.col("curve") != UPPER).sort("load_value", "gpu_capacity")
    if loaded.is_empty():
        return f"TTFT p90 against GPU capacity ({label})."
    top = loaded["gpu_capacity"].max()
    at_top = loaded.filter(pl.col("gpu_capacity") == top)
    parts = ", ".join(f"{row['load']} {format_duration(row['ttft_ms_p90'])}"
                      for row in at_top.iter_rows(named=True))
    return (f"TTFT p90 at the largest capacity ({top:,} tokens): {parts}; times are "
            f"{label}{roofline_caveat(label)}.")


def _label(curves: pl.DataFrame) -> str:
    label = curves["step_time_model"].drop_nulls().unique().to_list()
    return label[0] if label else "no step-time model"


def _capacity_label(tokens: int) -> str:
    return f"GPU {tokens:,} tokens"


def _rate_capacities(capacities: Sequence[int]) -> list[int]:
    """At most ``MAX_RATE_LINES`` capacities, spread geometrically, the ends kept."""
    values = sorted(set(capacities))
    if len(values) <= MAX_RATE_LINES:
        return values
    picks = np.unique(np.round(np.geomspace(1, len(values), MAX_RATE_LINES)).astype(int) - 1)
    return [values[i] for i in picks]


def rate_section(curves: pl.DataFrame) -> Section:
    """TTFT p50/p90 against request rate, one line per GPU capacity (bars for one load)."""
    label = _label(curves)
    loaded = curves.filter(pl.col("curve") != UPPER)
    kind = (loaded["load_kind"].unique().to_list() or ["rate"])[0]
    shown = _rate_capacities(loaded["gpu_capacity"].to_list())
    frame = (loaded.filter(pl.col("gpu_capacity").is_in(shown)).sort("gpu_capacity")
             .with_columns(ttft_p50_ms=pl.col("ttft_ms_p50"),
                           ttft_p90_ms=pl.col("ttft_ms_p90")))
    frame = frame.with_columns(capacity=pl.Series([_capacity_label(c)
                                                   for c in frame["gpu_capacity"]]))
    order = [_capacity_label(c) for c in shown]
    if frame["request_rate"].drop_nulls().n_unique() < 2:
        load = frame["load"][0] if frame.height else "the load"
        chart = ttft_rate_chart(frame, "capacity", "GPU KV capacity", "", order).properties(
            title=f"TTFT p50 and p90 at {load} per GPU capacity ({label})")
        caption = (f"One load ({load}): TTFT p50 and p90 per GPU capacity; give a list of "
                   f"loads (--rate R,R,...) for TTFT against request rate. Times are "
                   f"{label}{roofline_caveat(label)}.")
        return Section("load-rate", chart, caption)
    chart = ttft_rate_chart(frame, "capacity", "GPU KV capacity",
                            RATE_TITLES.get(kind, "request rate (requests/s)"), order
                            ).properties(title=f"TTFT p50 (solid) and p90 (dashed) against "
                                               f"request rate ({label})")
    heavy = frame.sort("request_rate").tail(1).row(0, named=True)
    fewer = (f" ({len(shown)} of {loaded['gpu_capacity'].n_unique()} capacities shown)"
             if len(shown) < loaded["gpu_capacity"].n_unique() else "")
    caption = (f"TTFT against request rate, one line per GPU capacity{fewer}, as a "
               f"vllm bench serve sweep plots it: at {heavy['load']} "
               f"({heavy['request_rate']:,.3g} requests/s) TTFT p90 is "
               f"{format_duration(heavy['ttft_ms_p90'])} at {heavy['gpu_capacity']:,} tokens"
               f"{overload_note(frame)}; times are {label}{roofline_caveat(label)}.")
    return Section("load-rate", chart, caption)


def _tier_bars(curves: pl.DataFrame) -> alt.Chart:
    """One capacity: each load's prompt tokens by tier as a stacked bar."""
    loaded = curves.filter(pl.col("curve") != UPPER)
    long = pl.concat([loaded.select("load", tier=pl.lit(name), share=expr)
                      for name, expr in (("GPU", pl.col("gpu_hit_ratio")),
                                         ("CPU", pl.col("cpu_hit_ratio").fill_null(0)),
                                         ("recomputed", 1 - pl.col("hit_ratio")))])
    return alt.Chart(long).mark_bar().encode(
        y=alt.Y("load:N", title="load", sort=_order(curves)[1:]),
        x=alt.X("share:Q", title="share of prompt tokens", scale=alt.Scale(domain=[0, 1]),
                axis=alt.Axis(format="%"), stack="zero"),
        color=alt.Color("tier:N", sort=["GPU", "CPU", "recomputed"],
                        scale=alt.Scale(domain=["GPU", "CPU", "recomputed"],
                                        range=["#2e7d32", "#1f6fb4", "#c62828"])),
        tooltip=tooltips("load", "tier", alt.Tooltip("share:Q", format=".1%"))
    ).properties(width=WIDTH, height=min(40 * loaded["load"].n_unique() + 20, 300),
                 title=f"Prompt tokens by tier at {loaded['gpu_capacity'][0]:,} tokens")


def curve_sections(curves: pl.DataFrame) -> list[Section]:
    """TTFT against request rate, then hit ratio and TTFT p50/p90 against capacity (with one
    capacity: the tier shares per load, as bars)."""
    label = _label(curves)
    sections = [rate_section(curves)]
    if curves.filter(pl.col("curve") != UPPER)["gpu_capacity"].n_unique() < 2:
        return sections + [Section("load-hit", _tier_bars(curves),
                                   "Hit ratio by tier at the one GPU capacity, per load; give "
                                   "--gpu LO,HI --gpu-steps N for curves against capacity.")]
    frame = curves.select("load", "curve", "gpu_capacity", "hit_ratio")
    hit = _layers(frame, alt.Y("hit_ratio:Q", title="hit ratio (GPU + CPU, token-weighted)",
                               scale=alt.Scale(domain=[0, 1])), _order(curves)).properties(
        title="Hit ratio against GPU capacity, one line per load", width=WIDTH, height=HEIGHT)
    ttft = pl.concat([curves.with_columns(statistic=pl.lit(name), ttft_ms=pl.col(column))
                      for name, column in (("p50", "ttft_ms_p50"), ("p90", "ttft_ms_p90"))])
    axis = time_axis(ttft["ttft_ms"].to_list(), "TTFT")
    frame = ttft.select("load", "curve", "gpu_capacity", "statistic",
                        ttft=pl.col("ttft_ms") / axis.divisor)
    y = axis.y("ttft")
    ttft_chart = alt.hconcat(*[
        _layers(frame.filter(pl.col("statistic") == name), y, _order(curves),
                ("statistic",)).properties(title=f"TTFT {name}", width=300, height=HEIGHT)
        for name in ("p50", "p90")]).properties(
        title=f"TTFT p50 and p90 against GPU capacity ({label})")
    return sections + [Section("load-hit", hit, _hit_caption(curves)),
                       Section("load-ttft", ttft_chart, _ttft_caption(curves, label))]


def summary_rows(curves: pl.DataFrame) -> pl.DataFrame:
    """One row per load at the largest GPU capacity: rate, tiers, TTFT and TPOT."""
    loaded = curves.filter(pl.col("curve") != UPPER)
    top = loaded.filter(pl.col("gpu_capacity") == loaded["gpu_capacity"].max()) \
        .sort("load_value")
    columns = dict(load=pl.col("load"), requests_per_s=pl.col("request_rate"),
                   GPU=pl.col("gpu_hit_ratio"), CPU=pl.col("cpu_hit_ratio").fill_null(0.0),
                   recomputed=1 - pl.col("hit_ratio"), TTFT_p50_ms=pl.col("ttft_ms_p50"),
                   TTFT_p90_ms=pl.col("ttft_ms_p90"), TTFT_p99_ms=pl.col("ttft_ms_p99"),
                   TPOT_p50_ms=pl.col("tpot_ms_p50"), TPOT_p90_ms=pl.col("tpot_ms_p90"))
    if "overloaded" in top.columns and top["overloaded"].drop_nulls().len():
        columns["overloaded"] = pl.col("overloaded")
    return top.select(**columns)


_TITLES = {"requests_per_s": "req/s", "overloaded": "overload", "TTFT_p50_ms": "TTFT p50",
           "TTFT_p90_ms": "TTFT p90", "TTFT_p99_ms": "TTFT p99", "TPOT_p50_ms": "TPOT p50",
           "TPOT_p90_ms": "TPOT p90"}


def _summary(curves: pl.DataFrame, description: str,
             configuration: Sequence[tuple[str, str]], provenance: str) -> str:
    loaded = curves.filter(pl.col("curve") != UPPER)
    capacities = sorted(loaded["gpu_capacity"].unique().to_list())
    rows = summary_rows(curves)
    top = rows.row(0, named=True) if rows.height else {}
    points = [{**r, "label": f"{r['load']} at {r['gpu_capacity']:,} tokens"}
              for r in loaded.iter_rows(named=True)]
    tpot = (NOT_MODELLED if rows.height == 0 or rows["TPOT_p50_ms"].drop_nulls().is_empty()
            else "in the table")
    caps = (f"{capacities[0]:,} tokens" if len(capacities) == 1 else
            f"{len(capacities)} capacities, {capacities[0]:,} to {capacities[-1]:,} tokens")
    items = [("workload", description), *configuration, ("GPU KV capacities", caps),
             ("loads", ", ".join(_order(curves)[1:])),
             ("overload", overload_text(points)),
             ("hit ratio by tier", f"{tier_text(top.get('GPU'), top.get('CPU'))} "
                                   f"(at {capacities[-1]:,} tokens, {top.get('load', '')})"
              if top else "n/a"),
             ("TPOT", tpot),
             ("step time", provenance or _label(curves))]
    headline = (f"<p>Per load at the largest GPU capacity ({capacities[-1]:,} tokens):</p>"
                + table_html(rows, _TITLES)) if rows.height else ""
    return summary_html(items, headline)


def _points(curves: pl.DataFrame) -> str:
    frame = curves.sort("curve", "load_value", "gpu_capacity").select(
        "load", "gpu_capacity", "request_rate", "hit_ratio", "gpu_hit_ratio", "cpu_hit_ratio",
        "ttft_ms_p50", "ttft_ms_p90", "ttft_ms_p99", "queue_ms_p90", "tpot_ms_p50",
        "tpot_ms_p90", "preemptions")
    titles = {"gpu_capacity": "GPU tokens", "request_rate": "requests/s", "hit_ratio": "hit",
              "gpu_hit_ratio": "GPU", "cpu_hit_ratio": "CPU", "ttft_ms_p50": "TTFT p50",
              "ttft_ms_p90": "TTFT p90", "ttft_ms_p99": "TTFT p99",
              "queue_ms_p90": "queue p90", "tpot_ms_p50": "TPOT p50",
              "tpot_ms_p90": "TPOT p90"}
    return table_html(frame, titles)


def curves_page(curves: pl.DataFrame, description: str,
                configuration: Sequence[tuple[str, str]] = (), provenance: str = "") -> str:
    """The whole page: the summary, then the curve sections, then every point."""
    lede = (f"Simulated engine runs (a model of vLLM v1's scheduler); times are "
            f"{_label(curves)}{roofline_caveat(_label(curves))}.")
    return page_html("kvlab simulate: curves under load", lede,
                     [("Summary", _summary(curves, description, configuration, provenance),
                       []),
                      ("Curves under load", "", curve_sections(curves)),
                      ("Every point", _points(curves), [])])
