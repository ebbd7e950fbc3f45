"""Which tier stacks are exact in one pass (``pipeline.onepass.tier_stacks``): an inclusive
LRU stack's one stack-distance pass equals a literal replay of its tiers; LMCache's stack is
no such stack (a larger disk can hit less), and its block-mode replay equals its literal
port request by request."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from oracles.lmcache_stack import StackOracle
from pipeline.components.lmcache import Chunks
from pipeline.onepass.stack_distance import stack_distances
from pipeline.onepass.tier_stacks import (inclusive_tier_counts, inclusive_tiers,
                                          lmcache_stack_hits)


def literal_inclusive(keys, capacities):
    """Each tier an LRU of its capacity that sees every access: the first tier holding the
    key before the access serves it (len(capacities): a miss)."""
    tiers = [OrderedDict() for _ in capacities]
    served = []
    for key in keys:
        served.append(next((k for k, t in enumerate(tiers) if key in t), len(tiers)))
        for tier, capacity in zip(tiers, capacities):
            tier[key] = True
            tier.move_to_end(key)
            while len(tier) > capacity:
                tier.popitem(last=False)
    return served


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=80),
       st.lists(st.integers(0, 8), min_size=1, max_size=3))
def test_an_inclusive_lru_stack_is_one_pass(keys, steps):
    capacities = np.cumsum(steps)                     # non-decreasing downwards
    distances = stack_distances(np.array(keys), np.ones(len(keys), np.int64))
    expected = literal_inclusive(keys, capacities)
    assert inclusive_tiers(distances, capacities).tolist() == expected
    counts = inclusive_tier_counts(np.array(keys), capacities[None, :])[0]
    assert counts.tolist() == np.bincount(expected, minlength=len(steps) + 1).tolist()


def _chunks(requests: list[list[int]]) -> Chunks:
    """One-token chunks, each request's prompt one token longer than its chunks."""
    codes = np.array([k for r in requests for k in r], np.int64)
    starts = np.concatenate(([0], np.cumsum([len(r) for r in requests]))).astype(np.int64)
    prompt = np.array([len(r) + 1 for r in requests], np.int64)
    return Chunks(1, starts, codes, np.ones(codes.size, np.int64), prompt,
                  int(codes.max(initial=0)) + 1)


# a bigger disk, fewer hits (found by a random search over the literal port)
PATHS = [[(1,), (1, 0), (1, 0, 0)], [(1,), (1, 0), (1, 0, 0)], [(1,)],
         [(0,), (0, 0), (0, 0, 0), (0, 0, 0, 1)], [(1,), (1, 0), (1, 0, 1), (1, 0, 1, 1)],
         [(0,), (0, 0)], [(1,), (1, 1)]]


def test_lmcache_stack_is_not_one_pass_a_larger_disk_hits_less():
    names: dict = {}
    requests = [[names.setdefault(p, len(names)) for p in path] for path in PATHS]
    chunks = _chunks(requests)
    gpu = np.zeros(len(requests), np.int64)
    hits = {disk: int(lmcache_stack_hits(chunks, gpu, (2, disk, 0)).sum()) for disk in (4, 5)}
    assert hits == {4: 6, 5: 5}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 2), max_size=6), min_size=1, max_size=20),
       st.integers(1, 6), st.integers(0, 8), st.integers(0, 8), st.data())
def test_the_block_mode_replay_equals_the_literal_port(paths, cpu, disk, remote, data):
    names: dict = {}
    requests = [[names.setdefault(tuple(p[:i + 1]), len(names)) for i in range(len(p))]
                for p in paths]
    gpu = [data.draw(st.integers(0, len(r))) for r in requests]
    ours = lmcache_stack_hits(_chunks(requests), np.array(gpu), (cpu, disk, remote))
    oracle = StackOracle(cpu, disk, remote, 1)
    for r, keys in enumerate(requests):
        split = oracle.lookup(keys)
        oracle.retrieve(keys, split, gpu[r], len(keys) + 1)
        oracle.unpin(keys, split)
        oracle.store(keys, len(keys) + 1, sum(split))
        assert tuple(ours[r]) == split, r


def test_a_cpu_only_stack_replay_is_the_lmcache_cpu_model():
    """With no disk the stack's block-mode replay hits what the ``lmcache`` model does."""
    from pipeline.components.lmcache import lmcache_chunks, lmcache_hits
    from test_engine_cpu_tier import _stream

    rng = np.random.default_rng(5)
    docs = [rng.integers(0, 500, int(rng.integers(40, 120))).tolist() for _ in range(6)]
    prompts = [docs[int(rng.integers(6))] + [900 + i] for i in range(40)]
    stream = _stream(prompts, 4)
    chunks = lmcache_chunks(stream, 8)
    for capacity in (8, 40, 200, 10**5):
        split = lmcache_stack_hits(chunks, np.zeros(stream.requests, np.int64),
                                   (capacity, 0, 0))
        assert (split[:, 0] * 8).tolist() == lmcache_hits(chunks, [capacity])[0].tolist()


def test_plan_finds_the_cheapest_cpu_and_disk(tmp_path, capsys):
    import json

    from pipeline.cli import main
    argv = ["plan", "--pattern", "long-doc-qa", "--num-documents", "6", "--document-length",
            "2000", "--model", "qwen2.5-1.5b", "--gpu", "64blocks", "--target-hit-ratio", "0.3",
            "--tier-costs", "4,0.1", "--json"]
    assert main(argv) == 0
    document = json.loads(capsys.readouterr().out)
    answer = document["answer"]
    assert document["met"] and answer["hit_ratio"] >= 0.3
    only = document["cheapest_cpu_only"]
    assert answer["cost"] <= only["cost"] and answer["disk_tokens"] > 0
