"""The engine models' curves on the lab's workload, for the report: ``block-lru`` vs ``vllm`` GPU
hits, and LMCache's chunk-level CPU tier next to the document and block-lru models'.

Both run the fast engines on the lab's documents (passes fwd,fwd) and return frames (model,
capacity, hit_tokens) that ``pipeline.charts.engines`` draws; ``run`` computes them.
"""

from __future__ import annotations

import polars as pl

from pipeline.workloads.stream import HEAD_FIRST, TAIL_FIRST
from pipeline.base.config import LAB_DOCS, LAB_GPU, LAB_TOKENS
from pipeline.catalog import CPU_MODELS, GPU_MODELS
from pipeline.cache.tiers import served_beyond
from pipeline.workloads.documents import documents_workload

__all__ = ["GPU_CAPACITIES", "CPU_CAPACITIES", "gpu_model_curves", "cpu_model_curves"]

#: the report's capacity grids (tokens): around the lab's working set of 50,110 tokens
GPU_CAPACITIES = tuple(range(40000, 52001, 16))
CPU_CAPACITIES = tuple(range(40000, 56001, 64))


def _stream(docs: int, tokens: int, block_size: int):
    return documents_workload(docs, tokens, ("fwd", "fwd"), block_size).block_stream()


def gpu_model_curves(capacities: list[int] | None = None, docs: int = LAB_DOCS,
                     tokens: int = LAB_TOKENS, block_size: int = 16) -> pl.DataFrame:
    """Second-pass GPU-hit tokens per (model, GPU capacity): block-lru, vLLM 0.33, vLLM 0.11."""
    capacities = list(GPU_CAPACITIES if capacities is None else capacities)
    stream = _stream(docs, tokens, block_size)
    runs = {"block-lru": GPU_MODELS["block-lru"](stream, capacities, TAIL_FIRST),
            "vllm 0.33": GPU_MODELS["vllm"](stream, capacities, TAIL_FIRST),
            "vllm 0.11": GPU_MODELS["vllm"](stream, capacities, TAIL_FIRST,
                                            vllm_version="0.11.0")}
    return pl.concat([pl.DataFrame({"model": name, "capacity": capacities,
                                    "hit_tokens": hits[:, docs:].sum(axis=1)})
                      for name, hits in runs.items()])


def cpu_model_curves(capacities: list[int] | None = None, gpu: int = LAB_GPU,
                     docs: int = LAB_DOCS, tokens: int = LAB_TOKENS) -> pl.DataFrame:
    """Second-pass CPU-served tokens per (model, CPU capacity) at GPU ``gpu``: the document
    model (one block per document), the block-lru model (16-token blocks), LMCache under vLLM."""
    capacities = list(CPU_CAPACITIES if capacities is None else capacities)
    rows = []
    for name, block_size, gpu_model, cpu_model in (
            ("document (kvlab)", max(tokens, 1), "block-lru", "block-lru"),
            ("block-lru blocks", 16, "block-lru", "block-lru"), ("lmcache", 16, "vllm", "lmcache")):
        stream = _stream(docs, tokens, block_size)
        g = GPU_MODELS[gpu_model](stream, [gpu], TAIL_FIRST)[0]
        cpu = CPU_MODELS[cpu_model](stream, g, capacities, HEAD_FIRST)
        served = served_beyond(g, cpu)
        rows.append(pl.DataFrame({"model": name, "capacity": capacities,
                                  "hit_tokens": served[:, docs:].sum(axis=1)}))
    return pl.concat(rows)
