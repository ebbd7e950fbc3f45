"""Report section: the baseline / lmcache TTFT ratio per pass."""

from __future__ import annotations

import altair as alt
import polars as pl

from pipeline.charts import Section
from pipeline.charts.parts import HEIGHT, WIDTH, pass_order, ttft_stats
from pipeline.base.config import BASELINE, OFFLOADED


def ratio_frame(requests: pl.DataFrame) -> pl.DataFrame:
    """baseline / lmcache ratio of p50 and mean TTFT per pass, long form."""
    stats = ttft_stats(requests)
    return (stats.filter(pl.col("config") == BASELINE).drop("config")
            .join(stats.filter(pl.col("config") == OFFLOADED).drop("config"),
                  on="pass", suffix="_offload")
            .select("pass", p50=pl.col("p50") / pl.col("p50_offload"),
                    mean=pl.col("mean") / pl.col("mean_offload"))
            .unpivot(index="pass", variable_name="statistic", value_name="ratio"))


def ratio_chart(requests: pl.DataFrame) -> alt.LayerChart:
    """Bars of the baseline/lmcache TTFT ratio per pass, a dashed rule at 1."""
    base = alt.Chart(ratio_frame(requests)).encode(
        x=alt.X("pass:N", title=None, sort=pass_order(requests), axis=alt.Axis(labelAngle=0)),
        xOffset=alt.XOffset("statistic:N", sort=["p50", "mean"]),
        y=alt.Y("ratio:Q", title=f"{BASELINE} / {OFFLOADED} TTFT"))
    bars = base.mark_bar().encode(
        color=alt.Color("statistic:N", title="statistic", sort=["p50", "mean"],
                        scale=alt.Scale(range=["#6a51a3", "#bcbddc"])),
        tooltip=[alt.Tooltip("pass:N"), alt.Tooltip("statistic:N"),
                 alt.Tooltip("ratio:Q", format=".2f")])
    labels = base.mark_text(dy=-6, baseline="bottom", fontSize=11).encode(
        text=alt.Text("ratio:Q", format=".2f"))
    one = alt.Chart(pl.DataFrame({"y": [1.0]})).mark_rule(strokeDash=[5, 4], color="#555") \
        .encode(y=alt.Y("y:Q"))
    return alt.layer(
        bars, labels, one, title=f"TTFT ratio {BASELINE} / {OFFLOADED} per pass (above 1: {OFFLOADED} faster)",
        width=WIDTH, height=HEIGHT - 40)


def ratio_caption(requests: pl.DataFrame) -> str:
    """One sentence: the p50 ratio of every pass."""
    order = pass_order(requests)
    parts = (ratio_frame(requests).filter(pl.col("statistic") == "p50")
             .sort(pl.col("pass").cast(pl.Enum(order)))
             .select(pl.format("{}× ({})", pl.col("ratio").round(2), "pass"))
             .to_series().to_list())
    return f"{BASELINE.capitalize()}/{OFFLOADED} p50 TTFT ratio by pass: {', '.join(parts)}."


def section(requests: pl.DataFrame) -> Section | None:
    """The ratio chart with its caption, or None when no pass was measured under both."""
    if ratio_frame(requests).is_empty():
        return None
    return Section("ratio", ratio_chart(requests), ratio_caption(requests))
