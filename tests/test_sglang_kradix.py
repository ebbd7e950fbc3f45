"""The compiled radix tree (``pipeline.components.sglang_kradix``) against the test oracle
``tests/oracles/sglang_radix.py`` (itself held equal to SGLang 0.5.23's ``RadixCache`` by
tests/test_sglang_radix.py): random operation sequences (shared-prefix prompts, inserts with
priorities and ``inserted_len``, matches, locks, unlocks, evictions, a tiny pool kept by
evicting after each insert; every eviction policy; page sizes 1 to 3) through both, with
equal results, sizes, clock, evictable leaves and every node (path, lock count, access and
creation ticks, hits, priority) after every operation. Needs no SGLang sources."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oracles.sglang_radix import RadixTree as Oracle
from pipeline.components.sglang_kradix_layout import POLICIES
from pipeline.components.sglang_kradix_tree import RadixTree
from test_sglang_radix import OPERATIONS, leaf_paths, run_operations, tree_rows


def assert_same(ours: RadixTree, oracle: Oracle, step) -> None:
    assert (ours.evictable_size, ours.protected_size, ours.total_size(), ours.clock) == \
        (oracle.evictable_size, oracle.protected_size, oracle.total_size(),
         oracle.clock), step
    assert ours.leaves() == leaf_paths(oracle), step
    assert ours.nodes() == tree_rows(oracle), step


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=25, deadline=None)
@given(page_size=st.integers(1, 3), capacity=st.integers(2, 16),
       operations=st.lists(OPERATIONS, max_size=30))
def test_equal_to_the_oracle_after_every_operation(policy, page_size, capacity, operations):
    ours = RadixTree(page_size, policy, nodes=2)                 # growth exercised too
    oracle = Oracle(page_size=page_size, policy=policy)
    run_operations(ours, oracle, capacity, operations, assert_same)
    assert ours.total_size() == 0


def test_rejects_unknown_policy_and_page_size():
    with pytest.raises(ValueError, match="eviction policy"):
        RadixTree(policy="random")
    with pytest.raises(ValueError, match="page_size"):
        RadixTree(page_size=0)
