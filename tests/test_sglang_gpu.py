"""The ``sglang-radix`` GPU model (``pipeline.components.sglang_gpu``): each request served
alone on SGLang's radix tree.

* Against the literal tree: the same requests replayed on SGLang 0.5.23's own ``RadixCache``
  (scripts/sglang_reference.py) give the same hit per request (skipped, saying why, without
  the sources).
* The one-pass stack-distance curve is not exact: a hand-worked case where the tree's
  whole-leaf eviction frees more than it needs and a token-level LRU of the same size keeps
  the head of the evicted prompt.
* The commands: ``trace --gpu-model sglang-radix`` runs it; a page size that does not divide
  the trace's block size is one line naming ``--radix-page-size``, exit 2.
"""

from __future__ import annotations

import sys
from collections import OrderedDict

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT
from pipeline.cli import main
from pipeline.components.sglang_gpu import page_sequences, radix_gpu, replay_radix
from pipeline.workloads.blocks import BLOCK_SCHEMA
from pipeline.workloads.stream import block_stream

sys.path.insert(0, str(ROOT / "scripts"))
import sglang_reference as ref  # noqa: E402


def stream_of(prompts: list[list[int]], block_size: int, tails: list[int] | None = None):
    """A block stream: request r's full blocks keyed by their path (``prompts[r]``: the
    block labels), then a partial block of ``tails[r]`` tokens (0: none)."""
    rows = []
    for r, labels in enumerate(prompts):
        for i in range(len(labels)):
            rows.append((r, i, hash(tuple(labels[:i + 1])) & (2 ** 63 - 1), block_size))
        tail = (tails or [0] * len(prompts))[r]
        if tail:
            rows.append((r, len(labels), 2 ** 62 + r, tail))
    return block_stream(pl.DataFrame(rows, schema=BLOCK_SCHEMA, orient="row"), block_size)


def token_lru_hits(stream, capacity: int, outputs) -> list[int]:
    """A token-level LRU (the one-pass curve's model, page size 1): each request hits the
    cached head of its prompt (at most n - 1), then touches its tokens head last (so the
    tail is evicted first) and trims to ``capacity``."""
    cache: OrderedDict = OrderedDict()
    hits = []
    for pages, n, o in page_sequences(stream, 1, outputs):
        key = pages[:n - 1]
        hit = next((i for i, page in enumerate(key) if page not in cache), len(key))
        hits.append(hit)
        for page in reversed(pages):
            cache[page] = True
            cache.move_to_end(page)
        while len(cache) > capacity:
            cache.popitem(last=False)
    return hits


def test_whole_leaf_eviction_is_not_a_token_lru():
    """Pool of 10 tokens. A (6 tokens) then B (6 other tokens): B's prefill needs 6 with 4
    free; the tree drops A's whole leaf (6), a token LRU only A's last 2. A again: the tree
    hits nothing, the token LRU A's first 4 tokens."""
    stream = stream_of([[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12], [1, 2, 3, 4, 5, 6]], 1)
    ones = np.ones(3, np.int64)
    assert replay_radix(stream, 10).tolist() == [0, 0, 0]
    assert token_lru_hits(stream, 10, ones) == [0, 0, 4]
    # with room for both, both hit the n - 1 cap
    assert replay_radix(stream, 12).tolist() == [0, 0, 5] == token_lru_hits(stream, 12, ones)


def test_pages_and_the_hit_cap():
    """Page size 2, blocks of 4: a repeated 3-block prompt hits 2 whole blocks and one page
    of the third (the key is cut to n - 1 = 11 tokens, 5 pages)."""
    stream = stream_of([[1, 2, 3], [1, 2, 3]], 4)
    assert replay_radix(stream, 100, page_size=2).tolist() == [0, 10]
    assert radix_gpu(stream, [0, 100], radix_page_size=2).tolist() == [[0, 0], [0, 10]]


def test_a_request_larger_than_the_pool_is_not_admitted():
    stream = stream_of([[1, 2], [1, 2]], 4)
    assert replay_radix(stream, 8, output_tokens=2).tolist() == [0, 0]   # 9 tokens of KV
    assert replay_radix(stream, 9, output_tokens=2).tolist() == [0, 7]


