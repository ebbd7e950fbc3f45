"""The fleet report section: hit ratio and TTFT p90 per router against per-instance GPU
capacity, the capacity each router saves over round robin at equal TTFT p90, imbalance.

Capacity saved: for each (instances, load) and each TTFT p90 t that round robin reaches,
the fewest GPU blocks per instance c' at which a router's TTFT p90 <= t and round robin's
own fewest c; saved = 1 - c'/c (a router that never reaches t has no row). Charts: altair, saved inline.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:                       # altair is imported only when the page is drawn
    import altair as alt

__all__ = ["capacity_saved", "report_html"]


def capacity_saved(fleet: pl.DataFrame, baseline: str = "round-robin") -> pl.DataFrame:
    """Per (instances, load), each TTFT p90 the baseline reaches, and per router the fewest
    GPU blocks per instance that reach it; ``saved`` = 1 - router's / baseline's blocks."""
    targets = (fleet.filter(pl.col("router") == baseline)
               .select("instances", "load", target_ms="ttft_p90_ms").unique())
    if targets.height == 0:
        return pl.DataFrame()
    needed = (fleet.join(targets, on=["instances", "load"])
              .filter(pl.col("ttft_p90_ms") <= pl.col("target_ms"))
              .group_by("router", "instances", "load", "target_ms")
              .agg(pl.col("gpu_blocks").min().alias("blocks_needed")))
    base = needed.filter(pl.col("router") == baseline).select(
        "instances", "load", "target_ms", baseline_blocks="blocks_needed")
    return (needed.join(base, on=["instances", "load", "target_ms"])
            .with_columns(saved=1 - pl.col("blocks_needed") / pl.col("baseline_blocks"))
            .select("instances", "load", "target_ms", "router", "blocks_needed",
                    "baseline_blocks", "saved")
            .sort("instances", "load", "target_ms", "router"))


def _chart(fleet: pl.DataFrame, field: str, title: str) -> alt.Chart:
    import altair as alt

    return (alt.Chart(alt.Data(values=fleet.to_dicts())).mark_line(point=True)
            .encode(x=alt.X("gpu_blocks:Q", title="GPU blocks per instance"),
                    y=alt.Y(f"{field}:Q", title=title), color=alt.Color("router:N"),
                    strokeDash=alt.StrokeDash("load:N"), shape=alt.Shape("instances:N"))
            .properties(width=560, height=300))


def _table(frame: pl.DataFrame, digits: int = 3) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in frame.columns)
    rows = []
    for row in frame.iter_rows():
        cells = "".join(f"<td>{v:.{digits}f}</td>" if isinstance(v, float) else
                        f"<td>{html.escape(str(v))}</td>" for v in row)
        rows.append(f"<tr>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _best(fleet: pl.DataFrame, field: str, high: bool) -> str:
    row = fleet.sort(field, descending=high).row(0, named=True)
    return (f"best {field}: {row['router']} ({row[field]:.3g}) at {row['gpu_blocks']} blocks, "
            f"{row['instances']} instances, load {row['load']:g}.")


def report_html(fleet: pl.DataFrame, label: str, model_label: str) -> str:
    """A self-contained, offline page of the fleet section."""
    from pipeline.charts import Section, page_html

    saved = capacity_saved(fleet)
    sections = [Section("fleet-hit", _chart(fleet, "hit_ratio", "prefix hit ratio"),
                        "Prefix hit ratio (GPU + CPU tokens) per router against GPU blocks "
                        "per instance; " + _best(fleet, "hit_ratio", True)),
                Section("fleet-ttft", _chart(fleet, "ttft_p90_ms", "TTFT p90 (ms)"),
                        "TTFT p90 per router against GPU blocks per instance; "
                        + _best(fleet, "ttft_p90_ms", False)),
                Section("fleet-imbalance", _chart(fleet, "imbalance", "imbalance"),
                        "Imbalance: the busiest instance's requests over the mean (1 = "
                        "even).")]
    prelude = (f"<p>Workload: {html.escape(label)}. Step times: {html.escape(model_label)}."
               " Simulated engines (a model of vLLM v1's scheduler), not measurements.</p>"
               "<h3>GPU blocks a router needs for round robin's TTFT p90</h3>"
               + (_table(saved) if saved.height else "<p>No round-robin points.</p>")
               + "<h3>Points</h3>"
               + _table(fleet.select("router", "instances", "gpu_blocks", "load", "hit_ratio",
                                     "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms",
                                     "throughput_rps", "imbalance")))
    return page_html("kvlab fleet", "N simulated engine instances behind each router.",
                     [("Routers", prelude, sections)])
