"""plan --target-tpot-p90-ms: under a load (with --target-ttft-p90-ms) and with --fleet, the
answer meets TPOT p90 too and nothing smaller does; other plans refuse it."""

from __future__ import annotations

import json

import polars as pl

from pipeline.cli import main

LOAD = ["plan", "--target-ttft-p90-ms", "1000", "--pattern", "multi-tenant", "--users", "4",
        "--num-documents", "2", "--document-length", "600", "--system-prompt-length", "200",
        "--repeat-count", "2", "--output-tokens", "32", "--latency", "roofline", "--model",
        "qwen2.5-7b", "--gpu-type", "L4", "--concurrency", "8", "--json"]


def _plan(capsys, *argv):
    status = main([*LOAD, *argv])
    return status, json.loads(capsys.readouterr().out)


def test_under_load_the_answer_meets_both_and_one_block_below_does_not(capsys):
    _, alone = _plan(capsys)
    tpot_there = alone["figures"]["tpot_ms_p90"]
    status, both = _plan(capsys, "--target-tpot-p90-ms", str(tpot_there * 1.02))
    assert both["target"]["tpot_ms_p90"] == tpot_there * 1.02
    at, below = both["figures"], both["figures_one_block_below"]
    assert at["ttft_ms_p90"] <= 1000 and at["tpot_ms_p90"] <= tpot_there * 1.02
    if both["answer"]["status"] == "met":
        assert below["ttft_ms_p90"] > 1000 or below["tpot_ms_p90"] > tpot_there * 1.02
    status, none = _plan(capsys, "--target-tpot-p90-ms", "0.001")
    assert status == 1 and none["answer"]["status"] == "unreachable"


def test_fleet_plan_meets_tpot_and_no_smaller_point_does(tmp_path, capsys):
    argv = ["plan", "--pattern", "groups", "--groups", "3", "--users", "2", "--questions", "2",
            "--system-prompt-length", "256", "--fleet", "--instances", "1,2", "--router",
            "round-robin", "--gpu", "40blocks,80blocks", "--target-hit-ratio", "0.1",
            "--target-tpot-p90-ms", "2.927", "--model", "qwen2.5-1.5b", "--jobs", "1", "--json",
            "--out", str(tmp_path / "o")]
    main(argv)
    document = json.loads(capsys.readouterr().out)
    assert document["target"]["tpot_p90_ms"] == 2.927
    fleet = pl.read_parquet(tmp_path / "o" / "fleet.parquet").with_columns(
        tokens=pl.col("instances") * pl.col("gpu_blocks"))
    meeting = fleet.filter((pl.col("tpot_p90_ms") <= 2.927) & (pl.col("hit_ratio") >= 0.1))
    answer = document["answers"][0]
    assert meeting.height < fleet.height          # the TPOT target rules points out
    if meeting.height:
        assert answer["tpot_p90_ms"] <= 2.927
        assert answer["total_tokens"] == meeting["tokens"].min() * 16
    else:
        assert answer["status"] == "unreachable"


def test_other_plans_refuse_it(capsys):
    assert main(["plan", "--target-hit-ratio", "0.5", "--target-tpot-p90-ms", "40"]) == 2
    assert "--target-tpot-p90-ms: not with" in capsys.readouterr().err
