"""``pipeline.components.sglang_radix`` against SGLang 0.5.23's own RadixCache.

The property tests run random operation sequences (prompts with shared prefixes, inserts with
priorities and ``inserted_len``, matches, locks and unlocks, evictions, a tiny capacity kept by
evicting after each insert; every eviction policy; page sizes 1 to 3) through SGLang's
unmodified ``radix_cache.py`` (scripts/sglang_reference.py: stubs for torch and the memory
pools, the clock pinned to a counter) and through the component, and assert after every
operation equal results (matched and cached lengths, lock deltas, evicted tokens), equal
evictable / protected / total sizes, equal evictable leaves and the same tree node by node
(path, lock count, access and creation times, hits, priority). They skip, saying why, when the
SGLang sources are absent (``scripts/ensure_sglang_sources.sh`` fetches them). The hand-worked
tests need no SGLang.
"""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT
from oracles.sglang_radix import POLICIES, RadixTree

sys.path.insert(0, str(ROOT / "scripts"))
import sglang_reference as ref  # noqa: E402

needs_sglang = pytest.mark.skipif(
    not ref.sources_present(),
    reason=f"SGLang {ref.VERSION} sources absent from {ref.SOURCES}: "
           "run scripts/ensure_sglang_sources.sh")


def tree_rows(tree: RadixTree) -> list:
    return ref.snapshot(tree.root, lambda node: tuple(node.key))


def leaf_paths(tree: RadixTree) -> list:
    return sorted(ref.path_of(node, tree.root) for node in tree.evictable_leaves)


# --------------------------------------------------------------------------- hand-worked

def test_split_on_match_and_insert():
    tree = RadixTree()
    assert tree.insert([1, 2, 3])[0] == 0
    assert tree.insert([1, 2, 4, 5])[0] == 2            # [1,2] split off [1,2,3]
    assert tree.match_prefix([1, 2, 4, 9])[0] == 3      # splits [4,5] into [4] -> [5]
    assert sorted(r[0] for r in tree_rows(tree)) == [
        (), (1, 2), (1, 2, 3), (1, 2, 4), (1, 2, 4, 5)]
    assert tree.evictable_size == tree.total_size() == 5
    assert leaf_paths(tree) == [(1, 2, 3), (1, 2, 4, 5)]


def test_page_size_rounds_down():
    tree = RadixTree(page_size=2)
    assert tree.insert([1, 2, 3, 4, 5])[0] == 0          # stored: [1,2,3,4]
    assert tree.total_size() == 4
    assert tree.match_prefix([1, 2, 3, 9])[0] == 2       # a page of 2 matched, then a split
    assert tree.match_prefix([1, 2, 3, 4, 5, 6])[0] == 4
    assert tree.match_prefix([1])[0] == 0                # under one page: no lookup at all
    assert tree.match_prefix([2, 1, 3, 4])[0] == 0


def test_locks_protect_and_count():
    tree = RadixTree()
    tree.insert([1, 2, 3])
    _, node = tree.insert([1, 2, 4, 5])
    assert tree.inc_lock_ref(node) == -4                 # [1,2] and [4,5] move to protected
    assert (tree.evictable_size, tree.protected_size) == (1, 4)
    assert tree.inc_lock_ref(node) == 0                  # a second holder moves nothing
    assert tree.evict(100) == 1                          # only [3] can go
    assert tree.dec_lock_ref(node) == 0
    assert tree.dec_lock_ref(node) == 4
    assert (tree.evictable_size, tree.protected_size) == (4, 0)
    assert tree.evict(1) == 2                            # the whole leaf [4,5], not one token
    assert tree.evict(1) == 2                            # then [1,2], a leaf now
    assert tree.total_size() == 0


def test_parent_joins_the_heap_in_the_same_call():
    tree = RadixTree()
    tree.insert([1, 2, 3])
    tree.insert([1, 2, 4])                               # [1,2] -> [3], [4]
    assert tree.evict(3) == 4                            # [3], [4], then [1,2]
    assert tree.root.children == {}


@pytest.mark.parametrize("policy, first", [("lru", (5, 6)), ("mru", (1, 2)),
                                           ("fifo", (1, 2)), ("filo", (5, 6))])
def test_policy_order(policy, first):
    tree = RadixTree(policy=policy)
    tree.insert([1, 2])
    tree.insert([5, 6])
    tree.match_prefix([1, 2])                            # [1,2] now the most recent access
    tree.evict(1)
    assert first not in [r[0] for r in tree_rows(tree)]


