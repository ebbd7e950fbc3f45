"""Report sections of a trace replay (``python -m pipeline trace``): hit ratio over GPU
capacity, over CPU capacity at a fixed GPU, tail-first vs head-first, and the reuse-distance
distribution. Each function takes small polars frames and returns a ``Section``.

Capacities are worded by ``Units``: tokens with thousands separators, and GiB beside them
(in the captions, tooltips and a second line of axis labels) when the run was given sizes
through a KV model (``--model`` and the like)."""

from __future__ import annotations

import altair as alt
import polars as pl

from pipeline.charts import Section
from pipeline.charts.parts import TOKENS, Units

__all__ = ["Units", "gpu_section", "cpu_section", "orders_section", "reuse_section"]

WIDTH, HEIGHT = 760, 300
RATIO_COLOURS = {"block hit ratio": "#1f77b4", "token hit ratio": "#ff7f0e"}
ORDER_COLOURS = {"tail-first": "#2ca02c", "head-first": "#d62728"}


def _long_ratios(frame: pl.DataFrame, x: str) -> pl.DataFrame:
    return frame.unpivot(["block_hit_ratio", "token_hit_ratio"], index=x,
                         variable_name="ratio", value_name="value").with_columns(
        pl.col("ratio").str.replace_all("_", " "))




def _positive(frame: pl.DataFrame, field: str) -> pl.DataFrame:
    """Rows with ``field`` > 0 (a log axis has no 0; capacity 0 is in the printed table)."""
    return frame.filter(pl.col(field) > 0)


def _pct(value: float) -> str:
    return f"{100 * value:.1f} %"


def gpu_section(curve: pl.DataFrame, order: str, infinite_ratio: float,
                half: int | None = None, units: Units = TOKENS) -> Section:
    """``curve``: gpu_capacity (tokens), block_hit_ratio, token_hit_ratio; ``half``: the
    exact capacity (tokens) where the block hit ratio reaches half ``infinite_ratio``
    (``pipeline.trace.engine.gpu_crossing``), else the first grid point that does (the
    caption says so)."""
    long = units.with_gib(_long_ratios(_positive(curve, "gpu_capacity"), "gpu_capacity"),
                          "gpu_capacity")
    chart = (alt.Chart(long).mark_line(interpolate="step-after", strokeWidth=2)
             .encode(x=units.axis("gpu_capacity", "GPU capacity (tokens, log)"),
                     y=alt.Y("value:Q", title="hit ratio", scale=alt.Scale(domain=[0, 1])),
                     color=alt.Color("ratio:N", title=None, scale=alt.Scale(
                         domain=list(RATIO_COLOURS), range=list(RATIO_COLOURS.values()))),
                     tooltip=[*units.tooltip("gpu_capacity"), alt.Tooltip("ratio:N"),
                              alt.Tooltip("value:Q", format=".4f")])
             .properties(title=f"Hit ratio over GPU capacity ({order}, no CPU tier)",
                         width=WIDTH, height=HEIGHT))
    top = curve.row(-1, named=True)
    where = "at"
    if half is None:
        half = curve.filter(pl.col("block_hit_ratio") >= infinite_ratio / 2)["gpu_capacity"].min()
        where = "by the chart's capacity of"
    caption = (f"The GPU alone reaches half the infinite-cache block hit ratio "
               f"({_pct(infinite_ratio)}) {where} {units.tokens(half)} and "
               f"{_pct(top['block_hit_ratio'])} of blocks ({_pct(top['token_hit_ratio'])} "
               f"of prompt tokens) when it holds every distinct block, at "
               f"{units.tokens(top['gpu_capacity'])}.")
    return Section("trace-gpu", chart, caption)


def cpu_section(curve: pl.DataFrame, gpu_capacity: int, order: str,
                units: Units = TOKENS) -> Section:
    """``curve``: cpu_capacity, gpu_token_ratio, cpu_token_ratio (shares of prompt tokens)."""
    long = units.with_gib(_positive(curve, "cpu_capacity").unpivot(
        ["gpu_token_ratio", "cpu_token_ratio"], index="cpu_capacity", variable_name="tier",
        value_name="share").with_columns(
        pl.col("tier").str.replace("_token_ratio", "").str.to_uppercase()), "cpu_capacity")
    chart = (alt.Chart(long).mark_area(interpolate="step-after", opacity=0.85)
             .encode(x=units.axis("cpu_capacity", "CPU capacity (tokens, log)"),
                     y=alt.Y("share:Q", stack=True, title="share of prompt tokens served",
                             scale=alt.Scale(domain=[0, 1])),
                     color=alt.Color("tier:N", title="served by", scale=alt.Scale(
                         domain=["GPU", "CPU"], range=["#1f77b4", "#9467bd"])),
                     tooltip=[*units.tooltip("cpu_capacity"), alt.Tooltip("tier:N"),
                              alt.Tooltip("share:Q", format=".4f")])
             .properties(title=f"What a CPU tier adds at GPU {units.tokens(gpu_capacity)} "
                               f"(CPU {order})", width=WIDTH, height=HEIGHT))
    first, last = curve.row(0, named=True), curve.row(-1, named=True)
    caption = (f"At GPU {units.tokens(gpu_capacity)} the GPU serves "
               f"{_pct(first['gpu_token_ratio'])} of prompt tokens; a CPU tier of "
               f"{units.tokens(last['cpu_capacity'])} adds {_pct(last['cpu_token_ratio'])}, "
               "and the rest is recomputed.")
    return Section("trace-cpu", chart, caption)


