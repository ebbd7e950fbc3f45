"""Report section: the GPU cliff (second-pass hits vs GPU capacity, no CPU tier)."""

from __future__ import annotations

import altair as alt
import polars as pl

from pipeline.charts.parts import TIER_COLOURS, cliff_chart, cliff_summary, span, working_set
from pipeline.sweeps import second_pass


def gpu_cliff_chart(aggregates: pl.DataFrame, scenario: dict) -> alt.LayerChart:
    """Second-pass hits vs GPU capacity (no CPU tier), working set and spec points marked."""
    return cliff_chart(second_pass(aggregates, "gpu_cliff"), "gpu_capacity", "hits",
                       scenario["gpu_spec_points"], "GPU capacity (tokens)", "second-pass hits",
                       TIER_COLOURS[0], scenario,
                       "GPU cliff: second-pass hits vs GPU capacity (no CPU tier)")


def gpu_cliff_caption(aggregates: pl.DataFrame, scenario: dict) -> str:
    """One sentence: hits before the cliff, and the capacity where all hit."""
    frame = second_pass(aggregates, "gpu_cliff")
    n, ws = int(frame.get_column("accesses").max()), working_set(scenario)
    s = cliff_summary(frame, "gpu_capacity", "hits", pl.col("hits") == pl.col("accesses"))
    if s["cliff"] is None:
        return (f"Second-pass hits never reach all {n}: {span(s['low'], s['high'])} at every "
                f"GPU capacity up to {s['top']} tokens (working set {ws}).")
    short = " (one token short of the working set)" if s["last_before"] == ws - 1 else ""
    product = f"{scenario['docs']} × {scenario['tokens']}"
    where = (f", the working set ({product})" if s["cliff"] == ws
             else f" (working set {product} = {ws})")
    return (f"Second-pass hits are {span(s['low'], s['high'])} at every GPU capacity up to "
            f"{s['last_before']} tokens{short} and all {n} from {s['cliff']}{where}.")

