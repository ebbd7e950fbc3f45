"""The compiled scheduler (``pipeline.components.sglang_ksched``, as ``--engine sglang`` runs
it) against the test oracle ``tests/oracles/sglang_sched.py`` (the plain-Python loop that
tests/test_engine_sglang_equal.py holds equal to SGLang 0.5.23's own pieces when its
sources are present): hypothesis's timed workloads of that test (shared stems, bursts,
tiny pools that retract, every policy, page sizes 1, 2, 4), every step's batch and every
request's outcome equal; the whole-run kernel (``run_on_steps``, recording its batches)
equal to the step-by-step one. Needs no SGLang sources."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from oracles.sglang_sched import Req, Scheduler
from test_engine_sglang_equal import ours, scheduler_settings, workloads

from pipeline.engine.sglang_instance import SGLangInstance
from pipeline.engine.sglang_step_clock import run_on_steps


def oracle(requests, pool, options, make=Scheduler, overlap: bool = False) -> dict:
    """The oracle's loop (``make(settings, overlap=...)``), driven as ``ours`` drives the
    engine; with ``overlap`` also each batch's launch-time lists (``launch``)."""
    sched = make(scheduler_settings(pool, options), overlap=overlap)
    reqs = [Req(i, p + o, len(p), len(o)) for i, (p, o, _) in enumerate(requests)]
    batches, now, pointer, step = [], 0, 0, 0

    def busy() -> bool:
        last = sched.last_batch.reqs if sched.last_batch is not None and \
            sched.last_batch.extend else []
        return bool(sched.waiting or sched.chunked is not None or sched.queued is not None
                    or any(not r.finished for r in sched.running.reqs + last))
    while pointer < len(reqs) or busy():
        if not busy():
            now = max(now, requests[pointer][2])
        while pointer < len(reqs) and requests[pointer][2] <= now:
            sched.waiting.append(reqs[pointer])
            pointer += 1
        batch = sched.iterate(step)
        if batch is None:
            if sched.overlap and not sched.waiting:      # the last result processed
                continue
            raise RuntimeError("stuck")
        batches.append(batch)
        step, now = step + 1, now + 1
    return {"requests": [(r.first_sched, r.first_token, r.finish_step, r.hit, r.retractions)
                         for r in reqs],
            "steps": [(b.extend, list(b.scheduled), b.first_tokens, b.finished)
                      for b in batches],
            **({"launch": [(b.sampling, b.finishing) for b in batches]} if overlap else {}),
            "host_loaded": [getattr(r, "host_loaded", 0) for r in reqs]}


def outcome(run, *args):
    try:
        return run(*args)
    except RuntimeError as exc:
        return {"error": "stuck" if "stuck" in str(exc) else "out of memory"}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_equal_to_the_oracle_scheduler(workload):
    mine, theirs = outcome(ours, *workload), outcome(oracle, *workload)
    if "error" in mine or "error" in theirs:
        assert mine.get("error") == theirs.get("error")
        return
    assert mine["steps"] == theirs["steps"]
    assert mine["requests"] == theirs["requests"]
    engine = SGLangInstance(mine["config"])
    run_on_steps(mine["sims"], mine["config"], engine, record=True)
    STEPS, SCHED, EVENTS = engine.steps
    bounds = STEPS[:, -1].tolist() + [len(SCHED)]
    assert [[tuple(r) for r in SCHED[bounds[j]:bounds[j + 1]].tolist()]
            for j in range(len(STEPS))] == [s[1] for s in mine["steps"]]


def test_a_long_queue_grows_the_in_batch_tree():
    """300 requests at once under ``dfs-weight`` (which matches the whole queue into its
    in-batch tree at every pass, however long) and ``lpm``: the tree grows, equal still."""
    stems = [[s] * 20 for s in range(5)]
    requests = [(stems[i % 5][:i % 21] + [100 + i, 101 + i], [7, 8, 9], 0)
                for i in range(300)]
    for policy in ("dfs-weight", "lpm"):
        options = dict(policy=policy, max_running=4, chunk=None, max_prefill=16384,
                       conservativeness=1.0, seed=0, page=1)
        mine, theirs = ours(requests, 400, options), oracle(requests, 400, options)
        assert mine["steps"] == theirs["steps"]
        assert mine["requests"] == theirs["requests"]
        frame = run_on_steps(mine["sims"], mine["config"]).requests
        assert frame["gpu_hit_tokens"].to_list() == [r[3] for r in mine["requests"]]
