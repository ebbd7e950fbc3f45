"""Report section: predicted second-pass TTFT along both cliffs (pipeline.ttft.latency)."""

from __future__ import annotations

import altair as alt
import polars as pl

from pipeline.charts import Section
from pipeline.charts.parts import HEIGHT, WIDTH, change_points, fmt, working_set
from pipeline.base.config import BASELINE, OFFLOADED
from pipeline.base.stats import exact_median
from pipeline.sweeps import second_pass

AXES = ("GPU capacity, no CPU tier", "CPU capacity, GPU fixed")


def predicted_frame(predicted: pl.DataFrame) -> pl.DataFrame:
    """Second-pass predicted TTFT along both cliffs, long form: axis, capacity, ttft."""
    return pl.concat([
        second_pass(predicted, "gpu_cliff").select(
            pl.lit(AXES[0]).alias("axis"),
            pl.col("gpu_capacity").alias("capacity"), "predicted_ttft_ms"),
        second_pass(predicted, "cpu_cliff").select(
            pl.lit(AXES[1]).alias("axis"),
            pl.col("cpu_capacity").alias("capacity"), "predicted_ttft_ms"),
    ]).drop_nulls()


def predicted_chart(predicted: pl.DataFrame, scenario: dict) -> alt.FacetChart:
    """Predicted second-pass mean TTFT along the GPU cliff and along the CPU cliff."""
    frame = pl.concat([change_points(part, "capacity", "predicted_ttft_ms")
                       for part in predicted_frame(predicted).partition_by("axis")])
    line = alt.Chart().mark_line(interpolate="step-after", strokeWidth=2, color="#6a51a3",
                                 point=True).encode(
        x=alt.X("capacity:Q", title="capacity (tokens)",     # "150k": labels stay apart
                axis=alt.Axis(format="~s", labelOverlap="greedy", tickCount=5)),
        y=alt.Y("predicted_ttft_ms:Q", title="predicted mean TTFT (ms, log scale)",
                scale=alt.Scale(type="log")),
        tooltip=[alt.Tooltip("capacity:Q", format="d"),
                 alt.Tooltip("predicted_ttft_ms:Q", format=".1f")])
    rule = alt.Chart().mark_rule(strokeDash=[5, 4], color="#555").encode(
        x=alt.XDatum(working_set(scenario)))
    return alt.layer(line, rule, data=frame).properties(
        width=WIDTH // 2 - 20, height=HEIGHT - 40).facet(
        column=alt.Column("axis:N", title=None, header=alt.Header(labelFontSize=13),
                          sort=list(AXES)),
    ).resolve_scale(x="independent").properties(title=alt.Title(
        "Predicted second-pass TTFT from simulated hits and measured tier latencies",
        subtitle=f"left: GPU capacity, no CPU tier; right: CPU capacity at GPU "
                 f"{scenario['cpu_sweep_gpu']}; dashed: working set"))


def predicted_caption(predicted: pl.DataFrame, latencies: dict, scenario: dict) -> str:
    """One sentence: the tier latencies and the predicted TTFT on both sides of each cliff."""
    frame = predicted_frame(predicted)
    ws = working_set(scenario)

    def side(axis: str, below: bool) -> str:
        part = frame.filter(pl.col("axis").str.starts_with(axis),
                            (pl.col("capacity") < ws) if below else (pl.col("capacity") >= ws))
        return (fmt(part.select(exact_median("predicted_ttft_ms")).item()) if part.height
                else "n/a")

    gpu_only, offload = (latencies[config] for config in (BASELINE, OFFLOADED))
    known = lambda value: "n/a" if value is None else fmt(value)  # noqa: E731
    return (f"With the measured medians per tier (GPU hit {known(gpu_only['gpu'])} ms, CPU "
            f"reload {known(offload['cpu'])} ms, recompute {known(gpu_only['miss'])} ms), the "
            f"model predicts a second-pass mean TTFT of {side('GPU', True)} ms below GPU {ws} "
            f"and {side('GPU', False)} ms from it; at GPU {scenario['cpu_sweep_gpu']} a CPU tier "
            f"of {ws} tokens or more gives {side('CPU', False)} ms, less gives "
            f"{side('CPU', True)} ms.")


def section(predicted: pl.DataFrame, latencies: dict, scenario: dict) -> Section | None:
    """The predicted-TTFT chart with its caption, or None when no second pass is predicted."""
    if predicted_frame(predicted).is_empty():
        return None
    return Section("predicted", predicted_chart(predicted, scenario),
                   predicted_caption(predicted, latencies, scenario))
