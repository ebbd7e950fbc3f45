"""``--engine sglang`` against SGLang 0.5.23's scheduler loop run unmodified: its own
``Scheduler.get_next_batch_to_run`` / ``_get_new_batch_prefill_raw`` /
``update_running_batch`` / ``process_batch_result``, ``ScheduleBatch`` (``init_new``,
``prepare_for_extend`` / ``_decode``, ``filter_batch``, ``merge_batch``,
``check_decode_mem``, ``retract_decode``, ``copy``), ``SchedulerBatchResultProcessor``,
``Req``, the token allocators, ``ReqToTokenPool`` and ``RadixCache`` or the
``UnifiedRadixCache`` (Python core) SGLang builds by default, over a numpy-backed torch
(scripts/sglang_scheduler_unmodified.py; in a process of its own, since it installs that
torch). Per step and per request, on the drawn workloads of test_engine_sglang_equal.py
(shared stems, bursts, every modelled policy, pages 1/2/4, chunking) and
test_sglang_overlap.py's tight pools (retraction, skipped decodes), with the non-overlap
loop against the compiled engine and the overlap loop against the Python model the compiled
one is held equal to (test_sglang_overlap.py) and against the compiled overlap engine itself
(its batches and requests; its first tokens and finishes are listed at launch,
test_sglang_overlap.py relates them to the processed ones). Small example counts;
``scripts/sglang_loop_sweep.py N`` runs more. SGLang's intake runs too
(``init_req_max_new_tokens``, ``intake=True``): the drawn outputs are left unclipped (only
the requests it aborts dropped, ``sglang_intake``), so SGLang's own clip and the engine's
meet; a test of its own pins a request clipped, and a prompt both refuse. Skipped, saying
why, without the sources.
"""

from __future__ import annotations

import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT
from test_engine_sglang_equal import ours, outcome, pytestmark, sglang_intake, \
    workloads  # noqa: F401
from test_sglang_overlap import compiled, overlap_model, tight

sys.path.insert(0, str(ROOT / "scripts"))
import sglang_scheduler_unmodified as unmodified  # noqa: E402

pytest.importorskip("numpy", reason="the stand-in torch is numpy-backed")


def theirs(pool, requests, size, options) -> dict:
    """SGLang's loop on the workload, through its intake (``intake=True``); its refusals
    (stuck, the last request aborted out of memory) as the lab's ``outcome`` names them;
    any other failure raises."""
    try:
        return pool.submit(unmodified.run, [(p + o, len(p), len(o), a)
                                            for p, o, a in requests], size,
                           **{"intake": True, **options}).result()
    except RuntimeError as exc:
        if "stuck" in str(exc):
            return {"error": "stuck"}
        if "retracting all" in str(exc):
            return {"error": "out of memory"}
        raise


def check(mine: dict, reference: dict) -> None:
    if "error" in mine or "error" in reference:
        assert mine.get("error") == reference.get("error")
        return
    assert mine["steps"] == reference["steps"]
    assert mine["requests"] == reference["requests"]


#: workloads as drawn, outputs unclipped: SGLang's intake and the engine's cut them
DRAWN = st.one_of(workloads(clip=False), tight(clip=False))
#: the trees SGLang's loop can run on: RadixCache, and the UnifiedRadixCache (Python core,
#: one full-attention component) its registry builds by default
TREES = st.sampled_from(["radix", "unified"])


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(DRAWN, TREES)
def test_engine_equal_to_sglangs_own_loop(sglang, workload, tree):
    requests, size, options = workload
    check(outcome(ours, *workload), theirs(sglang, requests, size, {**options, "tree": tree}))


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(DRAWN, TREES)
def test_overlap_equal_to_sglangs_own_loop(sglang, workload, tree):
    """The Python overlap model per step and request (given the workload as the intake
    queues it: it takes SGLang's ``Req`` as queued); the compiled overlap engine (what
    ``simulate --engine sglang`` runs by default) per request and per batch launched."""
    requests, size, options = workload
    reference = theirs(sglang, requests, size, {**options, "overlap": True, "tree": tree})
    check(outcome(overlap_model, *sglang_intake(workload)), reference)
    engine = outcome(compiled, *workload)
    if "error" in engine or "error" in reference:
        assert engine.get("error") == reference.get("error")
        return
    assert engine["requests"] == reference["requests"]
    assert [s[:2] for s in engine["steps"]] == [s[:2] for s in reference["steps"]]


