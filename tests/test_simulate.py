"""pipeline.onepass.events (the lab's document mode): the one-pass method equals kvlab's classes replayed directly."""

import numpy as np
import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from kvlab.kvsim import TwoTierCache
from pipeline.onepass.stack_distance import lru_states
from pipeline.onepass.events import RESULT_SCHEMA, simulate
from pipeline.workloads.documents import ACCESS_SCHEMA, PASS_ORDER, DocumentWorkload


def trace_frame(keys, sizes):
    n = len(keys)
    return pl.DataFrame({
        "pass_index": [0] * n, "pass_order": ["fwd"] * n, "step": list(range(n)),
        "seq": list(range(n)), "doc": keys, "size": sizes,
    }, schema={"pass_index": pl.Int16, "pass_order": PASS_ORDER, "step": pl.Int32,
               "seq": pl.Int32, "doc": pl.Int32, "size": pl.Int64})


@st.composite
def traces(draw):
    """Repeated keys with per-key sizes, some oversize, some zero."""
    n_keys = draw(st.integers(1, 8))
    size_of = draw(st.lists(st.integers(0, 14), min_size=n_keys, max_size=n_keys))
    keys = draw(st.lists(st.integers(0, n_keys - 1), max_size=50))
    return keys, [size_of[k] for k in keys]


capacities = st.lists(st.integers(0, 40), min_size=1, max_size=4)


@given(trace=traces(), gpus=capacities, cpus=capacities)
def test_onepass_events_equal_direct_replay(trace, gpus, cpus):
    accesses = trace_frame(*trace)
    assert_frame_equal(simulate(accesses, gpus, cpus, "onepass"),
                       simulate(accesses, gpus, cpus, "direct"))


@given(trace=traces(), caps=st.lists(st.integers(0, 40), max_size=6))
def test_lru_states_match_kvlab_state_after_every_access(trace, caps):
    keys, sizes = trace
    states = lru_states(keys, sizes, caps)
    for row, capacity in enumerate(caps):
        cache = TwoTierCache(capacity, 0).gpu
        for i, (key, size) in enumerate(zip(keys, sizes)):
            before = cache.evictions
            assert cache.access(key, size) == states.hits[row, i]
            assert cache.used == states.used[row, i]
            assert cache.evictions - before == states.evicted[row, i]


def test_events_schema_and_lab_numbers():
    events = simulate(DocumentWorkload().accesses(), [21520], [0, 56000])
    assert events.schema == pl.Schema({**ACCESS_SCHEMA, **RESULT_SCHEMA})
    offload = events.filter(pl.col("cpu_capacity") == 56000, pl.col("pass_index") == 2)
    assert offload["tier"].to_list() == ["gpu"] * 4 + ["cpu"] * 6
    assert offload["gpu_used"].max() <= 21520 and offload["cpu_used"].max() <= 56000
    # Stack distance: doc 9 re-read right after itself = its own size; null on first reads.
    assert events.filter(pl.col("seq") == 20)["stack_distance"][0] == 5011
    assert events.filter(pl.col("pass_index") == 0)["stack_distance"].null_count() == 20


def test_hit_iff_distance_within_capacity_when_items_fit():
    events = simulate(DocumentWorkload().accesses(), [5011, 21520, 50109, 50110], [0])
    within = pl.col("stack_distance").is_not_null() & (
        pl.col("stack_distance") <= pl.col("gpu_capacity"))
    assert (events["tier"] == "gpu").to_list() == events.select(within).to_series().to_list()


def test_variable_size_per_key_is_rejected_by_onepass_but_direct_works():
    accesses = trace_frame([1, 1], [3, 4])
    with pytest.raises(ValueError, match="key 1"):
        simulate(accesses, [10], [0], "onepass")
    assert simulate(accesses, [10], [0], "direct")["tier"].to_list() == ["miss", "gpu"]


@pytest.mark.parametrize("gpus, cpus, message", [
    ([], [0], "empty"), ([-1], [0], ">= 0"), ([5], [], "empty"), ([5], [-3], ">= 0")])
def test_bad_capacities(gpus, cpus, message):
    with pytest.raises(ValueError, match=message):
        simulate(DocumentWorkload().accesses(), gpus, cpus)


def test_empty_workload():
    events = simulate(DocumentWorkload(docs=0).accesses(), [10], [0])
    assert events.height == 0 and events.columns == [*ACCESS_SCHEMA, *RESULT_SCHEMA]


def test_many_capacities_in_one_call_match_one_by_one():
    accesses = DocumentWorkload(docs=7, tokens=13, passes=("fwd", "rev", "fwd")).accesses()
    caps = list(range(0, 100, 3))
    together = simulate(accesses, caps, [0, 40])
    apart = pl.concat([simulate(accesses, [c], [0, 40]) for c in caps])
    assert_frame_equal(together, apart)
    assert np.all(together["gpu_used"].to_numpy() <= together["gpu_capacity"].to_numpy())
