"""The compiled HiCache engine (``sglang_ksched`` over ``sglang_khiradix``, as ``simulate
--engine sglang --enable-hierarchical-cache`` runs it) against the plain-Python HiCache loop
(``oracles.sglang_hisched.HiScheduler``, which tests/test_sglang_hisched.py holds equal to
SGLang 0.5.23's own pieces over its HiCache): hypothesis's workloads of the HiCache
scheduler test (the engine test's plus long stems returning to small pools), each write
policy, host pools of 8, 40 and 200 tokens; every step's batch, its host tokens loaded and
written, every request's outcome and host tokens loaded equal; in both loops (the overlap
loop against ``HiScheduler(..., overlap=True)``); the whole-run kernel equal to the
step-by-step one. Needs no SGLang sources."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oracles.sglang_hiradix import WRITE_POLICIES
from oracles.sglang_hisched import HiScheduler
from test_engine_sglang_equal import ours, scheduler_settings, workloads
from test_sglang_hisched import returning_stems
from test_sglang_ksched import oracle, outcome
from test_sglang_overlap import tight

from pipeline.components.sglang_settings import SchedulerSettings
from pipeline.components.sglang_storage_spec import StorageSpec
from pipeline.engine import sglang as engine_module
from pipeline.engine.request import SimRequest
from pipeline.engine.sglang import SGLang, SGLangConfig, simulate
from pipeline.engine.sglang_hicache import HiCacheSpec, SGLangHiInstance
from pipeline.engine.sglang_instance import SGLangInstance
from pipeline.engine.sglang_step_clock import run_on_steps


class Recording(HiScheduler):
    """``HiScheduler`` noting each batch's host tokens (loaded, written) since the last
    batch's (a turn that only processed a result counts toward the next batch)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.moved: list = []
        self.mark = (0, 0)

    def iterate(self, step: int):
        batch = super().iterate(step)
        if batch is not None:
            now = self.tree.loaded, self.tree.written
            self.moved.append((now[0] - self.mark[0], now[1] - self.mark[1]))
            self.mark = now
            if self.overlap:                     # the launched batch's own lists
                batch.first_tokens, batch.finished = batch.sampling, batch.finishing
        return batch


def model(requests, pool, options, write_policy, host, overlap) -> dict:
    made = []

    def make(settings, overlap):
        made.append(Recording(settings, write_policy=write_policy, host_tokens=host,
                              overlap=overlap))
        return made[0]
    result = oracle(requests, pool, options, make, overlap)
    result["moved"] = made[0].moved
    return result


def check(workload, write_policy, host, overlap) -> None:
    requests, pool, options = workload
    spec = HiCacheSpec(write_policy, host, 1)
    mine = outcome(ours, requests, pool, options, spec, overlap)
    theirs = outcome(model, requests, pool, options, write_policy, host, overlap)
    if "error" in mine or "error" in theirs:
        assert mine.get("error") == theirs.get("error")
        return
    assert mine["steps"] == theirs["steps"]
    assert mine["requests"] == theirs["requests"]
    assert mine["host_loaded"] == theirs["host_loaded"]
    assert mine["moved"] == theirs["moved"]
    frame = run_on_steps(mine["sims"], mine["config"])        # the whole-run kernel
    assert frame.requests["cpu_hit_tokens"].to_list() == mine["host_loaded"]
    assert frame.steps["reload_tokens"].to_list() == [m[0] for m in mine["moved"]]
    assert frame.steps["host_write_bytes"].to_list() == [m[1] for m in mine["moved"]]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(workload=st.one_of(workloads(), returning_stems(), returning_stems()),
       write_policy=st.sampled_from(WRITE_POLICIES), host=st.sampled_from([8, 40, 200]))
def test_compiled_hicache_equal_to_the_python_model(workload, write_policy, host):
    check(workload, write_policy, host, overlap=False)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(workload=st.one_of(workloads(), returning_stems(), tight()),
       write_policy=st.sampled_from(WRITE_POLICIES), host=st.sampled_from([8, 40, 200]))
def test_compiled_hicache_overlap_equal_to_the_python_model(workload, write_policy, host):
    check(workload, write_policy, host, overlap=True)


def test_storage_options_run_the_python_engine():
    settings_ = SchedulerSettings(max_total_tokens=64)
    plain = SGLangConfig(2, 10 ** 6, 1, settings_, HiCacheSpec("write_through", 100, 1))
    stored = replace(plain, hicache=HiCacheSpec("write_through", 100, 1, StorageSpec()))
    assert type(SGLang.instance(plain)) is SGLangInstance
    assert type(SGLang.instance(stored)) is SGLangHiInstance


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(workload=st.one_of(workloads(), returning_stems()),
       write_policy=st.sampled_from(WRITE_POLICIES), host=st.sampled_from([8, 40, 200]))
def test_compiled_and_python_hicache_frames_agree(workload, write_policy, host):
    """``simulate``'s frames on the step and the time clock (with the step model's reload
    term: ``load_ms``, the host byte columns) are the plain-Python HiCache engine's."""
    requests, pool, options = workload
    spec = HiCacheSpec(write_policy, host, 7)
    config = SGLangConfig(2, 10 ** 6, options["page"], scheduler_settings(pool, options),
                          spec)
    runs = [SimRequest(i, p, len(o), arrival_step=a, arrival_s=a / 10,
                       output_token_ids=o) for i, (p, o, a) in enumerate(requests)]
    price = _price
    try:
        compiled = [simulate(runs, config), simulate(runs, config, clock="time",
                                                     step_ms=price)]
    except RuntimeError:
        return
    route = engine_module.compiled_hicache
    try:
        engine_module.compiled_hicache = lambda spec: spec is None
        python = [simulate(runs, config), simulate(runs, config, clock="time",
                                                   step_ms=price)]
    finally:
        engine_module.compiled_hicache = route
    for mine, theirs in zip(compiled, python):
        assert mine.requests.equals(theirs.requests)
        assert mine.steps.equals(theirs.steps)


def _price(record) -> float:
    return 1.0 + record.prefill_tokens * 0.5 + record.decode_seqs + record.reload_tokens
