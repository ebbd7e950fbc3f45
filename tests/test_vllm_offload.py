"""pipeline.components.vllm_offload equals vLLM 0.33.0's own native offloading manager
(``CPUOffloadingManager``, ``lru`` and ``arc``) after every call, and its sizing and
decisions match hand arithmetic.

vLLM's files run unmodified on CPU (scripts/vllm_offload_reference.py); the sources come
from ``scripts/ensure_vllm_sources.sh``, and without them the equality tests skip and say so.
"""

from __future__ import annotations

import random
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import vllm_offload_reference as reference  # noqa: E402

from pipeline.components.vllm_offload import (NativeOffload, blocks_per_chunk,  # noqa: E402
                                                 distinct, offload_chunks)
from pipeline.components.vllm_offload_policies import (  # noqa: E402
    ABSENT, ANCHOR, C_RANK, C_WHERE, R_T1, RES)

needs_vllm = pytest.mark.skipif(
    not reference.have_sources(),
    reason="vLLM 0.33.0 sources absent: run scripts/ensure_vllm_sources.sh")

configs = st.fixed_dictionaries({
    "num_chunks": st.integers(0, 6), "policy": st.sampled_from(["lru", "arc"]),
    "store_threshold": st.sampled_from([0, 1, 2, 3]),
    "max_tracker_size": st.sampled_from([1, 2, 3, 64_000]),
    "tokens_per_chunk": st.sampled_from([1, 16])})
#: Call sequences: a seed and a length drawn by hypothesis, the calls by the reference
#: script's weighted draw (uniform choices of requests and chunk ranges, which hypothesis's
#: own small numbers would bias to the first request and chunk).
operations = st.builds(lambda seed, steps: reference.random_operations(random.Random(seed), steps),
                       st.integers(0, 2**32), st.integers(1, 80))


def run_both(config: dict, ops: list[tuple], **trie) -> int:
    """Run ``ops`` on vLLM's manager and on the model; assert equal after every call (and
    LRU's list in order); return the calls made."""
    real, model = reference.RealOffload(**config), NativeOffload(**config)
    count = 0
    for count, (left, right) in enumerate(zip(reference.run_operations(real, ops, **trie),
                                              reference.run_operations(model, ops, **trie)), 1):
        assert left == right, f"call {count} ({left[0]}) differs"
        if model.policy == "lru":
            assert_lru_list_ranked(model)
    return count


def assert_lru_list_ranked(model: NativeOffload) -> None:
    """LRU's list (the order ``evict`` walks) holds every resident key once, and the linked
    anchors, in (rank, row) order."""
    K, L = model.M[2], model.M[3]
    order, row = [], L[R_T1, RES + 1]
    while row != R_T1:
        order.append(int(row))
        row = L[row, RES + 1]
    assert [(K[r, C_RANK], r) for r in order] == sorted((K[r, C_RANK], r) for r in order)
    resident = sorted(r for r in model._rows.values() if K[r, C_WHERE] != ABSENT)
    assert sorted(r for r in order if K[r, C_WHERE] != ANCHOR) == resident


@needs_vllm
@given(configs, operations)
def test_equal_to_vllm_after_every_call(config, ops):
    """Tiny caches, shared prefixes (a 3-wide key trie), repeated keys, both policies,
    store thresholds with a tiny tracker, pending and failed stores, pinned loads, resets."""
    assert run_both(config, ops) == len(ops)


@needs_vllm
@given(configs, operations)
def test_equal_to_vllm_with_long_distinct_requests(config, ops):
    """Requests of up to 10 chunks over a 2-wide trie: many evictions per store."""
    run_both(config, ops, trie_width=2, depth=10)


reuse = st.builds(lambda seed, steps: reference.random_operations(
    random.Random(seed), steps, reference.REUSE_WEIGHTS), st.integers(0, 2**32),
    st.integers(10, 80))


