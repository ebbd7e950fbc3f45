"""``--engine sglang --enable-hierarchical-cache`` against SGLang 0.5.23's own HiCache, per
step and per request, and the engine's frames without HiCache unchanged.

The reference is scripts/sglang_scheduler_reference.py over SGLang's ``UnifiedRadixCache``
with HiCache switched on as ``init_hicache`` leaves it (scripts/sglang_hicache_reference.py:
``PrefillAdder``'s load back, ``match_kv_cache``'s host hits and the tree's write-through,
write-back, host eviction and load back run as shipped; transfers finish at once, acks are
seen at the next turn), in a process of its own. Hypothesis draws the timed workloads of
tests/test_sglang_hisched.py (shared stems, bursts, pools that evict and retract, long
stems returning to small pools, page sizes 1, 2, 4), each write policy and host pools of 8,
40 and 200 tokens (the smaller ones evict on the host). The engine runs as ``simulate``
runs it; every step's batch, its host tokens loaded (``reload_tokens``) and bytes loaded and
written, and every request's steps, device and host hits and retractions must be equal.
"""

from __future__ import annotations

import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT
from test_engine_sglang_equal import scheduler_settings, workloads
from test_sglang_hisched import returning_stems

from pipeline.components.sglang_hiradix import WRITE_POLICIES
from pipeline.components.sglang_sched import Scheduler
from pipeline.engine import sglang as engine_module
from pipeline.engine.request import SimRequest
from pipeline.engine.sglang import SGLangConfig, simulate
from pipeline.engine.sglang_hicache import HiCacheSpec, SGLangHiInstance
from pipeline.engine.sglang_instance import SGLangInstance

sys.path.insert(0, str(ROOT / "scripts"))
import sglang_reference as ref  # noqa: E402
import sglang_scheduler_reference as scheduler  # noqa: E402

KV_BYTES = 3                                      # bytes per token of the byte columns


@pytest.fixture(scope="module")
def sglang():
    if not ref.sources_present():
        pytest.skip(f"SGLang {ref.VERSION} sources absent from {ref.SOURCES}: run "
                    "scripts/ensure_sglang_sources.sh")
    pytest.importorskip("msgspec", reason="SGLang's unified tree core imports msgspec")
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool


def config(pool: int, options: dict, hicache: HiCacheSpec | None) -> SGLangConfig:
    return SGLangConfig(2, 10 ** 6, options["page"], scheduler_settings(pool, options),
        hicache)


def sims(requests) -> list[SimRequest]:
    return [SimRequest(i, p, len(o), arrival_step=a, output_token_ids=o)
            for i, (p, o, a) in enumerate(requests)]


def stepped(engine, requests, runs) -> list:
    """``engine``'s StepRecords, one step per time unit, each request added at its arrival
    step (``requests``' third field); RuntimeError("stuck") when a step finds no batch."""
    records, now, pointer = [], 0, 0
    while pointer < len(runs) or engine.has_work():
        if not engine.has_work():
            now = max(now, requests[pointer][2])
        while pointer < len(runs) and requests[pointer][2] <= now:
            engine.add_request(runs[pointer])
            pointer += 1
        record = engine.step()
        if record is None:
            raise RuntimeError("stuck")
        records.append(record)
        now += 1
    return records


def batch_of(record) -> tuple:
    """A StepRecord as the references list a batch: (extend, scheduled, first tokens,
    finished)."""
    return (record.prefill_tokens > 0 or not record.decode_seqs, list(record.scheduled),
            record.first_tokens, record.finished)


def ours(requests, pool, options, policy, host) -> dict:
    """The engine as ``simulate`` runs it: its StepRecords (stepped) and its frames."""
    cfg = config(pool, options, HiCacheSpec(policy, host, KV_BYTES))
    runs = sims(requests)
    records = stepped(SGLangHiInstance(cfg), requests, runs)
    return {"steps": [batch_of(r) for r in records], "frames": simulate(runs, cfg)}


def theirs(sglang, requests, pool, options, policy, host) -> dict:
    return sglang.submit(scheduler.run_unified, [(p + o, len(p), len(o), a)
                                                 for p, o, a in requests], pool,
                         hicache=(policy, host), **options).result()


