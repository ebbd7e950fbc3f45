"""``run --block-size`` with the engine models: sweeps equal to the registries' models, the
report's block, policy, real-engine and trace sections, stale block files, predicted TTFT per
pass; and ``bench --with``."""

import numpy as np
import polars as pl

from pipeline.catalog.model_api import CPU_MODELS, GPU_MODELS
from pipeline.workloads.stream import HEAD_FIRST, TAIL_FIRST
from pipeline.blocks.sweep import lab_block_stream, block_frames

LAB = {"docs": 10, "tokens": 5011, "passes": ["fwd", "fwd", "rev"], "block_size": 16}


def test_engine_models_in_the_sweeps_equal_the_registries():
    """block_frames with vllm / lmcache: one order each, model columns, and every row equal to
    the registries' models called directly (the blocks command's figures)."""
    caps = [30000, 48000, 48640, 56000]
    options = {"chunk_size": 256, "save_unfull_chunk": False}
    _, aggregates = block_frames(**LAB, gpu_capacities=caps, cpu_capacities=caps,
                                 cpu_sweep_gpu=21520, gpu_model="vllm", cpu_model="lmcache",
                                 gpu_options={"output_tokens": 1}, cpu_options=options)
    assert set(aggregates["gpu_model"]) == {"vllm"} and set(aggregates["cpu_model"]) == {"lmcache"}
    assert set(aggregates["gpu_order"].cast(str)) == {TAIL_FIRST}
    assert set(aggregates["cpu_order"].cast(str)) == {HEAD_FIRST}
    stream, pass_index = lab_block_stream(LAB["docs"], LAB["tokens"], LAB["passes"],
                                          LAB["block_size"])
    gpu = GPU_MODELS["vllm"](stream, caps, TAIL_FIRST)
    second = pass_index == 1
    cliff = aggregates.filter(pl.col("sweep") == "gpu_cliff", pl.col("pass_index") == 1)
    assert cliff.sort("gpu_capacity")["gpu_hit_tokens"].to_list() == \
        gpu[:, second].sum(axis=1).tolist()
    assert cliff.filter(pl.col("gpu_capacity") == 48000)["gpu_hit_tokens"].item() == 28960
    fixed = GPU_MODELS["vllm"](stream, [21520], TAIL_FIRST)[0]
    cpu = CPU_MODELS["lmcache"](stream, fixed, caps, HEAD_FIRST, **options)
    served = np.maximum(cpu - fixed, 0)[:, second].sum(axis=1)
    rows = aggregates.filter(pl.col("sweep") == "cpu_cliff", pl.col("pass_index") == 1)
    assert rows.sort("cpu_capacity")["cpu_hit_tokens"].to_list() == served.tolist()
    # LMCache on the lab: 48,640 CPU tokens in pass 2 at CPU 56000 and 48640, none below
    assert rows.filter(pl.col("cpu_capacity") == 56000)["cpu_hit_tokens"].item() == 48640
    assert rows.filter(pl.col("cpu_capacity") == 48640)["cpu_hit_tokens"].item() == 48640


# --- run --block-size and the report's groups ------------------------------------------------

import shutil  # noqa: E402

import pytest  # noqa: E402

from conftest import ROOT, folder_snapshot, run_outputs  # noqa: E402
from pipeline.cli import main  # noqa: E402

DATA = ROOT / "data" / "ttft.jsonl"
SMALL = ["--points", "6", "--grid-steps", "3", "--quiet", "--measured", str(DATA)]
REPORT_SECTIONS = ("plan-sweep-gpu_cliff", "plan-sweep-cpu_cliff", "plan-fit", "real-engine-tiers",
                   "real-engine-ttft", "blocks-gpu-orders", "blocks-cpu-tier", "engines-gpu",
                   "engines-cpu", "policies-lab")




@pytest.fixture(scope="module")
def engine_run(tmp_path_factory):
    """run --block-size 16 with the vllm and lmcache models, a trace report beside it."""
    root = tmp_path_factory.mktemp("engines")
    (root / "report").mkdir()
    (root / "report" / "trace.html").write_text("<html></html>")
    assert main(["run", *SMALL, *run_outputs(root), "--block-size", "16", "--gpu-model", "vllm",
                 "--cpu-model", "lmcache"]) == 0
    return root


def test_run_block_size_writes_the_engine_models_sweeps(engine_run):
    events = pl.read_parquet(engine_run / "events" / "blocks_events.parquet")
    assert events.height == 2 * 10 * 3 * 314                  # both orders, every block access
    aggregates = pl.read_parquet(engine_run / "events" / "blocks_aggregates.parquet")
    assert set(aggregates["gpu_model"]) == {"vllm"} and set(aggregates["cpu_model"]) == {"lmcache"}
    rows = aggregates.filter(pl.col("sweep") == "cpu_cliff", pl.col("cpu_capacity") == 56000)
    per_pass = rows.sort("pass_index").select("gpu_hit_tokens", "cpu_hit_tokens",
                                              "miss_tokens").rows()
    assert per_pass == [(0, 0, 50110), (0, 48640, 1470), (21488, 27728, 894)]   # LMCache
    cliff = aggregates.filter(pl.col("sweep") == "gpu_cliff", pl.col("pass_index") == 1,
                              pl.col("gpu_capacity") == 48000)
    assert cliff["gpu_hit_tokens"].item() == 28960                               # vLLM 0.33.0


