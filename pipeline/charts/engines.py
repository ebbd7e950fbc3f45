"""Report sections for the engine models: ``block-lru`` vs ``vllm`` GPU cliffs, and LMCache's
chunk-level CPU cliff next to the document and block-lru models'.

Each section draws a frame it is given (model, capacity, hit_tokens), computed by
``pipeline.blocks.engine_curves`` in the stage that writes the aggregates.
``run_engine_sections`` draws a run's own engine models instead (any workload: its block
aggregates next to the block-lru model's in the same orders).
"""

from __future__ import annotations

import altair as alt
import polars as pl

from pipeline.charts import Section
from pipeline.charts.parts import tooltips

__all__ = ["lab_engine_sections", "run_engine_sections"]


#: The lab's two engine sections: (id, x title, y title, caption), GPU then CPU.
_LAB = (("engines-gpu", "GPU KV cache (tokens, as vLLM logs it)", "second-pass GPU-hit tokens",
         "vLLM 0.33's curve is the block-lru one shifted right by two blocks (32 "
         "tokens): the running request's partial tail block and the null block take "
         "slots the block-lru model gives to cached blocks; before vLLM 0.24 the empty "
         "tail slots also stay parked in the LRU, which costs more."),
        ("engines-cpu", "CPU tier (tokens of KV)", "second-pass CPU-served tokens",
         "LMCache's cliff is at 48,640 tokens, not 50,110: it stores only full "
         "256-token chunks (19 per document, the last 147 tokens always recomputed), "
         "and below 190 chunks each store evicts another document's chunk 0, which "
         "kills its whole prefix."))


def lab_engine_sections(gpu: pl.DataFrame, cpu: pl.DataFrame) -> list[Section]:
    """block-lru vs vllm second-pass GPU hits over the GPU capacity vLLM logs, and LMCache's
    chunk-level CPU cliff next to the document and block-lru models' (``gpu``, ``cpu``:
    ``pipeline.blocks.engine_curves.gpu_model_curves``, ``cpu_model_curves``)."""
    return [Section(name, alt.Chart(frame).mark_line(interpolate="step-after", strokeWidth=2)
                    .encode(x=alt.X("capacity:Q", title=x_title),
                            y=alt.Y("hit_tokens:Q", title=y_title),
                            color=alt.Color("model:N", title="model"),
                            tooltip=tooltips("model", "capacity", "hit_tokens"))
                    .properties(width=760, height=300), caption)
            for frame, (name, x_title, y_title, caption) in zip((gpu, cpu), _LAB)]


# --------------------------------------------------------------------------- a run's engines


def _run_curves(engine: pl.DataFrame, lru: pl.DataFrame, sweep: str, x: str,
                tier: str) -> pl.DataFrame:
    """Second-pass cached tokens of ``sweep`` per capacity: the run's engine models and the
    block-lru model in the same orders; ``series`` names the model (and orders when several)."""
    from pipeline.charts.blocks import second_pass_tokens

    mine = second_pass_tokens(engine, sweep)
    orders = mine.select("gpu_order", "cpu_order").unique(maintain_order=True)
    lru_rows = second_pass_tokens(lru, sweep).join(orders, on=["gpu_order", "cpu_order"])
    several = orders.height > 1

    def named(frame: pl.DataFrame) -> pl.DataFrame:
        model = pl.col("gpu_model") if tier == "GPU" else pl.format(
            "{} + {}", "gpu_model", "cpu_model")
        label = pl.format("{} ({} CPU)", model, "cpu_order") if several else model
        return frame.select(x, "cached_tokens", "gpu_order", "cpu_order", series=label)
    return pl.concat([named(mine), named(lru_rows)]).sort("series", x)


def _reach(frame: pl.DataFrame, x: str, series: str) -> tuple[int, int | None]:
    """(most cached tokens of ``series``, the smallest capacity that reaches them)."""
    rows = frame.filter(pl.col("series") == series)
    best = int(rows["cached_tokens"].max() or 0)
    first = rows.filter(pl.col("cached_tokens") == best)[x].min() if best else None
    return best, first


def _comparison(frame: pl.DataFrame, x: str, tier: str) -> str:
    """One clause per series (its most cached tokens and from which capacity), and how many
    more tokens of capacity the engine needs than the block-lru model for the same tokens."""
    from pipeline.charts.blocks import reach_phrase

    names = frame["series"].unique(maintain_order=True).to_list()
    found = {series: _reach(frame, x, series) for series in names}
    best, first = found[names[0]]
    if len(names) > 1 and len(set(found.values())) == 1 and first is not None:
        return (f"{' and '.join(names)} both keep {best:,} {reach_phrase(first, best, tier)}: the "
                "engine models need no more than the block-lru one")
    parts = [f"{series} keeps none" if first is None else
             f"{series} keeps {best:,} {reach_phrase(first, best, tier)}"
             for series, (best, first) in found.items()]
    text = "; ".join(parts)
    lru = [s for s in names if s.startswith("block-lru")]
    engines = [s for s in names if not s.startswith("block-lru")]
    if len(lru) == len(engines) == 1:
        (best_i, first_i), (best_e, first_e) = found[lru[0]], found[engines[0]]
        if best_i == best_e and first_i is not None and first_e is not None:
            gap = first_e - first_i
            text += (f": {engines[0]} needs {gap:,} more {tier} tokens than the block-lru model"
                     if gap > 0 else f": {engines[0]} needs no more than the block-lru model")
    return text


def run_engine_sections(engine: pl.DataFrame, lru: pl.DataFrame, scenario: dict,
                        describe: str) -> list[Section]:
    """The run's engine models (``engine``: its block aggregates) next to the block-lru model in
    the same orders (``block-lru``): second-pass GPU hits over the GPU capacity, and what the CPU
    tier adds at the run's fixed GPU capacity. ``describe``: the models and their options."""
    sections = []
    for key, sweep, x, tier, title in (
            ("run-engines-gpu", "gpu_cliff", "gpu_capacity", "GPU",
             "second-pass GPU-hit tokens over the GPU capacity, no CPU tier"),
            ("run-engines-cpu", "cpu_cliff", "cpu_capacity", "CPU",
             f"second-pass cached tokens (GPU + CPU) over the CPU capacity at GPU "
             f"{scenario['cpu_sweep_gpu']:,} tokens")):
        frame = _run_curves(engine, lru, sweep, x, tier)
        chart = (alt.Chart(frame).mark_line(interpolate="step-after", strokeWidth=2)
                 .encode(x=alt.X(f"{x}:Q", title=f"{tier} capacity (tokens)",
                                 axis=alt.Axis(format="~s")),
                         y=alt.Y("cached_tokens:Q", title="second-pass cached tokens",
                                 axis=alt.Axis(format="~s")),
                         color=alt.Color("series:N", title="model"),
                         strokeDash=alt.StrokeDash("series:N", title="model"),
                         tooltip=[alt.Tooltip("series:N"), alt.Tooltip(f"{x}:Q", format=","),
                                  alt.Tooltip("cached_tokens:Q", format=",")])
                 .properties(title=f"This run's engine models: {title}", width=760,
                             height=280))
        where = "" if tier == "GPU" else f" at GPU {scenario['cpu_sweep_gpu']:,} tokens"
        caption = (f"This run's {describe}{where}, next to the block-lru model in the same "
                   f"orders, second-pass tokens of the {scenario['docs'] * scenario['tokens']:,}"
                   f" in the working set: {_comparison(frame, x, tier)}.")
        sections.append(Section(key, chart, caption))
    return sections
