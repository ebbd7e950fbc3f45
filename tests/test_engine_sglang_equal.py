"""``--engine sglang`` against SGLang 0.5.23's own scheduling code, per request and per step.

scripts/sglang_scheduler_reference.py runs SGLang's ``SchedulePolicy``, ``PrefillAdder``,
``PrefillBudget``, ``RadixCache`` (with ``checkpoint``) and ``match_kv_cache`` unmodified, in
the scheduler's batch loop (transcribed there, cited, because ``Scheduler`` and
``ScheduleBatch`` need torch and a live server). Hypothesis draws timed workloads (prompts
on a few shared stems, bursts of arrivals, outputs, pools small enough to retract, every
modelled policy: ``random`` pinned by one seed for both, ``random.shuffle`` on the global
generator there and on a seeded ``random.Random`` here; page sizes 1, 2 and 4) and the
test asserts every step's batch (prefill or decode, each request's new and cached tokens,
who sampled a first token, who finished) and every request's first scheduled / first token /
finish step, radix hit and retractions. Skipped, saying why, without the sources.
"""

from __future__ import annotations

import sys

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from conftest import ROOT
from pipeline.components import sglang_ksched as K
from pipeline.components.sglang_settings import SCHEDULE_POLICIES, SchedulerSettings
from pipeline.engine.request import SimRequest
from pipeline.engine.sglang import SGLangConfig, simulate
from pipeline.engine.sglang_instance import SGLangInstance
from pipeline.engine.sglang_intake import intake_limit, refusal

sys.path.insert(0, str(ROOT / "scripts"))
import sglang_reference  # noqa: E402

pytestmark = pytest.mark.skipif(
    not sglang_reference.sources_present(),
    reason=f"SGLang {sglang_reference.VERSION} sources absent from {sglang_reference.SOURCES}:"
           " run scripts/ensure_sglang_sources.sh")


def sglang_intake(workload, clip: bool = True):
    """The workload as SGLang's intake queues it (``sglang_intake``): the requests it
    refuses dropped, with ``clip`` the others' outputs cut to its clip (without: left for
    the engine and SGLang's own intake to cut)."""
    requests, pool, options = workload
    page, kept = options["page"], []
    for p, o, a in requests:
        if refusal(len(p), len(o), pool, page) is None:
            kept.append((p, o[:intake_limit(len(p), len(o), pool, page)] if clip else o, a))
    return kept, pool, options


@st.composite
def workloads(draw, clip: bool = True):
    """Drawn timed workloads, as SGLang's intake queues them (``sglang_intake``)."""
    stems = [draw(st.lists(st.integers(0, 50), min_size=1, max_size=24)) for _ in range(3)]
    requests, step = [], 0
    for i in range(draw(st.integers(1, 14))):
        stem = stems[draw(st.integers(0, 2))][:draw(st.integers(0, 24))]
        prompt = stem + draw(st.lists(st.integers(51, 60), max_size=10))
        if not prompt:
            prompt = [61]
        outputs = draw(st.lists(st.integers(0, 60), min_size=1, max_size=16))
        step += draw(st.sampled_from([0, 0, 1, 3]))
        requests.append((prompt, outputs, step))
    longest = max(len(p) + len(o) for p, o, _ in requests)
    chunk = draw(st.sampled_from([None, 8, 16, 64]))
    options = dict(
        policy=draw(st.sampled_from(SCHEDULE_POLICIES)),
        max_running=draw(st.integers(1, 8)), chunk=chunk,
        max_prefill=draw(st.sampled_from([16, 48, 16384])),
        conservativeness=draw(st.sampled_from([0.1, 0.3, 1.0, 2.0])),
        seed=draw(st.integers(0, 3)), page=draw(st.sampled_from([1, 1, 2, 4])))
    pool = longest + 2 + draw(st.sampled_from([0, 8, 30, 120]))
    workload = sglang_intake((requests, pool, options), clip)
    assume(workload[0])
    return workload


def scheduler_settings(pool: int, options: dict):
    """SGLang's settings of one drawn workload's ``options`` on a pool of ``pool`` tokens."""
    return SchedulerSettings(
        max_total_tokens=pool, page_size=options["page"], schedule_policy=options["policy"],
        max_running_requests=options["max_running"], chunked_prefill_size=options["chunk"],
        max_prefill_tokens=options["max_prefill"],
        schedule_conservativeness=options["conservativeness"], seed=options["seed"])