def test_report_has_every_section_group_and_the_trace_link(engine_run):
    page = (engine_run / "report" / "index.html").read_text()
    for key in REPORT_SECTIONS:
        assert f'id="chart-{key}"' in page, key
    for heading in ("Block mode", "Cache policies", "a real engine (llama.cpp)", "Trace replay"):
        assert heading in page
    assert 'href="trace.html"' in page
    assert "vllm (output_tokens=1, vllm_version=0.33.0)" in page   # the run's models named


def test_document_mode_run_removes_stale_block_files_and_predicts_per_pass(engine_run,
                                                                           tmp_path):
    root = tmp_path / "out"
    shutil.copytree(engine_run, root)
    (root / "report" / "trace.html").unlink()
    assert main(["run", *SMALL, *run_outputs(root)]) == 0
    assert not (root / "events" / "blocks_events.parquet").exists()
    assert not (root / "events" / "blocks_aggregates.parquet").exists()
    page = (root / "report" / "index.html").read_text()
    assert all(f'id="chart-{key}"' in page for key in REPORT_SECTIONS)
    assert "trace.html" not in page
    predicted = pl.read_parquet(root / "events" / "predicted_ttft.parquet")
    second = predicted.filter(pl.col("sweep") == "gpu_cliff", pl.col("pass_index") == 1)
    below = second.filter(pl.col("gpu_capacity") == 50109).row(0, named=True)
    at = second.filter(pl.col("gpu_capacity") == 50110).row(0, named=True)
    assert below["predicted_p50_ms"] > 500 and below["predicted_mean_ms"] > 500
    assert at["predicted_p50_ms"] < 40 and at["predicted_mean_ms"] < 40


@pytest.mark.parametrize("args, names", [
    (["--gpu-model", "vllm"], "--gpu-model"),
    (["--chunk-size", "256"], "--chunk-size"),
    (["--block-size", "16", "--chunk-size", "100", "--cpu-model", "lmcache"], "--chunk-size"),
    (["--block-size", "16", "--output-tokens", "4"], "--output-tokens"),
    (["--block-size", str(2**33)], "--block-size"),
])
def test_bad_block_options_write_nothing(capsys, tmp_path, args, names):
    before = folder_snapshot(tmp_path)
    code = main(["run", *SMALL, *run_outputs(tmp_path), *args])
    err = capsys.readouterr().err
    assert code != 0 and len(err.strip().splitlines()) == 1 and names in err, err
    assert folder_snapshot(tmp_path) == before


def test_off_lab_block_run_draws_its_own_workload_and_no_lab_sections(tmp_path):
    assert main(["run", *SMALL, *run_outputs(tmp_path), "--docs", "4", "--tokens", "100",
                 "--block-size", "16", "--gpu-model", "vllm"]) == 0
    page = (tmp_path / "report" / "index.html").read_text()
    assert 'id="chart-blocks-gpu-orders"' in page and "4 documents x 100 tokens" in page
    for key in ("engines-gpu", "engines-cpu", "policies-lab"):
        assert f'id="chart-{key}"' not in page
    aggregates = pl.read_parquet(tmp_path / "events" / "blocks_aggregates.parquet")
    assert set(aggregates["gpu_model"]) == {"vllm"} and aggregates["gpu_capacity"].max() > 0


# --- bench ------------------------------------------------------------------------------------

def test_bench_help_lists_every_benchmark_group(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    text = capsys.readouterr().out
    for option in ("--with NAME[,NAME]", "--block-blocks", "--engines-capacities",
                   "--trace-repeat", "--policy-requests", "--skip-run", "--requests"):
        assert option in text
    for group in ("--with blocks", "--with engines", "--with trace", "--with policies"):
        assert group in text


def test_bench_with_runs_the_named_benchmarks_small(capsys):
    assert main(["bench", "--skip-run", "--skip-curve", "--with", "blocks,policies",
                 "--block-blocks", "2000", "--block-contexts", "20", "--block-capacities", "5",
                 "--policy-requests", "2000", "--policy-objects", "100", "--policy-points",
                 "3", "--policy-names", "lru,fifo"]) == 0
    out = capsys.readouterr().out
    assert "== --with blocks" in out and "identical per request" in out
    assert "== --with policies" in out and "\nfifo " in out
    assert "default pipeline run" not in out and "== --with trace" not in out


def test_bench_with_an_unknown_name_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["bench", "--with", "blocks,bogus"])
    assert stop.value.code == 2 and "unknown benchmark bogus" in capsys.readouterr().err


def test_block_aggregates_carry_predicted_ttft_per_pass(engine_run):
    """Each request priced by its tokens per tier (the fitted model: per-tier medians on the
    bundled file, interpolated by token share): recomputing everything costs the recompute
    median; LMCache's pass 2 reloads all but the 147-token tails."""
    aggregates = pl.read_parquet(engine_run / "events" / "blocks_aggregates.parquet")
    rows = aggregates.filter(pl.col("sweep") == "cpu_cliff", pl.col("pass_index") == 1)
    none = rows.filter(pl.col("cpu_capacity") == 0).row(0, named=True)
    full = rows.filter(pl.col("cpu_capacity") == 56000).row(0, named=True)
    assert none["predicted_p50_ms"] == none["predicted_mean_ms"] > 500
    assert 48 < full["predicted_p50_ms"] < 70
    assert full["predicted_p50_ms"] == pytest.approx(full["predicted_mean_ms"])
    assert aggregates["predicted_p50_ms"].null_count() == 0
