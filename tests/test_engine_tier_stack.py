"""LMCache's tier stack as the engine's CPU tier: with the CPU tier alone it is LMCache's
CPU backend (the compiled ``LMCacheTier``) request by request and step by step; its loads
take bytes / GB/s + latency per tier in the step (hand arithmetic), in place of the step
model's reload term; a slow tier can make TTFT worse than recomputing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.components.kstack import STEP_BYTES_COLUMNS
from pipeline.components.lmcache_stack import LMCacheStack, Tier, share_remote
from pipeline.engine.config import SchedulerConfig
from pipeline.engine.cpu_tier import LMCacheTier
from pipeline.engine.loop import simulate
from pipeline.engine.request import SimRequest
from pipeline.steptime.fitted import Linear
from test_engine_cpu_tier import shared_runs
from test_engine_sim import loaded_runs

NEW = ["disk_hit_tokens", "remote_hit_tokens", "load_ms"]


@settings(max_examples=40, deadline=None)
@given(st.one_of(shared_runs(), loaded_runs()), st.sampled_from([1, 2, 4]),
       st.sampled_from([1, 2, 3, 5, 1000]))
def test_a_cpu_only_stack_is_lmcache_cpu_backend(run, per, chunks):
    requests, config = run
    chunk = per * config.block_size
    cpu = simulate(requests, config, cpu_tier=LMCacheTier(chunks * chunk, config.block_size,
                                                          chunk))
    stack = simulate(requests, config, cpu_tier=LMCacheStack(
        [Tier("cpu", chunks * chunk)], config.block_size, 2.0, chunk))
    assert stack.requests.drop(NEW).equals(cpu.requests)
    assert stack.steps.drop(STEP_BYTES_COLUMNS).equals(cpu.steps)
    assert stack.requests["disk_hit_tokens"].sum() == 0


def _model(reload_ms: float = 0.0) -> Linear:
    return Linear({"fixed_ms": 10.0, "prefill_token_ms": 1.0, "context_token_ms": 0.0,
                   "decode_seq_ms": 0.0, "reload_token_ms": reload_ms})


def _run(tiers, prompts, *, bytes_per_token=1e6, reload_ms=0.0):
    """Requests one after another (each arrives when the one before it has finished)."""
    config = SchedulerConfig(num_gpu_blocks=6, max_model_len=1000, block_size=4)
    requests = [SimRequest(i, p, 1, arrival_s=1000.0 * i) for i, p in enumerate(prompts)]
    tier = LMCacheStack(tiers, 4, bytes_per_token, 8) if tiers else None
    return simulate(requests, config, cpu_tier=tier, clock="time",
                    step_ms=_model(reload_ms).step_ms)


def test_loads_take_bytes_over_bandwidth_plus_latency():
    # A: 17 tokens (two chunks of 8 stored), B evicts it from the tiny GPU pool and the
    # 16-token CPU tier; A again: 16 tokens from disk at 1 GB/s, 1e6 bytes per token
    a, b = list(range(17)), list(range(100, 117))
    tiers = [Tier("cpu", 16, 50.0, 0.0), Tier("disk", 64, 1.0, 2.5)]
    frame = _run(tiers, [a, b, a], reload_ms=7.0).requests
    assert frame["disk_hit_tokens"].to_list() == [0, 0, 16]
    assert frame["cpu_hit_tokens"].to_list() == [0, 0, 16]
    load = 16 * 1e6 / 1e9 * 1e3 + 2.5                 # 16 MB at 1 GB/s = 16 ms, + 2.5 ms
    assert frame["load_ms"].to_list() == pytest.approx([0, 0, load])
    # the step: fixed 10 + 1 token computed x 1 ms + the load (the reload term replaced)
    assert frame["ttft_ms"][2] == pytest.approx(10.0 + 1.0 + load)
    steps = _run(tiers, [a, b, a], reload_ms=7.0).steps
    assert steps["disk_load_bytes"].sum() == 16 * 10**6
    assert steps["cpu_load_bytes"].sum() == steps["remote_load_bytes"].sum() == 0


def test_a_slow_tier_makes_ttft_worse_than_recomputing():
    a, b = list(range(17)), list(range(100, 117))
    slow = [Tier("cpu", 16, 50.0, 0.0), Tier("disk", 64, 0.5, 40.0)]
    with_tier = _run(slow, [a, b, a]).requests["ttft_ms"][2]
    without = _run(None, [a, b, a]).requests["ttft_ms"][2]
    assert without == pytest.approx(10.0 + 17.0)      # recomputed: 17 tokens x 1 ms
    assert with_tier == pytest.approx(10.0 + 1.0 + 32.0 + 40.0) and with_tier > without


def test_a_shared_remote_store_serves_another_instance():
    a = list(range(17))
    tiers = [Tier("cpu", 16), Tier("remote", 64, 1.0, 1.0, True)]
    first, second = share_remote([LMCacheStack(tiers, 4, 1.0, 8) for _ in range(2)])
    config = SchedulerConfig(num_gpu_blocks=6, max_model_len=1000, block_size=4)
    simulate([SimRequest(0, a, 1)], config, cpu_tier=first)
    frame = simulate([SimRequest(0, a, 1)], config, cpu_tier=second).requests
    assert frame["remote_hit_tokens"].to_list() == [16]


def test_a_fleet_shares_one_remote_store_in_time_order():
    """Two instances, round robin, each with its own CPU tier and one shared remote store:
    a document stored by one instance is read from the remote store by the other; the run
    goes in time order (the fleet's event loop, not one instance after the other)."""
    from pipeline.fleet.loop import simulate_fleet
    from pipeline.fleet.routers import make_router

    doc = list(range(64))
    requests = [SimRequest(i, doc + [1000 + i], 1, arrival_s=float(i)) for i in range(4)]
    config = SchedulerConfig(block_size=4, num_gpu_blocks=40, max_model_len=200)
    tiers = [Tier("cpu", 16), Tier("remote", 256, 1.0, 1.0, True)]
    stacks = share_remote([LMCacheStack(tiers, 4, 1.0, 8) for _ in range(2)])
    result = simulate_fleet(requests, config, make_router("round-robin", 2, 4),
                            _model().step_ms, cpu_tiers=stacks)
    assert stacks[1].remote_of is stacks[0]
    assert stacks[1].bytes_loaded()["remote"] > 0      # instance 1 read what 0 stored
    assert result.requests["cpu_hit_tokens"].to_list()[1] > 0


def test_every_tier_runs_the_same_compiled_engine():
    """No tier, LMCache's CPU tier and a stack reach the engine in one shape (a stack's:
    ``kstack.engine_arrays``), so the engine compiles once for all (each shape compiled the
    whole engine again, ~20 s of CPU on a clean cache)."""
    from pipeline.engine import krun
    config = SchedulerConfig(num_gpu_blocks=8, max_model_len=100, block_size=4)
    requests = [SimRequest(i, list(range(i, i + 12)), 2) for i in range(3)]
    simulate(requests, config)
    known = set(krun._engine.signatures)
    lmcache = simulate(requests, config, cpu_tier=LMCacheTier(16, 4, 4))
    stack = simulate(requests, config, cpu_tier=LMCacheStack([Tier("cpu", 16)], 4, 2.0, 4))
    assert set(krun._engine.signatures) == known
    assert stack.requests.drop(NEW).equals(lmcache.requests)
