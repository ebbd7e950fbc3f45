"""SGLang's overlap loop (``event_loop_overlap``, its default): the plain-Python scheduler
(``pipeline.components.sglang_sched.Scheduler(..., overlap=True)``) against SGLang 0.5.23's
own ``SchedulePolicy`` / ``PrefillAdder`` / ``RadixCache`` driven unmodified in the
transcribed overlap loop (``scripts/sglang_scheduler_reference.py``, ``overlap=True``), per
step (the batch launched, who its result gave a first token, who it finished) and per
request, on the workloads of tests/test_engine_sglang_equal.py (tiny pools, so the
retraction and the skipped decode run). Skipped, saying why, without the sources."""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from oracles.sglang_sched import Scheduler
from test_sglang_ksched import oracle
from test_engine_sglang_equal import (outcome, pytestmark, refused_alike,  # noqa: F401
                                     scheduler_settings, sglang_intake, theirs, turn_by_turn,
                                     workloads)

from pipeline.engine.sglang import SGLangConfig
from pipeline.engine.sglang_instance import SGLangInstance
from pipeline.engine.sglang_step_clock import run_on_steps


@st.composite
def tight(draw, clip: bool = True):
    """Bursts of requests with long outputs on pools that barely hold them, admitted
    together by a small new-token ratio: decodes run out of memory (retract or skip); as
    SGLang's intake queues them (``sglang_intake``)."""
    requests, step = [], 0
    stem = draw(st.lists(st.integers(0, 50), min_size=0, max_size=12))
    for _ in range(draw(st.integers(3, 10))):
        prompt = stem[:draw(st.integers(0, len(stem)))] + draw(
            st.lists(st.integers(51, 60), min_size=1, max_size=8))
        outputs = draw(st.lists(st.integers(0, 60), min_size=1, max_size=30))
        step += draw(st.sampled_from([0, 0, 0, 1, 2]))
        requests.append((prompt, outputs, step))
    longest = max(len(p) + len(o) for p, o, _ in requests)
    page = draw(st.sampled_from([1, 1, 2, 4]))
    options = dict(policy=draw(st.sampled_from(["fcfs", "lpm", "lof"])),
                   max_running=draw(st.integers(2, 8)),
                   chunk=draw(st.sampled_from([None, 8, 16])), max_prefill=16384,
                   conservativeness=draw(st.sampled_from([0.1, 0.3])), seed=0, page=page)
    workload = sglang_intake((requests, longest + 2 * page + draw(st.integers(0, 24)),
                              options), clip)
    assume(workload[0])
    return workload


def overlap_model(requests, pool, options, make=Scheduler) -> dict:
    """The Python model's overlap loop (``make(settings, overlap=True)``), driven as the
    reference's ``run`` drives its loop."""
    return oracle(requests, pool, options, make, overlap=True)


def reference(requests, pool, options) -> dict:
    return theirs(requests, pool, {**options, "overlap": True})


def check_overlap(workload) -> None:
    """The Python model's overlap loop equals SGLang's, step by step and request by
    request, or both refuse the workload alike."""
    mine, ref = outcome(overlap_model, *workload), outcome(reference, *workload)
    if refused_alike(mine, ref):
        return
    assert mine["steps"] == ref["steps"]
    assert mine["requests"] == ref["requests"]
    launched(mine)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_overlap_equal_to_sglangs_loop(workload):
    check_overlap(workload)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tight())
def test_overlap_equal_on_tight_pools(workload):
    check_overlap(workload)


def launched(run) -> None:
    """The finishes known at launch are the processed ones; a first token known at launch
    is processed unless the request was retracted in the next turn."""
    for (_, _, first, finished), (sampling, finishing) in zip(run["steps"], run["launch"]):
        assert finishing == finished
        assert set(first) <= set(sampling)


def test_a_tiny_pool_skips_and_retracts_in_both():
    """Four requests of 10 prompt + 8 output tokens in a 44-token pool, admitted together
    by a small new-token ratio: the decodes run out; both loops agree, and the overlap loop
    differs from the non-overlap one."""
    requests = [([i] * 10, list(range(100, 108)), 0) for i in range(4)]
    options = dict(policy="fcfs", max_running=8, chunk=None, max_prefill=16384,
                   conservativeness=0.3, seed=0, page=1)
    mine, ref = overlap_model(requests, 44, options), reference(requests, 44, options)
    assert (mine["steps"], mine["requests"]) == (ref["steps"], ref["requests"])
    assert mine["steps"] != theirs(requests, 44, options)["steps"]
    assert sum(r[4] for r in mine["requests"]) > 0


def compiled(requests, pool, options) -> dict:
    """The compiled engine with the overlap loop, turn by turn (``SGLangInstance.step``)
    and whole (``run_on_steps``, its events: each batch's first tokens and finishes)."""
    config = SGLangConfig(2, 10 ** 6, options["page"], scheduler_settings(pool, options),
        overlap=True)
    run = turn_by_turn(config, requests)
    whole = SGLangInstance(config)
    run_on_steps(run["sims"], config, whole, record=True)
    STEPS, SCHED, EVENTS = whole.steps
    bounds = STEPS[:, -1].tolist() + [len(SCHED)]
    return {"requests": run["requests"], "steps": run["steps"],
            "whole": [[tuple(r) for r in SCHED[bounds[j]:bounds[j + 1]].tolist()]
                      for j in range(len(STEPS))],
            "events": [tuple(e) for e in EVENTS.tolist()], "engine": run["engine"]}


def check_compiled(workload) -> None:
    mine, model = outcome(compiled, *workload), outcome(overlap_model, *workload)
    if refused_alike(mine, model):
        return
    assert mine["steps"] == [(s[0], s[1], *launch) for s, launch in
                             zip(model["steps"], model["launch"])]
    assert mine["requests"] == model["requests"]
    assert mine["whole"] == [s[1] for s in model["steps"]]
    assert mine["events"] == [(j, kind, i) for j, s in enumerate(model["launch"])
                              for kind in (0, 1) for i in s[kind]]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(workloads(), tight()))
def test_compiled_overlap_equal_to_the_python_model(workload):
    check_compiled(workload)
