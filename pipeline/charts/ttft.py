"""Report section: measured TTFT per request, coloured by the tier the simulator predicts."""

from __future__ import annotations

import altair as alt
import polars as pl

from pipeline.charts import Section
from pipeline.charts.parts import (HEIGHT, WIDTH, fmt, pass_order, tier_colour, tier_phrase,
                                   tooltips, ttft_stats)
from pipeline.base.config import BASELINE, OFFLOADED
from pipeline.base.stats import exact_median
from pipeline.sweeps import SECOND_PASS


#: Most request dots drawn in all: beyond it each (config, pass) shows an even sample (every
#: k-th request in order), so a 200k-request file still makes a small page. The medians are
#: computed from every request, never from the sample.
MAX_DOTS = 3000


def chart_frame(requests: pl.DataFrame, max_dots: int = MAX_DOTS) -> tuple[pl.DataFrame, int]:
    """(rows to draw, requests shown): sampled request rows (kind "request") and one exact
    median row per (config, pass) (kind "median")."""
    groups = max(requests.select("config", "pass").n_unique(), 1)
    per_group = max(max_dots // groups, 1)
    size = pl.len().over("config", "pass")
    step = ((size + per_group - 1) // per_group).cast(pl.Int64)
    shown = (requests.sort("config", "request")
             .filter(pl.int_range(pl.len()).over("config", "pass") % step == 0)
             .select("config", "pass", "doc", pl.col("tier").cast(pl.String), "ttft_ms",
                     kind=pl.lit("request")))
    medians = (requests.group_by("config", "pass", maintain_order=True)
               .agg(exact_median("ttft_ms").alias("ttft_ms"))
               .select("config", "pass", pl.lit(None, pl.Int64).alias("doc"),
                       pl.lit(None, pl.String).alias("tier"), "ttft_ms",
                       kind=pl.lit("median")))
    return pl.concat([shown, medians.cast(shown.schema)]), shown.height


def ttft_chart(requests: pl.DataFrame) -> alt.FacetChart:
    """Every request's TTFT (colour = predicted tier; an even sample beyond ``MAX_DOTS``) with
    the per-pass median (of every request) as a tick."""
    passes = pass_order(requests)
    frame, shown = chart_frame(requests)
    x = alt.X("pass:N", title=None, sort=passes, axis=alt.Axis(labelAngle=0))
    points = alt.Chart().mark_circle(size=45, opacity=0.85).encode(
        x=x, xOffset=alt.XOffset("doc:O"),
        y=alt.Y("ttft_ms:Q", title="TTFT (ms, log scale)", scale=alt.Scale(type="log")),
        color=tier_colour(),
        tooltip=tooltips("config:N", "pass:N", "doc:Q", "tier:N",
                         alt.Tooltip("ttft_ms:Q", format=".1f"))
    ).transform_filter(alt.datum.kind == "request")
    median = alt.Chart().encode(x=x, y=alt.Y("ttft_ms:Q"),
                                tooltip=tooltips("config:N", "pass:N",
                                                 alt.Tooltip("ttft_ms:Q", format=".1f",
                                                             title="p50 TTFT (ms)"))
                                ).transform_filter(alt.datum.kind == "median")
    ticks = median.mark_tick(color="black", thickness=3, size=80)
    labels = median.mark_text(dy=-13, fontSize=11, fontWeight="bold").encode(
        text=alt.Text("ttft_ms:Q", format=".3~r"))
    dots = ("dots: requests" if shown == requests.height else
            f"dots: an even sample of {shown:,} of {requests.height:,} requests")
    return alt.layer(points, ticks, labels, data=frame).properties(
        width=WIDTH // 2 - 20, height=HEIGHT).facet(
        column=alt.Column("config:N", title=None, sort=[BASELINE, OFFLOADED],
                          header=alt.Header(labelFontSize=13)),
    ).properties(title=alt.Title("Measured time to first token per request",
                                 subtitle=f"{dots} (colour = tier the simulator predicts); "
                                          "black tick and label: median of all (ms)"))


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
