"""The compiled LMCache tier stack (``pipeline.components.kstack``) equals its literal port
(``tests/oracles/lmcache_stack.py``) on random chunk streams: per request the chunks hit per
tier, and every tier's full state after each call."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from oracles.lmcache_stack import StackOracle
from pipeline.components.lmcache_stack import LMCacheStack, Tier

BLOCK = 2


@st.composite
def streams(draw):
    per = draw(st.integers(1, 2))
    chunk = BLOCK * per
    tiers = [Tier("cpu", draw(st.integers(0, 6)) * chunk + draw(st.integers(0, chunk - 1)))]
    disk = draw(st.integers(-1, 8))
    if disk >= 0:
        tiers.append(Tier("disk", disk * chunk, 5.0, 1.0))
    remote = draw(st.integers(-1, 10))
    if remote >= 0:
        tiers.append(Tier("remote", remote * chunk, 2.0, 3.0))
    policy = draw(st.sampled_from(["lru", "fifo", "mru", "lfu"]))
    requests = []
    for _ in range(draw(st.integers(1, 25))):
        path = draw(st.lists(st.integers(0, 2), min_size=0, max_size=7))
        keys = [tuple(path[:i + 1]) for i in range(len(path))]
        prompt = len(keys) * chunk + draw(st.integers(0, chunk - 1))
        gpu = draw(st.integers(0, prompt // BLOCK)) * BLOCK
        requests.append((keys, max(prompt, 1), min(gpu, max(prompt - 1, 0))))
    return chunk, tiers, requests, policy


@settings(max_examples=150, deadline=None)
@given(streams())
def test_stack_equals_its_literal_port(case):
    chunk, tiers, requests, policy = case
    caps = {t.kind: t.tokens for t in tiers}
    compiled = LMCacheStack(tiers, BLOCK, 2.0, chunk, policy=policy)
    oracle = StackOracle(caps["cpu"], caps.get("disk", 0), caps.get("remote", 0), chunk,
                         policy)
    for r, (keys, prompt, gpu) in enumerate(requests):
        split = compiled.lookup(keys)
        assert split == oracle.lookup(keys), r
        assert compiled.state() == oracle.state(), (r, "lookup")
        compiled.retrieve(keys, split, gpu, prompt)
        oracle.retrieve(keys, split, gpu, prompt)
        oracle.unpin(keys, split)
        assert compiled.state() == oracle.state(), (r, "retrieve")
        hit = sum(split) * chunk
        compiled.store(keys, prompt, hit)
        oracle.store(keys, prompt, hit)
        assert compiled.state() == oracle.state(), (r, "store")
        assert compiled.used("cpu") == oracle.used("cpu")


def test_a_disk_hit_is_promoted_to_the_cpu_tier():
    chunk = 4
    stack = LMCacheStack([Tier("cpu", 2 * chunk), Tier("disk", 8 * chunk, 5.0, 1.0)], 2, 2.0,
                         chunk)
    first, second = [("a",), ("a", "b")], [("c",), ("c", "d")]
    for keys in (first, second):                     # the second evicts the first from CPU
        stack.store(keys, 2 * chunk, 0)
    assert stack.state() == {"cpu": second, "disk": first + second, "remote": []}
    split = stack.lookup(first)
    assert split == (0, 2, 0)
    stack.retrieve(first, split, 0, 2 * chunk + 1)
    assert stack.state()["cpu"] == first              # promoted, the second evicted
    assert stack.state()["disk"] == second + first    # refreshed in prefix order


def test_lfu_keeps_the_chunk_hit_most():
    """A hit three times, B twice (stored, then hit once): storing C evicts LRU's least
    recent (A, hit before B) but LFU's least hit (B); LFU then orders by count."""
    chunk = BLOCK

    def cpu_after(policy):
        stack = LMCacheStack([Tier("cpu", 2 * chunk)], BLOCK, 2.0, chunk, policy=policy)
        oracle = StackOracle(2 * chunk, 0, 0, chunk, policy)
        a, b, c = [("a",)], [("b",)], [("c",)]
        for keys in (a, b):
            stack.store(keys, chunk, 0)
            oracle.store(keys, chunk, 0)
        for keys in (a, a, b):
            split = stack.lookup(keys)
            assert split == oracle.lookup(keys) == (1, 0, 0)
            stack.retrieve(keys, split, 0, chunk + 1)
            oracle.retrieve(keys, split, 0, chunk + 1)
            oracle.unpin(keys, split)
        stack.store(c, chunk, 0)
        oracle.store(c, chunk, 0)
        assert stack.state() == oracle.state()
        return stack.state()["cpu"]
    assert cpu_after("lru") == [("b",), ("c",)]
    assert cpu_after("lfu") == [("c",), ("a",)]


def test_an_unknown_policy_names_every_modelled_one_lfu_included():
    try:
        LMCacheStack([Tier("cpu", 512)], BLOCK, 2.0, 256, policy="arc")
    except ValueError as exc:
        assert "lru, fifo, mru, lfu" in str(exc) and "not modelled" not in str(exc)
    else:
        raise AssertionError("policy arc was accepted")