@st.composite
def workloads(draw):
    """Prompts drawn from a small tree of block labels (shared prefixes), partial tails,
    outputs, a page size dividing the block size 4 and a few capacities."""
    prompts, tails = [], []
    for _ in range(draw(st.integers(1, 12))):
        prompts.append(draw(st.lists(st.integers(0, 2), min_size=1, max_size=5)))
        tails.append(draw(st.integers(0, 3)))
    outputs = draw(st.lists(st.integers(1, 9), min_size=len(prompts), max_size=len(prompts)))
    page = draw(st.sampled_from([1, 2, 4]))
    capacities = draw(st.lists(st.integers(0, 60), min_size=1, max_size=3))
    return stream_of(prompts, 4, tails), np.array(outputs), page, capacities


@pytest.mark.skipif(not ref.sources_present(), reason=f"SGLang {ref.VERSION} sources absent "
                    f"from {ref.SOURCES}: run scripts/ensure_sglang_sources.sh")
@settings(max_examples=40, deadline=None)
@given(workloads())
def test_equals_sglangs_own_radix_cache(workload):
    stream, outputs, page, capacities = workload
    for capacity in capacities:
        ours = replay_radix(stream, capacity, page, outputs)
        theirs = replay_radix(stream, capacity, page, outputs, tree=ref.SGLangTree(1, "lru"))
        assert ours.tolist() == theirs.tolist()


def test_trace_runs_it_and_refuses_a_page_size_off_the_block(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 1100, "output_length": 4, '
                     '"hash_ids": [1, 2, 3]}\n'
                     '{"timestamp": 5, "input_length": 1100, "output_length": 4, '
                     '"hash_ids": [1, 2, 4]}\n')
    out = tmp_path / "out"
    assert main(["trace", str(trace), "--gpu-model", "sglang-radix", "--gpu", "4096",
                 "--cpu", "0", "--radix-page-size", "16", "--out", str(out), "--no-report"]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("models: GPU sglang-radix (SGLang 0.5.23 RadixCache, page size 16)")
    assert main(["trace", str(trace), "--gpu-model", "sglang-radix", "--radix-page-size", "24",
                 "--out", str(tmp_path / "bad")]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "--radix-page-size 24: must divide the block size 512" in error[0]
    assert not (tmp_path / "bad").exists()


@st.composite
def admitted(draw):
    """``workloads`` with pools large enough to admit every request alone (SGLang's intake
    neither clips nor aborts one, ``sglang_intake``)."""
    stream, outputs, page, capacities = draw(workloads())
    need = int((stream.prompt_tokens + outputs).max()) + 2 * page + 6   # SGLang intake: no cut
    return stream, outputs, page, [need + c for c in capacities]


@settings(max_examples=30, deadline=None)
@given(admitted())
def test_equals_the_sglang_engine_at_concurrency_one(workload):
    """The engine (``simulate --engine sglang --concurrency 1 --chunked-prefill-size -1``,
    itself equal to SGLang's scheduler) hits what the GPU model replays."""
    from pipeline.components.sglang_settings import SchedulerSettings
    from pipeline.engine.request import SimRequest
    from pipeline.engine.sglang import SGLangConfig, simulate

    stream, outputs, page, capacities = workload
    requests = []
    for r in range(stream.requests):
        blocks = stream.codes[stream.starts[r]:stream.starts[r] + stream.cacheable[r]]
        requests.append(SimRequest(r, range(int(stream.prompt_tokens[r])), int(outputs[r]),
                                   prompt_keys=blocks.astype(np.int64) + 1))
    for capacity in capacities:
        config = SGLangConfig(2, 10 ** 6, stream.block_size, SchedulerSettings(
            max_total_tokens=capacity, page_size=page, chunked_prefill_size=None))
        engine = simulate(requests, config, concurrency=1).requests["gpu_hit_tokens"]
        assert engine.to_list() == replay_radix(stream, capacity, page, outputs).tolist()
