"""plan --latency FITTED: TTFT only from a fitted file whose model and prompt range fit."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT
from pipeline.cli import main as cli_main

FITTED = ROOT / "data" / "measured" / "llamacpp_calib.fitted.json"
BASE = ["plan", "--latency", str(FITTED), "--docs", "4", "--tokens", "5000", "--json"]


def plan_json(capsys, *extra: str) -> dict:
    assert cli_main([*BASE, *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_matching_kv_size_and_range_prints_the_fitted_ttft(capsys):
    doc = plan_json(capsys, "--target-hit-ratio", "0.5", "--kv-bytes-per-token", "2048",
                    "--served-model", "kvlab-tiny-random")
    assert "ttft_withheld" not in doc
    assert doc["models"]["fitted step time"]["served_model"] == "kvlab-tiny-random"
    cold = doc["figures"][0]
    # a cold 5000-token prompt: the file's coefficients over 10 chunks of 512
    c = doc["models"]["fitted step time"]["coefficients"]
    m = 5000
    k = -(-m // 512)
    expected = (k * c["fixed_ms"] + m * c["prefill_token_ms"]
                + (512 * k * (k - 1) / 2 + m) * c["context_token_ms"]
                + m * (m + 1) / 2 * c["attention_pair_ms"])
    assert cold["p50_ms"] == pytest.approx(expected)


@pytest.mark.parametrize("extra, reason", [
    ([], "fitted with 2,048 KV bytes per token, this plan sizes 28,672"),
    (["--kv-bytes-per-token", "2048", "--served-model", "llama"],
     "fitted on kvlab-tiny-random, not llama"),
    (["--kv-bytes-per-token", "2048", "--tokens", "9000"], "12 of 12 prompts lie outside"),
])
def test_unbacked_ttft_is_withheld_and_says_why(capsys, extra, reason):
    doc = plan_json(capsys, "--target-hit-ratio", "0.5", *extra)
    assert reason in doc["ttft_withheld"]
    assert all(row["p50_ms"] is None and row["mean_ms"] is None for row in doc["figures"])
    assert cli_main([*BASE, "--target-ttft-ms", "100", *extra]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "TTFT withheld" in err and reason in err


def test_bad_latency_inputs_are_one_line(tmp_path, capsys):
    bad = tmp_path / "f.json"
    bad.write_text('{"kind": "something else"}')
    assert cli_main([*BASE, "--target-hit-ratio", "0.5", "--latency", str(bad)]) == 1
    assert "not a fitted step-time file" in capsys.readouterr().err
    assert cli_main([*BASE, "--target-hit-ratio", "0.5", "--measured",
                     str(ROOT / "data" / "ttft.jsonl")]) == 1
    assert "--latency and --measured exclude each other" in capsys.readouterr().err
