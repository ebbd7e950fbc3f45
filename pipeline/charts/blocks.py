"""Report section for block mode: tail-first vs head-first over GPU capacity, and
what a CPU tier adds. Input: the aggregates of ``pipeline.blocks.sweep.block_sweeps``.

``block_sections(aggregates, scenario)`` returns two ``Section``s; ``scenario`` needs
``docs``, ``tokens``, ``block_size`` and ``cpu_sweep_gpu``.
"""

from __future__ import annotations

import altair as alt
import polars as pl

from pipeline.workloads.stream import HEAD_FIRST, ORDERS, TAIL_FIRST
from pipeline.blocks.sweep import edges
from pipeline.charts import Section
from pipeline.charts.parts import tooltips

__all__ = ["block_sections", "gpu_orders_chart", "gpu_orders_caption", "cpu_tier_chart",
           "cpu_tier_caption", "second_pass_tokens", "reach_phrase"]

SECOND_PASS = 1
PANEL_WIDTH, HEIGHT = 300, 240
ORDER_COLOURS = {TAIL_FIRST: "#2e7d32", HEAD_FIRST: "#c62828"}


def second_pass_tokens(aggregates: pl.DataFrame, sweep: str) -> pl.DataFrame:
    """Second-pass rows of one sweep with ``cached_tokens`` = GPU + CPU hit tokens."""
    return (aggregates.filter(pl.col("sweep") == sweep, pl.col("pass_index") == SECOND_PASS)
            .with_columns(cached_tokens=pl.col("gpu_hit_tokens") + pl.col("cpu_hit_tokens"),
                          gpu_order=pl.col("gpu_order").cast(pl.String),
                          cpu_order=pl.col("cpu_order").cast(pl.String)))


def _edge_rules(scenario: dict, top_x: int) -> alt.LayerChart:
    """Dashed rules at the full-block edge and the working set, labelled; when the edges sit
    in the right part of the axis (up to ``top_x``) both labels go to their left, one above
    the other, so none runs off the panel."""
    edge = edges(scenario["docs"], scenario["tokens"], scenario["block_size"])
    crowded = edge["working_set"] > 0.7 * max(top_x, 1)
    rules = []
    for name, label, align, dx, y in (
            ("full_blocks", "full blocks", "right", -4, HEIGHT * 0.3),
            ("working_set", "working set", *(("right", -4) if crowded else ("left", 4)),
             HEIGHT * 0.6)):
        base = alt.Chart(pl.DataFrame({"x": [edge[name]],
                                       "label": [f"{label} {edge[name]:,}"]})
                         ).encode(x=alt.X("x:Q"))
        rules += [base.mark_rule(strokeDash=[5, 4], color="#555"),
                  base.mark_text(align=align, dx=dx, color="#555", fontSize=10)
                  .encode(y=alt.YValue(y), text=alt.Text("label:N"))]
    return alt.layer(*rules)


def _step_line(frame: pl.DataFrame, x: str, colour: str, x_title: str,
               top: int, colour_field: str | None = None) -> alt.Chart:
    enc = {"x": alt.X(f"{x}:Q", title=x_title, axis=alt.Axis(format="d")),
           "y": alt.Y("cached_tokens:Q", title="second-pass cached tokens",
                      scale=alt.Scale(domain=[0, max(top, 1)])),
           "tooltip": tooltips(alt.Tooltip(f"{x}:Q", format="d"), "gpu_hit_tokens:Q",
                               "cpu_hit_tokens:Q", "miss_tokens:Q")}
    if colour_field:
        enc["color"] = alt.Color(f"{colour_field}:N", title="CPU order",
                                 scale=alt.Scale(domain=list(ORDERS),
                                                 range=[ORDER_COLOURS[o] for o in ORDERS]))
    mark = alt.Chart(frame.sort(x)).mark_line(interpolate="step-after", strokeWidth=2,
                                             **({} if colour_field else {"color": colour}))
    return mark.encode(**enc)


def gpu_orders_chart(aggregates: pl.DataFrame, scenario: dict) -> alt.HConcatChart:
    """Second-pass GPU hit tokens vs GPU capacity, one panel per GPU order, edges marked."""
    frame = second_pass_tokens(aggregates, "gpu_cliff")
    top = int(frame["prompt_tokens"].max() or 0)
    rules = _edge_rules(scenario, int(frame["gpu_capacity"].max() or 0))   # both panels'
    panels = [alt.layer(_step_line(frame.filter(pl.col("gpu_order") == order), "gpu_capacity",
                                   ORDER_COLOURS[order], "GPU capacity (tokens)", top), rules,
                        title=order, width=PANEL_WIDTH, height=HEIGHT)
              for order in ORDERS]
    return alt.hconcat(
        *panels, title=f"Block mode ({scenario['block_size']}-token blocks): second-pass GPU hits "
              "vs GPU capacity, no CPU tier")


def _at(frame: pl.DataFrame, capacity_column: str, capacity: int, **where: str) -> int:
    rows = frame.filter(pl.col(capacity_column) == capacity,
                        *[pl.col(k) == v for k, v in where.items()])
    return int(rows["cached_tokens"][0]) if rows.height else 0


def _first_full(frame: pl.DataFrame, capacity_column: str, **where: str) -> int | None:
    rows = frame.filter(*[pl.col(k) == v for k, v in where.items()])
    best = rows["cached_tokens"].max()
    return rows.filter(pl.col("cached_tokens") == best)[capacity_column].min() if best else None