@pytest.mark.parametrize("overlap, tree", [(False, "radix"), (True, "unified")])
@pytest.mark.parametrize("page, pool", [(1, 44), (2, 44), (4, 52)])
def test_a_tiny_pool_retracts_in_sglangs_own_loop(sglang, page, pool, overlap, tree):
    """Four requests of 10 prompt + 8 output tokens in a pool of 44 or 52 tokens, admitted
    together by a small new-token ratio: SGLang's ``retract_decode`` retracts one, and the
    lab agrees step by step."""
    requests = [([i] * 10, list(range(100, 108)), 0) for i in range(4)]
    options = dict(policy="fcfs", max_running=8, chunk=None, max_prefill=16384,
                   conservativeness=0.3, seed=0, page=page)
    mine = (overlap_model if overlap else ours)(requests, pool, options)
    reference = theirs(sglang, requests, pool, {**options, "overlap": overlap, "tree": tree})
    check(mine, reference)
    assert sum(r[4] for r in reference["requests"]) > 0


def _provenance() -> dict:
    """Where the loop's methods come from, and what is left stubbed (in the worker)."""
    m = unmodified.load()
    unmodified.run([([1, 2, 3, 4, 5], 3, 2, 0)], 16, page=2, overlap=True)
    S, B = m["sched"].Scheduler, m["sb"].ScheduleBatch
    methods = [S.get_next_batch_to_run, S._get_new_batch_prefill_raw, S.update_running_batch,
               S.process_batch_result, B.prepare_for_extend, B.prepare_for_decode,
               B.retract_decode, B.filter_batch, B.merge_batch, B.check_decode_mem]
    return {"files": sorted({f.__code__.co_filename for f in methods}),
            "unpatched": unmodified.unpatched()}


def test_the_loop_is_sglangs_own_code(sglang):
    """The loop methods run are the functions of SGLang's files (not a transcription), and
    no configuration getter the loop reads was left an inert stub."""
    found = sglang.submit(_provenance).result()
    root = str(unmodified.ref.SOURCES)
    assert found["files"] == [f"{root}/sglang/srt/managers/schedule_batch.py",
                              f"{root}/sglang/srt/managers/scheduler.py"]
    assert found["unpatched"] == []


@pytest.mark.parametrize("overlap", [False, True])
def test_a_request_the_pool_never_admits_is_clipped_as_sglang_clips_it(sglang, overlap):
    """A 15-token prompt asking 16 tokens on a 33-token pool of 4-token pages (32 once
    page-aligned) needs 16 + 4 + 16 tokens to be admitted, more than the pool: SGLang's
    ``init_req_max_new_tokens`` clips ``max_new_tokens`` to 32 - 16 - 4 - 1 = 11
    (scheduler.py:2693-2740, allocator/base.py:88-105) and the request finishes after 11
    tokens; the engine's intake does the same (it used to report the run stuck)."""
    requests = [(list(range(15)), list(range(100, 116)), 0)]
    options = dict(policy="fcfs", max_running=8, chunk=None, max_prefill=16384,
                   conservativeness=1.0, seed=0, page=4)
    reference = theirs(sglang, requests, 33, {**options, "overlap": overlap})
    assert reference["requests"] == [(0, 0, 10, 0, 0)]
    assert theirs(sglang, requests, 33, {**options, "intake": False}) == {"error": "stuck"}
    mine = (compiled if overlap else ours)(requests, 33, options)
    (assert_launched if overlap else check)(mine, reference)
    assert mine["engine"].clipped == {0: 5}


def assert_launched(engine: dict, reference: dict) -> None:
    """The compiled overlap engine's requests and batches launched (its first tokens and
    finishes are listed at launch)."""
    assert engine["requests"] == reference["requests"]
    assert [s[:2] for s in engine["steps"]] == [s[:2] for s in reference["steps"]]


def test_a_prompt_sglang_aborts_is_refused(sglang):
    """A prompt of ``max_req_len - 5`` tokens or more SGLang aborts with an error
    (``validate_input_length``, managers/utils.py:259-289; ``max_req_len = min(context - 1,
    pool - 1)``, tp_worker.py:568-572): the engine refuses it, naming why."""
    requests = [(list(range(28)), [1, 2], 0)]
    options = dict(policy="fcfs", max_running=8, chunk=None, max_prefill=16384,
                   conservativeness=1.0, seed=0, page=4)
    with pytest.raises(ValueError, match="SGLang aborts it"):
        ours(requests, 33, options)
    with pytest.raises(RuntimeError, match="exceeds the maximum allowed length"):
        theirs(sglang, requests, 33, options)
