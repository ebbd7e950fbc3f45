"""Any registered CPU model as the engine's CPU tier (``pipeline.engine.cpu_tier.ModelTier``):
at concurrency 1 it equals the block models' composition (the registry's ``vllm`` GPU model
+ that CPU model) request by request; forced through the Python path, ``lmcache`` equals
the compiled LMCache tier under load, so the Python call points are the compiled ones."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline import catalog as registry
from pipeline.workloads.stream import HEAD_FIRST, TAIL_FIRST
from pipeline.engine.config import SchedulerConfig
from pipeline.engine.cpu_tier import LMCacheTier, ModelTier, engine_cpu_models
from pipeline.engine.loop import simulate
from pipeline.engine.request import SimRequest
from pipeline.components.lmcache import loadable_prefix
from pipeline.cache.tiers import served_beyond
from test_engine_sim import _stream, loaded_runs, prompt_sets


def composition(prompts, outputs, gpu_blocks: int, model: str, cpu_tokens: int,
                block_size: int, options: dict, order: str) -> np.ndarray:
    """CPU tokens per request of the block models' composition: vllm's GPU hit g, the CPU
    model's prefix c from block 0, vLLM loads ``loadable(c) - g`` (at least 0)."""
    stream = _stream(prompts, block_size)
    gpu = registry.GPU_MODELS["vllm"](stream, [gpu_blocks * block_size], TAIL_FIRST,
                                      output_tokens=np.array(outputs))[0]
    cpu = registry.CPU_MODELS[model](stream, gpu, [cpu_tokens], order, **options)[0]
    return served_beyond(gpu, loadable_prefix(cpu, stream.prompt_tokens))


def test_every_cpu_model_but_the_oracle_is_offered():
    offered = engine_cpu_models()
    assert {"lmcache", "lmcache-replay", "block-lru", "lru", "fifo", "s3fifo", "arc",
            "sieve", "clock", "lfu", "mru"} <= set(offered)
    assert "opt" not in offered and "vllm" not in offered
    with pytest.raises(ValueError, match="needs the future"):
        ModelTier("opt", 64, 4)


