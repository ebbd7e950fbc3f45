"""The trace engine's own code (curves by size band, points, grids) against the blocks
engine's per-request answers."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.onepass.lru_depths import block_lru_cpu, block_lru_gpu
from pipeline.workloads.stream import ORDERS, block_stream
from pipeline.trace import engine
from pipeline.workloads.tokens import token_blocks

prompts = st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=14), min_size=1,
                   max_size=10)


def stream_of(prompt_list, block_size):
    tokens = np.array([t for p in prompt_list for t in p], dtype=np.int64)
    lengths = np.array([len(p) for p in prompt_list], dtype=np.int64)
    return block_stream(token_blocks(tokens, lengths, block_size), block_size)


@given(prompt_list=prompts, block_size=st.integers(1, 3), order=st.sampled_from(ORDERS),
       capacities=st.lists(st.integers(0, 40), min_size=1, max_size=6))
def test_gpu_curve_equals_the_engine_per_request_sums(prompt_list, block_size, order,
                                                       capacities):
    """Every capacity, including those below the largest request (one pass per band)."""
    stream = stream_of(prompt_list, block_size)
    expected = block_lru_gpu(stream, capacities, order).sum(axis=1) // block_size
    assert engine.gpu_curve(stream, np.array(capacities), order).tolist() == expected.tolist()


@settings(max_examples=40)       # polars frames per point: slower per example
@given(prompt_list=prompts, block_size=st.integers(1, 3),
       gpu=st.lists(st.integers(0, 30), min_size=1, max_size=3),
       cpu=st.lists(st.integers(0, 60), min_size=1, max_size=3))
def test_points_are_the_engine_tiers_summed(prompt_list, block_size, gpu, cpu):
    stream = stream_of(prompt_list, block_size)
    totals, per_request = engine.points(stream, gpu, cpu, "tail-first", "head-first")
    assert totals.height == len(gpu) * len(cpu)
    assert per_request.height == len(gpu) * len(cpu) * stream.requests
    gpu_hits = block_lru_gpu(stream, gpu, "tail-first")
    prompt = int(stream.prompt_tokens.sum())
    for row in totals.iter_rows(named=True):
        g, c = divmod(row["point"], len(cpu))
        cpu_prefix = block_lru_cpu(stream, gpu_hits[g], [cpu[c]], "head-first")[0]
        served = np.maximum(cpu_prefix - gpu_hits[g], 0)
        assert (row["gpu_capacity"], row["cpu_capacity"]) == (gpu[g], cpu[c])
        assert row["gpu_tokens"] == gpu_hits[g].sum()
        assert row["cpu_tokens"] == served.sum()
        assert row["recomputed_tokens"] == prompt - gpu_hits[g].sum() - served.sum()
        assert row["hit_blocks"] == (gpu_hits[g].sum() + served.sum()) // block_size
        assert row["block_hit_ratio"] == row["hit_blocks"] / stream.blocks
    sums = per_request.group_by("point").sum().sort("point")
    assert sums["gpu_hit_tokens"].to_list() == totals["gpu_tokens"].to_list()
    assert (sums["gpu_hit_tokens"] + sums["cpu_hit_tokens"] + sums["miss_tokens"]).to_list() \
        == [prompt] * totals.height


@given(prompt_list=prompts, block_size=st.integers(1, 3))
def test_infinite_cache_and_grids(prompt_list, block_size):
    stream = stream_of(prompt_list, block_size)
    inf = engine.infinite(stream)
    top = engine.distinct_cacheable(stream) * block_size
    assert engine.default_gpu_grid(stream)[-1] == top
    assert engine.default_cpu_grid(stream)[0] == 0
    # an infinite cache = a GPU holding every distinct cacheable block
    hits = engine.gpu_curve(stream, np.array([top]), "tail-first")[0]
    assert inf.block_hit_ratio == hits / stream.blocks
    keys = [tuple(p[:min((i + 1) * block_size, len(p))]) for p in prompt_list
            for i in range(-(-len(p) // block_size))]
    assert inf.repeat_ratio == 1 - len(set(keys)) / len(keys)
