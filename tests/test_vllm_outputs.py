"""Per-request output lengths in the concurrency-1 ``vllm`` model (``--output-tokens trace``):
the one-pass form and the compiled pool equal the plain-Python oracle, the compiled pool
equals vLLM 0.33.0's own ``KVCacheManager`` (scripts/vllm_reference.py; skipped without the
sources), sampled blocks are hashed so a next turn re-sending the reply hits them, and bad
lengths are one line."""

from __future__ import annotations

import dataclasses
import json
import random
import sys

import numpy as np
import polars as pl
import pytest
from conftest import ROOT, SYNTHETIC_TRACE, needs_shared_trace
from hypothesis import given
from hypothesis import strategies as st
from oracles import vllm_pool as oracle
from test_engine_caches_vllm import vllm_frames

from pipeline.workloads.stream_limits import storable_tokens
from pipeline.workloads.stream import TRACE, RequestOutputs, block_stream
from pipeline.cli import main
from pipeline.onepass.vllm_fast import vllm_gpu
from pipeline.components.vllm_gpu import replay_gpu, replay_vllm
from pipeline.components.vllm_layout import vllm_layout
from pipeline.workloads.mooncake import read_mooncake
from pipeline.workloads.tokens import read_tokens

sys.path.insert(0, str(ROOT / "scripts"))
import vllm_reference as reference  # noqa: E402

SOURCES = reference.Path.home() / ".cache" / "kvlab" / "vllm-0.33.0"
SYNTHETIC = SYNTHETIC_TRACE
A = list(range(1, 16))                                  # 15 tokens
REPLY = [900001, 900002]


def write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@st.composite
def streams_with_outputs(draw):
    """A ``vllm_frames`` stream with a length per request (0: none given) and, for some
    requests, sampled-block codes: other requests' prompt codes or new ones."""
    frame, block_size = draw(vllm_frames())
    stream = block_stream(frame, block_size)
    lengths = np.array(draw(st.lists(st.integers(0, 9), min_size=stream.requests,
                                     max_size=stream.requests)), np.int64)
    codes, starts, extra = [], [0], 4
    for r in range(stream.requests):
        own = set(stream.codes[stream.starts[r]:stream.starts[r + 1]].tolist())
        pool = [c for c in range(stream.n_codes + extra) if c not in own]
        picked = draw(st.lists(st.sampled_from(pool), max_size=3, unique=True)) if pool else []
        codes += picked
        starts.append(len(codes))
    outputs = RequestOutputs(lengths, np.array(codes, np.int64), np.array(starts, np.int64),
                             stream.n_codes + extra)
    return dataclasses.replace(stream, outputs=outputs)


@given(streams_with_outputs(), st.sampled_from(["0.11.0", "0.33.0"]),
       st.lists(st.integers(0, 40), min_size=1, max_size=4), st.booleans())
def test_fast_paths_equal_the_literal_model_per_request(stream, version, blocks, sampled):
    if not sampled:                                     # lengths only: the one-pass form
        stream = dataclasses.replace(stream, outputs=dataclasses.replace(
            stream.outputs, codes=np.zeros(0, np.int64),
            starts=np.zeros(stream.requests + 1, np.int64)))
    size = stream.block_size
    capacities = [b * size + b % size for b in blocks]
    literal = oracle.replay_gpu(stream, capacities, output_tokens=TRACE, vllm_version=version)
    assert vllm_gpu(stream, capacities, output_tokens=TRACE,
                    vllm_version=version).tolist() == literal.tolist()
    assert replay_gpu(stream, capacities, output_tokens=TRACE,
                      vllm_version=version).tolist() == literal.tolist()
    for row, capacity in enumerate(capacities):
        assert (replay_vllm(stream, capacity, TRACE, version) * size).tolist() \
            == literal[row].tolist()
    lengths = np.maximum(stream.outputs.lengths, 1)
    if not sampled and stream.requests:                 # "trace" is the array of lengths
        assert oracle.replay_gpu(stream, capacities, output_tokens=lengths,
                                 vllm_version=version).tolist() == literal.tolist()
    assert storable_tokens(stream, TRACE) == storable_tokens(stream, lengths)


