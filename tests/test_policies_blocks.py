"""The policy family in block mode (pipeline/policies/blockmode.py, registered in
pipeline.catalog.model_api): LRU equals the block model's block-lru engine on both tiers and orders,
every policy runs through the two-tier API, and ``Policy.place`` keeps its contract."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.kvsim import LRUCache
from pipeline.commands.blocks import run_blocks
from pipeline.catalog.model_api import CPU_MODELS, GPU_MODELS, two_tier
from pipeline.workloads.stream import ORDERS, block_stream
from pipeline.catalog import POLICIES, entry, names
from pipeline.policies.blockmode import policy_cpu_model, policy_gpu_model
from pipeline.policies.simple import LRU
from pipeline.workloads.blocks import BLOCK_SCHEMA
from trie_frames import trie_frame


def fast_gpu(name: str):
    """Policy ``name``'s GPU model on the block kernel its entry declares (``lru``'s entry
    runs the block-lru model instead, so the kernel is wrapped here)."""
    return policy_gpu_model(name, POLICIES[name], entry(name).block_kernel)


def fast_cpu(name: str):
    """Policy ``name``'s CPU model on its entry's block kernel."""
    return policy_cpu_model(name, POLICIES[name], entry(name).block_kernel)


@st.composite
def block_frames(draw, max_requests=12, max_blocks=6):
    """(frame, block_size): requests as paths in a small trie (shared prefixes), a request
    may end in a partial block."""
    block_size = draw(st.integers(1, 3))
    return trie_frame(draw, block_size, min_requests=1, max_requests=max_requests,
                      branches=2, max_blocks=max_blocks, key_step=5, key_offset=1,
                      partial_sometimes=True, key_tokens=False), block_size


@given(capacity=st.integers(0, 30),
       trace=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 12)), max_size=40))
def test_lru_on_the_base_equals_kvlab_lru(capacity, trace):
    ours, kvlab = LRU(capacity), LRUCache(capacity)
    for key, size in trace:
        assert ours.access(key, size) == kvlab.access(key, size)
        assert ours.keys() == kvlab.keys() and ours.used == kvlab.used
        assert ours.evictions == kvlab.evictions


@given(block_frames(), st.lists(st.integers(0, 30), min_size=1, max_size=3),
       st.sampled_from(ORDERS), st.sampled_from(ORDERS), st.integers(0, 20))
def test_lru_model_equals_the_block_lru_model(case, capacities, gpu_order, cpu_order, gpu):
    """The class replay of LRU equals the one-pass block-lru model, which is what ``lru`` is
    registered as."""
    frame, block_size = case
    stream = block_stream(frame, block_size)
    assert GPU_MODELS["lru"] is GPU_MODELS["block-lru"] and CPU_MODELS["lru"] is CPU_MODELS["block-lru"]
    np.testing.assert_array_equal(
        policy_gpu_model("lru", POLICIES["lru"])(stream, capacities, gpu_order),
        GPU_MODELS["block-lru"](stream, capacities, gpu_order))
    gpu_hits = GPU_MODELS["block-lru"](stream, [gpu], gpu_order)[0]
    np.testing.assert_array_equal(
        policy_cpu_model("lru", POLICIES["lru"])(stream, gpu_hits, capacities, cpu_order),
        CPU_MODELS["block-lru"](stream, gpu_hits, capacities, cpu_order))


@settings(max_examples=60)
@pytest.mark.parametrize("name", names(policy=True, block_kernel=True))
@given(case=block_frames(max_requests=16, max_blocks=8),
       capacities=st.lists(st.integers(0, 24), min_size=1, max_size=3),
       gpu_order=st.sampled_from(ORDERS), cpu_order=st.sampled_from(ORDERS),
       gpu=st.integers(0, 12))
def test_compiled_block_models_equal_the_classes(name, case, capacities, gpu_order,
                                                 cpu_order, gpu):
    frame, block_size = case
    stream = block_stream(frame, block_size)
    np.testing.assert_array_equal(
        fast_gpu(name)(stream, capacities, gpu_order),
        policy_gpu_model(name, POLICIES[name])(stream, capacities, gpu_order))
    gpu_hits = fast_gpu(name)(stream, [gpu], gpu_order)[0]
    np.testing.assert_array_equal(
        fast_cpu(name)(stream, gpu_hits, capacities, cpu_order),
        policy_cpu_model(name, POLICIES[name])(stream, gpu_hits, capacities, cpu_order))


@settings(max_examples=min(30, settings.default.max_examples))
@pytest.mark.parametrize("name", list(POLICIES))
@given(block_frames(), st.integers(0, 40), st.integers(0, 40), st.sampled_from(ORDERS))
def test_every_policy_runs_as_both_tiers(name, case, gpu, cpu, order):
    frame, block_size = case
    stream = block_stream(frame, block_size)
    result = two_tier(stream, gpu, cpu, order, order, name, name)
    assert (result["gpu_hit_tokens"] + result["cpu_hit_tokens"] + result["miss_tokens"]
            == result["prompt_tokens"]).all()
    assert (result["gpu_hit_tokens"] <= (gpu // block_size) * block_size).all()
    assert (result["cpu_hit_tokens"] <= (cpu // block_size) * block_size).all()


@settings(max_examples=min(40, settings.default.max_examples))
@pytest.mark.parametrize("name", list(POLICIES))
@given(capacity=st.integers(0, 8),
       requests=st.lists(st.lists(st.integers(0, 9), max_size=5, unique=True), max_size=12))
def test_place_contract(name, capacity, requests):
    cls = POLICIES[name]
    future = [k for keys in requests if len(keys) <= capacity for k in keys]
    tier = cls(capacity, future) if cls.needs_future else cls(capacity)
    for keys in requests:
        before = set(tier.keys())
        tier.place(keys, 1)
        after = set(tier.keys())
        assert tier.used == len(after) <= capacity
        if len(keys) > capacity:
            assert after == before                      # not stored, evicts nothing
        elif not getattr(tier, "may_decline", False):
            assert set(keys) <= after                   # its own blocks are never evicted


def test_blocks_command_takes_policy_models():
    lab = run_blocks(passes=["fwd", "fwd", "rev"])
    assert run_blocks(passes=["fwd", "fwd", "rev"], gpu_model="lru") == lab
    mru = run_blocks(passes=["fwd", "fwd"], gpu_model="mru")["passes"][1]
    assert mru["gpu_hit_tokens"] > 0                    # MRU keeps blocks of the cycle
    opt = run_blocks(passes=["fwd", "fwd"], gpu_model="opt", cpu=30000, cpu_model="opt")
    assert opt["passes"][1]["gpu_hit_tokens"] + opt["passes"][1]["cpu_hit_tokens"] >= 30000


@pytest.mark.parametrize("order", ORDERS)
def test_lfu_block_kernel_resets_a_set_aside_count(order):
    """A block of the request set aside as LFU's victim comes back at count 1 (``_insert``):
    ``a`` (count 3) is set aside, reinserted at 1 and later evicted before ``m``."""
    X, Y, a, n, m, p = 1, 2, 3, 4, 5, 6
    requests = [[X]] * 5 + [[Y]] * 4 + [[a], [a], [a, n], [m], [p], [a]]
    rows = [(r, i, key, 1) for r, keys in enumerate(requests) for i, key in enumerate(keys)]
    stream = block_stream(pl.DataFrame(rows, schema=BLOCK_SCHEMA, orient="row"), 1)
    expected = policy_gpu_model("lfu", POLICIES["lfu"])(stream, [3], order)
    np.testing.assert_array_equal(fast_gpu("lfu")(stream, [3], order), expected)
    assert expected[0, -1] == 0


def test_arc_place_drops_the_ghost_of_a_set_aside_block():
    """Placing [2, 6] in ARC(2) sets both aside after ``_replace`` made them B1 ghosts; put
    back, they are resident and not ghosts, and the ghost sizes add up (it used to raise
    KeyError later, on the Mooncake trace at 439 blocks)."""
    tier = POLICIES["arc"](2)
    for keys in ([4], [4], [2, 6]):
        tier.place(keys, 1)
    assert tier.keys() == [2, 6] and not set(tier._b1) & {2, 6}
    assert tier._b1_size == sum(tier._b1.values()) and tier._b2_size == sum(tier._b2.values())