def orders_section(curves: pl.DataFrame, units: Units = TOKENS, whose: str = "") -> Section:
    """``curves``: order, gpu_capacity, token_hit_ratio; ``whose``: the model they are, when
    not the run's GPU model (in the title)."""
    chart = (alt.Chart(units.with_gib(_positive(curves, "gpu_capacity"), "gpu_capacity"))
             .mark_line(interpolate="step-after", strokeWidth=2)
             .encode(x=units.axis("gpu_capacity", "GPU capacity (tokens, log)"),
                     y=alt.Y("token_hit_ratio:Q", title="token hit ratio",
                             scale=alt.Scale(domain=[0, 1])),
                     color=alt.Color("order:N", title="GPU order", scale=alt.Scale(
                         domain=list(ORDER_COLOURS), range=list(ORDER_COLOURS.values()))),
                     strokeDash=alt.StrokeDash("order:N", legend=None),
                     tooltip=[alt.Tooltip("order:N"), *units.tooltip("gpu_capacity"),
                              alt.Tooltip("token_hit_ratio:Q", format=".4f")])
             .properties(title="Tail-first (vLLM) vs head-first (LMCache) eviction on the GPU"
                               + (f" ({whose})" if whose else ""),
                         width=WIDTH, height=HEIGHT))
    gap = (curves.pivot("order", index="gpu_capacity", values="token_hit_ratio")
           .with_columns(gap=pl.col("tail-first") - pl.col("head-first"))
           .sort("gap", descending=True).row(0, named=True))
    caption = (f"The orders differ most at {units.tokens(gap['gpu_capacity'])}: tail-first "
               f"{_pct(gap['tail-first'])} vs head-first {_pct(gap['head-first'])} of prompt "
               f"tokens (tail-first keeps a request's head, which every prefix match needs).")
    return Section("trace-orders", chart, caption)


def reuse_section(reuse: pl.DataFrame, gpu_capacity: int, units: Units = TOKENS,
                  whose: str = "") -> Section:
    """``reuse``: reuse_tokens (one row per reused block: its LRU stack distance in tokens);
    ``whose``: the LRU model they are, when not the run's GPU model (in the caption)."""
    total = reuse.height
    beyond = reuse.filter(pl.col("reuse_tokens") > gpu_capacity).height
    cdf = (reuse.group_by("reuse_tokens").agg(n=pl.len()).sort("reuse_tokens")
           .select("reuse_tokens", share=pl.col("n").cum_sum() / max(total, 1))
           .group_by(bucket=(pl.col("reuse_tokens").log(10) * 50).floor())   # 50 per decade
           .agg(pl.all().last()).sort("reuse_tokens").drop("bucket"))
    line = (alt.Chart(units.with_gib(cdf, "reuse_tokens"))
            .mark_line(interpolate="step-after", strokeWidth=2, color="#8c564b")
            .encode(x=units.axis("reuse_tokens", "reuse distance (tokens of distinct blocks "
                                 "between reuses, log)"),
                    y=alt.Y("share:Q", title="share of reuses within",
                            scale=alt.Scale(domain=[0, 1])),
                    tooltip=[*units.tooltip("reuse_tokens"),
                             alt.Tooltip("share:Q", format=".4f")]))
    rule = alt.Chart(pl.DataFrame({"x": [max(gpu_capacity, 1)],
                                   "label": [f"GPU {gpu_capacity:,}"]})).encode(x=alt.X("x:Q"))
    chart = alt.layer(line, rule.mark_rule(strokeDash=[5, 4], color="#555"),
                      rule.mark_text(align="left", dx=4, color="#555")
                      .encode(y=alt.YValue(12), text=alt.Text("label:N")),
                      title="Reuse-distance distribution: how far apart reuses are",
                      width=WIDTH, height=HEIGHT)
    caption = (f"{_pct(beyond / total if total else 0.0)} of the {total:,} block reuses lie "
               f"farther apart than {f'an LRU ({whose})' if whose else 'a'} GPU of "
               f"{units.tokens(gpu_capacity)} reaches: the offload "
               "opportunity a CPU tier can turn from recomputation into reloads.")
    return Section("trace-reuse", chart, caption)
