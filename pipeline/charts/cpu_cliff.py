"""Report section: the CPU cliff (second-pass misses vs CPU capacity, GPU fixed)."""

from __future__ import annotations

import altair as alt
import polars as pl

from pipeline.charts.parts import TIER_COLOURS, cliff_chart, cliff_summary, span, working_set
from pipeline.sweeps import second_pass


def cpu_cliff_chart(aggregates: pl.DataFrame, scenario: dict) -> alt.LayerChart:
    """Second-pass misses vs CPU capacity at a fixed GPU capacity."""
    return cliff_chart(second_pass(aggregates, "cpu_cliff"), "cpu_capacity", "misses",
                       scenario["cpu_spec_points"], "CPU capacity (tokens)", "second-pass misses",
                       TIER_COLOURS[2], scenario, f"CPU cliff: second-pass misses vs CPU capacity "
                       f"(GPU fixed at {scenario['cpu_sweep_gpu']})")


def cpu_cliff_caption(aggregates: pl.DataFrame, scenario: dict) -> str:
    """One sentence: misses before the CPU holds the working set, and where they vanish."""
    frame = second_pass(aggregates, "cpu_cliff")
    ws, gpu = working_set(scenario), scenario["cpu_sweep_gpu"]
    s = cliff_summary(frame, "cpu_capacity", "misses", pl.col("misses") == 0)
    if s["cliff"] is None:
        return (f"With GPU {gpu}, second-pass misses stay {span(s['low'], s['high'])} at "
                f"every CPU capacity up to {s['top']} tokens (working set {ws}).")
    if s["last_before"] is None:                    # no miss even without a CPU tier
        return (f"With GPU {gpu}, the GPU alone holds the working set ({ws} tokens): no "
                f"second-pass misses at any CPU capacity, so a CPU tier adds nothing here.")
    whole = ": the CPU tier must hold the whole working set" if s["cliff"] == ws else ""
    return (f"With GPU {gpu}, second-pass misses stay {span(s['low'], s['high'])} at every "
            f"CPU capacity up to {s['last_before']} tokens and drop to 0 from "
            f"{s['cliff']}{whole} ({ws} tokens).")