def test_requests_without_a_length_generate_one_token():
    frame_stream = block_stream(
        pl.DataFrame({"request": [0, 1], "block_index": [0, 0], "block_key": [1, 2],
                      "block_tokens": [16, 16]}).cast({"request": pl.UInt32,
                                                       "block_index": pl.UInt32,
                                                       "block_key": pl.UInt64,
                                                       "block_tokens": pl.UInt32}), 16)
    assert [r.blocks for r in oracle.vllm_requests(frame_stream, TRACE)] == [1, 1]
    with_lengths = dataclasses.replace(frame_stream, outputs=RequestOutputs(
        np.array([0, 18]), np.zeros(0, np.int64), np.zeros(3, np.int64), 2))
    assert [r.blocks for r in oracle.vllm_requests(with_lengths, TRACE)] == [1, 3]
    assert [r.blocks for r in oracle.vllm_requests(with_lengths, 2)] == [2, 2]


def test_a_next_turn_hits_the_reply_as_vllm_does(tmp_path, capsys):
    """A = 15 tokens sampling [900001, 900002], then B = A + those: vLLM hits [0, 16] in a
    pool of 48 tokens (block 16); with placeholder outputs the reply is never hit."""
    path = write(tmp_path / "ab.jsonl", [{"timestamp": 0, "tokens": A, "output_token_ids": REPLY},
                                        {"timestamp": 1, "tokens": A + REPLY}])
    stream = read_tokens(path, 16).block_stream()
    assert replay_vllm(stream, 48, TRACE).tolist() == [0, 1]
    assert not vllm_layout(stream, TRACE).repeated          # the one-pass form is exact
    assert vllm_gpu(stream, [48], output_tokens=TRACE).tolist() == [[0, 16]]
    assert vllm_gpu(stream, [48], output_tokens=2).tolist() == [[0, 0]]
    hits = {}
    for output in ("trace", "2"):
        out = tmp_path / f"out-{output}"
        assert main(["trace", str(path), "--format", "tokens", "--gpu", "48", "--cpu", "0",
                     "--gpu-model", "vllm", "--output-tokens", output, "--out", str(out),
                     "--no-report", "--json"]) == 0
        summary = json.loads(capsys.readouterr().out)
        assert summary["gpu_options"]["output_tokens"] == (output if output == "trace" else 2)
        hits[output] = pl.read_parquet(out / "requests.parquet")["gpu_hit_tokens"].to_list()
    assert hits == {"trace": [0, 16], "2": [0, 0]}


def test_a_reply_sampled_again_is_replayed(tmp_path):
    """A sampling the same reply twice: the second copy's key is cached when it is computed
    (two blocks, one hash), so the one-pass form gives way to the pool at every capacity."""
    line = {"timestamp": 0, "tokens": A, "output_token_ids": REPLY}
    path = write(tmp_path / "aa.jsonl", [line, {**line, "timestamp": 1},
                                         {"timestamp": 2, "tokens": A + REPLY}])
    stream = read_tokens(path, 16).block_stream()
    assert vllm_layout(stream, TRACE).repeated
    capacities = [16, 32, 48, 64, 4096, 8192]      # the last two never evict
    assert vllm_gpu(stream, capacities, output_tokens=TRACE).tolist() == \
        oracle.replay_gpu(stream, capacities, output_tokens=TRACE).tolist()


def test_token_lines_give_max_tokens_or_the_reply_length(tmp_path):
    path = write(tmp_path / "t.jsonl", [{"timestamp": 0, "tokens": [1, 2], "max_tokens": 7},
                                        {"timestamp": 1, "tokens": [3]},
                                        {"timestamp": 2, "tokens": [4], "max_tokens": 9,
                                         "output_token_ids": [5, 6, 7]}])
    workload = read_tokens(path, 16)
    assert workload.output_tokens.tolist() == [7, 1, 3]
    assert read_tokens(write(tmp_path / "u.jsonl", [{"timestamp": 0, "tokens": [1]}]),
                       16).output_tokens is None


def test_max_tokens_on_plain_lines_is_read(tmp_path):
    """Lines whose only extra key is a number (what a fast scanner may skip) keep it."""
    path = write(tmp_path / "p.jsonl", [{"timestamp": t, "tokens": [t, 1], "max_tokens": t + 2}
                                        for t in range(5)])
    assert read_tokens(path, 16).output_tokens.tolist() == [2, 3, 4, 5, 6]


