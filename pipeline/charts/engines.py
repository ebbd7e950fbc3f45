"""Report sections for the engine models: ``ideal`` vs ``vllm`` GPU cliffs, and LMCache's
chunk-level CPU cliff next to the document and ideal block models'.

Each section draws a frame it is given (model, capacity, hit_tokens), computed by
``pipeline.engines.curves`` in the stage that writes the aggregates.
"""

from __future__ import annotations

import altair as alt
import polars as pl

from pipeline.charts import Section

__all__ = ["gpu_models_section", "cpu_models_section"]


def _step_chart(frame: pl.DataFrame, x_title: str, y_title: str) -> alt.Chart:
    return (alt.Chart(frame).mark_line(interpolate="step-after", strokeWidth=2)
            .encode(x=alt.X("capacity:Q", title=x_title),
                    y=alt.Y("hit_tokens:Q", title=y_title),
                    color=alt.Color("model:N", title="model"),
                    tooltip=["model", "capacity", "hit_tokens"])
            .properties(width=760, height=300))


def gpu_models_section(frame: pl.DataFrame) -> Section:
    """ideal vs vllm: second-pass GPU hits over the GPU capacity vLLM logs
    (``pipeline.engines.curves.gpu_model_curves``)."""
    return Section("engines-gpu", _step_chart(frame, "GPU KV cache (tokens, as vLLM logs it)",
                                              "second-pass GPU-hit tokens"),
                   "vLLM 0.33's curve is the ideal one shifted right by two blocks (32 "
                   "tokens): the running request's partial tail block and the null block take "
                   "slots the ideal model gives to cached blocks; before vLLM 0.24 the empty "
                   "tail slots also stay parked in the LRU, which costs more.")


def cpu_models_section(frame: pl.DataFrame) -> Section:
    """LMCache's chunk-level CPU cliff next to the document and ideal block models'
    (``pipeline.engines.curves.cpu_model_curves``)."""
    return Section("engines-cpu", _step_chart(frame, "CPU tier (tokens of KV)",
                                              "second-pass CPU-served tokens"),
                   "LMCache's cliff is at 48,640 tokens, not 50,110: it stores only full "
                   "256-token chunks (19 per document, the last 147 tokens always recomputed), "
                   "and below 190 chunks each store evicts another document's chunk 0, which "
                   "kills its whole prefix.")
