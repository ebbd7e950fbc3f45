"""pipeline.engine equals vLLM 0.33.0's own Scheduler, request by request and step by step.

vLLM's files run unmodified on CPU (scripts/vllm_scheduler_reference.py: torch/CUDA
modules and the config package stubbed, a fake executor sampling each request's next
output id). The sources come from ``scripts/ensure_vllm_sources.sh``; without them these
tests skip and say so.
"""

from __future__ import annotations

import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import vllm_scheduler_reference as reference  # noqa: E402

from pipeline.engine.config import SchedulerConfig  # noqa: E402
from pipeline.engine.request import SimRequest, sequence_tokens  # noqa: E402

pytestmark = pytest.mark.skipif(
    not reference.have_sources(),
    reason="vLLM 0.33.0 sources absent: run scripts/ensure_vllm_sources.sh")


@st.composite
def timed_workloads(draw):
    """Shared prefixes, chats re-sending replies, tiny prompts, bursts at one step, pools
    from a few blocks to many, every scheduler knob, sync and async."""
    block_size = draw(st.sampled_from([1, 2, 3, 4, 16]))
    requests: list[SimRequest] = []
    step = 0
    for index in range(draw(st.integers(1, 10))):
        kind = draw(st.sampled_from(["fresh", "prefix", "reply", "tiny"]))
        tokens: list[int] = []
        if requests and kind == "prefix":
            base = requests[draw(st.integers(0, len(requests) - 1))].prompt_token_ids
            tokens = list(base[:draw(st.integers(1, len(base)))])
        elif requests and kind == "reply":                 # re-send prompt + its reply
            base = requests[draw(st.integers(0, len(requests) - 1))]
            tokens = [int(t) for t in sequence_tokens(base)[:-1]]
        extra = draw(st.lists(st.integers(0, 30), min_size=0 if tokens else 1,
                              max_size=2 if kind == "tiny" else 40))
        tokens = (tokens + extra)[:120]
        step += draw(st.sampled_from([0, 0, 1, 2, 7]))     # bursts: several at one step
        requests.append(SimRequest(index, tokens, draw(st.integers(1, 10)),
                                   arrival_step=step))
    longest = max(len(r.prompt_token_ids) + r.max_tokens for r in requests)
    max_model_len = longest + draw(st.sampled_from([0, 0, 3, 64]))
    prompt = max(len(r.prompt_token_ids) for r in requests)
    if draw(st.booleans()) and longest > prompt + 1:     # max_model_len caps the outputs
        max_model_len = draw(st.integers(prompt + 1, longest - 1))
    need = max(-(-(min(len(r.prompt_token_ids) + r.max_tokens, max_model_len) - 1)
                 // block_size) for r in requests)
    chunked = draw(st.booleans())
    batched = draw(st.sampled_from([4, 8, 16, 32, 4096]))
    return requests, SchedulerConfig(
        num_gpu_blocks=need + 1 + draw(st.sampled_from([0, 1, 2, 5, 20, 500])),
        max_model_len=max_model_len, block_size=block_size,
        max_num_seqs=draw(st.sampled_from([1, 2, 3, 256])),
        max_num_batched_tokens=batched if chunked else max(batched, max_model_len),
        chunked_prefill=chunked,
        long_prefill_token_threshold=draw(st.sampled_from([0, 2, 5])),
        async_scheduling=draw(st.booleans()))


def _compare(requests, config):
    theirs, their_steps = reference.run_vllm(requests, config)
    ours, our_steps = reference.run_model(requests, config)
    assert ours == theirs
    assert reference.model_steps(our_steps) == [(s, r, w, f) for s, _, r, w, f in their_steps]


@given(timed_workloads())
def test_every_request_and_step_equals_vllm(workload):
    _compare(*workload)


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_decode_growth_preempts_and_a_reply_is_hit(async_scheduling):
    """Three long decodes in a pool that cannot hold them (preemptions), then a chat turn
    re-sending a reply: vLLM and the model agree, and the reply's full blocks are hit."""
    first = SimRequest(0, list(range(15)), 2, arrival_step=0, output_token_ids=[900001, 900002])
    turn = SimRequest(1, list(range(15)) + [900001, 900002], 1, arrival_step=5)
    config = SchedulerConfig(num_gpu_blocks=3, max_model_len=64, block_size=16,   # 48 tokens
                             async_scheduling=async_scheduling)
    theirs, _ = reference.run_vllm([first, turn], config)
    assert theirs[1][3] == 16                               # vLLM hits [0, 16]
    _compare([first, turn], config)
    crowd = [SimRequest(i, [i] * 6, 12, arrival_step=0) for i in range(3)]
    config = SchedulerConfig(num_gpu_blocks=12, max_model_len=64, block_size=2,
                             async_scheduling=async_scheduling)
    theirs, _ = reference.run_vllm(crowd, config)
    assert sum(row[4] for row in theirs.values()) > 0       # somebody was preempted
    _compare(crowd, config)