@needs_shared_trace
def test_mooncake_output_length_is_each_requests_max_tokens():
    workload = read_mooncake(SYNTHETIC)
    lengths = np.array([json.loads(line)["output_length"]
                        for line in SYNTHETIC.read_text().splitlines() if line.strip()])
    assert workload.output_tokens.tolist() == lengths.tolist()
    stream = workload.block_stream()
    capacities = [512 * 1000, 512 * 8000]
    per_request = vllm_gpu(stream, capacities, output_tokens=TRACE)
    literal = [replay_vllm(stream, c, lengths) * 512 for c in capacities]
    assert per_request.tolist() == np.array(literal).tolist()
    assert per_request.sum() < vllm_gpu(stream, capacities, output_tokens=1).sum()


@pytest.mark.parametrize("fmt, record, reason", [
    ("mooncake", {"timestamp": 1, "input_length": 3, "output_length": 0, "hash_ids": [7]},
     "output_length must be >= 1"),
    ("tokens", {"timestamp": 1, "tokens": [1], "max_tokens": 0}, "max_tokens must be >= 1"),
    ("tokens", {"timestamp": 1, "tokens": [1], "max_tokens": 1.5}, "max_tokens is not"),
    ("tokens", {"timestamp": 1, "tokens": [1], "max_tokens": 1, "output_token_ids": [1, 2]},
     "max_tokens is smaller"),
])
def test_a_bad_output_length_is_one_line_and_nothing_is_written(tmp_path, capsys, fmt, record,
                                                                 reason):
    good = {"mooncake": {"timestamp": 0, "input_length": 3, "output_length": 2,
                         "hash_ids": [5]},
            "tokens": {"timestamp": 0, "tokens": [1, 2]}}[fmt]
    path = write(tmp_path / "bad.jsonl", [good, record])
    out = tmp_path / "out"
    code = main(["trace", str(path), "--format", fmt, "--block-size", "4", "--gpu", "64",
                 "--cpu", "0", "--gpu-model", "vllm", "--output-tokens", "trace",
                 "--out", str(out), "--report", str(tmp_path / "r.html")])
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1
    assert f"{path}:2:" in err and reason in err
    assert not out.exists() and not (tmp_path / "r.html").exists()


def test_output_tokens_takes_a_number_or_trace(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["trace", "x.jsonl", "--gpu-model", "vllm", "--output-tokens", "all"])
    assert exit_info.value.code == 2
    assert "expected an integer >= 1 or 'trace'" in capsys.readouterr().err


@pytest.mark.skipif(not (SOURCES / "vllm" / "v1" / "core" / "kv_cache_manager.py").is_file(),
                    reason="vLLM 0.33.0 sources absent: run scripts/ensure_vllm_sources.sh")
def test_pool_and_oracle_equal_vllms_allocator_with_per_request_outputs():
    """Random chats (scripts/vllm_reference.py ``random_chats``): a max_tokens per prompt,
    some replies given as ids and re-sent by a later turn; every request's hit of the
    compiled pool and of the oracle equal to vLLM 0.33.0's KVCacheManager, and the reply
    hashing matters in some cases."""
    classes = reference.load_vllm(SOURCES)
    rng = random.Random(20261201)
    mattered = 0
    for _ in range(60):
        block_size = rng.randint(1, 4)
        prompts, outputs, sampled = reference.random_chats(rng, block_size)
        need = max(-(-(len(p) + o - 1) // block_size) for p, o in zip(prompts, outputs)) + 1
        capacity = rng.randint(need, need + 30) * block_size + rng.randint(0, block_size - 1)
        theirs = reference.vllm_hits(classes, prompts, capacity, block_size, outputs, sampled)
        for replay in (None, oracle.replay_vllm):
            assert reference.model_hits(prompts, capacity, block_size, outputs, "0.33.0",
                                        sampled, replay) == theirs
        assert reference.model_hits(prompts, capacity, block_size, outputs, "0.33.0") == \
            reference.vllm_hits(classes, prompts, capacity, block_size, outputs)
        mattered += reference.model_hits(prompts, capacity, block_size, outputs,
                                         "0.33.0") != theirs
    assert mattered > 0
