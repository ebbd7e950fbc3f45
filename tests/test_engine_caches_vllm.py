"""The ``vllm`` GPU model: vLLM 0.33.0's figures, the one-pass engine equals the compiled
pool's replay per request, which equals the plain-Python oracle (``oracles.vllm_pool``), the
pool as a tier object, and the three differences from the block-lru model."""

import json
import numpy as np
import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvlab.scenario import pass_keys
from pipeline.catalog.model_api import GPU_MODELS
from pipeline.cli import main as cli_main
from pipeline.workloads.stream import HEAD_FIRST, block_stream
from pipeline.onepass.vllm_fast import vllm_gpu, vllm_hits
from pipeline.components.vllm_gpu import (VllmPool, VllmTier, replay_gpu, replay_vllm,
                                             unhashed_to_head)
from pipeline.components.vllm_layout import vllm_layout
from pipeline.workloads.blocks import BLOCK_SCHEMA, document_blocks

from oracles import vllm_pool as oracle
from trie_frames import trie_frame


CAPACITIES = [30000, 47000, 48000, 50110]


def lab_stream(tokens=5011, passes=("fwd", "fwd"), docs=10, block_size=16):
    order = [doc for name in passes for doc in pass_keys(name, docs)]
    return block_stream(document_blocks(order, tokens, block_size), block_size)


def second_pass(hits, docs=10):
    return hits[:, docs:2 * docs].sum(axis=1).tolist()


@pytest.mark.parametrize("model", ["vllm", "vllm-replay"])
def test_lab_figures_vllm_0_33(model):
    """10 x 5011, block 16, fwd,fwd, output 1: vLLM 0.33.0's own allocator gave these."""
    hits = GPU_MODELS[model](lab_stream(), CAPACITIES, "tail-first")
    assert second_pass(hits) == [0, 18_880, 28_960, 49_920]


def test_block_lru_model_differs_as_vllm_does():
    assert second_pass(GPU_MODELS["block-lru"](lab_stream(), CAPACITIES, "tail-first")) == \
        [0, 19_200, 29_280, 50_080]


def test_block_multiple_documents_hit_one_block_less():
    """5008 = 313 x 16: the n - 1 cap leaves the last block of every document uncached-hit."""
    for model in ("vllm", "vllm-replay"):
        hits = GPU_MODELS[model](lab_stream(tokens=5008), [50110], "tail-first")
        assert second_pass(hits) == [49_920]


