"""Report section: the tier of every access per pass, GPU only beside GPU + CPU."""

from __future__ import annotations

import altair as alt
import polars as pl

from pipeline.charts.parts import HEIGHT, WIDTH, tier_colour, tier_phrase, tooltips
from pipeline.cache.tiers import COUNT_COLUMNS, TIER

#: aggregates column -> the tier it counts.
COLUMN_TIERS = {column: tier for tier, column in COUNT_COLUMNS.items()}


def breakdown_frame(aggregates: pl.DataFrame, scenario: dict) -> pl.DataFrame:
    """Tier counts per pass for GPU only vs GPU + CPU, long form (one row per tier)."""
    gpu, cpu = scenario["cpu_sweep_gpu"], scenario["offload_cpu"]
    rows = aggregates.filter(pl.col("sweep") == "cpu_cliff", pl.col("gpu_capacity") == gpu,
                             pl.col("cpu_capacity").is_in([0, cpu]))
    if rows.get_column("cpu_capacity").n_unique() < len({0, cpu}):
        raise ValueError(f"cpu_cliff sweep at GPU {gpu} needs CPU capacities 0 and {cpu}")
    return (rows
            .with_columns(
                setup=pl.when(pl.col("cpu_capacity") == 0).then(pl.lit("GPU only"))
                        .otherwise(pl.format("GPU + CPU {}", pl.col("cpu_capacity"))),
                pass_label=pl.format("pass {} ({})", pl.col("pass_index") + 1,
                                     pl.col("pass_order")))
            .unpivot(on=list(COLUMN_TIERS), index=["setup", "cpu_capacity", "pass_index",
                                                   "pass_label"],
                     variable_name="tier", value_name="count")
            .with_columns(tier=pl.col("tier").replace_strict(COLUMN_TIERS, return_dtype=TIER))
            .with_columns(tier_rank=pl.col("tier").to_physical())   # stacking order for vega
            .sort("cpu_capacity", "pass_index", "tier"))


def breakdown_chart(aggregates: pl.DataFrame, scenario: dict) -> alt.FacetChart:
    """Stacked gpu/cpu/miss bars per pass, GPU only beside GPU + CPU."""
    frame = breakdown_frame(aggregates, scenario)
    passes = frame.get_column("pass_index").n_unique()
    bars = alt.Chart(frame).mark_bar().encode(      # many passes: slanted labels stay apart
        x=alt.X("pass_label:N", title=None, sort=None,
                axis=alt.Axis(labelAngle=0 if passes <= 4 else -45, labelOverlap=False)),
        y=alt.Y("count:Q", title="accesses", stack="zero"),
        color=tier_colour("tier"),
        order=alt.Order("tier_rank:Q"),
        tooltip=tooltips("setup:N", "pass_label:N", "tier:N", "count:Q"))
    return bars.properties(width=WIDTH // 2 - 20, height=HEIGHT - 40).facet(
        column=alt.Column("setup:N", title=None, sort=frame.get_column("setup").unique(
            maintain_order=True).to_list(), header=alt.Header(labelFontSize=13)),
    ).properties(title=f"Tier of every access per pass at GPU {scenario['cpu_sweep_gpu']}")


def breakdown_caption(aggregates: pl.DataFrame, scenario: dict) -> str:
    """One sentence: the last pass's tiers without and with the CPU tier."""
    frame = breakdown_frame(aggregates, scenario)
    last = frame.filter(pl.col("pass_index") == pl.col("pass_index").max())
    alone = tier_phrase(last.filter(pl.col("cpu_capacity") == 0))
    if scenario["offload_cpu"] == 0:
        return (f"In {last.get_column('pass_label')[0]} the GPU alone serves {alone}; this "
                f"run has no CPU tier (--offload-cpu 0).")
    offload = tier_phrase(last.filter(pl.col("cpu_capacity") != 0))
    return (f"In {last.get_column('pass_label')[0]} the GPU alone serves "
            f"{alone}, while adding a {scenario['offload_cpu']}-token CPU tier gives "
            f"{offload}.")