def test_lfu_and_priority_order():
    tree = RadixTree(policy="lfu")
    tree.insert([1, 2])
    tree.insert([1, 2])                                  # a second hit (inserted_len 0)
    tree.insert([5, 6])
    tree.evict(1)                                        # [5,6]: 1 hit, though more recent
    assert [r[0] for r in tree_rows(tree)] == [(), (1, 2)]
    tree = RadixTree(policy="priority")
    tree.insert([1, 2], priority=5)
    tree.insert([5, 6], priority=1)
    tree.match_prefix([5, 6])
    tree.evict(1)                                        # the lower priority goes first
    assert [r[0] for r in tree_rows(tree)] == [(), (1, 2)]


def test_rejects_unknown_policy_and_page_size():
    with pytest.raises(ValueError, match="eviction policy"):
        RadixTree(policy="random")
    with pytest.raises(ValueError, match="page_size"):
        RadixTree(page_size=0)


# --------------------------------------------------------------------------- against SGLang

STEMS = ((1, 2, 3, 4, 5, 6), (1, 2, 3, 7, 8), (9, 9, 1, 2), (4, 5))


@st.composite
def prompts(draw):
    stem = draw(st.sampled_from(STEMS))
    cut = draw(st.integers(0, len(stem)))
    tail = draw(st.lists(st.integers(1, 4), max_size=5))
    return list(stem[:cut]) + tail


OPERATIONS = st.one_of(
    st.tuples(st.just("insert"), prompts(), st.integers(0, 3), st.integers(0, 6),
              st.booleans()),
    st.tuples(st.just("match"), prompts(), st.booleans()),
    st.tuples(st.just("unlock"), st.integers(0, 5)),
    st.tuples(st.just("evict"), st.integers(0, 12)),
)


def run_operations(ours, theirs, capacity: int, operations, assert_same) -> None:
    """``operations`` through both trees with equal results, ``assert_same`` after each (a
    tiny pool of ``capacity`` kept by evicting the overflow after each insert); then every
    lock released and everything evictable evicted."""
    held = []                                            # (our node, their node) locked
    assert_same(ours, theirs, "init")
    for step in operations:
        kind = step[0]
        if kind == "insert":
            _, tokens, priority, inserted, lock = step
            a = ours.insert(tokens, priority, inserted)
            b = theirs.insert(tokens, priority, inserted)
            assert a[0] == b[0], step
            if lock:
                assert ours.inc_lock_ref(a[1]) == theirs.inc_lock_ref(b[1]), step
                held.append((a[1], b[1]))
            excess = ours.total_size() - capacity        # a tiny pool: evict the overflow
            if excess > 0:
                assert ours.evict(excess) == theirs.evict(excess), step
        elif kind == "match":
            _, tokens, lock = step
            a, b = ours.match_prefix(tokens), theirs.match_prefix(tokens)
            assert a[0] == b[0], step
            if lock:
                assert ours.inc_lock_ref(a[1]) == theirs.inc_lock_ref(b[1]), step
                held.append((a[1], b[1]))
        elif kind == "unlock" and held:
            a, b = held.pop(step[1] % len(held))
            assert ours.dec_lock_ref(a) == theirs.dec_lock_ref(b), step
        elif kind == "evict":
            assert ours.evict(step[1]) == theirs.evict(step[1]), step
        assert_same(ours, theirs, step)
    for a, b in held:                                    # release everything, then drain
        assert ours.dec_lock_ref(a) == theirs.dec_lock_ref(b)
    assert ours.evict(10 ** 6) == theirs.evict(10 ** 6)
    assert_same(ours, theirs, "drained")


def assert_same(ours: RadixTree, theirs: ref.SGLangTree, step) -> None:
    assert (ours.evictable_size, ours.protected_size, ours.total_size()) == \
        (theirs.evictable_size, theirs.protected_size, theirs.total_size()), step
    assert leaf_paths(ours) == theirs.evictable_leaf_paths(), step
    assert tree_rows(ours) == theirs.snapshot(), step
    assert ours.clock == theirs.clock.now, step


@needs_sglang
@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=40)
@given(page_size=st.integers(1, 3), capacity=st.integers(2, 16),
       operations=st.lists(OPERATIONS, max_size=25))
def test_equal_to_sglang_after_every_operation(policy, page_size, capacity, operations):
    ours = RadixTree(page_size=page_size, policy=policy)
    theirs = ref.SGLangTree(page_size=page_size, policy=policy)
    run_operations(ours, theirs, capacity, operations, assert_same)
    assert ours.protected_size == 0
    assert ours.total_size() == ours.evictable_size == 0
