"""Block mode: the one-pass engine equals the literal replay, per request and per
block; block mode with one full block per document equals kvlab's document mode."""

import contextlib
import io
import json
from typing import NamedTuple

import numpy as np
import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvlab.scenario import run as run_scenario
from pipeline.onepass import lru_depths
from pipeline.cli import main as cli_main
from pipeline.onepass.stack_distance import band_limits, stack_distances
from pipeline.commands.blocks import run_blocks
from pipeline.catalog.model_api import CPU_MODELS, GPU_MODELS, two_tier
from pipeline.workloads.stream import ORDERS, block_stream
from pipeline.workloads.blocks import BLOCK_SCHEMA, document_blocks

from conftest import cli_in_process
from oracles import block_lru as literal_replay
from trie_frames import trie_frame


def distances_at(stream, capacity, order, touch_from=None):
    """The depth pass that is exact for a tier of ``capacity`` blocks (its size band)."""
    sizes = np.unique(lru_depths._placements(stream, touch_from))
    limit = int(band_limits(sizes, np.array([capacity], np.int64))[0])
    return lru_depths.block_distances(stream, order, touch_from, limit)


@st.composite
def block_frames(draw, max_requests=14, max_blocks=7):
    """(frame, block_size): requests as paths in a small trie, so prefixes are shared
    across requests; a request may end in a partial block."""
    block_size = draw(st.integers(1, 4))
    return trie_frame(draw, block_size, max_requests=max_requests, branches=2,
                      max_blocks=max_blocks, key_step=7, key_offset=3, partial_sometimes=True,
                      key_tokens=False), block_size


def edge_capacities(stream, drawn):
    """0, every placement size and size + 1 (band edges: a request exactly the capacity and
    one larger than it), plus drawn capacities, all in blocks."""
    sizes = set(stream.cacheable.tolist())
    return sorted({0, *drawn, *sizes, *(s + 1 for s in sizes), *(max(s - 1, 0) for s in sizes)})


@given(block_frames(), st.lists(st.integers(0, 40), max_size=3), st.sampled_from(ORDERS))
def test_gpu_tier_onepass_equals_replay(case, drawn, order):
    frame, block_size = case
    stream = block_stream(frame, block_size)
    capacities = np.array(edge_capacities(stream, drawn), np.int64)
    fast = lru_depths.prefix_blocks(stream, capacities, order)
    cacheable = stream.cacheable_mask()
    for row, capacity in enumerate(capacities.tolist()):
        literal = literal_replay.replay(stream, capacity, 0, order, order)
        assert fast[row].tolist() == literal.gpu_prefix.tolist()
        depth = distances_at(stream, capacity, order).depth
        assert ((depth <= capacity) & cacheable).tolist() == literal.gpu_present.tolist()


@given(block_frames(), st.integers(0, 12), st.lists(st.integers(0, 40), max_size=3),
       st.sampled_from(ORDERS), st.sampled_from(ORDERS))
def test_cpu_tier_onepass_equals_replay(case, gpu, drawn, gpu_order, cpu_order):
    frame, block_size = case
    stream = block_stream(frame, block_size)
    gpu_prefix = literal_replay.replay(stream, gpu, 0, gpu_order, gpu_order).gpu_prefix
    capacities = np.array(edge_capacities(stream, drawn), np.int64)
    fast = lru_depths.prefix_blocks(stream, capacities, cpu_order, touch_from=gpu_prefix)
    cacheable = stream.cacheable_mask()
    for row, capacity in enumerate(capacities.tolist()):
        literal = literal_replay.replay(stream, gpu, capacity, gpu_order, cpu_order)
        assert literal.gpu_prefix.tolist() == gpu_prefix.tolist()
        assert fast[row].tolist() == literal.cpu_prefix.tolist()
        depth = distances_at(stream, capacity, cpu_order, touch_from=gpu_prefix).depth
        assert ((depth <= capacity) & cacheable).tolist() == literal.cpu_present.tolist()