def ours(requests, pool, options, hicache=None, overlap: bool = False) -> dict:
    """The engine's loop, step by step (``hicache``: a ``HiCacheSpec``)."""
    config = SGLangConfig(2, 10 ** 6, options["page"], scheduler_settings(pool, options),
                          hicache, overlap)
    run = turn_by_turn(config, requests)
    rows = run.pop("rows")
    return {**run, "config": config, "host_loaded": [int(r[K.R_HLOADED]) for r in rows]}


def turn_by_turn(config, requests) -> dict:
    """``requests`` through one ``SGLangInstance`` turn by turn (``step``), each added at its
    arrival step: per launched batch (a prefill or idle batch, scheduled, first tokens,
    finished) and its moved counters, per request (first scheduled, first token, finish,
    hit, retractions); the engine, its requests and its request rows."""
    engine = SGLangInstance(config)
    sims = [SimRequest(i, p, len(o), arrival_step=a, output_token_ids=o)
            for i, (p, o, a) in enumerate(requests)]
    steps, moved, now, pointer = [], [], 0, 0
    while pointer < len(sims) or engine.has_work():
        if not engine.has_work():
            now = max(now, requests[pointer][2])
        while pointer < len(sims) and requests[pointer][2] <= now:
            engine.add_request(sims[pointer])
            pointer += 1
        record = engine.step()
        if record is None:
            if engine.idle:                      # overlap: the last result processed
                continue
            raise RuntimeError("stuck")
        steps.append((record.prefill_tokens > 0 or not record.decode_seqs,
                      list(record.scheduled), record.first_tokens, record.finished))
        moved.append(tuple(int(v) for v in engine._row[K.S_LOADED:K.S_COLUMNS]))
        now += 1
    rows = [engine.request(i) for i in range(len(sims))]
    return {"requests": [(r[K.R_FSCHED], r[K.R_FTOK], r[K.R_FINSTEP], r[K.R_HIT],
                          r[K.R_RETR]) for r in rows], "steps": steps, "sims": sims,
            "moved": moved, "engine": engine, "rows": rows}


def theirs(requests, pool, options) -> dict:
    import sglang_scheduler_reference as reference
    return reference.run([(p + o, len(p), len(o), a) for p, o, a in requests], pool,
                         **options)


def outcome(run, *args):
    try:
        return run(*args)
    except RuntimeError as exc:                  # both must refuse the same workload
        return {"error": "stuck" if "stuck" in str(exc) else "out of memory"}


def refused_alike(mine: dict, theirs: dict) -> bool:
    """Whether either run (``outcome``) refused its workload; then both refused it alike
    (asserted)."""
    if "error" in mine or "error" in theirs:
        assert mine.get("error") == theirs.get("error")
        return True
    return False


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_equal_to_sglangs_scheduler(workload):
    requests, pool, options = workload
    mine, reference = outcome(ours, *workload), outcome(theirs, *workload)
    if refused_alike(mine, reference):
        return
    assert mine["steps"] == reference["steps"]
    assert mine["requests"] == reference["requests"]
    frame = simulate(mine["sims"], mine["config"]).requests      # the command's frames agree
    assert list(zip(frame["first_scheduled_step"], frame["first_token_step"],
                    frame["finish_step"], frame["gpu_hit_tokens"], frame["preemptions"])) \
        == [tuple(row) for row in mine["requests"]]


@pytest.mark.parametrize("page, pool", [(1, 44), (2, 44), (4, 52)])
def test_a_tiny_pool_retracts_in_both(page, pool):
    """Four requests of 10 prompt + 8 output tokens in a pool of 44 or 52 tokens: admitted
    together by a small new-token ratio, the decodes run out and requests are retracted."""
    prompts = [[i] * 10 for i in range(4)]
    requests = [(p, list(range(100, 108)), 0) for p in prompts]
    options = dict(policy="fcfs", max_running=8, chunk=None, max_prefill=16384,
                   conservativeness=0.3, seed=0, page=page)
    mine, reference = ours(requests, pool, options), theirs(requests, pool, options)
    assert mine["steps"] == reference["steps"]
    assert mine["requests"] == reference["requests"]
    assert sum(r[4] for r in mine["requests"]) > 0
