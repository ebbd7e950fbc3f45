"""HiCache's L3 store (``pipeline.components.sglang_histore.StoreRadixTree``) against SGLang
0.5.23's own: its ``UnifiedRadixCache`` and tree core with HiCache on and a storage backend
attached as ``attach_storage_backend`` leaves it, the ``HybridCacheController``'s storage
methods (hit query, page transfer, backup, host allocation for a hit, release queue) run as
shipped, its threads replaced by synchronous steps (each finishes its item when queued: the
hit query at submission, the transfer at the drain that allocates it, a backup at its write
ack) and a dict with ``HiCacheFile``'s semantics as the store
(scripts/sglang_hicache_reference.py), in a process of its own.

Hypothesis runs operation sequences (the HiCache tree's inserts, matches, locks, evictions,
load backs and ack polls, plus a request's prefetch at enqueue and its admission poll)
through both, each write policy, prefetch policy and page size, thresholds small enough to
fire, host pools that evict, and asserts after every operation the same results (prefetch
admissions and tokens loaded from storage), sizes, host pool, pages stored and every node.
"""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings, target
from hypothesis import strategies as st

from conftest import ROOT, needs_sglang_sources
from test_sglang_hiradix import OPERATIONS, TAILS, compare, prompts

from pipeline.components.sglang_hiradix import WRITE_POLICIES
from pipeline.components.sglang_histore import StoreRadixTree
from pipeline.components.sglang_storage_spec import PREFETCH_POLICIES, StorageSpec

sys.path.insert(0, str(ROOT / "scripts"))
import sglang_hicache_reference as hi  # noqa: E402

pytestmark = needs_sglang_sources()

@st.composite
def visits(draw):
    """A prompt's visit: inserted (its copies written through, acked, backed up), later
    evicted from the device, and a request for a prompt sharing its stem prefetched and
    polled across ack polls (the storage queues drain one turn behind)."""
    rid = draw(st.integers(0, 3))
    steps = [("insert", draw(prompts()), 0, draw(st.booleans())), ("check",), ("check",)]
    if draw(st.booleans()):
        steps.append(("evict", draw(st.integers(0, 30))))
    steps.append(("prefetch", rid, draw(prompts())))
    steps += draw(st.lists(st.sampled_from([("check",), ("progress", rid)]), max_size=5))
    return steps


@st.composite
def races(draw):
    """A prefetch in flight while the same prompt (or one on its stem) is inserted: the
    pages it brings are partly on the host already (freed at once) or refill a node that
    has lost its host copy."""
    rid, prompt = draw(st.integers(0, 3)), draw(prompts())
    other = prompt[:draw(st.integers(0, len(prompt)))] + list(draw(st.sampled_from(TAILS)))
    steps = [("prefetch", rid, prompt), ("insert", draw(st.sampled_from([prompt, other])),
                                         0, False)]
    steps += draw(st.lists(st.sampled_from([("check",), ("progress", rid)]), min_size=2,
                           max_size=5))
    return steps


STORAGE_OPERATIONS = st.one_of(
    OPERATIONS, visits(), visits(), races(),
    st.tuples(st.just("prefetch"), st.integers(0, 3), prompts()),
    st.tuples(st.just("progress"), st.integers(0, 3)),
    st.tuples(st.just("check")),
)


def flat(operations) -> list:
    return [step for op in operations for step in (op if isinstance(op, list) else [op])]


def run_both(sglang, write_policy, prefetch, threshold, page_size, device, host, policy,
             operations):
    operations = flat(operations)
    tree = StoreRadixTree(page_size, policy, device_tokens=device, host_tokens=host,
                          write_policy=write_policy,
                          storage=StorageSpec(prefetch_policy=prefetch, threshold=threshold))
    ours = hi.observe(tree, device, operations)
    theirs = sglang.submit(hi.replay, write_policy, device, host, operations, page_size,
                           policy, dict(prefetch_policy=prefetch, threshold=threshold)
                           ).result()
    return tree, ours, theirs


