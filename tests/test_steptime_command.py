"""simulate with --latency (the time clock, metrics) and --gpu CAPS (curves under load)."""

import json
import re

import polars as pl
import pytest

from conftest import ROOT, cli_in_process, folder_snapshot

CHAT = str(ROOT / "data" / "simulate" / "chat.jsonl")


#: the roofline needs a model (none is assumed)
ROOF = ["--latency", "roofline", "--model", "qwen2.5-1.5b"]


def _run(*args):
    return cli_in_process("simulate", *args)


def _fit(tmp_path):
    path = tmp_path / "fit.json"
    path.write_text(json.dumps({
        "kind": "fitted-step-time", "version": 1, "engine": "vllm", "served_model": "m",
        "kv_bytes_per_token": 28672,
        "coefficients": {"fixed_ms": 5.0, "prefill_token_ms": 0.1, "context_token_ms": 0.0,
                         "decode_seq_ms": 1.0, "reload_token_ms": 0.0},
        "stderr": {}, "unidentified": [], "prompt_tokens_range": [40, 60], "source": ["x"]}))
    return str(path)


def test_one_timed_run_writes_metrics(tmp_path):
    out = tmp_path / "out"
    done = _run(CHAT, "--gpu", "64blocks", "--rate", "5", "--latency", _fit(tmp_path),
                "--out", str(out))
    assert done.returncode == 0, done.stderr
    requests = pl.read_parquet(out / "requests.parquet")
    steps = pl.read_parquet(out / "steps.parquet")
    # every step priced by the fitted line: 5 + 0.1 x prefill + 1.0 x decodes
    assert steps["duration_ms"].to_list() == pytest.approx(
        (5 + 0.1 * steps["prefill_tokens"] + steps["decode_seqs"]).to_list())
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["step_time_model"] == "fitted (fit.json: vllm, m)"
    assert metrics["ttft_ms_p50"] == pytest.approx(requests["ttft_ms"].median())
    assert metrics["vllm_prefix_cache_hit_rate"] == pytest.approx(
        requests["gpu_hit_tokens"].sum() / requests["prompt_tokens"].sum())
    assert any("outside the fitted prompt range" in note for note in metrics["notes"])
    assert "[fitted (fit.json: vllm, m)]" in done.stdout and "Prometheus" in done.stdout
    log = pl.read_parquet(out / "vllm_log.parquet")
    assert log["time_s"][0] == 10.0


