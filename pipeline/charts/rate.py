"""TTFT p50 and p90 against request rate, the view of a ``vllm bench serve`` sweep.

``ttft_rate_chart(frame, group, ...)`` draws one line per ``group`` value (a GPU capacity, a
router), a point per load, p50 solid and p90 dashed; the time axis and the rate axis follow
``pipeline.charts.durations`` (seconds above 10 s, log beyond a 100x span). With a single
request rate a line would be a lone dot: the chart is then one labelled bar per group and
statistic. ``ttft_bars`` is that bar chart for any category axis. Points the overload
detector calls overloaded (an ``overloaded`` column) are circled in black.
"""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import polars as pl

from pipeline.charts.durations import format_duration, scale_for, time_axis

__all__ = ["STATISTICS", "ttft_long", "ttft_rate_chart", "ttft_bars", "overload_note"]

#: (name, column) of the two TTFT statistics drawn.
STATISTICS = (("p50", "ttft_p50_ms"), ("p90", "ttft_p90_ms"))
_DASH = alt.StrokeDash("statistic:N", title="TTFT", sort=[s for s, _ in STATISTICS],
                       scale=alt.Scale(domain=[s for s, _ in STATISTICS],
                                       range=[[1, 0], [6, 4]]),
                       legend=None)            # the title says: p50 solid, p90 dashed


def ttft_long(frame: pl.DataFrame, keep: Sequence[str]) -> pl.DataFrame:
    """One row per (row of ``frame``, statistic): ``keep`` columns, ``statistic`` and
    ``ttft_ms``; rows without a TTFT dropped."""
    return pl.concat([frame.select(*keep, statistic=pl.lit(name), ttft_ms=pl.col(column))
                      for name, column in STATISTICS]).drop_nulls("ttft_ms")


def overload_note(frame: pl.DataFrame) -> str:
    """The caption's words on the circled (overloaded) points; empty when none is."""
    if "overloaded" not in frame.columns or not frame["overloaded"].any():
        return ""
    return (f"; circled: the {int(frame['overloaded'].sum())} overloaded points (arrivals "
            f"outpace service: their TTFT is mostly queueing)")


def ttft_bars(frame: pl.DataFrame, category: str, title: str, order: Sequence[str]
              ) -> alt.LayerChart:
    """TTFT p50 and p90 as labelled horizontal bars, one row per ``category`` value."""
    long = ttft_long(frame, [category])
    axis = time_axis(long["ttft_ms"].to_list(), "TTFT")
    long = long.with_columns(value=pl.col("ttft_ms") / axis.divisor,
                             text=pl.Series([format_duration(v) for v in long["ttft_ms"]]))
    base = alt.Chart(alt.Data(values=long.to_dicts())).encode(
        y=alt.Y(f"{category}:N", title=title, sort=list(order)),
        yOffset=alt.YOffset("statistic:N", sort=[s for s, _ in STATISTICS]),
        x=axis.x("value"))
    bars = base.mark_bar(height={"band": 0.9}).encode(
        color=alt.Color("statistic:N", title="TTFT", sort=[s for s, _ in STATISTICS],
                        scale=alt.Scale(range=["#1f6fb4", "#c62828"])),
        tooltip=[alt.Tooltip(f"{category}:N"), alt.Tooltip("statistic:N"),
                 alt.Tooltip("text:N", title="TTFT")])
    labels = base.mark_text(align="left", dx=4).encode(text="text:N")
    rows = max(long[category].n_unique(), 1)
    return alt.layer(bars, labels).properties(width=560, height=min(60 * rows, 420))


def ttft_rate_chart(frame: pl.DataFrame, group: str, group_title: str, rate_title: str,
                    order: Sequence[str], facet: str | None = None) -> alt.TopLevelMixin:
    """TTFT p50/p90 (y) against ``request_rate`` (x), one line per ``group``, one panel per
    ``facet`` value when given; with one distinct rate, ``ttft_bars`` per group instead."""
    if frame["request_rate"].drop_nulls().n_unique() < 2:
        if facet is not None:
            frame = frame.with_columns(pl.format("{}, {}", group, facet).alias(group))
            order = frame[group].unique(maintain_order=True).to_list()
        return ttft_bars(frame, group, group_title, order)
    flagged = "overloaded" in frame.columns and frame["overloaded"].any()
    keep = [group, "request_rate", *([facet] if facet else []), *(["overloaded"] if flagged
                                                                   else [])]
    long = ttft_long(frame, keep)
    axis = time_axis(long["ttft_ms"].to_list(), "TTFT")
    rate_scale, rate_suffix = scale_for(long["request_rate"].to_list(), zero=False)
    long = long.with_columns(value=pl.col("ttft_ms") / axis.divisor,
                             text=pl.Series([format_duration(v) for v in long["ttft_ms"]]))
    base = alt.Chart(alt.Data(values=long.to_dicts())).encode(
        x=alt.X("request_rate:Q", title=f"{rate_title}{rate_suffix}", scale=rate_scale),
        y=axis.y("value"),
        color=alt.Color(f"{group}:N", title=group_title, sort=list(order)))
    layers = [base.mark_line(point=True).encode(
        strokeDash=_DASH, detail="statistic:N",
        tooltip=[alt.Tooltip(f"{group}:N", title=group_title),
                 alt.Tooltip("request_rate:Q", title="requests/s", format=".3~g"),
                 alt.Tooltip("statistic:N"), alt.Tooltip("text:N", title="TTFT")])]
    if flagged:                          # the overload detector's verdict, circled in black
        layers.append(base.mark_point(shape="circle", size=200, filled=False, strokeWidth=1.5)
                      .encode(color=alt.value("#111")).transform_filter("datum.overloaded"))
    chart = alt.layer(*layers)
    if facet is None:
        return chart.properties(width=560, height=300)
    panels = long[facet].unique(maintain_order=True).to_list()
    return chart.properties(width=max(180, 620 // len(panels)), height=280).facet(
        column=alt.Column(f"{facet}:N", title=None, sort=panels))
