"""Report section: the second-pass hit ratio over a GPU x CPU capacity grid."""

from __future__ import annotations

import altair as alt
import polars as pl

from pipeline.charts.parts import HEIGHT, WIDTH, tooltips, working_set
from pipeline.sweeps import second_pass


def grid_frame(aggregates: pl.DataFrame) -> pl.DataFrame:
    """Second-pass hit ratio per (GPU, CPU) cell of the grid sweep."""
    return (second_pass(aggregates, "grid")
            .with_columns(hit_ratio=pl.col("hits") / pl.col("accesses"))
            .select("gpu_capacity", "cpu_capacity", "hit_ratio", "gpu_hits", "cpu_hits",
                    "misses"))


#: 0 % hits is grey (nothing served), 100 % dark green: no good-looking colour for nothing.
RATIO_RANGE = ["#eeeeee", "#1b5e20"]
EDGE_COLOUR = "#e65100"


def heatmap_chart(aggregates: pl.DataFrame, scenario: dict) -> alt.LayerChart:
    """GPU x CPU heatmap of the second-pass hit ratio, each cell labelled. The axes are the
    grid's points in order (not to scale): the working-set edge (ws - 1 | ws), one token
    wide, is marked by an orange line and bold labels so it does not read as a grid step."""
    ws = working_set(scenario)
    bold = alt.expr(f"datum.value == {ws} || datum.value == {ws - 1} ? 'bold' : 'normal'")
    frame = grid_frame(aggregates)
    base = alt.Chart(frame).encode(
        x=alt.X("gpu_capacity:O", title="GPU capacity (tokens; grid points, not to scale)",
                axis=alt.Axis(labelAngle=-45, labelFontWeight=bold)),
        y=alt.Y("cpu_capacity:O", title="CPU capacity (tokens)", sort="descending",
                axis=alt.Axis(labelFontWeight=bold)))
    cells = base.mark_rect(stroke="white").encode(
        color=alt.Color("hit_ratio:Q", title="second-pass hit ratio",
                        scale=alt.Scale(domain=[0, 1], range=RATIO_RANGE),
                        legend=alt.Legend(format="%")),
        tooltip=tooltips("gpu_capacity:O", "cpu_capacity:O",
                         alt.Tooltip("hit_ratio:Q", format=".0%"), "gpu_hits:Q", "cpu_hits:Q",
                         "misses:Q"))
    labels = base.mark_text(fontSize=11).encode(
        text=alt.Text("hit_ratio:Q", format=".0%"),
        color=alt.ColorValue(**alt.condition(alt.datum.hit_ratio > 0.5, alt.value("white"),
                                             alt.value("black"))))
    layers = [cells, labels]
    rule = alt.Chart(frame).mark_rule(color=EDGE_COLOUR, strokeWidth=3)
    if ws in frame["gpu_capacity"]:          # same field and sort as the cells: one domain
        layers.append(rule.transform_filter(alt.datum.gpu_capacity == ws).encode(
            x=alt.X("gpu_capacity:O", bandPosition=0)))
    if ws in frame["cpu_capacity"]:
        layers.append(rule.transform_filter(alt.datum.cpu_capacity == ws).encode(
            y=alt.Y("cpu_capacity:O", sort="descending", bandPosition=1)))
    return alt.layer(
        *layers, title=alt.Title("Second-pass hit ratio over a GPU × CPU capacity grid",
                        subtitle=f"orange: the working-set edge between {ws - 1} and {ws} "
                                 "tokens (bold labels)"),
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

