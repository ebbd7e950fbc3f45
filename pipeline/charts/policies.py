"""Report sections for the policy family: hit ratio vs capacity per policy, with Belady's
OPT as the ceiling, for the lab's cyclic workload and for a Mooncake trace (object level).

``policy_sections(lab, trace)`` draws the frames it is given (``pipeline.blocks.policy_curves``:
``lab_curves``, ``trace_curves``, computed in the stage that writes the aggregates).
"""

from __future__ import annotations

import altair as alt
import polars as pl

from pipeline.charts import Section
from pipeline.charts.parts import tooltips
from pipeline.base.config import LAB_DOCS, LAB_TOKENS

__all__ = ["curve_chart", "policy_sections"]


def curve_chart(curves: pl.DataFrame, x_title: str, log_x: bool = False) -> alt.LayerChart:
    """Hit ratio vs capacity, one line per policy; OPT drawn thick and dashed as the ceiling.
    Linear axes draw steps (hits change only at the capacity points)."""
    scale = alt.Scale(type="log", nice=False) if log_x else alt.Scale(zero=True, nice=False)
    shape = "monotone" if log_x else "step-after"
    order = curves["policy"].unique(maintain_order=True).to_list()
    base = alt.Chart(curves).encode(
        x=alt.X("capacity:Q", title=x_title, scale=scale),
        y=alt.Y("hit_ratio:Q", title="hit ratio", axis=alt.Axis(format="%"),
                scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("policy:N", sort=order, title="policy"),
        tooltip=tooltips("policy", "capacity", "hits", "accesses",
                         alt.Tooltip("hit_ratio:Q", format=".1%")))
    others = base.transform_filter(alt.datum.policy != "opt").mark_line(
        strokeWidth=1.5, interpolate=shape)
    ceiling = base.transform_filter(alt.datum.policy == "opt").mark_line(
        strokeWidth=3.5, strokeDash=[6, 3], interpolate=shape)
    return alt.layer(others, ceiling, width=760, height=320)


def _gap(curves: pl.DataFrame, capacity: int) -> tuple[float, str, float]:
    at = curves.filter(pl.col("capacity") == capacity)
    best = at.filter(pl.col("policy") != "opt").sort("hit_ratio", descending=True).row(
        0, named=True)
    opt = at.filter(pl.col("policy") == "opt")["hit_ratio"][0]
    return opt, best["policy"], best["hit_ratio"]


def policy_sections(lab: pl.DataFrame, trace: pl.DataFrame | None = None) -> list[Section]:
    """The lab's section (``lab``: its curves), and the trace's when ``trace`` is given."""
    lru_below = lab.filter((pl.col("policy") == "lru")
                           & (pl.col("capacity") == LAB_DOCS * LAB_TOKENS - 1))["hit_ratio"]
    opt_below = lab.filter((pl.col("policy") == "opt")
                           & (pl.col("capacity") == LAB_DOCS * LAB_TOKENS - 1))["hit_ratio"]
    sections = [Section(
        "policies-lab", curve_chart(lab, "cache capacity (tokens)"),
        f"On the lab's cyclic workload ({LAB_DOCS} documents x {LAB_TOKENS} tokens read "
        f"fwd, fwd, rev) LRU and the recency/frequency policies fall to the reverse pass "
        f"alone below the working set ({lru_below[0]:.0%} of accesses one token short of it) "
        f"while OPT keeps what fits ({opt_below[0]:.0%}); MRU matches OPT from two documents "
        f"up; S3-FIFO stores nothing until a document fits its 10% small queue.")]
    if trace is not None:
        middle = int(trace["capacity"].unique().sort()[trace["capacity"].n_unique() // 2])
        opt, best, best_ratio = _gap(trace, middle)
        sections.append(Section(
            "policies-trace", curve_chart(trace, "cache capacity (512-token blocks, log)",
                                          log_x=True),
            f"On the Mooncake trace at block level (each block one object, no prefix rule), "
            f"at {middle:,} blocks the best policy ({best}) hits {best_ratio:.1%} of block "
            f"reads against OPT's {opt:.1%}: the headroom any policy could still win."))
    return sections