def outcome(run, *args) -> dict:
    try:
        return run(*args)
    except RuntimeError as exc:
        return {"error": "stuck" if "stuck" in str(exc) else "out of memory"}


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(workload=st.one_of(workloads(), returning_stems(), returning_stems()),
       policy=st.sampled_from(WRITE_POLICIES), host=st.sampled_from([8, 40, 200]))
def test_hicache_runs_equal_sglang(sglang, workload, policy, host):
    requests, pool, options = workload
    mine = outcome(ours, requests, pool, options, policy, host)
    reference = outcome(theirs, sglang, requests, pool, options, policy, host)
    if "error" in mine or "error" in reference:
        assert mine.get("error") == reference.get("error")
        return
    assert mine["steps"] == [tuple(s) for s in reference["steps"]]
    frame, steps = mine["frames"].requests, mine["frames"].steps
    hits = (frame["gpu_hit_tokens"] + frame["cpu_hit_tokens"]).to_list()
    got = list(zip(frame["first_scheduled_step"], frame["first_token_step"],
                   frame["finish_step"], hits, frame["preemptions"]))
    assert got == [tuple(r) for r in reference["requests"]]
    assert frame["cpu_hit_tokens"].to_list() == reference["host_loaded"]
    assert list(zip(steps["reload_tokens"], steps["host_write_bytes"] // KV_BYTES)) == \
        reference["host"]
    assert (steps["host_load_bytes"] == steps["reload_tokens"] * KV_BYTES).all()


def test_a_stem_returns_from_the_host(sglang):
    """A 30-token stem, pushed off a 60-token pool by another, comes back: loaded from the
    host (written through at its insert, or backed up at its eviction), as SGLang loads it;
    write_through_selective copies a node at its second hit only, so there is nothing to
    load."""
    a, b = list(range(100, 130)), list(range(200, 230))
    requests = [(a + [1, 2], [9, 9], 0), (b + [3, 4], [9, 9], 5), (a + [5, 6], [9, 9], 10)]
    options = dict(policy="fcfs", max_running=4, chunk=None, max_prefill=16384,
                   conservativeness=1.0, seed=0, page=1)
    for policy in WRITE_POLICIES:
        mine = ours(requests, 60, options, policy, 200)
        reference = theirs(sglang, requests, 60, options, policy, 200)
        loaded = mine["frames"].requests["cpu_hit_tokens"].to_list()
        assert loaded == reference["host_loaded"]
        assert loaded == [0, 0, 0 if policy == "write_through_selective" else 30]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_without_hicache_python_and_compiled_frames_agree(workload):
    """The Python instance over the plain scheduler writes the compiled engine's frames (on
    the step and the time clock): its frame building is the engine's. A run without
    HiCache is the compiled one (``simulate`` takes it)."""
    requests, pool, options = workload
    cfg, runs = config(pool, options, None), sims(requests)
    assert type(engine_module.SGLang.instance(cfg)) is SGLangInstance

    def price(record) -> float:
        return 1.0 + record.prefill_tokens * 0.5 + record.decode_seqs

    try:
        compiled = [simulate(runs, cfg), simulate(runs, cfg, clock="time", step_ms=price)]
    except RuntimeError:
        return
    original, route = engine_module.SGLang.instance, engine_module.compiled_hicache
    try:
        engine_module.compiled_hicache = lambda spec: spec is None
        engine_module.SGLang.instance = staticmethod(
            lambda c, tier=None, capacity=64: SGLangHiInstance(c, tier, capacity,
                                                               make=Scheduler))
        python = [simulate(runs, config(pool, options, HiCacheSpec("write_back", 0, 1))),
                  simulate(runs, cfg, clock="time", step_ms=price)]
    finally:
        engine_module.SGLang.instance, engine_module.compiled_hicache = original, route
    for mine, theirs_ in zip(python, compiled):
        assert mine.requests.select(theirs_.requests.columns).equals(theirs_.requests)
        assert mine.steps.select(theirs_.steps.columns).equals(theirs_.steps)


def test_host_pool_as_sglang_sizes_it():
    from pipeline.engine.sglang_hicache import host_pool_tokens
    assert host_pool_tokens(1000, 1, 2.0, 0, 100) == 2001          # ratio, one padding page
    assert host_pool_tokens(1000, 4, 2.0, 0, 100) == 2004
    assert host_pool_tokens(1000, 16, 2.0, 1, 114688) == (8719 // 16 + 1) * 16   # 1 GB
