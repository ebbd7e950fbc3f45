"""``plan`` prints TTFT only where its model was measured (that KV size, those prompt
lengths), says why otherwise and answers hit-ratio targets only; its "at least" sizes are
rounded up in every unit; engine models take the chunk size on the trace's block grid."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, strategies as st

from pipeline.cli import main
from pipeline.sizes.units import size_up
from pipeline.catalog.model_options import default_chunk_size

MOONCAKE = [
    '{"timestamp": 0, "input_length": 1100, "output_length": 1, "hash_ids": [1, 2, 3]}',
    '{"timestamp": 1, "input_length": 600, "output_length": 1, "hash_ids": [4, 5]}',
    '{"timestamp": 2, "input_length": 1100, "output_length": 1, "hash_ids": [1, 2, 3]}',
    '{"timestamp": 3, "input_length": 1600, "output_length": 1, "hash_ids": [4, 5, 6, 7]}',
]


def plan_json(capsys, *argv: str) -> dict:
    assert main(["plan", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def refused(capsys, *argv: str) -> str:
    assert main(["plan", *argv]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def test_the_labs_plan_keeps_its_ttft(capsys):
    out = plan_json(capsys, "--target-ttft-ms", "100")
    assert "ttft_withheld" not in out
    assert all(row["p50_ms"] is not None for row in out["figures"])


@pytest.mark.parametrize("argv, reason", [
    (["--model", "llama-3.1-8b"], "measured with 28,672 KV bytes per token (the lab's model, "
                                  "Qwen2.5-1.5B), not Llama-3.1-8B's 131,072"),
    (["--docs", "25", "--tokens", "8000"], "covers prompts of 5,011 tokens, this workload's "
                                           "are 8,000 tokens"),
    (["--kv-bytes-per-token", "1000"], "not custom's 1,000"),
])
def test_ttft_outside_the_measurement_is_withheld(capsys, argv, reason):
    err = refused(capsys, "--target-ttft-ms", "100", *argv)
    assert "--target-ttft-ms: TTFT withheld: " in err and reason in err
    assert "--target-hit-ratio" in err
    out = plan_json(capsys, "--target-hit-ratio", "0.6", *argv)
    assert reason in out["ttft_withheld"]
    assert all(row["p50_ms"] is None and row["mean_ms"] is None and row["hit_ratio"] is not None
               for row in out["figures"] + (out["figures_one_token_below"] or []))
    assert main(["plan", "--target-hit-ratio", "0.6", *argv]) == 0
    text = capsys.readouterr().out
    assert f"TTFT withheld: " in text and reason in text


def test_the_reload_bandwidth_is_the_measurements_not_the_models(capsys):
    """The bandwidth is a figure of the measurement (its model's KV bytes per token)."""
    lab = plan_json(capsys, "--target-hit-ratio", "0.6")
    other = plan_json(capsys, "--target-hit-ratio", "0.6", "--model", "llama-3.1-8b")
    assert lab["models"]["lmcache"]["reload_bandwidth_gbps"] == \
        other["models"]["lmcache"]["reload_bandwidth_gbps"]
    assert main(["plan", "--target-hit-ratio", "0.6", "--model", "llama-3.1-8b",
                 "--verbose"]) == 0                     # withheld: the model with --verbose
    assert "GB/s at 28,672 bytes per token" in capsys.readouterr().out


def test_a_trace_with_prompts_the_model_never_saw_withholds_ttft(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join(MOONCAKE) + "\n")
    err = refused(capsys, str(trace), "--target-ttft-ms", "300")
    assert "covers prompts of 5,011 tokens, this workload's are 600 to 1,600 tokens" in err
    out = plan_json(capsys, str(trace), "--gpu", "512", "--target-hit-ratio", "0.3")
    assert out["answer"]["status"] == "met" and "ttft_withheld" in out


def test_a_report_without_ttft_says_why(tmp_path, capsys):
    report = tmp_path / "plan.html"
    assert main(["plan", "--target-hit-ratio", "0.6", "--model", "llama-3.1-8b",
                 "--report", str(report)]) == 0
    capsys.readouterr()
    assert "TTFT withheld: the TTFT model was measured with" in report.read_text()


def test_engine_models_on_a_mooncake_trace_take_its_block_grid(tmp_path, capsys):
    """The lmcache model's chunk defaults to the trace's block grid (512 tokens), as in
    ``trace`` and ``blocks``: one definition (``default_chunk_size``) for every command."""
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join(MOONCAKE) + "\n")
    for argv in (["--gpu-model", "vllm", "--cpu-model", "lmcache"], ["--cpu-model", "lmcache"]):
        out = plan_json(capsys, str(trace), "--gpu", "512", "--target-hit-ratio", "0.3", *argv)
        assert out["answer"]["status"] == "met"
        assert out["answer"]["cpu"]["tokens"] % 512 == 0
        assert main(["trace", str(trace), *argv, "--out", str(tmp_path / "out"), "--no-report",
                     "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["cpu_options"]["chunk_size"] == \
            default_chunk_size(512) == 512


def test_an_at_least_size_is_rounded_up_in_every_unit(capsys):
    """200,000 tokens of Llama-3.1-8B are 24.414 GiB: 24.41 GiB holds only 199,966 tokens."""
    argv = ["--docs", "25", "--tokens", "8000", "--target-hit-ratio", "0.6", "--model",
            "llama-3.1-8b", "--gpu", "2GiB"]
    assert main(["plan", *argv]) == 0
    text = capsys.readouterr().out
    assert "a CPU tier of 200,000 tokens = 24.42 GiB (26.22 GB;" in text
    assert "max_local_cpu_size: 24.42" in text
    out = plan_json(capsys, *argv)["answer"]["cpu"]
    assert out["GiB"] * 2**30 >= out["bytes"] and out["GB"] * 1e9 >= out["bytes"]


@given(st.integers(0, 2**62), st.sampled_from([2**30, 10**9, 2**20]), st.integers(0, 6))
def test_size_up_is_the_smallest_figure_that_holds_the_bytes(size, unit, digits):
    figure = size_up(size, unit, digits)
    scaled = round(figure * 10**digits)                 # the figure in units of 10^-digits
    assert scaled * unit >= size * 10**digits > (scaled - 1) * unit or size == scaled == 0