@needs_vllm
@given(st.integers(1, 3), st.sampled_from(["lru", "arc"]), reuse)
def test_equal_to_vllm_with_few_keys_reused(num_chunks, policy, ops):
    """Requests of up to 4 chunks over a 2-wide trie (30 keys), loads, touches and finished
    requests: evicted keys come back, so ARC's ghost hits move its target, and reuse
    promotes chunks to T2."""
    run_both({"num_chunks": num_chunks, "policy": policy}, ops, trie_width=2, depth=4)


@needs_vllm
def test_reference_random_cases_agree():
    """The reference script's own random run (what it prints) finds no difference."""
    assert reference.main(["--random", "40", "--seed", "3"]) == 0


# --------------------------------------------------------------------------- hand arithmetic

def test_offload_chunks_is_vllms_arithmetic():
    """cpu_bytes_to_use = GiB * 2**30; chunk bytes rounded up to a 4096-byte page."""
    per_block = 16 * 28_672                              # 16 tokens of 28 KiB: 112 pages
    assert offload_chunks(10, per_block) == 10 * 2**30 // per_block == 23_405
    assert offload_chunks(1, 1000, chunk_blocks=3) == 2**30 // 4096    # 3000 B -> one page
    assert offload_chunks(1.5, 4096) == 393_216
    assert offload_chunks(1, 4096, world_size=2) == 2**30 // 8192       # every worker's copy
    assert blocks_per_chunk(16) == 1
    assert blocks_per_chunk(16, block_size=64) == 4
    assert blocks_per_chunk(16, chunk_blocks=3) == 3
    for bad in ({"block_size": 40}, {"block_size": 64, "chunk_blocks": 4},
                {"chunk_blocks": 0}):
        with pytest.raises(ValueError):
            blocks_per_chunk(16, **bad)


def stored(cache: NativeOffload, request, chunks, complete: bool = True):
    result = cache.prepare_store(request, chunks)
    if result is not None and complete:
        cache.complete_store(result[0])
    return result


def test_lru_evicts_a_requests_tail_before_its_head():
    """A request's chunks share its rank, ordered by position: a later chunk is older."""
    cache = NativeOffload(2, "lru")
    a = cache.new_request([10, 11])
    assert stored(cache, a, [0, 1]) == ([10, 11], [])
    b = cache.new_request([20])
    assert stored(cache, b, [0]) == ([20], [11])              # 11 (the tail) goes first
    assert [cache.lookup(k) for k in (10, 11, 20)] == [1, 0, 1]


def test_lru_finished_request_renews_head_last():
    """on_request_finished gives fresh ranks tail to head: the head is the most recent."""
    cache = NativeOffload(2, "lru")
    a, b = cache.new_request([10, 11]), cache.new_request([20, 21])
    stored(cache, a, [0, 1])
    cache.request_finished(a)                                  # 11 -> rank 2, 10 -> rank 3
    assert cache.snapshot()["ranks"] == {11: (2, 0), 10: (3, 0)}
    assert stored(cache, b, [0, 1]) == ([20, 21], [11, 10])


def test_pending_and_pinned_chunks_are_not_evicted():
    """A chunk whose store is in flight is HIT_PENDING and cannot be evicted; nor can one a
    load pins; vLLM then refuses the store (None) and allocates nothing."""
    cache = NativeOffload(1, "lru")
    a = cache.new_request([10])
    assert stored(cache, a, [0], complete=False) == ([10], [])
    assert cache.lookup(10) == 2
    b = cache.new_request([20])
    assert cache.prepare_store(b, [0]) is None
    cache.complete_store([10])
    assert cache.lookup(10) == 1
    cache.prepare_load(cache.new_request([10]), [0])
    assert cache.prepare_store(b, [0]) is None                 # pinned by the load
    cache.complete_load([10])
    assert cache.prepare_store(b, [0]) == ([20], [10])