@pytest.mark.parametrize("model", engine_cpu_models())
@settings(max_examples=25)
@given(data=st.data())
def test_concurrency_one_equals_the_block_composition(model, data):
    block_size = data.draw(st.sampled_from([1, 2, 4]))
    prompts = data.draw(prompt_sets(block_size))
    outputs = data.draw(st.lists(st.integers(1, 9), min_size=len(prompts),
                                 max_size=len(prompts)))
    need = max(-(-(len(p) + o - 1) // block_size) for p, o in zip(prompts, outputs)) + 1
    blocks = need + data.draw(st.integers(0, 12))
    if registry.entry(model).unit == "chunk":
        chunk = block_size * data.draw(st.sampled_from([1, 2, 4]))
        options, order = {"chunk_size": chunk}, HEAD_FIRST
        cpu = data.draw(st.sampled_from([chunk, 2 * chunk, 4 * chunk, 10**6]))
    else:
        options, order = {}, data.draw(st.sampled_from([HEAD_FIRST, TAIL_FIRST]))
        cpu = block_size * data.draw(st.sampled_from([1, 2, 3, 4, 6, 10**5]))
    config = SchedulerConfig(num_gpu_blocks=blocks, max_model_len=10**6, block_size=block_size,
                             async_scheduling=data.draw(st.booleans()))
    requests = [SimRequest(i, p, o) for i, (p, o) in enumerate(zip(prompts, outputs))]
    tier = ModelTier(model, cpu, block_size, options, order)
    result = simulate(requests, config, cpu_tier=tier, concurrency=1).requests
    expected = composition(prompts, outputs, blocks, model, cpu, block_size, options, order)
    assert result["cpu_hit_tokens"].to_list() == expected.tolist()


@st.composite
def shared_runs(draw):
    """Timed requests over a small trie of prefixes, a GPU pool of a few blocks beyond the
    longest request, every scheduler knob."""
    size = draw(st.sampled_from([1, 2, 4]))
    prompts = draw(prompt_sets(size))
    step, requests = 0, []
    for i, prompt in enumerate(prompts):
        step += draw(st.sampled_from([0, 0, 1, 3]))
        requests.append(SimRequest(i, prompt, draw(st.integers(1, 6)), arrival_step=step))
    need = max(-(-(len(r.prompt_token_ids) + r.max_tokens - 1) // size) for r in requests)
    config = SchedulerConfig(num_gpu_blocks=need + 1 + draw(st.integers(0, 8)),
                             max_model_len=100, block_size=size,
                             max_num_seqs=draw(st.integers(1, 6)),
                             max_num_batched_tokens=draw(st.sampled_from([4, 16, 8192])),
                             long_prefill_token_threshold=draw(st.sampled_from([0, 3])),
                             async_scheduling=draw(st.booleans()))
    return requests, config


@given(st.one_of(shared_runs(), loaded_runs()), st.sampled_from([1, 2, 4]),
       st.sampled_from([1, 2, 3, 5, 1000]), st.sampled_from(["lmcache", "lmcache-replay"]))
def test_the_python_path_equals_the_compiled_lmcache_tier_under_load(run, per, chunks, model):
    requests, config = run
    chunk = per * config.block_size
    compiled = simulate(requests, config, cpu_tier=LMCacheTier(chunks * chunk,
                                                               config.block_size, chunk))
    python = simulate(requests, config, cpu_tier=ModelTier(
        model, chunks * chunk, config.block_size, {"chunk_size": chunk}))
    assert python.requests.equals(compiled.requests)
    assert python.steps.equals(compiled.steps)


def test_a_cpu_model_serves_what_the_gpu_evicted():
    """Two documents through a one-document GPU pool: the second read of the first
    document is served by an LRU CPU tier (and not without one)."""
    a, b = list(range(16)), list(range(100, 116))
    requests = [SimRequest(i, p + [500 + i], 1) for i, p in enumerate([a, b, a])]
    config = SchedulerConfig(num_gpu_blocks=6, max_model_len=64, block_size=4)
    cpu = simulate(requests, config, cpu_tier=ModelTier("lru", 64, 4), concurrency=1)
    none = simulate(requests, config, concurrency=1)
    assert cpu.requests["cpu_hit_tokens"].to_list() == [0, 0, 16]
    assert none.requests["cpu_hit_tokens"].to_list() == [0, 0, 0]


@pytest.mark.parametrize("tier", ["compiled", "lmcache", "lmcache-replay"])
def test_an_admission_refreshes_the_chunks_lmcache_hit(tier):
    """CPU tier of 2 one-block chunks: A stores X, B stores Y, C hits X (refreshing it) and
    stores W, evicting Y, so D (= Y) misses; without the refresh X would go and D hit."""
    x, y, w = [1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]
    prompts = [x + [100], y + [101], x + w, y + [103]]
    requests = [SimRequest(i, p, 1) for i, p in enumerate(prompts)]
    config = SchedulerConfig(num_gpu_blocks=3, max_model_len=64, block_size=4)  # 2 usable
    cpu = (LMCacheTier(8, 4, 4) if tier == "compiled"
           else ModelTier(tier, 8, 4, {"chunk_size": 4}))
    result = simulate(requests, config, cpu_tier=cpu, concurrency=1).requests
    expected = composition(prompts, [1] * 4, 3, "lmcache", 8, 4, {"chunk_size": 4}, HEAD_FIRST)
    assert result["gpu_hit_tokens"].to_list() == [0, 0, 0, 0]
    assert result["cpu_hit_tokens"].to_list() == expected.tolist() == [0, 0, 4, 0]


@pytest.mark.parametrize("shared", [False, True])
def test_the_python_path_equals_the_compiled_tier_in_a_fleet(shared):
    """Three instances behind a cache-aware router, LMCache per instance or one pool all
    share: the Python path's calls interleave across engines as the compiled tier's do."""
    from pipeline.fleet.loop import simulate_fleet
    from pipeline.fleet.routers import make_router
    from pipeline.steptime import Linear

    model = Linear(dict(fixed_ms=2.0, prefill_token_ms=0.02, context_token_ms=0.001,
                        decode_seq_ms=0.3, reload_token_ms=0.01), label="test coefficients")
    rng = np.random.default_rng(3)
    docs = [rng.integers(0, 1000, 96) for _ in range(5)]
    requests = [SimRequest(i, np.concatenate((docs[rng.integers(5)], [5000 + i])),
                           int(rng.integers(1, 8)), arrival_s=0.004 * i) for i in range(60)]
    config = SchedulerConfig(block_size=16, num_gpu_blocks=16, max_model_len=256)
    frames = []
    for make in (lambda: LMCacheTier(256, 16, 32),
                 lambda: ModelTier("lmcache", 256, 16, {"chunk_size": 32})):
        tiers = [make()] * 3 if shared else [make() for _ in range(3)]
        result = simulate_fleet(requests, config, make_router("kv-cost", 3, 16), model.step_ms,
                                cpu_tiers=tiers)
        frames.append(result.requests)
    assert frames[1].equals(frames[0]) and frames[0]["cpu_hit_tokens"].sum() > 0
