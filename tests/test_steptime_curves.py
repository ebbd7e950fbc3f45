"""Curves under load: the concurrency-1 engine run equals the one-pass upper line."""

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.engine.config import SchedulerConfig
from pipeline.engine.request import SimRequest
from pipeline.sizes.units import ModelShape
from pipeline.steptime import Linear, Roofline
from pipeline.steptime.curves import (CURVE_SCHEMA, ONE_PASS, UPPER, Load, apply_load,
                                      load_curves, parse_loads, upper_curve)
from pipeline.sizes.gpus import GpuPreset

TINY = ModelShape("tiny", 2, 64, 128, 4, 2, 100)
GPU = GpuPreset("toy", 1e-3, None, 1e-3, 1e-4)
ROOF = Roofline(TINY, GPU, overhead_ms=1.0)
LINEAR = Linear({"fixed_ms": 2.0, "prefill_token_ms": 0.5, "context_token_ms": 0.01,
                 "decode_seq_ms": 0.3, "reload_token_ms": 0.0})


def _chat(n_docs=3, turns=4, doc=40, seed=0):
    """Requests that share document prefixes (each a document + a question)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n_docs * turns):
        d = int(rng.integers(n_docs))
        prompt = np.concatenate((np.arange(doc) + 1000 * d, 10**6 + np.arange(5) + 10 * i))
        out.append(SimRequest(i, prompt, int(rng.integers(1, 6)), arrival_s=0.05 * i))
    return out


@pytest.mark.parametrize("latency", [ROOF, LINEAR])
def test_concurrency_one_equals_the_upper_line(latency):
    requests = _chat()
    config = SchedulerConfig(num_gpu_blocks=2, max_model_len=256, block_size=8,
                             max_num_batched_tokens=16)
    capacities = [64, 96, 160, 320, 1024]
    upper = upper_curve(requests, capacities, config, latency)
    alone = load_curves(requests, capacities, [Load("concurrency", 1)], config, latency)
    for column in ("hit_ratio", "ttft_ms_p50", "ttft_ms_p90", "ttft_ms_p99"):
        assert alone[column].to_list() == pytest.approx(upper[column].to_list()), column
    assert upper["curve"].unique().to_list() == [UPPER]
    assert upper["load"].unique().to_list() == [ONE_PASS]
    assert upper["hit_ratio"].to_list() == sorted(upper["hit_ratio"].to_list())
    assert upper["hit_ratio"][-1] > 0
    with pytest.raises(ValueError, match="GPU capacity 16 tokens cannot hold the largest"):
        load_curves(requests, [16], [Load("concurrency", 1)], config, latency)


@settings(max_examples=15)
@given(st.integers(0, 10**6), st.integers(13, 40))
def test_concurrency_one_equals_upper_random(seed, blocks):
    requests = _chat(n_docs=2 + seed % 3, turns=3, doc=8 + seed % 30, seed=seed)
    config = SchedulerConfig(num_gpu_blocks=2, max_model_len=256, block_size=4,
                             max_num_batched_tokens=12)
    upper = upper_curve(requests, [blocks * 4], config, ROOF)
    alone = load_curves(requests, [blocks * 4], [Load("concurrency", 1)], config, ROOF)
    assert alone["hit_ratio"].to_list() == pytest.approx(upper["hit_ratio"].to_list())
    assert alone["ttft_ms_p90"].to_list() == pytest.approx(upper["ttft_ms_p90"].to_list())


def test_load_erodes_hits_and_raises_ttft():
    requests = [SimRequest(i, r.prompt_token_ids, r.max_tokens, arrival_s=0.0)
                for i, r in enumerate(_chat(n_docs=4, turns=6))]
    config = SchedulerConfig(num_gpu_blocks=2, max_model_len=256, block_size=8,
                             max_num_batched_tokens=64, max_num_seqs=16)
    loads = [Load("concurrency", 1), Load("concurrency", 16)]
    frame = load_curves(requests, [96, 2048], loads, config, LINEAR, jobs=2)
    assert frame.schema == CURVE_SCHEMA and frame.height == 4
    one, many = frame.filter(pl.col("load") == "concurrency 1"), \
        frame.filter(pl.col("load") == "concurrency 16")
    assert many["ttft_ms_p90"][0] > one["ttft_ms_p90"][0]
    assert many["hit_ratio"][0] <= one["hit_ratio"][0]


def test_loads_and_arrivals():
    assert [l.label for l in parse_loads("speed", "0.5,1,2")] == ["speed 0.5x", "speed 1x",
                                                                  "speed 2x"]
    assert parse_loads("concurrency", "4")[0].label == "concurrency 4"
    for kind, text, message in (("speed", "", "empty"), ("rate", "0", "> 0"),
                                ("concurrency", "1.5", "whole"), ("rate", "x", "not a number")):
        with pytest.raises(ValueError, match=message):
            parse_loads(kind, text)
    requests = _chat()
    fast, k = apply_load(requests, Load("speed", 2.0))
    assert k is None and fast[3].arrival_s == pytest.approx(requests[3].arrival_s / 2)
    poisson, _ = apply_load(requests, Load("rate", 10.0), seed=1)
    times = [r.arrival_s for r in poisson]
    assert times[0] == 0.0 and times == sorted(times)
    assert times == [r.arrival_s for r in apply_load(requests, Load("rate", 10.0), seed=1)[0]]
    closed, k = apply_load(requests, Load("concurrency", 3))
    assert k == 3 and {r.arrival_s for r in closed} == {0.0}
    untimed = [SimRequest(0, [1, 2], 1)]
    with pytest.raises(ValueError, match="--speed needs arrival times"):
        apply_load(untimed, Load("speed", 1.0))


@settings(max_examples=25)
@given(st.integers(0, 10**6), st.sampled_from([ROOF, LINEAR]), st.booleans(),
       st.sampled_from([None, 3]))
def test_time_clock_fast_path_equals_stepping(seed, latency, async_scheduling, concurrency):
    """Runs of pure decode steps priced at once (decode_run_ms) give what stepping one by
    one gives: the same requests, steps and times, bit for bit."""
    from pipeline.engine.loop import simulate
    rng = np.random.default_rng(seed)
    requests = [SimRequest(i, np.concatenate((np.arange(int(rng.integers(8, 40))) + 1000 *
                                              int(rng.integers(3)), [10**6 + i])),
                           int(rng.integers(1, 60)), arrival_s=0.01 * i * float(rng.random()))
                for i in range(int(rng.integers(2, 14)))]
    for i in range(1, len(requests)):                # arrivals non-decreasing
        requests[i].arrival_s = max(requests[i].arrival_s, requests[i - 1].arrival_s)
    config = SchedulerConfig(num_gpu_blocks=int(rng.integers(30, 200)), max_model_len=128,
                             block_size=4, max_num_batched_tokens=32, max_num_seqs=4,
                             async_scheduling=async_scheduling)
    slow = simulate(requests, config, clock="time", step_ms=latency.step_ms,
                    concurrency=concurrency)
    fast = simulate(requests, config, clock="time", step_ms=latency.step_ms,
                    concurrency=concurrency, decode_run_ms=latency.decode_run_ms)
    assert fast.requests.equals(slow.requests)
    assert fast.steps.equals(slow.steps)
