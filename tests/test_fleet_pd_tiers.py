"""A disaggregated fleet whose prefill engines keep a CPU tier (LMCache's, or vLLM's native
offloading): the prefill side is the aggregated engine with that tier, run with max_tokens
1; the decode side is unchanged."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import polars as pl
import pytest

from conftest import cli_in_process
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.components.lmcache import LMCacheTier
from pipeline.engine.config import SchedulerConfig
from pipeline.engine.loop import simulate
from pipeline.engine.native_tier import NativeSpec
from pipeline.engine.vllm import VLLM
from pipeline.fleet.disaggregated import Link, Side, simulate_disaggregated
from pipeline.fleet.routers import make_router
from test_fleet_disaggregated import KV, MODEL, _requests, decode_alone, holding_config, \
    workloads


@settings(max_examples=25, deadline=None)
@given(workloads, st.integers(14, 40), st.sampled_from([16, 48, 256]),
       st.sampled_from(["lmcache", "native"]))
def test_a_prefill_tier_at_infinite_bandwidth_is_the_tiered_engine_composed(
        workload, blocks, tier_tokens, kind):
    requests = _requests(*workload)
    config = holding_config(requests, blocks)
    if config is None:
        return
    spec = NativeSpec(tier_tokens // 8, KV)

    def tiers() -> list:
        return [LMCacheTier(tier_tokens, 8, 16) if kind == "lmcache" else spec]
    pd = simulate_disaggregated(
        requests, Side(config, make_router("round-robin", 1, 8), MODEL, VLLM, tiers),
        Side(config, make_router("round-robin", 1, 8), MODEL, VLLM), Link(math.inf),
        KV).requests
    # the tiered engine alone, every request cut to its first token
    first = [replace(r, max_tokens=1) for r in requests]
    alone = simulate(first, config, clock="time", step_ms=MODEL.step_ms,
                     **({"cpu_tier": tiers()[0]} if kind == "lmcache" else
                        {"offload": spec})).requests
    for column in ("gpu_hit_tokens", "cpu_hit_tokens"):
        assert pd[column].to_list() == alone[column].to_list()
    assert pd["ttft_ms"].to_list() == pytest.approx(alone["ttft_ms"].to_list())
    # the decode side as without a tier: each request arrives when its prefill finished
    _, order, decode = decode_alone(requests, config, alone)
    finish = np.empty(len(requests))
    finish[order] = decode["finish_ms"].to_numpy()
    assert pd["finish_ms"].to_list() == pytest.approx(finish.tolist())


def test_the_prefill_tier_serves_hits_the_gpu_pool_lost():
    # three 120-token documents, each asked twice after the others: 18 GPU blocks of 8
    # hold none of them by then, a 512-token LMCache tier holds them all
    docs = [[1000 * d + j for j in range(120)] for d in range(3)]
    from pipeline.engine.request import SimRequest
    requests = [SimRequest(i, docs[i % 3] + [50_000 + i], 2, arrival_s=0.05 * i)
                for i in range(6)]
    config = SchedulerConfig(num_gpu_blocks=18, max_model_len=200, block_size=8,
                             max_num_batched_tokens=64)
    plain = simulate_disaggregated(
        requests, Side(config, make_router("round-robin", 1, 8), MODEL),
        Side(config, make_router("round-robin", 1, 8), MODEL), Link(math.inf), KV).requests
    tiered = simulate_disaggregated(
        requests, Side(config, make_router("round-robin", 1, 8), MODEL, None,
                       lambda: [LMCacheTier(512, 8, 16)]),
        Side(config, make_router("round-robin", 1, 8), MODEL), Link(math.inf), KV).requests
    assert plain["cpu_hit_tokens"].sum() == 0
    assert tiered["cpu_hit_tokens"][3:].to_list() == [112, 112, 112]   # 7 chunks of 16




def test_fleet_takes_a_cpu_tier_on_the_prefill_side(tmp_path):
    done = cli_in_process("fleet", "--pattern", "long-doc-qa",
         "--num-documents", "3", "--document-length", "1000", "--repeat-count", "2",
         "--model", "llama-3.1-8b", "--jobs", "1", "--prefill-instances", "1",
         "--decode-instances", "1", "--kv-transfer", "25GB/s", "--gpu", "70blocks",
         "--cpu", "1GiB", "--gpu-cost-per-hour", "2", "--cpu-memory-cost-per-gib-hour", "0.5",
         "--out", str(tmp_path / "f"), "--json")
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    assert row["cpu_hit_tokens"] > 0
    assert row["usd_per_hour"] == pytest.approx(2 * 2 + 0.5)     # CPU on the prefill side
    requests = pl.read_parquet(tmp_path / "f" / "requests")
    assert requests["kv_settled"].all()
