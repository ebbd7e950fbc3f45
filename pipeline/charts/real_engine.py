"""Report sections for a real engine: llama.cpp measured vs predicted tiers, and its TTFT.

Input: ``pipeline.measure.llamacpp.compare.load_measurement(path)`` of a ``--local-engine``
file (e.g. ``data/measured/llamacpp_lab.jsonl``). ``sections(joined)`` returns two
``Section``s: the tier of every request as the engine's log reports it, next to the llama.cpp
model's prediction and plain LRU's; and TTFT per request coloured by the measured tier.
"""

from __future__ import annotations

import altair as alt
import polars as pl

from pipeline.charts import Section
from pipeline.charts.parts import tooltips
from pipeline.cache.tiers import TIERS

__all__ = ["sections", "tier_frame", "tiers_caption", "tiers_chart", "ttft_caption",
           "ttft_chart"]

SOURCES = {"server_tier": "measured (engine log)", "predicted_tier": "llama.cpp model",
           "lru_tier": "plain LRU"}
TIER_NAMES = {"gpu": "live context", "cpu": "RAM cache", "miss": "recomputed"}
COLOURS = ["#2e7d32", "#1565c0", "#c62828"]


def _tier_colour() -> alt.Color:
    return alt.Color("tier:N", title="tier", sort=[TIER_NAMES[t] for t in TIERS],
                     scale=alt.Scale(domain=[TIER_NAMES[t] for t in TIERS], range=COLOURS))


def tier_frame(joined: pl.DataFrame) -> pl.DataFrame:
    """One row per (config, request, source): the tier each source gives the request."""
    return (joined.select("config", "request", "pass", "doc", "ttft_ms", *SOURCES)
            .with_columns(pl.col(name).cast(pl.String) for name in SOURCES)
            .unpivot(index=["config", "request", "pass", "doc", "ttft_ms"],
                     on=list(SOURCES), variable_name="source", value_name="tier")
            .with_columns(pl.col("source").replace_strict(SOURCES),
                          pl.col("tier").replace_strict(TIER_NAMES)))


def tiers_chart(joined: pl.DataFrame) -> alt.FacetChart:
    """A strip per (config, source): one cell per request, coloured by tier."""
    frame = tier_frame(joined)
    pass_starts = sorted(set(joined.group_by("config", "pass").agg(pl.col("request").min())
                             ["request"].to_list()))
    return alt.Chart(frame).mark_rect(stroke="white", strokeWidth=0.5).encode(
        x=alt.X("request:O", title="request (in sending order; ticks where a pass starts)",
                axis=alt.Axis(labelAngle=0, values=pass_starts)),
        y=alt.Y("source:N", title=None, sort=list(SOURCES.values())),
        color=_tier_colour(),
        tooltip=tooltips("config", "pass", "doc", "source", "tier",
                         alt.Tooltip("ttft_ms:Q", format=".1f")),
    ).properties(width=620, height=66).facet(
        row=alt.Row("config:N", title=None, sort=list(dict.fromkeys(joined["config"]))))


def tiers_caption(joined: pl.DataFrame) -> str:
    """How many requests each prediction gets right, per config."""
    parts = []
    for (config,), group in joined.group_by("config", maintain_order=True):
        model = (group["predicted_tier"].cast(pl.String) == group["server_tier"]).sum()
        lru = (group["lru_tier"].cast(pl.String) == group["server_tier"]).sum()
        parts.append(f"{config}: model {model}/{group.height}, LRU {lru}/{group.height}")
    return ("llama.cpp's own log against the predictions, request by request (the model "
            "knows the RAM cache's longest-prefix match, which refreshes the oldest entry "
            "on every miss; plain LRU does not): " + "; ".join(parts) + ".")


def ttft_chart(joined: pl.DataFrame) -> alt.FacetChart:
    """TTFT per request (log scale), coloured by the measured tier."""
    frame = joined.with_columns(tier=pl.col("server_tier").replace_strict(TIER_NAMES))
    return alt.Chart(frame).mark_circle(size=42, opacity=0.9).encode(
        x=alt.X("request:Q", title="request (in sending order)"),
        y=alt.Y("ttft_ms:Q", title="TTFT (ms, log scale)", scale=alt.Scale(type="log")),
        color=_tier_colour(),
        tooltip=tooltips("config", "pass", "doc", "tier", alt.Tooltip("ttft_ms:Q", format=".1f")),
    ).properties(width=230, height=220).facet(
        column=alt.Column("config:N", title=None, sort=list(dict.fromkeys(joined["config"]))))


def ttft_caption(joined: pl.DataFrame) -> str:
    """Median TTFT per measured tier over every config, and the miss/hit ratio."""
    medians = dict(joined.group_by("server_tier").agg(pl.col("ttft_ms").median()).rows())
    parts = [f"{TIER_NAMES[t]} {medians[t]:.1f} ms" for t in TIERS if t in medians]
    hit = joined.filter(pl.col("server_tier") != "miss")["ttft_ms"].median()
    ratio = (f"; a miss is {medians['miss'] / hit:.0f}x slower than a hit"
             if hit and "miss" in medians else "")
    return f"Measured TTFT per request, median by tier: {', '.join(parts)}{ratio}."


def sections(joined: pl.DataFrame) -> list[Section]:
    """The real-engine sections of the report."""
    return [Section("real-engine-tiers", tiers_chart(joined), tiers_caption(joined)),
            Section("real-engine-ttft", ttft_chart(joined), ttft_caption(joined))]
