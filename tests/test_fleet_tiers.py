"""``fleet`` with LMCache's tier stack or vLLM's native offloading: each of the fleet's
paths (every instance run alone in the compiled loop, the event loop's ``run_until``, the
event loop batch by batch for a shared remote store) writes the per-request tier and load
columns and the per-step bytes columns ``simulate`` writes, with the same values; the
fleet's figures count every tier's hits."""

from __future__ import annotations

from dataclasses import replace

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.components.lmcache_stack import LMCacheStack, Tier, share_remote
from pipeline.engine.engines import engine_class
from pipeline.engine.native_tier import NativeSpec
from pipeline.engine.request import SimRequest
from pipeline.fleet.aggregates import fleet_aggregates
from pipeline.fleet.loop import simulate_fleet
from pipeline.fleet.routers import make_router, router_class
from pipeline.steptime import Linear
from test_fleet_loop import workloads

# a reload coefficient the stack's own load times replace (a path that forgot: other times)
MODEL = Linear(dict(fixed_ms=2.0, prefill_token_ms=0.02, context_token_ms=0.001,
                    decode_seq_ms=0.3, reload_token_ms=0.05), label="test coefficients")
STACK = ["disk_hit_tokens", "remote_hit_tokens", "load_ms"]
STACK_STEPS = ["cpu_load_bytes", "disk_load_bytes", "remote_load_bytes"]
NATIVE = ["load_step", "load_done_step", "load_ms", "load_start_s", "load_end_s"]


def _stacks(size: int, n: int, shared: bool = False) -> list:
    tiers = [Tier("cpu", 4 * size, 2.0, 0.1), Tier("disk", 16 * size, 0.5, 0.3),
             Tier("remote", 64 * size, 0.2, 1.0, shared)]
    return share_remote([LMCacheStack(tiers, size, 1e5, size) for _ in range(n)])


def _both_paths(requests, config, n, name, tiers, engine=None):
    """The fleet with ``name`` as it is (oblivious: each instance alone, compiled) and as a
    router that reads the engines (the event loop, ``run_until``)."""
    watched = type("Watched", (router_class(name),), {"OBLIVIOUS": False})
    return [simulate_fleet(requests, config, router, MODEL.step_ms, cpu_tiers=tiers(),
                           engine=engine)
            for router in (make_router(name, n, config.block_size, seed=2),
                           watched(n, config.block_size, 2))]


@settings(max_examples=15, deadline=None)
@given(workloads(), st.integers(1, 3), st.sampled_from(["round-robin", "session"]))
def test_a_tier_stack_writes_its_columns_on_both_paths(workload, n, name):
    requests, config = workload
    alone, stepped = _both_paths(requests, config, n, name,
                                 lambda: _stacks(config.block_size, n))
    assert set(STACK) <= set(alone.requests.columns)
    assert set(STACK_STEPS) <= set(alone.steps.columns)
    assert alone.requests.equals(stepped.requests)
    assert alone.steps.equals(stepped.steps)


@settings(max_examples=10, deadline=None)
@given(workloads(), st.integers(1, 3))
def test_native_offloading_writes_its_columns_on_both_paths(workload, n):
    requests, config = workload
    config = replace(config, async_scheduling=False)
    spec = NativeSpec(num_chunks=8, kv_bytes_per_token=10**5)
    alone, stepped = _both_paths(requests, config, n, "round-robin", lambda: [spec] * n,
                                 engine_class("vllm"))
    assert set(NATIVE) <= set(alone.requests.columns)
    assert {"cpu_load_bytes", "cpu_store_bytes"} <= set(alone.steps.columns)
    assert alone.requests.equals(stepped.requests)
    assert alone.steps.equals(stepped.steps)


@settings(max_examples=15, deadline=None)
@given(workloads(), st.integers(2, 3))
def test_a_shared_store_steps_batch_by_batch_with_the_same_loads(workload, n):
    """Every request on one instance (one session): a remote store shared with the idle
    others changes nothing, but puts the fleet on its batch-by-batch path, which must price
    the stack's loads and record its bytes as the compiled loop does."""
    requests, config = workload
    requests = [replace(r, session="one") for r in requests]
    router = make_router("session", n, config.block_size)
    alone = simulate_fleet(requests, config, router, MODEL.step_ms,
                           cpu_tiers=_stacks(config.block_size, n))
    shared = simulate_fleet(requests, config, make_router("session", n, config.block_size),
                            MODEL.step_ms, cpu_tiers=_stacks(config.block_size, n, True))
    assert alone.requests.equals(shared.requests)
    assert alone.steps.equals(shared.steps)


def test_fleet_figures_count_every_tiers_hits():
    """A document evicted from the GPU and the CPU tier comes back from disk: the point's
    hit ratio counts it, and its tokens per tier are summed."""
    a, b = list(range(17)), list(range(100, 117))
    from pipeline.engine.config import SchedulerConfig
    config = SchedulerConfig(num_gpu_blocks=6, max_model_len=1000, block_size=4)
    requests = [SimRequest(i, p, 1, arrival_s=10.0 * i) for i, p in enumerate([a, b, a])]
    tiers = [Tier("cpu", 16, 50.0, 0.0), Tier("disk", 64, 1.0, 2.5)]
    result = simulate_fleet(requests, config, make_router("round-robin", 1, 4), MODEL.step_ms,
                            cpu_tiers=[LMCacheStack(tiers, 4, 1e6, 8)])
    frame = result.requests.with_columns(router=pl.lit("round-robin"), instances=1,
                                         gpu_blocks=6, load=1.0)
    fleet = fleet_aggregates(frame)
    assert fleet["disk_hit_tokens"].to_list() == [16]
    assert fleet["remote_hit_tokens"].to_list() == [0]
    gpu = int(frame["gpu_hit_tokens"].sum())
    assert fleet["hit_ratio"][0] == (gpu + 16) / (3 * 17)


def test_the_fleet_command_writes_every_points_tier_columns(tmp_path):
    from pipeline.cli import main
    out = tmp_path / "fleet"
    assert main(["fleet", "--pattern", "long-doc-qa", "--num-documents", "4",
                 "--document-length", "256", "--gpu", "40blocks", "--model", "qwen2.5-1.5b",
                 "--tier", "cpu:600tokens", "--tier", "disk:20000tokens:5:0.2",
                 "--router", "round-robin,prefix-precise", "--out",
                 str(out)]) == 0
    for table, columns in (("requests", STACK), ("steps", STACK_STEPS)):
        parts = sorted((out / table).glob("point=*/part-0.parquet"))
        assert len(parts) == 2
        for part in parts:
            assert set(columns) <= set(pl.read_parquet(part).columns)
    fleet = pl.read_parquet(out / "fleet.parquet")
    assert (fleet["disk_hit_tokens"] > 0).any()
