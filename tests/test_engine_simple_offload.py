"""The engine with vLLM's ``SimpleCPUOffloadConnector`` equals vLLM 0.33.0's own Scheduler
driving that connector's scheduler side (``SimpleCPUOffloadScheduler`` and its second
``BlockPool``, unmodified: scripts/vllm_simple_offload_reference.py, with the fake worker of
docs/offloading.md) request by request and step by step, on the step and time clocks, sync
and async scheduling, CPU and disk mediums. Without the vLLM sources these tests skip and
say so; the transfer arithmetic and the pool's sizing are also checked by hand.
"""

from __future__ import annotations

import dataclasses
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import vllm_simple_offload_reference as reference  # noqa: E402

from pipeline.engine.config import SchedulerConfig  # noqa: E402
from pipeline.engine.loop import simulate  # noqa: E402
from pipeline.engine.request import SimRequest  # noqa: E402
from pipeline.engine.simple_offload_tier import SimpleSpec, offload_slots  # noqa: E402
from pipeline.steptime.fitted import Linear  # noqa: E402

needs_vllm = pytest.mark.skipif(
    not reference.have_sources(),
    reason="vLLM 0.33.0 sources absent: run scripts/ensure_vllm_sources.sh")
KV = reference.KV_BYTES_PER_TOKEN