def test_null_block_and_tail_slot():
    """A pool of N // 16 blocks, block 0 reserved; a 5011-token prompt holds 314 slots."""
    pool = oracle.VllmBlockPool(48000 // 16, prepend_unhashed=True)
    assert 0 not in pool.free and len(pool.free) == 2999
    request = oracle.vllm_requests(lab_stream(passes=("fwd",)))[0]
    assert (request.blocks, len(request.keys), request.lookup) == (314, 313, 313)
    pool.run(request)
    assert next(iter(pool.free)) not in {b for blocks in pool.cached.values() for b in blocks}
    assert len(pool.cached) == 313
    compiled = VllmPool(48000 // 16, prepend_unhashed=True)       # the production pool
    assert compiled.free.tolist() == [2999]
    layout = vllm_layout(lab_stream(passes=("fwd",)))                 # its first request
    compiled.run(layout.keys, layout.key_starts[:2], layout.lookup[:1], layout.slots[:1])
    assert compiled.free.tolist() == [2999] and compiled.cached_keys().size == 313


def test_free_queue_placement_changed_in_0_24():
    assert not unhashed_to_head("0.11.0") and not unhashed_to_head("0.23.0")
    assert unhashed_to_head("0.24.0") and unhashed_to_head("0.33.0")
    old = replay_gpu(lab_stream(), CAPACITIES, vllm_version="0.11.0")
    assert second_pass(old) == [0, 17_600, 27_680, 48_640]     # empty slots parked in the LRU


def test_longer_outputs_cache_the_tail_block():
    """5011 + 13 = 5024 = 314 x 16 tokens computed: the tail block is full, hashed with output
    tokens (a key no prompt matches) and takes an LRU slot like any other."""
    request = oracle.vllm_requests(lab_stream(passes=("fwd",)), output_tokens=14)[0]
    assert (request.blocks, len(request.keys)) == (314, 314)
    stream = lab_stream()
    for output in (1, 2, 13, 14, 40):
        fast = vllm_gpu(stream, CAPACITIES, output_tokens=output)
        assert fast.tolist() == replay_gpu(stream, CAPACITIES, output_tokens=output).tolist()


def test_lab_workload_needs_no_literal_fallback():
    capacities = np.arange(0, 60000, 160) // 16 - 1
    _, exact = vllm_hits(lab_stream(passes=("fwd", "fwd", "rev")), np.maximum(capacities, 0))
    assert exact.all()


@st.composite
def vllm_frames(draw, max_requests=12, max_blocks=6):
    """(frame, block size): requests as paths in a small trie (shared prefixes), some ending
    in a partial block, some exactly on a block boundary (the hit cap's duplicates)."""
    block_size = draw(st.integers(1, 4))
    return trie_frame(draw, block_size, max_requests=max_requests, branches=2,
                      max_blocks=max_blocks, key_step=5, key_offset=1), block_size


@given(vllm_frames(), st.integers(1, 9), st.sampled_from(["0.11.0", "0.33.0"]),
       st.lists(st.integers(0, 30), max_size=4))
def test_one_pass_equals_literal_replay(case, output, version, drawn):
    frame, block_size = case
    stream = block_stream(frame, block_size)
    slots = {r.blocks for r in oracle.vllm_requests(stream, output)}
    blocks = sorted({0, 1, *drawn, *slots, *(s + 2 for s in slots)})     # band edges (+ null)
    tokens = [b * block_size + (b % block_size) for b in blocks]
    hits, exact = vllm_hits(stream, np.maximum(np.array(tokens) // block_size - 1, 0),
                            output, version)
    for row, capacity in enumerate(tokens):       # compiled == readable: the test below
        literal = replay_vllm(stream, capacity, output, version)
        if exact[row]:
            assert hits[row].tolist() == literal.tolist()
        else:                                   # the API replays that capacity literally
            api = vllm_gpu(stream, [capacity], output_tokens=output, vllm_version=version)
            assert api[0].tolist() == (literal * block_size).tolist()


@given(vllm_frames(), st.integers(1, 9), st.sampled_from(["0.11.0", "0.33.0"]),
       st.integers(0, 40))
def test_compiled_pool_equals_the_oracle(case, output, version, blocks):
    frame, block_size = case
    stream = block_stream(frame, block_size)
    capacity = blocks * block_size + blocks % block_size
    assert replay_vllm(stream, capacity, output, version).tolist() == \
        oracle.replay_vllm(stream, capacity, output, version).tolist()
    assert replay_gpu(stream, [capacity], output_tokens=output, vllm_version=version
                      ).tolist() == oracle.replay_gpu(stream, [capacity], output_tokens=output,
                                                      vllm_version=version).tolist()


def test_duplicate_is_detected_not_guessed():
    """A prompt of exactly two blocks read twice with a third prompt between: its hit stops at
    block 0 (cap), block 1 is recomputed while its old copy survives: two blocks, one hash."""
    rows = [(0, 0, 1, 2), (0, 1, 2, 2), (1, 0, 7, 2), (2, 0, 1, 2), (2, 1, 2, 2),
            (3, 0, 1, 2), (3, 1, 2, 2)]
    stream = block_stream(pl.DataFrame(rows, schema=BLOCK_SCHEMA, orient="row"), 2)
    _, exact = vllm_hits(stream, np.array([6]))
    assert not exact[0]
    assert vllm_gpu(stream, [14]).tolist() == replay_gpu(stream, [14]).tolist()


def test_bad_options_are_rejected():
    stream = lab_stream(passes=("fwd",))
    with pytest.raises(ValueError, match="tail-first"):
        vllm_gpu(stream, [100], HEAD_FIRST)
    with pytest.raises(ValueError, match="output tokens"):
        vllm_gpu(stream, [100], output_tokens=0)
    with pytest.raises(ValueError, match="vllm version"):
        replay_gpu(stream, [100], vllm_version="latest")


def blocks_json(capsys, *argv):
    assert cli_main(["blocks", *argv]) == 0
    return json.loads(capsys.readouterr().out)["passes"]


def test_done_when_command(capsys):
    passes = blocks_json(capsys, "--gpu-model", "vllm", "--gpu", "48000", "--block-size", "16",
                         "--passes", "fwd,fwd")
    assert passes[1]["gpu_hit_tokens"] == 28_960


@pytest.mark.parametrize("argv", [["--vllm-version", "latest"], ["--output-tokens", "0"],
                                  ["--chunk-size", "0"]])
def test_unparsable_engine_options_are_one_line(capsys, argv):
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["blocks", *argv])
    assert exit_info.value.code != 0
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and argv[0] in err


@pytest.mark.parametrize("capacities", [[-1], [1.5]])
def test_capacities_must_be_integers_at_least_zero(capacities):
    stream = lab_stream(passes=("fwd",))
    for model in (vllm_gpu, replay_gpu):
        with pytest.raises(ValueError, match="capacities"):
            model(stream, capacities)


@given(st.integers(0, 6), st.sampled_from(["0.11.0", "0.33.0"]),
       st.lists(st.lists(st.sampled_from("abcdefgh"), max_size=5, unique=True), max_size=12))
def test_tier_object_equals_the_oracle(blocks, version, requests):
    """``VllmTier`` (the compiled pool) and the oracle's pool agree on every lookup and on
    the keys held after every request."""
    tier = VllmTier((blocks + 1) * 4, block_size=4, vllm_version=version)
    pool = oracle.VllmBlockPool(blocks + 1, unhashed_to_head(version))
    for keys in requests:
        assert tier.lookup(keys) == len(pool.longest_hit(keys, len(keys)))
        tier.place(keys)
        pool.run(oracle.VllmRequest(tuple(keys), len(keys), len(keys)))
        assert sorted(tier.keys()) == sorted(pool.cached)