def reach_phrase(first: int | None, top: int, tier: str) -> str:
    """"from N GPU tokens", or "once the tier holds exactly them" where N is the count
    itself (no sentence says "198,400 from 198,400")."""
    if first is None:
        return "at no capacity drawn"
    return "once the tier holds exactly them" if first == top else f"from {first:,} {tier} tokens"


def gpu_orders_caption(aggregates: pl.DataFrame, scenario: dict) -> str:
    """One sentence: the two orders just below the full-block edge, and where both are full."""
    frame = second_pass_tokens(aggregates, "gpu_cliff")
    edge = edges(scenario["docs"], scenario["tokens"], scenario["block_size"])
    tail = frame.filter(pl.col("gpu_order") == TAIL_FIRST,
                        pl.col("gpu_capacity") < edge["full_blocks"]).sort("gpu_capacity")
    head_below = int(frame.filter(pl.col("gpu_order") == HEAD_FIRST,
                                  pl.col("gpu_capacity") < edge["full_blocks"])
                     ["cached_tokens"].max() or 0)
    hits = tail.filter(pl.col("cached_tokens") > 0)
    full = [_first_full(frame, "gpu_capacity", gpu_order=o) for o in ORDERS]
    top = int(frame["cached_tokens"].max() or 0)
    start = ("tail-first gets no second-pass GPU hit below the full-block edge"
             if hits.is_empty() else
             f"tail-first already keeps partial prefixes from {hits['gpu_capacity'][0]:,} GPU "
             f"tokens ({hits['cached_tokens'][0]:,} second-pass tokens there, "
             f"{tail['cached_tokens'][-1]:,} at {tail['gpu_capacity'][-1]:,})")
    head = ("head-first keeps nothing below the edge" if head_below == 0 else
            f"head-first keeps at most {head_below:,} below the edge")
    reach = (f"both orders reach {top:,} tokens {reach_phrase(full[0], top, 'GPU')}"
             if full[0] == full[1] else
             f"tail-first reaches {top:,} tokens {reach_phrase(full[0], top, 'GPU')} and "
             f"head-first {reach_phrase(full[1], top, 'GPU')}")
    blocks = ("every token of full blocks" if top == edge["full_blocks"] else
              f"{top:,} of the {edge['full_blocks']:,} tokens of full blocks")
    return (f"With a cyclic second pass, {start} while {head}; {reach}: {blocks}, "
            f"{edge['working_set'] - edge['full_blocks']:,} below the working set of "
            f"{edge['working_set']:,}, because a partial last block never hits.")


def cpu_tier_chart(aggregates: pl.DataFrame, scenario: dict) -> alt.HConcatChart:
    """Second-pass cached tokens (GPU + CPU) vs CPU capacity at a fixed GPU capacity, one
    panel per GPU order, a line per CPU order."""
    frame = second_pass_tokens(aggregates, "cpu_cliff")
    top = int(frame["prompt_tokens"].max() or 0)
    rules = _edge_rules(scenario, int(frame["cpu_capacity"].max() or 0))   # both panels'
    panels = [alt.layer(_step_line(frame.filter(pl.col("gpu_order") == order), "cpu_capacity",
                                   "", "CPU capacity (tokens)", top, "cpu_order"), rules,
                        title=f"GPU {order}", width=PANEL_WIDTH, height=HEIGHT)
              for order in ORDERS]
    return alt.hconcat(
        *panels, title=f"What a CPU tier adds: second-pass cached tokens at GPU "
              f"{scenario['cpu_sweep_gpu']:,} tokens")


def cpu_tier_caption(aggregates: pl.DataFrame, scenario: dict) -> str:
    """One sentence: GPU alone vs with each CPU order, at the default orders."""
    frame = second_pass_tokens(aggregates, "cpu_cliff").filter(
        pl.col("gpu_order") == TAIL_FIRST)
    alone = _at(frame, "cpu_capacity", 0, cpu_order=HEAD_FIRST)
    full = {o: _first_full(frame, "cpu_capacity", cpu_order=o) for o in ORDERS}
    top = int(frame["cached_tokens"].max() or 0)
    gains = {o: frame.filter(pl.col("cpu_order") == o, pl.col("cached_tokens") > alone)
             ["cpu_capacity"].min() for o in ORDERS}
    kept = "no second-pass tokens" if alone == 0 else f"{alone:,} second-pass tokens"
    if gains[HEAD_FIRST] is None:
        head = "adds nothing head-first (LMCache's order)"
    else:
        head = f"brings them to {top:,} head-first {reach_phrase(full[HEAD_FIRST], top, 'CPU')}"
        head += (" (LMCache's order), and nothing before"
                 if gains[HEAD_FIRST] == full[HEAD_FIRST] else
                 f" (LMCache's order; it adds nothing below {gains[HEAD_FIRST]:,})")
    tail = ("adds nothing" if gains[TAIL_FIRST] is None else
            f"adds partial prefixes from {gains[TAIL_FIRST]:,} and is full "
            + ("at the same size" if full[TAIL_FIRST] == full[HEAD_FIRST] else
               reach_phrase(full[TAIL_FIRST], top, 'CPU')))
    return (f"At GPU {scenario['cpu_sweep_gpu']:,} (tail-first) the GPU alone keeps {kept}; "
            f"a CPU tier {head}, while a tail-first CPU tier {tail}.")


def block_sections(aggregates: pl.DataFrame, scenario: dict) -> list[Section]:
    """The block-mode section's two charts with their captions."""
    return [Section("blocks-gpu-orders", gpu_orders_chart(aggregates, scenario),
                    gpu_orders_caption(aggregates, scenario)),
            Section("blocks-cpu-tier", cpu_tier_chart(aggregates, scenario),
                    cpu_tier_caption(aggregates, scenario))]