@given(block_frames(), st.integers(0, 60), st.integers(0, 60), st.sampled_from(ORDERS),
       st.sampled_from(ORDERS))
def test_model_registry_block_lru_equals_replay_in_tokens(case, gpu, cpu, gpu_order, cpu_order):
    frame, block_size = case
    stream = block_stream(frame, block_size)
    fast = two_tier(stream, gpu, cpu, gpu_order, cpu_order, "block-lru", "block-lru")
    literal = two_tier(stream, gpu, cpu, gpu_order, cpu_order, "block-lru-replay", "block-lru-replay")
    assert fast.equals(literal)
    assert (fast["gpu_hit_tokens"] + fast["cpu_hit_tokens"] + fast["miss_tokens"]
            == fast["prompt_tokens"]).all()
    assert (fast["gpu_hit_tokens"] <= (gpu // block_size) * block_size).all()


@given(st.integers(0, 6), st.integers(1, 40), st.lists(st.sampled_from(["fwd", "rev"]),
                                                        min_size=1, max_size=4),
       st.integers(0, 250), st.integers(0, 250), st.sampled_from(ORDERS),
       st.sampled_from(ORDERS))
def test_one_block_per_document_is_document_mode(docs, tokens, passes, gpu, cpu, gpu_order,
                                                 cpu_order):
    lab = run_scenario(gpu=gpu, docs=docs, tokens=tokens, passes=passes, cpu=cpu)
    blocks = run_blocks(gpu=gpu, docs=docs, tokens=tokens, passes=passes, cpu=cpu,
                        block_size=tokens, gpu_order=gpu_order, cpu_order=cpu_order)
    for doc_pass, block_pass in zip(lab["passes"], blocks["passes"], strict=True):
        assert block_pass == {
            "order": doc_pass["order"], "gpu_hit_tokens": doc_pass["gpu_hits"] * tokens,
            "cpu_hit_tokens": doc_pass["cpu_hits"] * tokens,
            "miss_tokens": doc_pass["misses"] * tokens,
            "hit_blocks": len(doc_pass["hit_docs"])}


def test_larger_block_than_document_is_never_cached():
    """block_size > the document: its one block is partial, so nothing ever hits."""
    result = run_blocks(gpu=10**6, docs=3, tokens=50, passes=["fwd", "fwd"], block_size=64)
    assert result["passes"][1] == {"order": "fwd", "gpu_hit_tokens": 0, "cpu_hit_tokens": 0,
                                   "miss_tokens": 150, "hit_blocks": 0}


# --------------------------------------------------------------------------- the command


class Done(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


def blocks_cli(*argv):
    """``python -m pipeline blocks ARGV`` in this process (the parser exits on bad input)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli_main(["blocks", *argv], prog="python -m pipeline")
        except SystemExit as exc:
            code = exc.code
    return Done(code, out.getvalue(), err.getvalue())


def second_pass(*argv):
    done = blocks_cli("--passes", "fwd,fwd", *argv)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["passes"][1]


def test_the_blocks_command_prints_json():
    """``python -m pipeline blocks``'s stdout is the JSON document (run in process)."""
    done = cli_in_process("blocks", "--gpu", "48000", "--passes", "fwd,fwd")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["passes"][1]["gpu_hit_tokens"] == 29280


def test_lab_figures_tail_first_vs_head_first():
    tail = second_pass("--block-size", "16", "--gpu", "48000")
    head = second_pass("--block-size", "16", "--gpu", "48000", "--gpu-order", "head-first")
    assert tail == {"order": "fwd", "gpu_hit_tokens": 29280, "cpu_hit_tokens": 0,
                    "miss_tokens": 50110 - 29280, "hit_blocks": 1830}
    assert head["gpu_hit_tokens"] == 0 and head["hit_blocks"] == 0
    for order in ORDERS:
        full = run_blocks(gpu=50110, passes=["fwd", "fwd"], gpu_order=order)["passes"][1]
        assert full["gpu_hit_tokens"] == 50080 == 313 * 16 * 10
        assert full["miss_tokens"] == 30


def test_model_choices_come_from_the_registries():
    done = blocks_cli("--help")
    assert done.returncode == 0
    for name in (*GPU_MODELS, *CPU_MODELS):
        assert name in done.stdout
    assert second_pass("--gpu", "48000", "--gpu-model", "block-lru-replay")["gpu_hit_tokens"] == 29280


@pytest.mark.parametrize("argv, names", [
    (["--block-size", "0"], "--block-size"), (["--block-size", "-16"], "--block-size"),
    (["--block-size", "x"], "--block-size"), (["--gpu-order", "lifo"], "--gpu-order"),
    (["--cpu-order", "tail"], "--cpu-order"), (["--gpu", "4.5"], "--gpu"),
    (["--cpu", "-1"], "--cpu"), (["--gpu-model", "nope"], "--gpu-model"),
])
def test_bad_input_is_one_line_naming_the_argument(argv, names):
    done = blocks_cli(*argv)
    assert done.returncode != 0
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and names in done.stderr


def test_stream_rejects_bad_block_size_and_repeated_keys():
    frame = document_blocks([0, 1], 40, 16)
    with pytest.raises(ValueError, match="block size"):
        block_stream(frame, 0)
    repeated = pl.DataFrame([(0, 0, 1, 4), (0, 1, 1, 4)], schema=BLOCK_SCHEMA, orient="row")
    with pytest.raises(ValueError, match="repeats a block key"):
        block_stream(repeated, 4)
    with pytest.raises(ValueError, match="unknown order"):
        lru_depths.block_lru_gpu(block_stream(frame, 16), [100], "lru")


def touch_distance_prefix(stream, capacities):
    """Prefix hits from the classic stack distance of each touch of the flattened head-first
    touch sequence (pipeline.onepass.stack_distance), running max per request."""
    mask = stream.cacheable_mask()
    codes = stream.codes[mask]
    distances = stack_distances(codes, np.ones_like(codes)) if codes.size else codes
    out = np.zeros((len(capacities), stream.requests), np.int64)
    request_of = np.repeat(np.arange(stream.requests), stream.cacheable)
    for r in range(stream.requests):
        running = np.maximum.accumulate(distances[request_of == r]) \
            if stream.cacheable[r] else np.zeros(0)
        for k, capacity in enumerate(capacities):
            out[k, r] = np.count_nonzero(running <= capacity)
    return out


@given(block_frames(), st.lists(st.integers(0, 40), max_size=4))
def test_docstring_touch_distance_is_exact_head_first(case, drawn):
    frame, block_size = case
    stream = block_stream(frame, block_size)
    largest = int(stream.cacheable.max()) if stream.requests else 0
    capacities = sorted({largest + extra for extra in drawn} | {largest})
    expected = lru_depths.prefix_blocks(stream, np.array(capacities), "head-first")
    assert touch_distance_prefix(stream, capacities).tolist() == expected.tolist()


def test_docstring_touch_distance_is_not_exact_tail_first():
    """Requests [a], [b], [a, c] at C = 2 blocks (no request larger than C): a is present
    before the third (depth 2), but tail-first touches c before a, so a's touch distance
    counts b, c and a: 3 > 2."""
    frame = pl.DataFrame([(0, 0, 1, 1), (1, 0, 2, 1), (2, 0, 1, 1), (2, 1, 3, 1)],
                         schema=BLOCK_SCHEMA, orient="row")
    stream = block_stream(frame, 1)
    touches = np.array([1, 2, 3, 1])                  # tail-first: c, then a
    assert stack_distances(touches, np.ones(4, np.int64))[3] == 3
    assert lru_depths.prefix_blocks(stream, np.array([2]), "tail-first")[0].tolist() == [0, 0, 1]
    assert literal_replay.replay(stream, 2, 0, "tail-first", "tail-first").gpu_prefix.tolist() == \
        [0, 0, 1]