def test_failed_store_frees_its_chunk():
    cache = NativeOffload(3, "lru")
    a = cache.new_request([10, 11])
    assert stored(cache, a, [0, 1], complete=False) == ([10, 11], [])
    cache.complete_store([11], success=False)
    snapshot = cache.snapshot()
    assert snapshot["chunks"] == {10: (-1, 0)} and snapshot["free"] == [1]
    b = cache.new_request([20, 21])
    stored(cache, b, [0, 1])                                   # chunk 2 fresh, then chunk 1
    assert cache.snapshot()["chunks"] == {10: (-1, 0), 20: (0, 2), 21: (0, 1)}


def test_store_threshold_counts_offers():
    """store_threshold 2: a chunk is stored on its second offer; the first is skipped."""
    cache = NativeOffload(4, "lru", store_threshold=2)
    a = cache.new_request([10, 11])
    assert cache.prepare_store(a, [0, 1]) == ([], [])
    assert cache.stores_skipped == 2
    b = cache.new_request([10, 12])
    assert cache.prepare_store(b, [0, 1]) == ([10], [])        # 10 offered twice, 12 once
    assert cache.snapshot()["tracker"] == [(11, 1), (10, 2), (12, 1)]


def test_store_threshold_tracker_drops_its_oldest():
    cache = NativeOffload(4, "lru", store_threshold=2, max_tracker_size=2)
    cache.prepare_store(cache.new_request([1, 2]), [0, 1])
    cache.prepare_store(cache.new_request([3]), [0])           # drops 1, the oldest
    assert cache.snapshot()["tracker"] == [(2, 1), (3, 1)]
    assert cache.prepare_store(cache.new_request([1]), [0]) == ([], [])


def test_arc_reuse_promotes_and_ghost_hit_grows_t1():
    """ARC: a reused chunk moves to T2 when its request finishes; evictions fill B1; a store
    of a key in B1 raises target_t1_size by max(1, |B2| / |B1|)."""
    cache = NativeOffload(2, "arc")
    a = cache.new_request([10, 11])
    stored(cache, a, [0, 1])
    reader = cache.new_request([10])
    cache.prepare_load(reader, [0])
    cache.complete_load([10])
    cache.request_finished(reader)
    assert cache.snapshot()["t1"] == [11] and cache.snapshot()["t2"] == [10]
    c = cache.new_request([30])
    assert stored(cache, c, [0]) == ([30], [11])               # |T1| 1 >= target 0: from T1
    assert cache.snapshot()["b1"] == [11]
    again = cache.new_request([11])
    assert stored(cache, again, [0]) == ([11], [30])           # ghost hit: target 0 -> 1
    snapshot = cache.snapshot()
    assert snapshot["target_t1_size"] == 1.0 and snapshot["b1"] == [30]
    assert snapshot["t1"] == [11] and snapshot["t2"] == [10]


def test_reset_drops_every_chunk():
    cache = NativeOffload(2, "arc")
    a = cache.new_request([10, 11])
    stored(cache, a, [0, 1])
    cache.reset()
    assert [cache.lookup(k) for k in (10, 11)] == [0, 0]
    assert stored(cache, a, [0]) == ([10], [])
    assert cache.snapshot()["chunks"] == {10: (0, 0)}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(st.integers(-2**63, 2**63 - 1), st.integers(0, 6)), max_size=60),
       st.lists(st.integers(0, 8), max_size=20))
def test_distinct_and_rows_for_are_first_seen_order(keys, more):
    """``distinct``: the keys once each in first-seen order, each key's index there (the
    compiled hash pass that replaced np.unique); ``rows_for`` gives one row per key over
    calls, as ``_row`` does."""
    import numpy as np
    array = np.array(keys, np.int64)
    unique, index = distinct(array)
    assert unique.tolist() == list(dict.fromkeys(keys))
    assert unique[index].tolist() == keys
    bulk, one = NativeOffload(4), NativeOffload(4)
    rows = bulk.rows_for(array).tolist() + bulk.rows_for(np.array(more, np.int64)).tolist()
    assert rows == [one._row(k) for k in keys + more]


def test_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="Unknown cache policy"):
        NativeOffload(2, "lfu")
