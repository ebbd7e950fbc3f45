"""The fleet loop: one instance is ``simulate`` exactly, for every router; session routing
on disjoint sessions is N independent ``simulate`` runs; the stale view lags."""

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.engine.config import SchedulerConfig
from pipeline.engine.core import EngineSim
from pipeline.engine.loop import simulate
from pipeline.engine.request import SimRequest
from pipeline.fleet.loop import simulate_fleet
from pipeline.fleet.routers import ROUTERS, make_router
from pipeline.fleet.routers.session import instance_for
from pipeline.fleet.view import FleetView
from pipeline.steptime import Linear
from pipeline.workloads.patterns import multi_turn, tenant_groups

LINEAR = Linear(dict(fixed_ms=2.0, prefill_token_ms=0.02, context_token_ms=0.001,
                     decode_seq_ms=0.3, reload_token_ms=0.0),
                label="linear stand-in (test coefficients)")


@st.composite
def workloads(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    docs = [rng.integers(0, 500, int(rng.integers(16, 120))) for _ in range(3)]
    n = draw(st.integers(1, 25))
    gaps = rng.exponential(draw(st.sampled_from([0.001, 0.01, 0.05])), n)
    arrivals = np.cumsum(gaps) - gaps[0]
    requests = [SimRequest(i, np.concatenate((docs[int(rng.integers(3))],
                                              rng.integers(500, 900, int(rng.integers(1, 30))))),
                           int(rng.integers(1, 12)), arrival_s=float(arrivals[i]),
                           session=f"s{int(rng.integers(4))}") for i in range(n)]
    config = SchedulerConfig(block_size=draw(st.sampled_from([4, 16])),
                             num_gpu_blocks=draw(st.integers(60, 200)), max_model_len=512,
                             max_num_batched_tokens=draw(st.sampled_from([64, 256])),
                             max_num_seqs=draw(st.sampled_from([2, 8])),
                             async_scheduling=draw(st.booleans()))
    return requests, config


@settings(max_examples=25)
@given(workloads(), st.sampled_from(sorted(ROUTERS)))
def test_one_instance_is_simulate(workload, name):
    requests, config = workload
    expected = simulate(requests, config, clock="time", step_ms=LINEAR.step_ms)
    fleet = simulate_fleet(requests, config, make_router(name, 1, config.block_size),
                           LINEAR.step_ms)
    assert fleet.requests["instance"].unique().to_list() == [0]
    assert fleet.requests.drop("instance", "decision").equals(expected.requests)
    assert fleet.steps.drop("instance").equals(expected.steps)


def assert_instances_are_independent(fleet, requests, config, n, placement):
    """Each instance's rows and batches = ``simulate`` of the requests placed on it."""
    for instance in range(n):
        mine = [r for r in requests if placement[r.index] == instance]
        rows = fleet.requests.filter(pl.col("instance") == instance)
        assert rows["request"].to_list() == [r.index for r in mine]
        if not mine:
            continue
        alone = [SimRequest(k, r.prompt_token_ids, r.max_tokens, arrival_s=r.arrival_s,
                            session=r.session) for k, r in enumerate(mine)]
        expected = simulate(alone, config, clock="time", step_ms=LINEAR.step_ms)
        assert rows.drop("request", "instance", "decision").equals(
            expected.requests.drop("request"))
        assert (fleet.steps.filter(pl.col("instance") == instance).drop("instance")
                .equals(expected.steps))


@settings(max_examples=15)
@given(workloads(), st.integers(2, 4))
def test_session_routing_is_independent_simulations(workload, n):
    requests, config = workload
    fleet = simulate_fleet(requests, config, make_router("session", n, config.block_size),
                           LINEAR.step_ms)
    placement = {r.index: instance_for(f"session:{r.session}", n) for r in requests}
    assert_instances_are_independent(fleet, requests, config, n, placement)


@settings(max_examples=20)
@given(workloads(), st.integers(2, 3), st.sampled_from(sorted(ROUTERS)))
def test_every_router_leaves_instances_independent(workload, n, name):
    """Whatever a router decides, each instance is ``simulate`` of what it was sent."""
    requests, config = workload
    fleet = simulate_fleet(requests, config, make_router(name, n, config.block_size, seed=3),
                           LINEAR.step_ms)
    placement = dict(zip(fleet.requests["request"], fleet.requests["instance"]))
    assert_instances_are_independent(fleet, requests, config, n, placement)


def test_cache_aware_routers_beat_round_robin_on_groups():
    pattern = tenant_groups(4, 3, 3, 256, 32, seed=1)
    requests = [SimRequest(i, p, 4, arrival_s=i * 0.02, session=s)
                for i, (p, s) in enumerate(zip(pattern.prompts, pattern.sessions))]
    config = SchedulerConfig(block_size=16, num_gpu_blocks=40, max_model_len=512)
    hits = {}
    for name in ("round-robin", "prefix-approx", "prefix-precise", "kv-cost"):
        result = simulate_fleet(requests, config, make_router(name, 4, 16), LINEAR.step_ms)
        hits[name] = result.requests["gpu_hit_tokens"].sum()
    assert min(hits["prefix-approx"], hits["prefix-precise"], hits["kv-cost"]) > \
        hits["round-robin"]


def test_stale_view_answers_from_its_last_refresh():
    config = SchedulerConfig(block_size=4, num_gpu_blocks=20, max_model_len=64)
    engine = EngineSim(config)
    view = FleetView([engine], staleness_ms=100.0)
    view.advance(0.0)
    request = SimRequest(0, np.arange(12), 2)
    engine.add_request(request)
    engine.step()
    view.changed(0)                        # as the fleet loop tells it after each move
    keys = engine.request_block_hashes(request)
    assert engine.cached_prefix_blocks(keys) == 3          # the prompt's 3 blocks
    assert view.cached_blocks(0, keys) == 0 and view.num_waiting(0) == 0
    view.advance(99.0)
    assert view.cached_blocks(0, keys) == 0
    view.advance(100.0)
    assert view.cached_blocks(0, keys) == 3 and view.epoch == 2
    live = FleetView([engine])
    assert live.cached_blocks(0, keys) == 3 and live.kv_usage(0) > 0


def test_multi_turn_prompts_resend_history_and_answers():
    pattern = multi_turn(2, 3, 8, 4, 5, think_s=1.0, rate=100.0, seed=0)
    by_session = {}
    for prompt, answer, session in zip(pattern.prompts, pattern.outputs, pattern.sessions):
        by_session.setdefault(session, []).append((prompt, answer))
    assert sorted(by_session) == ["chat0", "chat1"]
    for turns in by_session.values():
        for (prompt, answer), (after, _) in zip(turns, turns[1:]):
            assert np.array_equal(after[:prompt.size + answer.size],
                                  np.concatenate((prompt, answer)))
    assert np.all(np.diff(pattern.arrivals_s) >= 0)


def test_groups_share_a_system_prompt_per_group_only():
    pattern = tenant_groups(2, 2, 2, 6, 3, seed=0)
    firsts = {}
    for prompt, session in zip(pattern.prompts, pattern.sessions):
        firsts.setdefault(session[:2], set()).add(tuple(prompt[:6]))
    assert all(len(v) == 1 for v in firsts.values())
    assert firsts["g0"] != firsts["g1"]
    assert len({tuple(p[6:]) for p in pattern.prompts}) == len(pattern.prompts)


@pytest.mark.parametrize("model, served", [("compiled lmcache", 512), ("lmcache", 512),
                                           ("lru", 592), ("s3fifo", 592)])
def test_a_shared_cpu_pool_serves_blocks_another_instance_stored(model, served):
    """LMCache serves the prompt's 2 full chunks, a block model its 37 full blocks."""
    from functools import partial

    from pipeline.engine.cpu_tier import LMCacheTier, ModelTier
    from pipeline.fleet.sweep_point import Point, Settings, run_point
    from pipeline.engine.request import EngineRequests

    prompt = np.arange(600)
    requests = (SimRequest(0, prompt, 2, arrival_s=0.0), SimRequest(1, prompt, 2, arrival_s=5.0))
    workload = EngineRequests("same prompt twice", requests)
    config = SchedulerConfig(block_size=16, num_gpu_blocks=64, max_model_len=1024)
    tier = (partial(LMCacheTier, 4096, 16, 256) if model == "compiled lmcache" else
            partial(ModelTier, model, 4096, 16, {"chunk_size": 256} if model == "lmcache"
                    else {}))
    cpu = {}
    for shared in (False, True):
        settings = Settings(config, LINEAR, cpu_tier=tier, cpu_shared=shared)
        frame, _ = run_point(settings, Point("round-robin", 2, 64, 1.0), workload)
        assert frame["instance"].to_list() == [0, 1]
        cpu[shared] = frame["cpu_hit_tokens"].to_list()
    assert cpu[False] == [0, 0] and cpu[True][0] == 0 and cpu[True][1] == served


@settings(max_examples=25)
@given(workloads(), st.integers(1, 3), st.sampled_from(sorted(ROUTERS)),
       st.sampled_from([0.0, 3.0, 40.0]))
def test_decode_runs_at_once_equal_step_by_step(workload, n, name, staleness):
    requests, config = workload
    requests = [SimRequest(r.index, r.prompt_token_ids, r.max_tokens * 4,
                           arrival_s=r.arrival_s, session=r.session) for r in requests]
    config = SchedulerConfig(block_size=config.block_size, num_gpu_blocks=400,
                             max_model_len=config.max_model_len,
                             max_num_batched_tokens=config.max_num_batched_tokens,
                             max_num_seqs=config.max_num_seqs,
                             async_scheduling=config.async_scheduling)
    results = [simulate_fleet(requests, config, make_router(name, n, config.block_size, seed=1),
                              LINEAR.step_ms, staleness_ms=staleness, decode_run_ms=run)
               for run in (None, LINEAR.decode_run_ms)]
    assert results[1].requests.equals(results[0].requests)
    assert results[1].steps.equals(results[0].steps)


def test_decode_runs_skip_engine_steps(monkeypatch):
    calls = []
    step = EngineSim.step
    monkeypatch.setattr(EngineSim, "step", lambda self: calls.append(1) or step(self))
    requests = [SimRequest(i, np.arange(40) + 100 * i, 200, arrival_s=0.01 * i)
                for i in range(4)]
    config = SchedulerConfig(block_size=16, num_gpu_blocks=200, max_model_len=512)
    counts = []
    for run in (None, LINEAR.decode_run_ms):
        calls.clear()
        result = simulate_fleet(requests, config, make_router("round-robin", 2, 16),
                                LINEAR.step_ms, decode_run_ms=run)
        counts.append(len(calls))
    assert counts == [0, 0] and result.steps.height > 400    # every batch in compiled calls


def test_the_engines_cached_keys_are_its_hashed_blocks():
    engine = EngineSim(SchedulerConfig(block_size=16, num_gpu_blocks=30, max_model_len=512))
    for i in range(6):                     # more prompts than the pool holds: evictions
        engine.add_request(SimRequest(i, np.arange(100) + 1000 * (i % 4), 4, arrival_s=0.0))
        while engine.has_work():
            engine.step()
        assert engine.cached_keys() == set(engine.pool.cached)
        assert engine.cached_key_count() == len(engine.pool.cached) > 0


@settings(max_examples=25)
@given(workloads(), st.integers(2, 4), st.sampled_from(["round-robin", "random", "session"]),
       st.sampled_from([None, "lmcache", "lru"]))
def test_oblivious_routers_run_each_instance_alone_with_the_same_result(workload, n, name,
                                                                         cpu):
    """A router that reads no engine state is routed first and each instance run alone in
    one compiled loop: the same frames as the event loop that interleaves the instances
    (no CPU tier, the compiled LMCache tier, a registered model's tier)."""
    from pipeline.engine.cpu_tier import LMCacheTier, ModelTier
    from pipeline.fleet.routers import router_class

    requests, config = workload
    size = config.block_size
    tier = {None: None, "lmcache": lambda: LMCacheTier(2048, size, 4 * size),
            "lru": lambda: ModelTier("lru", 2048, size)}[cpu]
    watched = type("Watched", (router_class(name),), {"OBLIVIOUS": False})
    results = []
    for router in (make_router(name, n, size, seed=2), watched(n, size, 2)):
        assert router.OBLIVIOUS == (not results)
        results.append(simulate_fleet(requests, config, router, LINEAR.step_ms,
                                      cpu_tiers=[tier() for _ in range(n)] if tier else None))
    assert results[0].requests.equals(results[1].requests)
    assert results[0].steps.equals(results[1].steps)
