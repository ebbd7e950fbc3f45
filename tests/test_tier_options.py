"""``--tier``: LMCache's tier stack on the command line. Bad input is one line naming the
option, exit 2, nothing written; a good stack runs and writes the tier columns, which are
absent without ``--tier``."""

from __future__ import annotations

import json

import polars as pl
import pytest
from test_cli_bad_arguments import usage_error

from pipeline.cli import main

RUN = ["simulate", "--pattern", "long-doc-qa", "--num-documents", "2", "--document-length",
       "600", "--gpu", "64blocks", "--model", "qwen2.5-1.5b"]


@pytest.mark.parametrize("tiers, message", [
    (["cpu"], "'cpu': expected cpu:SIZE[:GBPS[:LATENCY_MS]]"),
    (["disk:20GiB:5"], "'disk:20GiB:5': expected disk:SIZE:GBPS:LATENCY_MS"),
    (["remote:20GiB"], "'remote:20GiB': expected remote:SIZE:GBPS:LATENCY_MS[:shared]"),
    (["cpu:20"], "SIZE '20' needs a unit"),
    (["cpu:-2GiB"], "SIZE: a capacity must be >= 0"),
    (["cpu:0GiB"], "SIZE must be > 0"),
    (["cpu:2GiB:-5"], "GBPS must be > 0, got '-5'"),
    (["cpu:2GiB:0"], "GBPS must be > 0"),
    (["cpu:2GiB:fast"], "GBPS must be a number, got 'fast'"),
    (["cpu:2GiB:5:-1"], "LATENCY_MS must be >= 0, got '-1'"),
    (["cpu:2GiB", "disk:9GiB:5:nan"], "LATENCY_MS must be >= 0"),
    (["tape:2GiB:1:1"], "a tier is cpu, disk or remote"),
    (["cpu:2GiB:50:0:shared"], "only a remote store is shared"),
    (["disk:9GiB:5:0.1", "cpu:2GiB"], "--tier disk:9GiB:5:0.1: the cpu tier comes first"),
    (["cpu:2GiB", "cpu:3GiB"], "--tier cpu:3GiB: a second cpu tier"),
    (["cpu:2GiB", "remote:9GiB:1:1", "disk:9GiB:5:0.1"],
     "--tier disk:9GiB:5:0.1: after remote (LMCache looks up cpu, then disk, then remote)"),
    (["cpu:2GiB", "remote:9GiB:1:1:shared"], "a shared remote store needs a fleet"),
    (["cpu:100tokens"], "100 tokens hold no chunk of 256 tokens"),
])
def test_bad_tiers_are_usage_errors(tmp_path, capsys, tiers, message):
    argv = [*RUN, *(a for t in tiers for a in ("--tier", t)), "--out", str(tmp_path / "out")]
    usage_error(capsys, argv, message)
    assert not (tmp_path / "out").exists()


def test_tier_with_cpu_is_a_usage_error(tmp_path, capsys):
    usage_error(capsys, [*RUN, "--tier", "cpu:2GiB", "--cpu", "2GiB", "--out",
                         str(tmp_path / "out")], "--tier: give the CPU tier as --tier cpu:SIZE")
    assert not (tmp_path / "out").exists()


def test_tier_policy(tmp_path, capsys):
    usage_error(capsys, [*RUN, "--tier", "cpu:512tokens", "--tier-policy", "lifo", "--out",
                         str(tmp_path / "out")], "--tier-policy: invalid choice: 'lifo'")
    usage_error(capsys, [*RUN, "--tier-policy", "fifo", "--out", str(tmp_path / "out")],
                "--tier-policy: it is the --tier stack's policy; give --tier")
    assert not (tmp_path / "out").exists()
    assert main([*RUN, "--tier", "cpu:512tokens", "--tier", "disk:1GiB:2:0.5", "--tier-policy",
                 "mru", "--out", str(tmp_path / "mru")]) == 0
    assert "tokens, MRU): cpu 512tokens" in capsys.readouterr().out
    assert main([*RUN, "--tier", "cpu:512tokens", "--tier", "disk:1GiB:2:0.5", "--tier-policy",
                 "lfu", "--out", str(tmp_path / "lfu")]) == 0
    assert "tokens, LFU): cpu 512tokens" in capsys.readouterr().out
    models = json.loads((tmp_path / "lfu" / "metrics.json").read_text())["models"]
    assert models["cpu_tier"] == "lmcache-stack" and models["stack"]["policy"] == "lfu"
    assert models["stack"]["tiers"] == ["cpu:512tokens", "disk:1GiB:2:0.5"]


