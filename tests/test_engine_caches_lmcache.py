"""The ``lmcache`` CPU model: the lab's figures, the compiled backend equals the literal
LocalCPUBackend replay (the oracle) per request, and why no one-pass form exists."""

import json

import numpy as np
import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvlab.scenario import pass_keys
from pipeline.commands.blocks import run_blocks
from pipeline.catalog.model_api import request_result, two_tier
from pipeline.workloads.stream import TAIL_FIRST, block_stream
from pipeline.cli import main as cli_main
from pipeline.components.lmcache import lmcache_chunks, lmcache_cpu, lmcache_hits
from pipeline.onepass.vllm_fast import vllm_gpu
from pipeline.workloads.blocks import BLOCK_SCHEMA, document_blocks
from oracles.lmcache_cpu import replay_cpu, replay_lmcache
from trie_frames import trie_frame

LAB = ("fwd", "fwd", "rev")


def lab_stream(passes=LAB, tokens=5011, docs=10):
    order = [doc for name in passes for doc in pass_keys(name, docs)]
    return block_stream(document_blocks(order, tokens, 16), 16)


def per_pass(cpu, gpu=21520, passes=LAB, model="lmcache"):
    result = run_blocks(gpu=gpu, cpu=cpu, passes=list(passes), gpu_model="vllm",
                        cpu_model=model)["passes"]
    return [(p["gpu_hit_tokens"], p["cpu_hit_tokens"], p["miss_tokens"]) for p in result]


@pytest.mark.parametrize("model", ["lmcache", "lmcache-replay"])
def test_lab_figures_at_56000(model):
    assert per_pass(56000, model=model) == [(0, 0, 50_110), (0, 48_640, 1_470),
                                            (21_488, 27_728, 894)]


def test_lab_figures_at_40000():
    assert per_pass(40000)[1] == (0, 0, 50_110)


def test_cliff_is_190_chunks_not_the_documents_tokens():
    """19 full chunks a document (4,864 tokens; the last 147 are never stored): 190 chunks =
    48,640 tokens is enough, one chunk less and every store evicts another document's chunk
    0, so pass 2 gets no CPU hit at all."""
    chunks = lmcache_chunks(lab_stream(passes=("fwd",)))
    assert chunks.starts[1] == 19 and chunks.tokens[:19].sum() == 4864
    assert per_pass(48_640, passes=("fwd", "fwd"))[1] == (0, 48_640, 1_470)
    assert per_pass(48_640 - 256, passes=("fwd", "fwd"))[1] == (0, 0, 50_110)


def test_whole_prompt_hit_loads_all_but_the_last_token():
    """save_unfull_chunk: a 300-token prompt is 2 chunks (256 + 44); on a full hit vLLM loads
    c - g - 1 tokens, as get_num_new_matched_tokens does."""
    stream = block_stream(document_blocks([0, 0], 300, 16), 16)
    cpu = lmcache_cpu(stream, np.zeros(2, np.int64), [1000], save_unfull_chunk=True)[0]
    assert cpu.tolist() == [0, 299]
    served = request_result(stream, np.array([0, 288]), cpu)["cpu_hit_tokens"]
    assert served.to_list() == [0, 11]
    assert lmcache_cpu(stream, np.zeros(2, np.int64), [1000])[0].tolist() == [0, 256]


def test_stored_head_is_oldest_and_a_lookup_refreshes_head_last():
    """Store inserts in prefix order (chunk 0 oldest); a hit touches in reverse (chunk 0
    newest); a chunk already present is not refreshed by a store."""
    rows = [(0, 0, 1, 1), (0, 1, 2, 1), (1, 0, 5, 1), (2, 0, 1, 1), (2, 1, 2, 1)]
    stream = block_stream(pl.DataFrame(rows, schema=BLOCK_SCHEMA, orient="row"), 1)
    chunks = lmcache_chunks(stream, 1)
    # capacity 3: request 1 evicts nothing; request 2 hits both chunks
    assert replay_lmcache(chunks, 3).tolist() == [0, 0, 2]
    # capacity 2: request 1 evicts chunk 0 (the oldest) of request 0, so request 2 misses
    assert replay_lmcache(chunks, 2).tolist() == [0, 0, 0]


def test_not_a_stack_algorithm():
    """Why no one-pass engine: with chunk = block = 1 token, a tier of 3 hits LESS than a
    tier of 2. At 3, request 3 finds A and stores D, E, F after it: allocating those three
    evicts everything, A included (the lookup's pins are released before the store), so
    request 4 (A, D) misses. At 2, request 3 misses A, stores A, D (E, F find no room) and
    request 4 hits both."""
    rows = [(0, 0, 3, 1), (1, 0, 3, 1), (1, 1, 10, 1), (2, 0, 17, 1), (3, 0, 3, 1),
            (3, 1, 24, 1), (3, 2, 31, 1), (3, 3, 38, 1), (4, 0, 3, 1), (4, 1, 24, 1)]
    stream = block_stream(pl.DataFrame(rows, schema=BLOCK_SCHEMA, orient="row"), 1)
    chunks = lmcache_chunks(stream, 1)
    assert replay_lmcache(chunks, 2).tolist() == [0, 1, 0, 0, 2]
    assert replay_lmcache(chunks, 3).tolist() == [0, 1, 0, 1, 0]


