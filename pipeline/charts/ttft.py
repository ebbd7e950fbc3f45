"""Report section: measured TTFT per request, coloured by the tier the simulator predicts."""

from __future__ import annotations

import altair as alt
import polars as pl

from pipeline.charts import Section
from pipeline.charts.parts import (HEIGHT, WIDTH, fmt, pass_order, tier_colour, tier_phrase,
                                   ttft_stats)
from pipeline.config import BASELINE, OFFLOADED
from pipeline.sweeps import SECOND_PASS


def ttft_chart(requests: pl.DataFrame) -> alt.FacetChart:
    """Every request's TTFT (colour = predicted tier) with the per-pass median as a tick."""
    passes = pass_order(requests)
    x = alt.X("pass:N", title=None, sort=passes, axis=alt.Axis(labelAngle=0))
    points = alt.Chart().mark_circle(size=45, opacity=0.85).encode(
        x=x, xOffset=alt.XOffset("doc:O"),
        y=alt.Y("ttft_ms:Q", title="TTFT (ms, log scale)", scale=alt.Scale(type="log")),
        color=tier_colour(),
        tooltip=["config:N", "pass:N", "doc:Q", "tier:N",
                 alt.Tooltip("ttft_ms:Q", format=".1f")])
    median = alt.Chart().encode(x=x, y=alt.Y("median(ttft_ms):Q"),
                                tooltip=["config:N", "pass:N",
                                         alt.Tooltip("median(ttft_ms):Q", format=".1f",
                                                     title="p50 TTFT (ms)")])
    ticks = median.mark_tick(color="black", thickness=3, size=80)
    labels = median.mark_text(dy=-13, fontSize=11, fontWeight="bold").encode(
        text=alt.Text("median(ttft_ms):Q", format=".3~r"))
    return alt.layer(points, ticks, labels, data=requests).properties(
        width=WIDTH // 2 - 20, height=HEIGHT).facet(
        column=alt.Column("config:N", title=None, sort=[BASELINE, OFFLOADED],
                          header=alt.Header(labelFontSize=13)),
    ).properties(title=alt.Title("Measured time to first token per request",
                                 subtitle="dots: requests (colour = tier the simulator "
                                          "predicts); black tick and label: median (ms)"))


def predicted_tiers(requests: pl.DataFrame, config: str, pass_name: str) -> str:
    """``"10 misses"``: the simulator's predicted tiers of one config's pass."""
    return tier_phrase(requests.filter(pl.col("config") == config, pl.col("pass") == pass_name)
                       .group_by("tier").len("count"))


def ttft_caption(requests: pl.DataFrame) -> str:
    """One sentence: the second pass's p50 per config (baseline, lmcache), with predicted tiers."""
    passes = pass_order(requests)
    replay = passes[min(SECOND_PASS, len(passes) - 1)]
    p50 = dict(ttft_stats(requests).filter(pl.col("pass") == replay)
               .select("config", "p50").iter_rows())
    parts = [f"{config} {fmt(p50[config])} ms ({predicted_tiers(requests, config, replay)})"
             for config in (BASELINE, OFFLOADED) if config in p50]
    which = "Second pass" if len(passes) > SECOND_PASS else "Pass"
    return f"{which} ({replay}) p50 TTFT: {' vs '.join(parts) or 'no baseline or lmcache'}."


def section(requests: pl.DataFrame) -> Section:
    """The measured TTFT chart with its caption (attributed requests, not empty)."""
    return Section("ttft", ttft_chart(requests), ttft_caption(requests))