def test_tier_needs_a_model(tmp_path, capsys):
    argv = [a for a in RUN if a not in ("--model", "qwen2.5-1.5b")]
    usage_error(capsys, [*argv, "--tier", "cpu:4096tokens", "--out", str(tmp_path / "out")],
                "--tier cpu:4096tokens needs --model PRESET")


def test_a_stack_runs_and_adds_its_columns(tmp_path, capsys):
    out = tmp_path / "stack"
    assert main([*RUN, "--tier", "cpu:512tokens", "--tier", "disk:1GiB:2:0.5",
                 "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert "tiers LMCache 0.5.6 stack" in stdout and "disk 1GiB at 2 GB/s + 0.5 ms" in stdout
    frame = pl.read_parquet(out / "requests.parquet")
    assert {"disk_hit_tokens", "remote_hit_tokens", "load_ms"} <= set(frame.columns)
    assert frame["disk_hit_tokens"].sum() > 0      # the 512-token CPU tier holds 2 chunks
    steps = pl.read_parquet(out / "steps.parquet")
    assert steps["disk_load_bytes"].sum() == frame["disk_hit_tokens"].sum() * 28672
    assert main([*RUN, "--cpu", "512", "--out", str(tmp_path / "plain")]) == 0
    plain = pl.read_parquet(tmp_path / "plain" / "requests.parquet")
    assert "load_ms" not in plain.columns
    assert "disk_load_bytes" not in pl.read_parquet(tmp_path / "plain" / "steps.parquet").columns


FLEET = ["fleet", "--pattern", "groups", "--groups", "3", "--users", "2", "--questions", "2",
         "--system-prompt-length", "512", "--question-length", "16", "--output-tokens", "4",
         "--latency", "roofline", "--model", "qwen2.5-1.5b", "--jobs", "1", "--instances", "2",
         "--gpu", "64blocks"]


def test_a_fleet_shares_a_remote_store(tmp_path, capsys):
    out = tmp_path / "fleet"
    assert main([*FLEET, "--tier", "cpu:512tokens", "--tier", "remote:1GiB:1:2:shared",
                 "--out", str(out)]) == 0, capsys.readouterr().err
    usage_error(capsys, [*FLEET, "--tier", "cpu:512tokens", "--cpu-shared", "--out",
                         str(tmp_path / "bad")], "--cpu-shared: with --tier")
    assert not (tmp_path / "bad").exists()


PLAN = ["plan", "--pattern", "long-doc-qa", "--num-documents", "2", "--document-length", "600",
        "--model", "qwen2.5-1.5b", "--gpu", "64blocks"]


@pytest.mark.parametrize("argv, message", [
    (["--target-hit-ratio", "0.5", "--tier-costs", "4"], "--tier-costs: expected CPU,DISK"),
    (["--target-hit-ratio", "0.5", "--tier-costs", "4,-1"], "--tier-costs: expected CPU,DISK"),
    (["--target-hit-ratio", "0.5", "--tier-costs", "0,0"], "not both 0"),
    (["--target-ttft-ms", "50", "--tier-costs", "4,0.1"],
     "--tier-costs: give --target-hit-ratio R or --target-ttft-p90-ms MS"),
])
def test_bad_tier_plans_are_usage_errors(capsys, argv, message):
    usage_error(capsys, [*PLAN, *argv], message)
