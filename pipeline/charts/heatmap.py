"""Report section: the second-pass hit ratio over a GPU x CPU capacity grid."""

from __future__ import annotations

import altair as alt
import polars as pl

from pipeline.charts import Section
from pipeline.charts.parts import HEIGHT, WIDTH, working_set
from pipeline.sweeps import second_pass


def grid_frame(aggregates: pl.DataFrame) -> pl.DataFrame:
    """Second-pass hit ratio per (GPU, CPU) cell of the grid sweep."""
    return (second_pass(aggregates, "grid")
            .with_columns(hit_ratio=pl.col("hits") / pl.col("accesses"))
            .select("gpu_capacity", "cpu_capacity", "hit_ratio", "gpu_hits", "cpu_hits",
                    "misses"))


def heatmap_chart(aggregates: pl.DataFrame, scenario: dict) -> alt.LayerChart:
    """GPU x CPU heatmap of the second-pass hit ratio, each cell labelled."""
    base = alt.Chart(grid_frame(aggregates)).encode(
        x=alt.X("gpu_capacity:O", title="GPU capacity (tokens)", axis=alt.Axis(labelAngle=0)),
        y=alt.Y("cpu_capacity:O", title="CPU capacity (tokens)", sort="descending"))
    cells = base.mark_rect(stroke="white").encode(
        color=alt.Color("hit_ratio:Q", title="second-pass hit ratio",
                        scale=alt.Scale(domain=[0, 1], scheme="greens"),
                        legend=alt.Legend(format="%")),
        tooltip=["gpu_capacity:O", "cpu_capacity:O", alt.Tooltip("hit_ratio:Q", format=".0%"),
                 "gpu_hits:Q", "cpu_hits:Q", "misses:Q"])
    labels = base.mark_text(fontSize=11).encode(
        text=alt.Text("hit_ratio:Q", format=".0%"),
        color=alt.condition(alt.datum.hit_ratio > 0.5, alt.value("white"), alt.value("black")))
    return alt.layer(cells, labels).properties(
        title="Second-pass hit ratio over a GPU × CPU capacity grid",
        width=WIDTH, height=HEIGHT)


def heatmap_caption(aggregates: pl.DataFrame, scenario: dict) -> str:
    """One sentence: how many cells reach 100 % and what they have in common."""
    cells = grid_frame(aggregates).with_columns(
        largest=pl.max_horizontal("gpu_capacity", "cpu_capacity"))
    full = cells.filter(pl.col("hit_ratio") == 1)
    rest = cells.filter(pl.col("hit_ratio") < 1)
    best_rest = rest.get_column("hit_ratio").max()
    tail = ("" if best_rest is None else "; every other cell gets 0%" if best_rest == 0
            else f"; every other cell gets at most {best_rest:.0%}")
    if full.is_empty():
        return f"No cell of the {cells.height}-cell grid reaches 100% second-pass hits{tail}."
    return (f"{full.height} of {cells.height} cells reach 100% second-pass hits, each with a "
            f"tier of at least {full.get_column('largest').min()} tokens (working set "
            f"{working_set(scenario)}){tail}.")


def section(aggregates: pl.DataFrame, scenario: dict) -> Section:
    """The heatmap with its caption (aggregates of the grid sweep)."""
    return Section("grid", heatmap_chart(aggregates, scenario),
                   heatmap_caption(aggregates, scenario))