@st.composite
def workloads(draw, timed=False):
    """Requests sharing a few prefixes (re-sent after others evicted them from a GPU pool
    of the largest request's blocks and a few more: preemptions, offload hits), offload
    pools from one usable slot up, eager or lazy stores; sync or async scheduling; on the
    time clock slow links and disks (CPU or disk medium)."""
    bs = draw(st.sampled_from([1, 2, 4]))
    prefixes = draw(st.lists(st.lists(st.integers(0, 40), min_size=4, max_size=24),
                             min_size=1, max_size=3))
    requests, step = [], 0
    for index in range(draw(st.integers(2, 9))):
        if draw(st.booleans()):                       # a prefix again
            tokens = list(draw(st.sampled_from(prefixes))) + draw(
                st.lists(st.integers(0, 40), max_size=6))
        else:                                         # others, evicting it from the GPU
            tokens = draw(st.lists(st.integers(41, 10**6), min_size=4, max_size=24))
        step += draw(st.sampled_from([0, 1, 3, 8]))
        requests.append(SimRequest(index, tokens, draw(st.integers(1, 6)), arrival_step=step))
    longest = max(len(r.prompt_token_ids) + r.max_tokens for r in requests)
    config = SchedulerConfig(
        num_gpu_blocks=-(-longest // bs) + 1 + draw(st.sampled_from([0, 1, 2])),
        max_model_len=longest + 4, block_size=bs,
        max_num_seqs=draw(st.sampled_from([1, 2, 4, 256])),
        max_num_batched_tokens=draw(st.sampled_from([4, 8, 16, 2048])),
        long_prefill_token_threshold=draw(st.sampled_from([0, 0, 3])),
        async_scheduling=draw(st.booleans()))
    link = {}
    if timed:
        scale = draw(st.sampled_from([0.005, 0.02, 0.1]))
        requests = [dataclasses.replace(r, arrival_s=r.arrival_step * scale,
                                        arrival_step=None) for r in requests]
        link = dict(rate_gbps=draw(st.sampled_from([1e-6, 1e-5, 50.0])),
                    latency_ms=draw(st.sampled_from([0.0, 3.0])))
        if draw(st.booleans()):
            link.update(medium="disk", disk_gbps=draw(st.sampled_from([1e-6, 1e-5, 7.0])),
                        disk_latency_ms=draw(st.sampled_from([0.0, 2.0])),
                        buffer_slots=draw(st.sampled_from([1, 2])))
    offload = reference.offload_config(draw(st.sampled_from([2, 3, 5, 16, 64])),
                                       draw(st.booleans()), **link)
    return requests, config, offload


@needs_vllm
@settings(max_examples=25, deadline=None)
@given(workloads())
def test_every_request_and_step_equals_vllm_step_clock(workload):
    theirs, ours = reference._both(*workload, False)
    assert ours[0] == theirs[0]
    assert ours[1] == theirs[1]


@needs_vllm
@settings(max_examples=15, deadline=None)
@given(workloads(timed=True))
def test_every_request_and_step_equals_vllm_time_clock(workload):
    """Slow links and disks: stores still in flight hold their slots (a later store finds
    none free), loads wait on their stream while other requests run."""
    theirs, ours = reference._both(*workload, True)
    assert ours[0] == theirs[0]
    assert ours[1] == theirs[1]                       # the same float arithmetic
    assert ours[2].keys() == theirs[2].keys()
    for request, times in theirs[2].items():
        assert ours[2][request] == pytest.approx(times, rel=1e-12)


def _resend():
    """A 32-token prompt, two 40-token requests that evict it from a 12-block GPU pool
    (block size 4), then the prompt again."""
    shared = list(range(100, 132))
    requests = [SimRequest(0, shared, 1, arrival_step=0)]
    requests += [SimRequest(1 + i, [200 + 40 * i + j for j in range(40)], 1,
                            arrival_step=2 + i) for i in range(2)]
    requests.append(SimRequest(3, shared + [7], 1, arrival_step=10))
    return requests, SchedulerConfig(num_gpu_blocks=12, max_model_len=64, block_size=4)


def test_an_evicted_prefix_loads_from_the_pool():
    """The re-sent prompt's 8 blocks come back from the offload pool (eagerly stored as
    computed), not from the GPU; with no pool (one slot: vLLM's null block) nothing does."""
    requests, config = _resend()
    loaded = simulate(requests, config, offload=SimpleSpec(64, KV)).requests
    assert loaded["cpu_hit_tokens"].to_list() == [0, 0, 0, 32]
    assert loaded["gpu_hit_tokens"][3] == 0
    assert simulate(requests, config, offload=SimpleSpec(1, KV)).requests[
        "cpu_hit_tokens"].to_list() == [0, 0, 0, 0]


def test_transfer_time_by_hand():
    """CPU: 8 blocks x 256 B at 1e-6 GB/s (1 B/ms) + 5 ms = 2,053 ms. Disk at 2 B/ms + 1 ms
    per block, the link at 1 B/ms: 129 ms to read or write a block, 256 ms to copy it;
    two buffer slots pipeline them (8 x 256 + 129), one does not (8 x 385)."""
    assert SimpleSpec(2, KV, rate_gbps=1e-6, latency_ms=5.0).event_ms(8, 256) == 2053.0
    disk = dict(medium="disk", rate_gbps=1e-6, disk_gbps=2e-6, disk_latency_ms=1.0)
    assert SimpleSpec(2, KV, **disk).event_ms(8, 256) == 8 * 256 + 129
    assert SimpleSpec(2, KV, buffer_slots=1, **disk).event_ms(8, 256) == 8 * 385


def test_a_slow_disk_is_slower_than_recomputing():
    """The re-sent prompt on the time clock: from a disk at 1e-6 GB/s its load takes
    longer than computing it again (no pool), from fast CPU memory less."""
    requests, config = _resend()
    requests = [dataclasses.replace(r, arrival_s=r.arrival_step * 0.1, arrival_step=None)
                for r in requests]
    step = Linear(reference.native.COEF).step_ms

    def finish_ms(spec):
        steps = simulate(requests, config, offload=spec, clock="time", step_ms=step)
        rows = steps.requests.row(3, named=True)
        return rows["cpu_hit_tokens"], rows["finish_step"], steps

    slow = SimpleSpec(64, KV, medium="disk", disk_gbps=1e-6, disk_latency_ms=2.0)
    none_hit, _, recompute = finish_ms(SimpleSpec(1, KV))
    slow_hit, _, slow_run = finish_ms(slow)
    fast_hit, _, fast_run = finish_ms(SimpleSpec(64, KV))
    assert (none_hit, slow_hit, fast_hit) == (0, 32, 32)

    def last_end(run):
        frame = run.steps
        return float((frame["start_ms"] + frame["duration_ms"]).max())

    assert last_end(slow_run) > last_end(recompute) > last_end(fast_run)


def test_pool_sizing_is_vllms():
    """``capacity // block bytes`` slots, at least one (worker.py:182-192)."""
    assert offload_slots(10 * 2**30, 2 * 2**20) == 5120
    assert offload_slots(100, 4096) == 1
    assert SimpleSpec.from_size(2**20, 64, 16).num_slots == 1024
