"""The engine with vLLM's native offloading equals vLLM 0.33.0's own Scheduler driving the
OffloadingConnector's scheduler side and CPU manager (scripts/vllm_offload_engine_reference.py:
vLLM's files unmodified, a fake worker on the transfer rule of docs/offloading.md), request
by request (GPU hit, CPU hit, scheduled / first-token / finish steps, preemptions, the step
a load was admitted and the step it was reported done) and step by step (running, waiting,
free blocks, chunks loaded and stored), on the step clock and the time clock (step and load
times), with sync and async scheduling (vLLM's ``AsyncScheduler``: ``defer_block_free``). Without the vLLM sources these tests skip and say so; the transfer arithmetic is
also checked by hand.
"""

from __future__ import annotations

import dataclasses
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import vllm_offload_engine_reference as reference  # noqa: E402

from pipeline.engine.config import SchedulerConfig  # noqa: E402
from pipeline.engine.loop import simulate  # noqa: E402
from pipeline.engine.native_tier import NativeSpec  # noqa: E402
from pipeline.engine.request import SimRequest  # noqa: E402
from pipeline.steptime.fitted import Linear  # noqa: E402

needs_vllm = pytest.mark.skipif(
    not reference.have_sources(),
    reason="vLLM 0.33.0 sources absent: run scripts/ensure_vllm_sources.sh")
KV = reference.KV_BYTES_PER_TOKEN
COEF = reference.COEF
_step_ms = reference.step_ms