@st.composite
def chunk_frames(draw, max_requests=12, max_blocks=9):
    """(frame, block size, chunk size): trie paths (shared prefixes), partial last blocks
    (a partial block's key depends on its tokens, as a chained hash does)."""
    block_size = draw(st.integers(1, 3))
    chunk_size = block_size * draw(st.integers(1, 3))
    frame = trie_frame(draw, block_size, max_requests=max_requests, branches=1,
                       max_blocks=max_blocks, key_step=3, key_offset=2)
    return frame, block_size, chunk_size


@given(chunk_frames(), st.booleans(), st.lists(st.integers(0, 40), max_size=4))
def test_numba_replay_equals_literal_replay(case, unfull, drawn):
    frame, block_size, chunk_size = case
    stream = block_stream(frame, block_size)
    chunks = lmcache_chunks(stream, chunk_size, unfull)
    capacities = sorted({0, 1, chunk_size - 1, chunk_size, 2 * chunk_size + 1, *drawn})
    fast = lmcache_hits(chunks, np.array(capacities))
    for row, capacity in enumerate(capacities):
        assert fast[row].tolist() == replay_lmcache(chunks, capacity).tolist()
    gpu = np.zeros(stream.requests, np.int64)
    assert lmcache_cpu(stream, gpu, capacities, chunk_size=chunk_size,
                       save_unfull_chunk=unfull).tolist() == \
        replay_cpu(stream, gpu, capacities, chunk_size=chunk_size,
                   save_unfull_chunk=unfull).tolist()


def test_cpu_state_ignores_the_gpu_tier():
    stream = lab_stream()
    one = lmcache_cpu(stream, vllm_gpu(stream, [21520])[0], [56000])
    two = lmcache_cpu(stream, np.zeros(stream.requests, np.int64), [56000])
    assert one.tolist() == two.tolist()


def test_bad_options_are_rejected():
    stream = lab_stream(passes=("fwd",))
    gpu = np.zeros(stream.requests, np.int64)
    with pytest.raises(ValueError, match="head-first"):
        lmcache_cpu(stream, gpu, [100], TAIL_FIRST)
    with pytest.raises(ValueError, match="multiple of the block size"):
        replay_cpu(stream, gpu, [100], chunk_size=100)


def test_done_when_command(capsys):
    assert cli_main(["blocks", "--gpu-model", "vllm", "--cpu-model", "lmcache", "--gpu",
                     "21520", "--cpu", "56000", "--passes", "fwd,fwd,rev"]) == 0
    passes = json.loads(capsys.readouterr().out)["passes"]
    assert [(p["gpu_hit_tokens"], p["cpu_hit_tokens"], p["miss_tokens"]) for p in passes] == \
        [(0, 0, 50_110), (0, 48_640, 1_470), (21_488, 27_728, 894)]


@pytest.mark.parametrize("argv, names", [
    (["--cpu-model", "lmcache", "--cpu-order", "tail-first"], "--cpu-order"),
    (["--chunk-size", "256"], "--chunk-size"),
    (["--cpu-model", "lmcache", "--chunk-size", "100"], "--chunk-size"),
    (["--output-tokens", "3"], "--output-tokens"),
    (["--gpu-model", "vllm", "--gpu-order", "head-first"], "--gpu-order"),
])
def test_bad_engine_options_are_one_line(capsys, argv, names):
    """Usage errors (an option of another model, an order or a chunk size the model cannot
    take): one line, exit 2."""
    assert cli_main(["blocks", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and names in err


@given(chunk_frames(), st.integers(0, 40), st.integers(0, 40), st.booleans())
def test_registry_fast_pair_equals_replay_pair(case, gpu_blocks, cpu_chunks, unfull):
    """Through the block models' two_tier: vllm + lmcache == vllm-replay + lmcache-replay."""
    frame, block_size, chunk_size = case
    stream = block_stream(frame, block_size)
    gpu, cpu = gpu_blocks * block_size, cpu_chunks * chunk_size + 1
    options = {"chunk_size": chunk_size, "save_unfull_chunk": unfull}
    fast = two_tier(stream, gpu, cpu, "tail-first", "head-first", "vllm", "lmcache",
                    {"output_tokens": 2}, options)
    literal = two_tier(stream, gpu, cpu, "tail-first", "head-first", "vllm-replay",
                       "lmcache-replay", {"output_tokens": 2}, options)
    assert fast.equals(literal)
    assert (fast["gpu_hit_tokens"] + fast["cpu_hit_tokens"] + fast["miss_tokens"]
            == fast["prompt_tokens"]).all()


def test_save_unfull_chunk_moves_the_cliff_to_the_documents_tokens():
    """LMCache 0.3.5's default: the 147-token partial chunk is stored too, so the tier needs
    all 50,110 tokens, and a whole-prompt hit still recomputes the last token."""
    def second(cpu):
        return run_blocks(gpu=21520, cpu=cpu, passes=["fwd", "fwd"], gpu_model="vllm",
                          cpu_model="lmcache",
                          cpu_options={"save_unfull_chunk": True})["passes"][1]
    whole = second(50110)
    assert (whole["cpu_hit_tokens"], whole["miss_tokens"]) == (50_100, 10)
    assert second(50109)["cpu_hit_tokens"] == 0
