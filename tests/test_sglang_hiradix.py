"""The HiCache oracle (``oracles.sglang_hiradix.HiRadixTree``) against SGLang 0.5.23's own
HiCache: its ``UnifiedRadixCache`` and tree core with HiCache on, driven unmodified on CPU
(scripts/sglang_hicache_reference.py: the transfer controller and host pool are counters,
every transfer finished at once, acks taken at the next ``check``), in a process of its own.

Hypothesis runs operation sequences (inserts of prompts on shared stems with locks, matches,
unlocks, evictions, load backs, ack polls; a device pool kept by evicting after each insert;
tiny host pools; each write policy; each eviction policy, mostly lru; page sizes 1, 2
and 4) through both and asserts after every
operation the same results (cached lengths, device and host hits, tokens evicted and loaded
back), sizes, host pool, tokens written and loaded, and every node (path, on device, on host,
lock count, hits). Skips without the SGLang sources or msgspec.
"""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings, target
from hypothesis import strategies as st

from conftest import ROOT, needs_sglang_sources
from oracles.sglang_hiradix import WRITE_POLICIES, HiRadixTree
from oracles.sglang_radix import POLICIES

sys.path.insert(0, str(ROOT / "scripts"))
import sglang_hicache_reference as hi  # noqa: E402

pytestmark = needs_sglang_sources()

STEMS = (tuple(range(1, 15)), tuple(range(1, 9)) + (50, 51, 52, 53, 54, 55),
         tuple(range(100, 112)))


TAILS = (tuple(range(60, 72)), tuple(range(80, 90)), (95, 96, 97))


@st.composite
def prompts(draw):
    """A stem (cut) and a tail: repeated often, so copies on the host get hit."""
    stem = draw(st.sampled_from(STEMS))
    cut = draw(st.sampled_from([len(stem), len(stem), draw(st.integers(0, len(stem)))]))
    tail = draw(st.sampled_from(TAILS))
    return list(stem[:cut]) + list(tail[:draw(st.integers(0, len(tail)))])


OPERATIONS = st.one_of(
    st.tuples(st.just("insert"), prompts(), st.sampled_from([0, 0, 4]), st.booleans()),
    st.tuples(st.just("match"), prompts(), st.booleans()),
    st.tuples(st.just("unlock"), st.integers(0, 5)),
    st.tuples(st.just("evict"), st.integers(0, 30)),
    st.tuples(st.just("load"), prompts()),
    st.tuples(st.just("load"), prompts()),
    st.tuples(st.just("check")),
)


def compare(ours: list, theirs: list) -> None:
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a == b, f"first difference at observation {i}"
    assert len(ours) == len(theirs)


@pytest.mark.parametrize("write_policy", WRITE_POLICIES)
@settings(max_examples=30, deadline=None)
@given(page_size=st.sampled_from([1, 1, 2, 4]), device=st.integers(12, 48),
       host=st.integers(4, 80), policy=st.sampled_from(("lru",) * 4 + POLICIES),
       operations=st.lists(OPERATIONS, max_size=30))
def test_hicache_equal_to_sglang(sglang, write_policy, page_size, device, host, policy,
                                 operations):
    tree = HiRadixTree(page_size, policy, device_tokens=device, host_tokens=host,
                       write_policy=write_policy)
    ours = hi.observe(tree, device, operations)
    target(float(tree.loaded), label="tokens loaded back")     # steer toward load backs
    theirs = sglang.submit(hi.replay, write_policy, device, host, operations,
                           page_size, policy).result()
    compare(ours, theirs)