@pytest.mark.parametrize("write_policy", WRITE_POLICIES)
@settings(max_examples=25, deadline=None)
@given(prefetch=st.sampled_from(PREFETCH_POLICIES), threshold=st.sampled_from([1, 4, 8]),
       page_size=st.sampled_from([1, 1, 2, 4]), device=st.integers(16, 40),
       host=st.integers(10, 40), policy=st.sampled_from(("lru", "lru", "lfu", "fifo")),
       operations=st.lists(STORAGE_OPERATIONS, max_size=12))
def test_storage_equal_to_sglang(sglang, write_policy, prefetch, threshold, page_size, device,
                                 host, policy, operations):
    tree, ours, theirs = run_both(sglang, write_policy, prefetch, threshold, page_size,
                                  device, host, policy, operations)
    target(float(tree.fetched), label="tokens fetched from storage")
    compare(ours, theirs)


def test_a_prefix_returns_from_storage(sglang):
    """A 20-token prefix written through to the host and on to storage, pushed off the
    device and the host by another, comes back: the prefetch finds its 20 pages, the next
    turn's drain allocates the host pages and transfers them, the turn after inserts them;
    admitted then, the request gets 20 tokens from storage (wait_complete waits for it,
    best_effort polled at once gets none)."""
    a, b = list(range(1, 21)), list(range(100, 125))
    for prefetch, expected in (("wait_complete", [(False, 0), (False, 0), (True, 20)]),
                               ("best_effort", [(True, 0)])):
        steps = [("insert", a, 0, False), ("check",), ("check",), ("evict", 20),
                 ("insert", b, 0, False), ("check",), ("check",), ("evict", 25),
                 ("prefetch", 1, a + [5]), ("progress", 1)]
        steps += [("check",), ("progress", 1), ("check",), ("progress", 1)] \
            if prefetch == "wait_complete" else []
        tree, ours, theirs = run_both(sglang, "write_through", prefetch, 8, 1, 40, 30, "lru",
                                      steps)
        compare(ours, theirs)
        assert [o for o in ours if isinstance(o, tuple) and len(o) == 2] == expected


A, B = list(range(1, 15)), list(range(1, 9)) + list(range(50, 56))
RACES = {
    # the prefetched pages partly on the host by the time they land: those freed at once
    "on the host already": (15, [
        ("insert", A, 0, False), ("insert", A, 0, False), ("check",), ("check",),
        ("prefetch", 0, A), ("insert", B, 0, False), ("insert", B, 0, False), ("check",),
        ("check",), ("evict", 1), ("prefetch", 0, A), ("insert", A, 0, False), ("check",),
        ("check",), ("prefetch", 0, A)]),
    # a prefetch stopped at its poll is still in the hit queue when the request's next one
    # is issued: draining it retires the next one (SGLang looks the request up, not the
    # operation)
    "a stopped prefetch drained late": (10, [
        ("match", A, False), ("insert", A, 0, False), ("insert", A, 0, False),
        ("insert", A[:8], 0, False), ("check",), ("check",), ("prefetch", 0, A),
        ("evict", 7), ("insert", [], 0, False), ("insert", [60, 61, 62], 0, False),
        ("check",), ("check",), ("prefetch", 0, A), ("progress", 0), ("prefetch", 0, A),
        ("insert", A, 0, False), ("check",), ("check",)]),
}


@pytest.mark.parametrize("race", sorted(RACES))
def test_a_prefetch_racing_an_insert(sglang, race):
    """Two rare paths the sweep (scripts/sglang_storage_sweep.py) found, kept."""
    host, operations = RACES[race]
    _, ours, theirs = run_both(sglang, "write_through", "best_effort", 1, 1, 16, host, "lru",
                               operations)
    compare(ours, theirs)