@st.composite
def workloads(draw):
    """Requests sharing a few prefixes arriving over time, GPU pools from the largest
    request's blocks up (preemptions), CPU pools from one chunk up, both policies, store
    thresholds, chunks of 1-2 blocks, sync-load budgets of 0 (every load asynchronous),
    a few chunks and unlimited; sync or async scheduling."""
    bs = draw(st.sampled_from([1, 2, 4]))
    prefixes = draw(st.lists(st.lists(st.integers(0, 40), min_size=4, max_size=30),
                             min_size=1, max_size=3))
    requests, step = [], 0
    for index in range(draw(st.integers(2, 10))):
        tokens = list(draw(st.sampled_from(prefixes))) + draw(
            st.lists(st.integers(0, 40), max_size=6))
        step += draw(st.sampled_from([0, 1, 3, 8]))
        requests.append(SimRequest(index, tokens, draw(st.integers(1, 6)), arrival_step=step))
    longest = max(len(r.prompt_token_ids) + r.max_tokens for r in requests)
    config = SchedulerConfig(
        num_gpu_blocks=-(-longest // bs) + 1 + draw(st.sampled_from([0, 1, 2, 4, 10])),
        max_model_len=longest + 4, block_size=bs,
        max_num_seqs=draw(st.sampled_from([1, 2, 4, 256])),
        max_num_batched_tokens=draw(st.sampled_from([4, 8, 16, 2048])),
        long_prefill_token_threshold=draw(st.sampled_from([0, 0, 3])),
        async_scheduling=draw(st.booleans()))
    offload = reference.offload_config(
        draw(st.sampled_from([1, 2, 4, 16, 64])), draw(st.sampled_from(["lru", "arc"])),
        draw(st.sampled_from([0, 0, 2])), draw(st.sampled_from([1, 1, 2])),
        draw(st.sampled_from([0, 0, KV * 8, 10**9])))
    return requests, config, offload


def _ours(requests, config, offload, timed=False, gbps=50.0, latency=0.0):
    return reference.run_model(requests, config, offload, timed=timed, link_gbps=gbps,
                               latency_ms=latency)


@needs_vllm
@settings(max_examples=30, deadline=None)
@given(workloads())
def test_every_request_and_step_equals_vllm_step_clock(workload):
    requests, config, offload = workload
    theirs, their_steps = reference.run_vllm(requests, config, offload)
    ours, our_steps, _ = _ours(requests, config, offload)
    assert ours == theirs
    assert our_steps == their_steps


@needs_vllm
@settings(max_examples=18, deadline=None)
@given(workloads(), st.sampled_from([0.005, 0.02, 0.1]), st.sampled_from([1e-6, 1e-5, 1e-4]),
       st.sampled_from([0.0, 3.0]))
def test_every_request_and_step_equals_vllm_time_clock(workload, scale, gbps, latency):
    """Slow links (a chunk takes tens to hundreds of ms): loads queue behind stores, the
    requests wait while others run, synchronous loads stretch their step."""
    requests, config, offload = workload
    requests = [dataclasses.replace(r, arrival_s=r.arrival_step * scale, arrival_step=None)
                for r in requests]
    theirs, their_steps, their_loads = reference.run_vllm(
        requests, config, offload, step_ms=_step_ms, link_bytes_per_ms=gbps * 1e6,
        latency_ms=latency)
    ours, our_steps, our_loads = _ours(requests, config, offload, True, gbps, latency)
    assert ours == theirs
    assert our_steps == their_steps                   # the same float arithmetic
    assert our_loads.keys() == their_loads.keys()
    for request, times in their_loads.items():
        assert our_loads[request] == pytest.approx(times, rel=1e-12)


def _chat(n: int = 3):
    """A 32-token prompt then n requests re-sending it, after a burst that evicts it from
    a 12-block GPU pool (block size 4)."""
    shared = list(range(100, 132))
    requests = [SimRequest(0, shared, 1, arrival_step=0)]
    requests += [SimRequest(1 + i, [200 + 40 * i + j for j in range(40)], 1,
                            arrival_step=2 + i) for i in range(2)]
    requests += [SimRequest(3 + i, shared + [7 + i], 1, arrival_step=10 + i)
                 for i in range(n)]
    return requests, SchedulerConfig(num_gpu_blocks=12, max_model_len=64, block_size=4)


def test_a_load_waits_on_the_link_by_hand():
    """One async load of 8 chunks of 4 tokens x 64 B = 2048 B at 1e-6 GB/s (1 B/ms) + 5 ms:
    2,053 ms on an idle link, queued behind nothing; the request waits that long."""
    requests, config = _chat(1)
    requests = [dataclasses.replace(r, arrival_s=r.arrival_step * 10.0, arrival_step=None)
                for r in requests]
    spec = NativeSpec(num_chunks=64, kv_bytes_per_token=64, link_gbps=1e-6, latency_ms=5.0)
    result = simulate(requests, config, offload=spec, clock="time",
                      step_ms=Linear(COEF).step_ms)
    row = result.requests.row(3, named=True)
    assert row["gpu_hit_tokens"] == 0 and row["cpu_hit_tokens"] == 32
    assert row["load_end_s"] * 1000 - row["load_start_s"] * 1000 == pytest.approx(
        8 * 4 * 64 / 1.0 + 5.0)
    assert row["load_ms"] >= 2053.0
    assert row["first_scheduled_ms"] >= row["load_end_s"] * 1000


def test_a_slow_link_is_worse_than_recompute():
    """The same re-sent prompt: with a 1 B/ms link its TTFT exceeds the one without any
    offloading (recomputing 32 tokens costs ~ 40 ms); with a fast link it is not worse."""
    requests, config = _chat(1)
    requests = [dataclasses.replace(r, arrival_s=r.arrival_step * 10.0, arrival_step=None)
                for r in requests]
    model = Linear(COEF).step_ms

    def ttft(spec):
        frame = simulate(requests, config, offload=spec, clock="time", step_ms=model).requests
        return frame.row(3, named=True)["ttft_ms"]
    plain = simulate(requests, config, clock="time", step_ms=model).requests.row(
        3, named=True)["ttft_ms"]
    slow = ttft(NativeSpec(num_chunks=64, kv_bytes_per_token=64, link_gbps=1e-6))
    fast = ttft(NativeSpec(num_chunks=64, kv_bytes_per_token=64, link_gbps=50.0))
    assert slow > plain + 1000.0
    assert fast <= plain


def test_without_offloading_the_frames_keep_their_columns():
    requests, config = _chat(1)
    plain = simulate(requests, config)
    native = simulate(requests, config, offload=NativeSpec(64, 64))
    assert "cpu_load_bytes" not in plain.steps.columns
    assert "load_step" not in plain.requests.columns
    assert native.steps.columns == plain.steps.columns + ["cpu_load_bytes", "cpu_store_bytes"]
    assert native.requests["cpu_hit_tokens"].sum() > 0
    assert native.steps["cpu_load_bytes"].sum() == native.requests["cpu_hit_tokens"].sum() \
        * 64 and native.steps["cpu_store_bytes"].sum() > 0


def test_a_link_far_slower_than_the_stores_keeps_every_transfer():
    """200 requests over one prefix with a link of 1 B/ms: store jobs pile up behind each
    other for minutes of simulated time; every one is kept (the job ring grows with the
    chunks) and the loads still come out in FIFO order."""
    shared = list(range(64))
    requests = [SimRequest(i, shared + [1000 + i] * 8, 2, arrival_s=0.001 * i)
                for i in range(200)]
    config = SchedulerConfig(num_gpu_blocks=40, max_model_len=128, block_size=4)
    spec = NativeSpec(num_chunks=10_000, kv_bytes_per_token=64, link_gbps=1e-6)
    frame = simulate(requests, config, offload=spec, clock="time",
                     step_ms=Linear(COEF).step_ms).requests
    loads = frame.filter(frame["load_ms"].is_not_null()).sort("load_start_s")
    assert loads.height > 0 and frame["finish_ms"].null_count() == 0
    assert (loads["load_end_s"].diff().drop_nulls() > 0).all()


def test_a_closed_loop_counts_the_requests_waiting_for_their_load():
    """``concurrency=K``: requests holding KV while their load is in flight are waiting
    requests: at most K requests are ever admitted and unfinished."""
    requests, config = _chat(6)
    requests = [dataclasses.replace(r, arrival_step=None) for r in requests]
    spec = NativeSpec(num_chunks=64, kv_bytes_per_token=64, link_gbps=1e-6)
    result = simulate(requests, config, offload=spec, clock="time", concurrency=2,
                      step_ms=Linear(COEF).step_ms)
    frame = result.requests
    assert frame["load_ms"].drop_nulls().len() > 0
    arrivals, finishes = frame["arrival_ms"].to_list(), frame["finish_ms"].to_list()
    for t in arrivals:                              # outstanding just after each arrival
        assert sum(a <= t < f for a, f in zip(arrivals, finishes)) <= 2


@needs_vllm
def test_a_prefix_still_being_stored_defers_the_lookup():
    """A's 8 chunks take 2,048 ms to store at 1 B/ms; C re-sends A's prompt at 100 ms,
    after two other prompts evicted it from the GPU: HIT_PENDING, so vLLM asks again each
    step until the store is done (2,090 ms), and only then loads, behind the others'
    stores on the link (7,210 to 9,258 ms). Equal to vLLM's scheduler and connector."""
    requests, config = _chat(1)
    requests = [dataclasses.replace(r, arrival_s=r.arrival_step * 0.01, arrival_step=None)
                for r in requests]
    offload = reference.offload_config(64)
    theirs, their_steps, their_loads = reference.run_vllm(
        requests, config, offload, step_ms=_step_ms, link_bytes_per_ms=1.0)
    ours, our_steps, our_loads = _ours(requests, config, offload, True, 1e-6)
    assert (ours, our_steps) == (theirs, their_steps)
    assert our_loads[3] == pytest.approx(their_loads[3]) == (2090.0, 7210.0, 9258.0)


def _two_short_prompts():
    """Two 4-token prompts of one block each, one output token, a 6-block pool."""
    requests = [SimRequest(i, [0, 0, 0, 0], 2, arrival_step=0) for i in range(2)]
    return requests, SchedulerConfig(num_gpu_blocks=7, max_model_len=10, block_size=1,
                                     max_num_seqs=2, max_num_batched_tokens=4,
                                     async_scheduling=True)


def test_async_scheduling_does_not_preempt_a_request_whose_step_is_in_flight():
    """Async scheduling with the connector: request 1 finds no block for its decode while
    its prefill step is in flight; its blocks could not be freed now (defer_block_free),
    so vLLM preempts nobody and the step waits: no preemption, both finish."""
    requests, config = _two_short_prompts()
    frame = simulate(requests, config, offload=NativeSpec(1, KV)).requests
    assert frame["preemptions"].to_list() == [0, 0]
    assert frame["output_tokens"].to_list() == [2, 2]


@needs_vllm
@settings(max_examples=12, deadline=None)
@given(workloads())
def test_async_scheduling_equals_vllm_and_defers_no_free(workload):
    """Async scheduling on the step clock; and vLLM itself never defers a free here: the
    async scheduler schedules no step past a request's last token (requests end at
    max_tokens or max_model_len), so ``deferred_frees`` stays empty (docs/offloading.md)."""
    requests, config, offload = workload
    config = dataclasses.replace(config, async_scheduling=True)
    scheduler = reference._load(reference.DEFAULT_VERSION, None)[1].core.Scheduler
    original, deferred = scheduler._free_request_blocks, []

    def free(self, request):
        deferred.append(not self._request_blocks_can_be_freed(request))
        return original(self, request)
    scheduler._free_request_blocks = free
    try:
        theirs, their_steps = reference.run_vllm(requests, config, offload)
    finally:
        scheduler._free_request_blocks = original
    ours, our_steps, _ = _ours(requests, config, offload)
    assert (ours, our_steps) == (theirs, their_steps)
    assert deferred and not any(deferred)
