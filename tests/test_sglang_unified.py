"""SGLang's ``UnifiedRadixCache`` (what its scheduler builds; Python tree core, one
full-attention component) against the oracle ``RadixTree`` held equal to ``RadixCache``.

Random operation sequences (test_sglang_radix.py's) run through SGLang's unmodified unified
cache (scripts/sglang_unified_reference.py: torch replaced by numpy slot arrays, the
rank-consensus decorator by the identity; in a process of its own, since its imports must not
meet the other SGLang loaders) and through the oracle; after every operation the results
(matched and cached lengths, lock deltas, evicted tokens), the evictable / protected / total
sizes and the tree node by node (path, lock count, hits, priority) must be equal. Skips, saying
why, without the SGLang sources or msgspec (the unified core imports it).
"""

from __future__ import annotations

import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT
from oracles.sglang_radix import POLICIES, RadixTree
from test_sglang_radix import OPERATIONS

sys.path.insert(0, str(ROOT / "scripts"))
import sglang_reference as ref  # noqa: E402
import sglang_unified_reference as unified  # noqa: E402

pytest.importorskip("msgspec", reason="SGLang's unified tree core imports msgspec")
pytestmark = pytest.mark.skipif(
    not ref.sources_present(),
    reason=f"SGLang {ref.VERSION} sources absent from {ref.SOURCES}: "
           "run scripts/ensure_sglang_sources.sh")


@pytest.fixture(scope="module")
def sglang():
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool


def oracle_rows(tree: RadixTree) -> list:
    return [(path, lock, hits, priority) for path, lock, _, _, hits, priority
            in ref.snapshot(tree.root, lambda node: tuple(node.key))][1:]


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=25, deadline=None)
@given(page_size=st.integers(1, 3), capacity=st.integers(2, 16),
       operations=st.lists(OPERATIONS, max_size=25))
def test_unified_equal_to_radix_cache(sglang, policy, page_size, capacity, operations):
    ours = unified.observe(RadixTree(page_size, policy), oracle_rows, capacity, operations)
    theirs = sglang.submit(unified.replay, page_size, policy, capacity, operations).result()
    assert ours == theirs


def test_observe_can_fail():
    """Two trees that differ (page sizes 1 and 2) are told apart by what observe records."""
    operations = [("insert", [1, 2, 3], 0, 0, False), ("match", [1, 2, 3, 4], False)]
    assert unified.observe(RadixTree(1), oracle_rows, 16, operations) != \
        unified.observe(RadixTree(2), oracle_rows, 16, operations)
