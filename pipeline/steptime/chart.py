"""Report section "curves under load": hit ratio and TTFT p50/p90 against GPU capacity.

One line per load, the concurrency-1 one-pass line dashed on top; every TTFT title and
caption names the step-time model (``roofline (...)`` or ``fitted (...)``).
"""

from __future__ import annotations

import altair as alt
import polars as pl

from pipeline.charts import Section, page_html
from pipeline.charts.parts import HEIGHT, WIDTH, tooltips
from pipeline.steptime.curves import UPPER

__all__ = ["curve_sections", "curves_page"]


def _order(curves: pl.DataFrame) -> list[str]:
    upper = curves.filter(pl.col("curve") == UPPER)["load"].unique().to_list()
    loads = (curves.filter(pl.col("curve") != UPPER).select("load", "load_value")
             .unique().sort("load_value")["load"].to_list())
    return [*upper, *loads]


def _x() -> alt.X:
    return alt.X("gpu_capacity:Q", title="GPU KV capacity (tokens)",
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


def _lines(curves: pl.DataFrame, y: str, title: str, scale: alt.Scale) -> alt.LayerChart:
    frame = curves.select("load", "curve", "gpu_capacity", y)
    return _layers(frame, alt.Y(f"{y}:Q", title=title, scale=scale), _order(curves))


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f} %"


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
            f"{worst['gpu_capacity']:,} tokens the hit ratio is {_pct(worst['top'])} one "
            f"request at a time and {_pct(worst['hit_ratio'])} at {worst['load']}, the largest "
            f"gap over the {upper.height} capacities.")


def _ttft_caption(curves: pl.DataFrame, label: str) -> str:
    loaded = curves.filter(pl.col("curve") != UPPER).sort("load_value", "gpu_capacity")
    if loaded.is_empty():
        return f"TTFT p90 against GPU capacity ({label})."
    top = loaded["gpu_capacity"].max()
    at_top = loaded.filter(pl.col("gpu_capacity") == top)
    parts = ", ".join(f"{row['load']} {row['ttft_ms_p90']:,.0f} ms"
                      for row in at_top.iter_rows(named=True))
    return (f"TTFT p90 at the largest capacity ({top:,} tokens): {parts}; times are {label}"
            f"{' (a lower bound from peak figures, not a measurement)' if label.startswith('roofline') else ''}.")


def curve_sections(curves: pl.DataFrame) -> list[Section]:
    """The hit-ratio chart and the TTFT p50/p90 chart with their captions."""
    label = curves["step_time_model"].drop_nulls().unique().to_list()
    label = label[0] if label else "no step-time model"
    hit = _lines(curves, "hit_ratio", "hit ratio (GPU + CPU, token-weighted)",
                 alt.Scale(domain=[0, 1])).properties(
        title="Hit ratio against GPU capacity, one line per load", width=WIDTH, height=HEIGHT)
    ttft = pl.concat([curves.with_columns(statistic=pl.lit(name), ttft=pl.col(column))
                      for name, column in (("p50", "ttft_ms_p50"), ("p90", "ttft_ms_p90"))])
    frame = ttft.select("load", "curve", "gpu_capacity", "statistic", "ttft")
    y = alt.Y("ttft:Q", title=f"TTFT (ms), {label}", scale=alt.Scale(type="log"))
    ttft_chart = alt.hconcat(*[
        _layers(frame.filter(pl.col("statistic") == name), y, _order(curves),
                ("statistic",)).properties(title=f"TTFT {name}", width=300, height=HEIGHT)
        for name in ("p50", "p90")]).properties(
        title=f"TTFT p50 and p90 against GPU capacity ({label})")
    return [Section("load-hit", hit, _hit_caption(curves)),
            Section("load-ttft", ttft_chart, _ttft_caption(curves, label))]


def curves_page(curves: pl.DataFrame, description: str) -> str:
    """A whole page with the two sections under one heading."""
    label = curves["step_time_model"].drop_nulls().unique().to_list()
    upper = curves.filter(pl.col("curve") == UPPER)["load"].unique().to_list()
    lede = (f"{description}. Step time: {label[0] if label else 'none'}. The dashed black "
            f"line is {upper[0] if upper else 'concurrency 1'} (each request alone), the line "
            f"load usually erodes (not a strict bound: a request admitted beside another can "
            f"hit blocks that one allocated).")
    return page_html("kvlab: curves under load", lede,
                     [("Curves under load", "", curve_sections(curves))])