def test_slo_gives_goodput_and_needs_the_time_clock(tmp_path):
    done = _run(CHAT, "--gpu", "64blocks", "--concurrency", "2", "--latency", "roofline",
                "--model", "qwen2.5-0.5b", "--slo-ttft-ms", "1e9", "--slo-tpot-ms", "1e9",
                "--out", str(tmp_path / "o"))
    assert done.returncode == 0, done.stderr
    metrics = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert metrics["goodput_fraction"] == 1.0 and metrics["slo_tpot_ms"] == 1e9
    requests = pl.read_parquet(tmp_path / "o" / "requests.parquet")
    assert {"tpot_ms", "itl_max_ms"} <= set(requests.columns)
    assert "goodput: 6 of 6 requests (100.0 %)" in done.stdout
    done = _run(CHAT, "--gpu", "64blocks", "--concurrency", "2", "--slo-tpot-ms", "5",
                "--out", str(tmp_path / "steps"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "--slo-tpot-ms" in done.stderr and not (tmp_path / "steps").exists()


def test_roofline_run_says_roofline(tmp_path):
    done = _run(CHAT, "--gpu", "64blocks", "--concurrency", "2", "--latency", "roofline",
                "--model", "qwen2.5-0.5b", "--gpu-type", "L4", "--out", str(tmp_path / "o"))
    assert done.returncode == 0, done.stderr
    metrics = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert metrics["step_time_model"].startswith("roofline (L4, Qwen2.5-0.5B")
    assert "not a measurement" in metrics["provenance"]
    assert done.stdout.count("[roofline (L4, Qwen2.5-0.5B, bf16 weights, MFU 0.703, MBU 0.738)]") == 3  # + TPOT


def test_curves_write_parquet_and_report(tmp_path):
    out = tmp_path / "c"
    done = _run("--pattern", "long-doc-qa", "--num-documents", "4", "--document-length", "200",
                *ROOF, "--gpu", "256,4096", "--gpu-steps", "20",
                "--concurrency", "1,4", "--out", str(out), "--report", str(out / "c.html"))
    assert done.returncode == 0, done.stderr
    curves = pl.read_parquet(out / "curves.parquet")
    assert curves.group_by("load").len().sort("load").rows() == [
        ("concurrency 1", 20), ("concurrency 1 (one pass)", 20), ("concurrency 4", 20)]
    upper = curves.filter(pl.col("curve") == "upper").sort("gpu_capacity")
    alone = curves.filter(pl.col("load") == "concurrency 1").sort("gpu_capacity")
    assert alone["hit_ratio"].to_list() == pytest.approx(upper["hit_ratio"].to_list())
    assert alone["ttft_ms_p90"].to_list() == pytest.approx(upper["ttft_ms_p90"].to_list())
    page = (out / "c.html").read_text()
    assert "curves under load" in page and "roofline (H100, Qwen2.5-1.5B" in page
    assert '<section class="summary">' in page and "H100 SXM: 989.4 TFLOP/s" in page
    loaded = curves.filter(pl.col("curve") != "upper")
    assert (loaded["request_rate"] > 0).all()
    # one output token per request: no time per output token, and the page says so
    assert loaded["tpot_ms_p50"].null_count() == loaded.height
    assert "TPOT</dt><dd>not modelled" in page


def test_curve_lines_word_long_times_in_seconds(tmp_path):
    # 3 s of overhead per step: TTFTs of seconds, printed as seconds, not "6,000 ms"
    done = _run("--pattern", "long-doc-qa", "--num-documents", "4", "--document-length", "200",
                *ROOF, "--step-overhead-ms", "3000", "--gpu", "1024,2048", "--rate", "1000",
                "--out", str(tmp_path / "o"))
    assert done.returncode == 0, done.stderr
    assert re.search(r"rate 1000/s: .* TTFT p90 \d\.\d\d s", done.stdout), done.stdout
    assert not re.search(r"\d,\d{3} ms", done.stdout), done.stdout


@pytest.mark.parametrize("options, message", [
    (["--gpu", "64blocks", "--clock", "time"], "--clock time needs a step-time model"),
    (["--gpu", "64blocks", *ROOF, "--clock", "steps"], "--clock time"),
    (["--gpu", "100,200", "--concurrency", "1,2"], "curves under load need --latency"),
    ([*ROOF, "--concurrency", "1,2"], "give --gpu SIZE"),
    ([*ROOF, "--concurrency", "2"], "--gpu SIZE is required"),
    ([*ROOF, "--gpu", "800", "--speed", "1,2", "--rate", "1,2"],
     "--rate: not allowed with argument --speed"),
    (["--concurrency", "1.5", "--gpu", "9blocks"], "--concurrency: a whole number"),
])
def test_usage_errors_exit_2(tmp_path, options, message):
    before = folder_snapshot(tmp_path)
    done = _run(CHAT, "--out", str(tmp_path / "o"), *options)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert folder_snapshot(tmp_path) == before


@pytest.mark.parametrize("options, message", [
    (["--gpu", "64blocks", "--rate", "2", "--latency", "nope.json"],
     "--latency: nope.json: cannot read"),
    (["--gpu", "64blocks", "--rate", "2", *ROOF, "--gpu-type", "X"],
     "--gpu-type: unknown GPU"),
    ([*ROOF, "--gpu", "32,800", "--concurrency", "1,2"],
     "--gpu 32 tokens (2 blocks of 16)"),
    (["--gpu", "64blocks", *ROOF], "arrivals are in steps"),
])
def test_bad_input_is_one_line_and_nothing_is_written(tmp_path, options, message):
    before = folder_snapshot(tmp_path)
    done = _run(CHAT, "--out", str(tmp_path / "o"), *options)
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    assert folder_snapshot(tmp_path) == before
