"""``plan --tier-costs CPU,DISK --target-ttft-p90-ms``: the grid's points run cheapest first,
each the engine run ``simulate --tier`` makes (its TTFT p90 equal to that run's); the answer
is the first that meets the target, every cheaper one missed; a model that cannot back the
plan, or a missing link, is one line."""

from __future__ import annotations

import json

import pytest
from test_cli_bad_arguments import usage_error

from conftest import ROOT
from pipeline.cli import main

BASE = ["plan", "--pattern", "long-doc-qa", "--num-documents", "8", "--document-length",
        "2000", "--model", "llama-3.1-8b", "--gpu", "1GiB",
        "--rate", "4", "--tier-costs", "4,0.1"]
LINKS = ["--latency", "roofline", "--disk-link", "40:0.05"]


def test_the_answer_is_the_cheapest_point_meeting_the_target(capsys, tmp_path):
    assert main([*BASE, *LINKS, "--target-ttft-p90-ms", "47", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    tried, answer = document["tried"], document["answer"]
    assert document["met"] and tried[-1] == answer and answer["disk_tokens"] > 0
    assert [t["cost"] for t in tried] == sorted(t["cost"] for t in tried)
    assert all(t["ttft_ms_p90"] > 47 for t in tried[:-1]) and answer["ttft_ms_p90"] <= 47
    # the answer's run is simulate --tier's at that point
    out = tmp_path / "sim"
    assert main(["simulate", *BASE[1:-2], "--latency", "roofline", "--clock", "time",
                 "--tier", f"cpu:{answer['cpu_tokens']}tokens", "--tier",
                 f"disk:{answer['disk_tokens']}tokens:40:0.05", "--out",
                 str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["ttft_ms_p90"] == pytest.approx(answer["ttft_ms_p90"], rel=1e-12)


def test_a_slow_disk_buys_nothing_and_a_missed_target_says_so(capsys):
    assert main([*BASE, "--latency", "roofline", "--disk-link", "0.5:5",
                 "--target-ttft-p90-ms", "47", "--json"]) == 0
    slow = json.loads(capsys.readouterr().out)["answer"]
    assert slow["disk_tokens"] == 0
    assert main([*BASE, *LINKS, "--target-ttft-p90-ms", "1", "--json"]) == 1
    missed = json.loads(capsys.readouterr().out)
    assert not missed["met"] and missed["runs"] == missed["grid_points"]


def test_a_model_that_cannot_back_the_plan_is_one_line(capsys):
    fitted = ROOT / "data" / "measured" / "llamacpp_calib.fitted.json"
    assert main([*BASE, "--latency", str(fitted), "--disk-link", "5:0.2",
                 "--target-ttft-p90-ms", "100"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--target-ttft-p90-ms: TTFT withheld" in err
    assert "fitted with 2,048 KV bytes per token" in err


@pytest.mark.parametrize("argv, message", [
    (["--latency", "roofline", "--target-ttft-p90-ms", "30"], "--disk-link GBPS:LATENCY_MS"),
    (["--target-ttft-p90-ms", "30", "--disk-link", "5:0.2"], "needs a step-time model"),
    (["--latency", "roofline", "--disk-link", "0:1", "--target-ttft-p90-ms", "30"],
     "--disk-link: expected GBPS[:LATENCY_MS]"),
    (["--target-hit-ratio", "0.5", "--cpu-link", "50"], "--cpu-link: prices loads for"),
])
def test_bad_links_are_usage_errors(capsys, argv, message):
    usage_error(capsys, [*BASE, *argv], message)


def test_a_tpot_target_is_met_too(capsys):
    argv = [*BASE, *LINKS, "--output-tokens", "8", "--target-ttft-p90-ms", "50", "--json"]
    assert main([*argv, "--target-tpot-p90-ms", "0.001"]) == 1
    missed = json.loads(capsys.readouterr().out)
    assert not missed["met"] and any(t["ttft_ms_p90"] <= 50 for t in missed["tried"])
    assert main(argv) == 0 and json.loads(capsys.readouterr().out)["answer"]["tpot_ms_p90"] > 0
