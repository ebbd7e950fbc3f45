"""``trace`` with every registered model: engine options shared with ``blocks``, the same
per-request tokens as the registries, the models named in the outputs, bad combinations."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from conftest import SYNTHETIC_TRACE, needs_shared_trace
from hypothesis import given
from hypothesis import strategies as st

from pipeline.workloads.stream_limits import model_capacities, storable_tokens
from pipeline.catalog.model_api import CPU_MODELS, GPU_MODELS, request_result
from pipeline.workloads.stream import HEAD_FIRST, TAIL_FIRST, block_stream
from pipeline.cli import main
from pipeline.catalog.model_options import default_chunk_size
from pipeline.workloads.blocks import document_blocks
from pipeline.workloads.mooncake import read_mooncake

SYNTHETIC = SYNTHETIC_TRACE
needs_trace = needs_shared_trace
ZIPF = ["--pattern", "zipf", "--num-documents", "5", "--document-length", "90",
        "--num-requests", "30", "--question-length", "20", "--system-prompt-length", "40",
        "--block-size", "16", "--no-report"]


def trace_json(capsys, *argv) -> dict:
    assert main(["trace", *map(str, argv), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def direct(stream, gpu, cpu, gpu_model, cpu_model, gpu_options, cpu_options) -> pl.DataFrame:
    """The registries called directly: one frame of (point, request, tokens by tier)."""
    frames = []
    gpu_hits = GPU_MODELS[gpu_model](stream, gpu, TAIL_FIRST, **gpu_options)
    for g in range(len(gpu)):
        cpu_prefix = CPU_MODELS[cpu_model](stream, gpu_hits[g], cpu, HEAD_FIRST, **cpu_options)
        for c in range(len(cpu)):
            frames.append(request_result(stream, gpu_hits[g], cpu_prefix[c]).select(
                pl.lit(g * len(cpu) + c).alias("point"), "request", "gpu_hit_tokens",
                "cpu_hit_tokens", "miss_tokens"))
    return pl.concat(frames).cast(pl.Int64)


@needs_trace
@pytest.mark.parametrize("extra, gpu_options, cpu_options", [
    ([], {"output_tokens": "trace", "vllm_version": "0.33.0"},      # the trace's lengths
     {"chunk_size": 512, "save_unfull_chunk": False}),
    (["--output-tokens", "1"], {"output_tokens": 1, "vllm_version": "0.33.0"},
     {"chunk_size": 512, "save_unfull_chunk": False}),
    (["--output-tokens", "700", "--vllm-version", "0.20.0", "--chunk-size", "1024",
      "--save-unfull-chunk"], {"output_tokens": 700, "vllm_version": "0.20.0"},
     {"chunk_size": 1024, "save_unfull_chunk": True}),
])
def test_shared_trace_engine_models_equal_the_registries(tmp_path, capsys, extra, gpu_options,
                                                         cpu_options):
    gpu, cpu = [0, 200_000, 3_000_000], [0, 1_000_000, 20_000_000]
    summary = trace_json(capsys, SYNTHETIC, "--gpu-model", "vllm", "--cpu-model", "lmcache",
                         "--gpu", ",".join(map(str, gpu)), "--cpu", ",".join(map(str, cpu)),
                         "--out", tmp_path, "--no-report", *extra)
    assert (summary["gpu_options"], summary["cpu_options"]) == (gpu_options, cpu_options)
    stream = read_mooncake(SYNTHETIC, 512).block_stream()
    expected = direct(stream, gpu, cpu, "vllm", "lmcache", gpu_options, cpu_options)
    got = pl.read_parquet(tmp_path / "requests.parquet")
    assert got.select(expected.columns).cast(pl.Int64).equals(expected)
    assert expected["cpu_hit_tokens"].sum() > 0 and expected["gpu_hit_tokens"].sum() > 0
    assert set(got["gpu_model"].cast(pl.String)) == {"vllm"}
    assert set(got["cpu_model"].cast(pl.String)) == {"lmcache"}
    points = pl.read_parquet(tmp_path / "points.parquet")
    assert points["gpu_model"].cast(pl.String).to_list() == ["vllm"] * 9
    assert [json.loads(o) for o in points["cpu_options"]] == [cpu_options] * 9
    totals = expected.group_by("point").agg(pl.col("gpu_hit_tokens", "cpu_hit_tokens").sum())
    assert totals.sort("point")["cpu_hit_tokens"].to_list() == \
        [p["cpu_tokens"] for p in summary["points"]]


@needs_trace
def test_engine_models_run_and_the_printout_says_which_ran(tmp_path, capsys):
    assert main(["trace", str(SYNTHETIC), "--gpu-model", "vllm", "--cpu-model", "lmcache",
                 "--gpu", "200000", "--cpu", "1000000", "--no-report", "--out",
                 str(tmp_path / "tr")]) == 0
    out = capsys.readouterr().out
    assert "GPU tail-first (vllm: output_tokens=trace, vllm_version=0.33.0), CPU head-first " \
           "(lmcache: chunk_size=512, save_unfull_chunk=False), capacities in tokens:" in out
    assert "the block-lru model: GPU curve exact from" in out


TWINS = {"block-lru": "block-lru-replay", "vllm": "vllm-replay", "lmcache": "lmcache-replay",
         "lru": "block-lru"}           # fast engine -> its literal replay (lru: the block model)
PAIRS = sorted(   # every registered model, arc and s3fifo included
    {(gpu, "block-lru") for gpu in GPU_MODELS} | {("block-lru", cpu) for cpu in CPU_MODELS}
    | {("vllm", "lmcache"), ("vllm-replay", "lmcache-replay")})


@pytest.mark.parametrize("gpu_model, cpu_model", PAIRS)
def test_every_model_runs_through_trace(tmp_path, capsys, gpu_model, cpu_model):
    argv = [*ZIPF, "--gpu", "0,160,480", "--cpu", "0,256,1000", "--out", tmp_path]
    summary = trace_json(capsys, *argv, "--gpu-model", gpu_model, "--cpu-model", cpu_model)
    assert (summary["gpu_model"], summary["cpu_model"]) == (gpu_model, cpu_model)
    points = pl.read_parquet(tmp_path / "points.parquet")
    assert set(points["gpu_model"].cast(pl.String)) == {gpu_model}
    assert set(points["cpu_model"].cast(pl.String)) == {cpu_model}
    if gpu_model in TWINS or cpu_model in TWINS:       # the twin gives the same tokens
        twin = trace_json(capsys, *argv, "--gpu-model", TWINS.get(gpu_model, gpu_model),
                          "--cpu-model", TWINS.get(cpu_model, cpu_model))
        assert twin["points"] == summary["points"]


@pytest.mark.parametrize("block_size, chunk", [(1, 256), (16, 256), (100, 300), (256, 256),
                                               (300, 300), (512, 512), (4096, 4096)])
def test_chunk_size_default_is_the_first_multiple_of_the_block_from_256(block_size, chunk):
    assert default_chunk_size(block_size) == chunk


def test_blocks_takes_the_same_chunk_default(capsys):
    def passes(*argv):
        assert main(["blocks", "--cpu-model", "lmcache", "--block-size", "512", "--cpu",
                     "56000", *argv]) == 0
        return json.loads(capsys.readouterr().out)["passes"]

    assert passes() == passes("--chunk-size", "512")


@pytest.mark.parametrize("argv, names", [
    (["--gpu-model", "vllm", "--gpu-order", "head-first"], "--gpu-order"),
    (["--cpu-model", "lmcache-replay", "--cpu-order", "tail-first"], "--cpu-order"),
    (["--cpu-model", "lmcache", "--chunk-size", "24"], "--chunk-size"),
    (["--cpu-model", "block-lru", "--chunk-size", "32"], "--chunk-size"),
    (["--gpu-model", "block-lru", "--output-tokens", "5"], "--output-tokens"),
    (["--gpu-order", "head-first"], "--gpu-order"),     # the default vllm is tail-first
    (["--cpu-model", "block-lru", "--save-unfull-chunk"], "--save-unfull-chunk"),
    (["--gpu-model", "block-lru-replay", "--vllm-version", "0.20.0"], "--vllm-version"),
])
def test_bad_model_combinations_are_one_line_and_write_nothing(tmp_path, capsys, argv, names):
    """Usage errors: one line, exit 2, nothing written."""
    out, report = tmp_path / "out", tmp_path / "r.html"
    try:
        status = main(["trace", *ZIPF[:-1], *argv, "--out", str(out), "--report", str(report)])
    except SystemExit as exit_:           # argparse's own check (--vllm-version)
        status = exit_.code
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and names in err and "Traceback" not in err
    assert not out.exists() and not report.exists()


@given(st.lists(st.integers(0, 4), min_size=1, max_size=12), st.integers(1, 60),
       st.sampled_from([1, 4, 16]), st.integers(1, 40), st.integers(1, 3))
def test_clipped_capacities_give_the_same_answer(docs, tokens, block_size, output, multiple):
    """Every registered model at a capacity above ``storable_tokens`` = at
    ``storable_tokens``: the clip that keeps the literal replays from allocating huge pools
    changes no answer."""
    stream = block_stream(document_blocks(docs, tokens, block_size), block_size)
    top = storable_tokens(stream, output)
    huge = [top, top * multiple + 7, 2 ** 62]
    assert model_capacities(stream, huge, output) == [top, top, top]
    chunk = default_chunk_size(block_size)
    gpu_runs = {name: {} for name in GPU_MODELS}
    gpu_runs.update({"vllm": {"output_tokens": output}, "vllm-replay": {"output_tokens": output}})
    for name, options in gpu_runs.items():
        hits = GPU_MODELS[name](stream, [top, top * multiple + 7], TAIL_FIRST, **options)
        assert np.array_equal(hits[0], hits[1])
    gpu = np.zeros(stream.requests, np.int64)
    cpu_runs = {name: {} for name in CPU_MODELS}
    cpu_runs.update({"lmcache": {"chunk_size": chunk}, "lmcache-replay": {"chunk_size": chunk}})
    for name, options in cpu_runs.items():
        hits = CPU_MODELS[name](stream, gpu, [top, top * multiple + 7], HEAD_FIRST, **options)
        assert np.array_equal(hits[0], hits[1])
