"""The pieces wired into the main flow: run --block-size (with engine models), the report's
new groups, and the bench options."""

import numpy as np
import polars as pl

from pipeline.blocks.models import CPU_MODELS, GPU_MODELS
from pipeline.blocks.stream import HEAD_FIRST, TAIL_FIRST
from pipeline.blocks.sweep import _stream, block_frames

LAB = {"docs": 10, "tokens": 5011, "passes": ["fwd", "fwd", "rev"], "block_size": 16}


def test_engine_models_in_the_sweeps_equal_the_registries():
    """block_frames with vllm / lmcache: one order each, model columns, and every row equal to
    the registries' models called directly (the blocks command's figures)."""
    caps = [30000, 48000, 48640, 56000]
    options = {"chunk_size": 256, "save_unfull_chunk": False}
    _, aggregates = block_frames(**LAB, gpu_capacities=caps, cpu_capacities=caps,
                                 cpu_sweep_gpu=21520, gpu_model="vllm", cpu_model="lmcache",
                                 gpu_options={"output_tokens": 1}, cpu_options=options)
    assert set(aggregates["gpu_model"]) == {"vllm"} and set(aggregates["cpu_model"]) == {"lmcache"}
    assert set(aggregates["gpu_order"].cast(str)) == {TAIL_FIRST}
    assert set(aggregates["cpu_order"].cast(str)) == {HEAD_FIRST}
    stream, pass_index = _stream(LAB["docs"], LAB["tokens"], LAB["passes"], LAB["block_size"])
    gpu = GPU_MODELS["vllm"](stream, caps, TAIL_FIRST)
    second = pass_index == 1
    cliff = aggregates.filter(pl.col("sweep") == "gpu_cliff", pl.col("pass_index") == 1)
    assert cliff.sort("gpu_capacity")["gpu_hit_tokens"].to_list() == \
        gpu[:, second].sum(axis=1).tolist()
    assert cliff.filter(pl.col("gpu_capacity") == 48000)["gpu_hit_tokens"].item() == 28960
    fixed = GPU_MODELS["vllm"](stream, [21520], TAIL_FIRST)[0]
    cpu = CPU_MODELS["lmcache"](stream, fixed, caps, HEAD_FIRST, **options)
    served = np.maximum(cpu - fixed, 0)[:, second].sum(axis=1)
    rows = aggregates.filter(pl.col("sweep") == "cpu_cliff", pl.col("pass_index") == 1)
    assert rows.sort("cpu_capacity")["cpu_hit_tokens"].to_list() == served.tolist()
    # issue 16's figures: 48,640 CPU tokens in pass 2 at CPU 56000 and 48640, none below
    assert rows.filter(pl.col("cpu_capacity") == 56000)["cpu_hit_tokens"].item() == 48640
    assert rows.filter(pl.col("cpu_capacity") == 48640)["cpu_hit_tokens"].item() == 48640
