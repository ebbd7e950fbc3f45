"""``--engine sglang --enable-hierarchical-cache --hicache-storage-backend ...`` against
SGLang 0.5.23's own HiCache with an L3 store, per step and per request.

The reference is scripts/sglang_hicache_reference.py's ``run_storage``: the scheduler loop
of scripts/sglang_scheduler_reference.py over SGLang's ``UnifiedRadixCache`` with HiCache
and a storage backend attached (the ``HybridCacheController``'s storage methods run as
shipped, its threads as synchronous steps, a store with ``HiCacheFile``'s semantics), with
the scheduler's storage steps transcribed: the prefetch at every enqueue, the paced
retries, the admission poll and the device-hit-loss re-issue; in a process of its own.
Hypothesis draws the timed workloads of tests/test_engine_sglang_equal.py and stems that
return after others pushed them off the device and the host, each write policy, prefetch
policy, small prefetch thresholds and host pools; every step's batch, its host tokens
loaded and written and pages stored, and every request's steps, hits, retractions, host
tokens and storage tokens must be equal.
"""

from __future__ import annotations

import sys

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from conftest import ROOT, needs_sglang_sources
from test_engine_sglang_equal import sglang_intake, workloads
from test_engine_sglang_hicache import KV_BYTES, batch_of, config, outcome, sims, stepped
from test_sglang_hisched import returning_stems

from pipeline.components.sglang_hiradix import WRITE_POLICIES
from pipeline.components.sglang_storage_spec import PREFETCH_POLICIES, StorageSpec
from pipeline.engine.sglang import simulate
from pipeline.engine.sglang_hicache import HiCacheSpec, SGLangHiInstance

sys.path.insert(0, str(ROOT / "scripts"))
import sglang_hicache_reference as hi  # noqa: E402

pytestmark = needs_sglang_sources()


@st.composite
def stored_stems(draw):
    """Five stems taking turns on a small device pool and a host pool of a stem or two:
    the host cycles them out, so a stem that returns is found in storage."""
    stems = [list(range(100 * k, 100 * k + draw(st.integers(10, 30)))) for k in range(1, 6)]
    requests, step = [], 0
    for _ in range(draw(st.integers(3, 12))):
        prompt = stems[draw(st.integers(0, 4))] + draw(st.lists(st.integers(0, 9),
                                                                max_size=4))
        outputs = draw(st.lists(st.integers(0, 60), min_size=1, max_size=4))
        step += draw(st.sampled_from([0, 1, 3, 8]))
        requests.append((prompt, outputs, step))
    longest = max(len(p) + len(o) for p, o, _ in requests)
    options = dict(policy=draw(st.sampled_from(["fcfs", "lpm"])),
                   max_running=draw(st.integers(1, 3)),
                   chunk=draw(st.sampled_from([None, 16])), max_prefill=16384,
                   conservativeness=1.0, seed=0, page=draw(st.sampled_from([1, 1, 2, 4])))
    workload = sglang_intake((requests, longest + 2 + draw(st.sampled_from([0, 8, 30])),
                              options))                  # as SGLang's intake queues them
    assume(workload[0])
    return workload


WORKLOADS = st.one_of(workloads(), returning_stems(), stored_stems(), stored_stems())


def ours(requests, pool, options, policy, host, prefetch, threshold) -> dict:
    """The engine as ``simulate`` steps it: its batches, per step (host tokens loaded,
    written, pages stored) and its frames."""
    spec = HiCacheSpec(policy, host, KV_BYTES, StorageSpec(prefetch_policy=prefetch,
                                                           threshold=threshold))
    cfg = config(pool, options, spec)
    runs = sims(requests)
    records = stepped(SGLangHiInstance(cfg), requests, runs)
    moved = [(loaded // KV_BYTES, written // KV_BYTES, stored // (KV_BYTES * options["page"]))
             for loaded, written, _, stored in (r.extra for r in records)]
    return {"steps": [batch_of(r) for r in records], "host": moved,
            "frames": simulate(runs, cfg)}


def theirs(sglang, requests, pool, options, policy, host, prefetch, threshold) -> dict:
    return sglang.submit(hi.run_storage, [(p + o, len(p), len(o), a) for p, o, a in requests],
                         pool, dict(policy=prefetch, threshold=threshold),
                         hicache=(policy, host), **options).result()


def check(sglang, workload, policy, host, prefetch, threshold) -> dict:
    requests, pool, options = workload
    options = {**options, "chunk": options["chunk"]}
    args = (requests, pool, options, policy, host, prefetch, threshold)
    mine, reference = outcome(ours, *args), outcome(theirs, sglang, *args)
    if "error" in mine or "error" in reference:
        assert mine.get("error") == reference.get("error")
        return mine
    assert mine["steps"] == [tuple(s) for s in reference["steps"]]
    assert mine["host"] == [tuple(h) for h in reference["host"]]
    frame = mine["frames"].requests
    hits = (frame["gpu_hit_tokens"] + frame["cpu_hit_tokens"]).to_list()
    got = list(zip(frame["first_scheduled_step"], frame["first_token_step"],
                   frame["finish_step"], hits, frame["preemptions"]))
    assert got == [tuple(r) for r in reference["requests"]]
    assert frame["cpu_hit_tokens"].to_list() == reference["host_loaded"]
    assert frame["storage_hit_tokens"].to_list() == reference["storage_loaded"]
    return mine


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(workload=WORKLOADS, policy=st.sampled_from(WRITE_POLICIES),
       host=st.sampled_from([24, 40, 80]),
       prefetch=st.sampled_from(PREFETCH_POLICIES), threshold=st.sampled_from([4, 8, 16]))
def test_storage_runs_equal_sglang(sglang, workload, policy, host, prefetch, threshold):
    check(sglang, workload, policy, host, prefetch, threshold)


def test_a_stem_returns_from_storage(sglang):
    """Three 40-token stems through a 60-token pool and a 100-token host pool: the first is
    pushed off both, written to storage on the way; when it returns, wait_complete and
    timeout hold its request until the prefetch lands (a turn without a batch) and load
    its 40 tokens through the host; best_effort admits it at once, without them."""
    a, b, c = (list(range(k, k + 40)) for k in (100, 200, 300))
    requests = [(a + [1, 2, 3], [9, 9, 9], 0), (b + [4, 5, 6], [9, 9, 9], 10),
                (c + [4, 5, 6], [9, 9, 9], 20), (a + [7, 8, 9], [9, 9, 9], 30)]
    options = dict(policy="fcfs", max_running=4, chunk=None, max_prefill=16384,
                   conservativeness=1.0, seed=0, page=1)
    for prefetch, expected in (("wait_complete", 40), ("timeout", 40), ("best_effort", 0)):
        mine = check(sglang, (requests, 60, options), "write_through", 100, prefetch, 8)
        frame = mine["frames"].requests
        assert frame["storage_hit_tokens"].to_list() == [0, 0, 0, expected]
        assert frame["cpu_hit_tokens"].to_list() == [0, 0, 0, expected]
