"""``plan --fleet --cost``'s page: every simulated configuration's price against its TTFT
p90, the frontier (nothing cheaper is faster) and the target."""

from __future__ import annotations

import altair as alt
import polars as pl

from pipeline.charts import Section, page_html

__all__ = ["frontier_section", "cost_page"]


def frontier_section(fleet: pl.DataFrame, edge: pl.DataFrame, target_ms: float | None,
                     synthetic: str) -> Section:
    """USD per hour (x) against TTFT p90 (y) per simulated point, by kind and router (its
    engines and CPU tier in the tooltip); the frontier as a step line; the target as a
    rule."""
    tier = (pl.when(pl.col("cpu_tokens") > 0)
            .then(pl.format(" + CPU {} tokens", "cpu_tokens")).otherwise(pl.lit(""))
            if "cpu_tokens" in fleet.columns else pl.lit(""))
    if "tier" in fleet.columns:                # a stack or native offloading: its name
        tier = (pl.when(pl.col("tier").str.contains(":"))
                .then(pl.format(" + tier {}", "tier")).otherwise(tier))
    points = fleet.drop_nulls("ttft_p90_ms").with_columns(
        engines=pl.concat_str(pl.when(pl.col("kind") == "disaggregated")
                              .then(pl.format("{} prefill + {} decode", "instances",
                                              "decode_instances"))
                              .otherwise(pl.format("{} instances", "instances")), tier)).select(
        "usd_per_hour", "ttft_p90_ms", "kind", "router", "engines", "gpu_blocks",
        "usd_per_million_output_tokens")
    base = alt.Chart(points).mark_point(filled=True, size=70, opacity=0.8).encode(
        x=alt.X("usd_per_hour:Q", title="USD per hour"),
        y=alt.Y("ttft_p90_ms:Q", title="TTFT p90 (ms)", scale=alt.Scale(type="log")),
        color=alt.Color("kind:N", title="fleet"), shape=alt.Shape("router:N"),
        tooltip=["kind", "router", "engines", "gpu_blocks", "usd_per_hour", "ttft_p90_ms",
                 "usd_per_million_output_tokens"])
    line = alt.Chart(edge.select("usd_per_hour", "ttft_p90_ms")).mark_line(
        interpolate="step-after", color="#555").encode(x="usd_per_hour:Q", y="ttft_p90_ms:Q")
    layers = [line, base]
    if target_ms is not None:
        layers.append(alt.Chart(pl.DataFrame({"target": [target_ms]})).mark_rule(
            strokeDash=[4, 3], color="#c62828").encode(y="target:Q"))
    chart = alt.layer(*layers).properties(width=760, height=380)
    caption = (f"{points.height} configurations simulated; {edge.height} on the frontier "
               f"(no cheaper configuration is faster). {synthetic}")
    return Section("cost-frontier", chart, caption)


def cost_page(section: Section, lede: str) -> str:
    return page_html("kvlab: what a fleet costs", lede, [("Price against TTFT p90", "",
                                                          [section])])
