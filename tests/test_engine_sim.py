"""pipeline.engine: concurrency 1 equals today's ``vllm`` and ``lmcache`` models; properties
of every run; the simulate command's outputs and its one-line errors."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT, folder_snapshot
from pipeline.workloads.stream import block_stream
from pipeline.cli import main
from pipeline.engine.config import SchedulerConfig
from pipeline.engine.cpu_tier import LMCacheTier
from pipeline.engine.loop import simulate
from pipeline.engine.request import SimRequest
from pipeline.components.lmcache import lmcache_chunks, loadable_prefix
from pipeline.components.vllm_gpu import replay_vllm
from pipeline.workloads.tokens import token_blocks
from oracles.lmcache_cpu import replay_lmcache


@st.composite
def prompt_sets(draw, block_size):
    """Prompts from a small trie of block contents (shared prefixes, partial tails)."""
    prompts = []
    for _ in range(draw(st.integers(1, 12))):
        path = draw(st.lists(st.integers(0, 2), min_size=1, max_size=5))
        tokens = [hash(tuple(path[:i + 1])) % 997 * 100 + t
                  for i in range(len(path)) for t in range(block_size)]
        prompts.append(tokens[:len(tokens) - draw(st.integers(0, block_size - 1))])
    return prompts


def _stream(prompts, block_size):
    lengths = np.array([len(p) for p in prompts])
    tokens = np.concatenate([np.asarray(p, np.int64) for p in prompts])
    return block_stream(token_blocks(tokens, lengths, block_size), block_size)


@given(st.data())
def test_concurrency_one_equals_the_vllm_and_lmcache_models(data):
    block_size = data.draw(st.sampled_from([1, 2, 4, 16]))
    prompts = data.draw(prompt_sets(block_size))
    outputs = data.draw(st.lists(st.integers(1, 9), min_size=len(prompts),
                                 max_size=len(prompts)))
    need = max(-(-(len(p) + o - 1) // block_size) for p, o in zip(prompts, outputs)) + 1
    blocks = need + data.draw(st.integers(0, 30))
    chunk = block_size * data.draw(st.sampled_from([1, 2, 4]))
    cpu = data.draw(st.sampled_from([0, chunk, 4 * chunk, 10**6]))
    asynchronous = data.draw(st.booleans())
    requests = [SimRequest(i, p, o) for i, (p, o) in enumerate(zip(prompts, outputs))]
    config = SchedulerConfig(num_gpu_blocks=blocks, max_model_len=10**6, block_size=block_size,
                             async_scheduling=asynchronous)
    tier = LMCacheTier(cpu, block_size, chunk) if cpu else None
    result = simulate(requests, config, cpu_tier=tier, concurrency=1).requests
    stream = _stream(prompts, block_size)
    gpu = replay_vllm(stream, blocks * block_size, np.array(outputs)) * block_size
    assert result["gpu_hit_tokens"].to_list() == gpu.tolist()
    assert result["output_tokens"].to_list() == outputs
    if cpu:
        chunks = lmcache_chunks(stream, chunk)
        prefix = loadable_prefix(replay_lmcache(chunks, cpu), chunks.prompt_tokens)
        assert result["cpu_hit_tokens"].to_list() == np.maximum(prefix - gpu, 0).tolist()


@st.composite
def loaded_runs(draw):
    size = draw(st.sampled_from([1, 4, 16]))
    requests = []
    step = 0
    for i in range(draw(st.integers(1, 15))):
        step += draw(st.sampled_from([0, 1, 3]))
        prompt = draw(st.lists(st.integers(0, 5), min_size=1, max_size=60))
        requests.append(SimRequest(i, prompt, draw(st.integers(1, 20)), arrival_step=step))
    need = max(-(-(len(r.prompt_token_ids) + r.max_tokens - 1) // size) for r in requests)
    config = SchedulerConfig(num_gpu_blocks=need + 1 + draw(st.integers(0, 40)),
                             max_model_len=100, block_size=size,
                             max_num_seqs=draw(st.integers(1, 8)),
                             max_num_batched_tokens=draw(st.sampled_from([4, 16, 64, 8192])),
                             long_prefill_token_threshold=draw(st.sampled_from([0, 7])),
                             async_scheduling=draw(st.booleans()))
    return requests, config


@given(loaded_runs())
def test_every_run_finishes_within_the_limits(run):
    """Against the simple model of a request's life: it is scheduled no earlier than it
    arrives, samples max_tokens tokens, first token no earlier than its first schedule; a
    step never exceeds the token budget, max_num_seqs or the pool."""
    requests, config = run
    result = simulate(requests, config)
    frame, steps = result.requests, result.steps
    assert frame["output_tokens"].to_list() == [r.max_tokens for r in requests]
    assert (frame["first_scheduled_step"] >= frame["arrival_step"]).all()
    assert (frame["first_token_step"] >= frame["first_scheduled_step"]).all()
    assert (frame["finish_step"] >= frame["first_token_step"]).all()
    assert (frame["finish_step"] - frame["first_token_step"]
            >= frame["output_tokens"] - 1).all()
    assert (steps["prefill_tokens"] + steps["decode_seqs"]
            <= config.max_num_batched_tokens).all()
    assert (steps["num_running"] <= config.max_num_seqs).all()
    assert (steps["free_blocks"].is_between(0, config.num_gpu_blocks - 1)).all()
    assert steps["step"].is_unique().all()
    hits = frame["gpu_hit_tokens"] % config.block_size
    assert (hits == 0).all() and (frame["gpu_hit_tokens"] < frame["prompt_tokens"]).all()


def _run(*args):
    """``python -m pipeline simulate ARGS`` in this process: (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(["simulate", *args], prog="python -m pipeline")
        except SystemExit as exc:
            status = exc.code
    return subprocess.CompletedProcess(args, status, out.getvalue(), err.getvalue())


def _write(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_simulate_writes_the_step_interface(tmp_path):
    """A reply of 2 output tokens re-sent by the next turn is hit (a pool of 48 tokens:
    vLLM hits [0, 16])."""
    trace = _write(tmp_path / "t.jsonl", [
        {"arrival_step": 0, "prompt_token_ids": list(range(1, 16)), "max_tokens": 2,
         "output_token_ids": [900001, 900002]},
        {"arrival_step": 4, "prompt_token_ids": list(range(1, 16)) + [900001, 900002],
         "max_tokens": 1}])
    done = _run(trace, "--format", "tokens", "--gpu", "3blocks", "--out",
                str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    requests = pl.read_parquet(tmp_path / "out" / "requests.parquet")
    assert requests.select("request", "first_scheduled_step", "first_token_step",
                           "finish_step", "gpu_hit_tokens", "preemptions").rows() == [
        (0, 0, 0, 1, 0, 0), (1, 4, 4, 4, 16, 0)]
    steps = pl.read_parquet(tmp_path / "out" / "steps.parquet")
    assert steps.select("step", "prefill_tokens", "decode_seqs", "num_running",
                        "num_waiting", "free_blocks").rows() == [
        (0, 15, 0, 1, 0, 1), (1, 0, 1, 1, 0, 1), (4, 1, 0, 1, 0, 0)]


@pytest.mark.parametrize("rows, options, message", [
    ([{"arrival_step": 3, "prompt_token_ids": [1], "max_tokens": 1},
      {"arrival_step": 1, "prompt_token_ids": [1], "max_tokens": 1}], [],
     "t.jsonl:2: arrival_step goes backwards"),
    ([{"arrival_step": 0, "prompt_token_ids": [1], "max_tokens": 0}], [],
     "t.jsonl:1: max_tokens must be >= 1, got 0"),
    ([{"arrival_step": 0, "prompt_token_ids": [1, 2, 3], "max_tokens": 1}],
     ["--max-model-len", "2"], "t.jsonl:1: prompt of 3 tokens is longer than --max-model-len 2"),
    ([{"arrival_step": 0, "prompt_token_ids": list(range(40)), "max_tokens": 1}],
     ["--block-size", "4"], "t.jsonl:1: the request needs 10 blocks of 4 tokens, more than "
                            "--gpu 3blocks"),
])
def test_bad_input_is_one_line_and_nothing_is_written(tmp_path, rows, options, message):
    trace = _write(tmp_path / "t.jsonl", rows)
    out = tmp_path / "out"
    before = folder_snapshot(tmp_path)
    done = _run(trace, "--gpu", "3blocks", "--out", str(out), *options)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    assert folder_snapshot(tmp_path) == before


def test_a_pool_of_max_model_len_minus_one_tokens_is_enough(tmp_path):
    """max_model_len 13 caps 8 prompt + 10 output tokens at 5 outputs; the KV never holds
    the last sampled token, so 12 tokens = 3 blocks of 4 (vLLM's scheduler runs it in
    num_gpu_blocks 4: finish at step 4)."""
    trace = _write(tmp_path / "t.jsonl", [
        {"arrival_step": 0, "prompt_token_ids": list(range(1, 9)), "max_tokens": 10}])
    done = _run(trace, "--block-size", "4", "--gpu", "4blocks", "--max-model-len", "13",
                "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    frame = pl.read_parquet(tmp_path / "out" / "requests.parquet")
    assert frame.select("finish_step", "output_tokens", "preemptions").rows() == [(4, 5, 0)]
    refused = _run(trace, "--block-size", "4", "--gpu", "3blocks", "--max-model-len",
                   "13", "--out", str(tmp_path / "out2"))
    assert refused.returncode == 1 and "needs 3 blocks of 4 tokens" in refused.stderr


def test_mooncake_and_patterns_run(tmp_path):
    trace = _write(tmp_path / "m.jsonl", [
        {"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]},
        {"timestamp": 5, "input_length": 700, "output_length": 2, "hash_ids": [1, 3]}])
    done = _run(trace, "--format", "mooncake", "--gpu", "200blocks", "--concurrency", "1",
                "--out", str(tmp_path / "m"))
    assert done.returncode == 0, done.stderr
    frame = pl.read_parquet(tmp_path / "m" / "requests.parquet")
    assert frame["gpu_hit_tokens"].to_list() == [0, 512]
    assert frame["output_tokens"].to_list() == [3, 2]
    untimed = _run(trace, "--format", "mooncake", "--gpu", "200blocks", "--out",
                   str(tmp_path / "x"))
    assert untimed.returncode == 1 and "give --latency" in untimed.stderr
    assert "--rate or --concurrency" in untimed.stderr
    done = _run("--pattern", "long-doc-qa", "--num-documents", "3", "--document-length",
                "100", "--gpu", "100blocks", "--rate", "0.5", "--out", str(tmp_path / "p"))
    assert done.returncode == 0, done.stderr
    frame = pl.read_parquet(tmp_path / "p" / "requests.parquet")
    assert frame.height == 9 and frame["gpu_hit_tokens"].sum() > 0


@given(st.data())
def test_the_vllm_model_takes_per_request_output_lengths(data):
    """The fast ``vllm`` GPU model and its literal replay agree with one output length per
    request (the replay equals the engine at concurrency 1, above)."""
    from pipeline.onepass.vllm_fast import vllm_gpu
    from pipeline.components.vllm_gpu import replay_gpu
    block_size = data.draw(st.sampled_from([1, 2, 4]))
    prompts = data.draw(prompt_sets(block_size))
    outputs = np.array(data.draw(st.lists(st.integers(1, 9), min_size=len(prompts),
                                          max_size=len(prompts))))
    stream = _stream(prompts, block_size)
    capacities = [block_size * c for c in range(0, 40, 3)]
    assert np.array_equal(vllm_gpu(stream, capacities, output_tokens=outputs),
                          replay_gpu(stream, capacities, output_tokens=outputs))


def test_the_time_clock_prices_each_batch():
    requests = [SimRequest(i, list(range(10 * i, 10 * i + 20)), 3, arrival_s=0.002 * i)
                for i in range(4)]
    config = SchedulerConfig(num_gpu_blocks=40, max_model_len=64, block_size=4)
    result = simulate(requests, config, clock="time",
                      step_ms=lambda record: 1.0 + 0.01 * record.prefill_tokens)
    frame, steps = result.requests, result.steps
    assert (steps["duration_ms"] == 1.0 + 0.01 * steps["prefill_tokens"]).all()
    assert np.allclose(steps["start_ms"][1:].to_numpy(),
                       (steps["start_ms"] + steps["duration_ms"])[:-1].to_numpy())
    assert frame["arrival_ms"].to_list() == pytest.approx([0.0, 2.0, 4.0, 6.0])
    assert (frame["ttft_ms"] == frame["first_token_ms"] - frame["arrival_ms"]).all()
    assert (frame["queue_ms"] >= 0).all() and (frame["e2e_ms"] >= frame["ttft_ms"]).all()


def test_a_router_sees_what_the_next_admission_hits():
    """cached_prefix_blocks(request_block_hashes(r)) = the GPU hit r gets when admitted."""
    from pipeline.engine.core import EngineSim
    engine = EngineSim(SchedulerConfig(num_gpu_blocks=30, max_model_len=100, block_size=4))
    first = SimRequest(0, list(range(14)), 3, output_token_ids=[70, 71, 72])
    engine.add_request(first)
    while engine.has_unfinished():
        engine.step()
    turn = SimRequest(1, list(range(14)) + [70, 71, 72, 9], 1)
    seen = engine.cached_prefix_blocks(engine.request_block_hashes(turn))
    assert seen == 4 and engine.free_blocks == 29 and engine.outstanding() == 0
    engine.add_request(turn)
    engine.step()
    assert engine.result(1).gpu_hit == seen * 4


@given(loaded_runs())
def test_advance_equals_stepping_one_by_one(run):
    """A DecodeRun leaves the engine as its steps one by one would, with the same records."""
    from pipeline.engine.core import EngineSim
    requests, config = run
    one, fast = EngineSim(config), EngineSim(config)
    for request in requests:
        one.add_request(request)
        fast.add_request(request)
    mine, theirs = [], []
    while fast.has_work():
        batch = fast.advance(7)
        if batch is not None:
            mine.extend(batch.records())
        else:
            record = fast.step()
            mine.extend([record] if record else [])
    while one.has_work():
        record = one.step()
        theirs.extend([record] if record else [])
    assert [(r.step, list(r.scheduled), r.decode_seqs, r.context_tokens, r.free_blocks,
             r.num_waiting) for r in mine] == \
        [(r.step, list(r.scheduled), r.decode_seqs, r.context_tokens, r.free_blocks,
          r.num_waiting) for r in theirs]
    assert [(s.first_token_step, s.finish_step, s.gpu_hit) for s in map(fast.result, range(
        len(requests)))] == [(s.first_token_step, s.finish_step, s.gpu_hit)
                             for s in map(one.result, range(len(requests)))]


@settings(max_examples=30)
@given(loaded_runs(), st.sampled_from([None, 7.0, 40.0]))
def test_run_until_equals_the_time_clock(run, pieces):
    """Requests all queued at 0 ms, run with ``run_until`` (in one call, or in pieces of
    ``pieces`` ms; compiled, or a Python step_ms): the steps, times and outputs of the time
    clock's run."""
    from pipeline.engine.core import EngineSim
    from pipeline.steptime.fitted import Linear
    requests, config = run
    for request in requests:
        request.arrival_s = 0.0
    model = Linear({"fixed_ms": 1.0, "prefill_token_ms": 0.25, "context_token_ms": 0.01,
                    "decode_seq_ms": 0.5, "reload_token_ms": 0.0, "attention_pair_ms": 1e-3})
    expected = simulate(requests, config, clock="time", step_ms=model.step_ms)
    for step_ms in (model.step_ms, lambda record: model.step_ms(record)):
        engine = EngineSim(config)
        for request in requests:
            engine.add_request(request)
        now, parts, ends = 0.0, [], {}
        while engine.has_work():
            until = np.inf if pieces is None else now + pieces
            block = engine.run_until(until, now, step_ms)
            parts.append(block)
            ends.update(zip(block.steps[:, 0].tolist(), (block.start_ms + block.duration_ms)))
            now = block.now_ms
        steps = np.concatenate([b.steps for b in parts])
        assert steps.tolist() == expected.steps.select(
            "step", "prefill_tokens", "decode_seqs", "context_tokens", "reload_tokens",
            "num_running", "num_waiting", "free_blocks").to_numpy().tolist()
        assert np.concatenate([b.duration_ms for b in parts]).tolist() == \
            expected.steps["duration_ms"].to_list()
        events = np.concatenate([b.events for b in parts])
        first = {i: ends[s] for s, kind, i in events.tolist() if kind == 0}
        done = {i: ends[s] for s, kind, i in events.tolist() if kind == 1}
        frame = expected.requests
        assert [first[i] for i in frame["request"]] == frame["first_token_ms"].to_list()
        assert [done[i] for i in frame["request"]] == frame["finish_ms"].to_list()


def test_arrival_patterns():
    from pipeline.engine.workload import with_arrivals
    make = lambda: [SimRequest(i, [1, 2], 1, arrival_step=4 * i) for i in range(50)]  # noqa: E731
    slow = make()
    with_arrivals(slow, "steps", speed=2.0)
    assert [r.arrival_step for r in slow] == [2 * i for i in range(50)]
    first, again = make(), make()
    with_arrivals(first, "steps", rate=0.5, seed=3)
    with_arrivals(again, "steps", rate=0.5, seed=3)
    steps = [r.arrival_step for r in first]
    assert steps == [r.arrival_step for r in again] and steps[0] == 0
    assert steps == sorted(steps) and 60 < steps[-1] < 150       # about 2 steps apart
    timed = make()
    with_arrivals(timed, "time", rate=100.0, seed=1)
    assert 0.2 < timed[-1].arrival_s < 1.0                        # about 10 ms apart


@given(st.lists(st.tuples(st.lists(st.integers(0, 4), min_size=1, max_size=40),
                          st.integers(1, 9)), min_size=1, max_size=8),
       st.sampled_from([1, 3, 16]))
def test_keys_in_one_pass_equal_keys_one_by_one(prompts, block_size):
    from pipeline.engine.hashing import block_keys, bulk_request_keys, request_keys
    from pipeline.engine.request import sequence_tokens
    requests = [SimRequest(i, p, m) for i, (p, m) in enumerate(prompts)]
    bulk = bulk_request_keys(requests, block_size)
    for request, keys in zip(requests, bulk):
        assert keys == request_keys(request, block_size)
        assert keys == block_keys(sequence_tokens(request), block_size)
        prompt = block_keys(np.asarray(request.prompt_token_ids), block_size)
        assert keys[:len(prompt)] == prompt                 # a prefix keeps its keys


@pytest.mark.parametrize("asynchronous", [False, True])
def test_concurrency_one_equals_the_trace_commands_vllm_model(tmp_path, asynchronous):
    """``simulate --concurrency 1`` and ``trace --gpu-model vllm`` on one Mooncake file
    (one output token each, as the trace command's --output-tokens default): equal hits."""
    import random
    rng = random.Random(7)
    rows = []
    for i in range(40):
        count = rng.randint(1, 4)
        ids = [rng.randint(0, 3) * 100 + j for j in range(count)]
        if rng.random() < 0.5:
            ids[-1] = 1000 + i
        rows.append({"timestamp": i, "input_length": (count - 1) * 512 + rng.randint(1, 512),
                     "output_length": 1, "hash_ids": ids})
    trace = _write(tmp_path / "m.jsonl", rows)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["trace", trace, "--format", "mooncake", "--gpu", "3072", "--cpu", "0",
                       "--gpu-model", "vllm", "--no-report", "--out", str(tmp_path / "t")])
    assert status == 0, err.getvalue()
    done = _run(trace, "--format", "mooncake", "--block-size", "512", "--gpu", "6blocks",
                "--concurrency", "1", "--out", str(tmp_path / "s"),
                *(["--async-scheduling"] if asynchronous else []))
    assert done.returncode == 0, done.stderr
    theirs = pl.read_parquet(tmp_path / "t" / "requests.parquet")["gpu_hit_tokens"]
    ours = pl.read_parquet(tmp_path / "s" / "requests.parquet")["gpu_hit_tokens"]
    assert ours.to_list() == theirs.cast(pl.Int64).to_list() and ours.sum() > 0
