"""`python -m pipeline plan`: the lab's answer, the other outcomes, engine models, traces and
patterns, bad input (the search itself is checked in test_plan_search.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import cli_in_process
from kvlab.kvsim import TwoTierCache
from pipeline.cli import main as cli_main
from pipeline.plan.search import DocumentEvaluator, Target, plan
from pipeline.workloads.documents import DocumentWorkload


def run_plan(capsys, *argv: str, status: int = 0) -> dict:
    assert cli_main(["plan", *argv, "--json"]) == status
    return json.loads(capsys.readouterr().out)


def test_lab_answer_is_the_whole_working_set(capsys):
    out = run_plan(capsys, "--target-ttft-ms", "100")
    answer = out["answer"]
    assert answer["status"] == "met"
    assert answer["cpu"]["tokens"] == 50_110 == 10 * 5011
    assert round(answer["cpu"]["GiB"], 2) == 1.34
    assert answer["lmcache_max_local_cpu_size"] == 1.34
    assert out["kv"]["bytes_per_token"] == 28_672
    at = {row["pass_name"]: row for row in out["figures"]}
    below = {row["pass_name"]: row for row in out["figures_one_token_below"]}
    assert at["pass2-fwd"]["p50_ms"] == pytest.approx(48.1, abs=0.1)
    assert below["pass2-fwd"]["p50_ms"] > 500            # one token less: every doc recomputed
    assert below["pass2-fwd"]["hit_ratio"] == 0 and at["pass2-fwd"]["hit_ratio"] == 1
    assert out["models"]["lmcache"]["method"] == "per-tier medians"
    assert "recompute_ms_per_token" in out["models"]["lmcache"]["not_identifiable"]


def test_lab_hit_ratio_and_other_model(capsys):
    out = run_plan(capsys, "--target-hit-ratio", "1", "--pass", "2", "--model", "llama-3.1-8b")
    assert out["answer"]["cpu"]["tokens"] == 50_110
    assert out["answer"]["cpu"]["bytes"] == 50_110 * 131_072


def test_gpu_alone_and_unreachable(capsys):
    assert run_plan(capsys, "--target-ttft-ms", "100", "--gpu", "50110")["answer"]["status"] \
        == "gpu_alone"
    out = run_plan(capsys, "--target-ttft-ms", "20", status=1)    # answered, then exit 1
    assert out["answer"]["status"] == "unreachable"
    assert out["figures_one_token_below"] is None


def test_an_unreachable_target_prints_its_answer_and_exits_1(capsys):
    assert cli_main(["plan", "--target-ttft-ms", "20"]) == 1
    captured = capsys.readouterr()
    assert "answer: NO CPU size can meet it" in captured.out and captured.err == ""


def test_gpu_as_a_size(capsys):
    # 1.5GiB of the 1.5B model is 56,173 tokens: every document fits on the GPU.
    out = run_plan(capsys, "--target-hit-ratio", "1", "--gpu", "1.5GiB", "--model",
                   "qwen2.5-1.5b")
    assert out["gpu"]["tokens"] == 56_173 and out["answer"]["status"] == "gpu_alone"


def test_block_mode_stores_only_full_blocks(capsys):
    out = run_plan(capsys, "--target-hit-ratio", "0.9", "--block-size", "256")
    assert out["answer"]["cpu"]["tokens"] == 10 * 19 * 256      # 19 full chunks per document


def test_text_output(capsys):
    assert cli_main(["plan", "--target-ttft-ms", "100"]) == 0
    text = capsys.readouterr().out
    assert "a CPU tier of 50,110 tokens = 1.34 GiB (1.44 GB; GiB = 2^30 bytes" in text
    assert "max_local_cpu_size: 1.34" in text and "SYNTHETIC" in text
    assert "not identifiable" not in text and "evaluations)" not in text   # --verbose only
    assert cli_main(["plan", "--target-ttft-ms", "100", "--verbose"]) == 0
    verbose = capsys.readouterr().out
    assert "not identifiable" in verbose and "evaluations)" in verbose
    assert set(text.splitlines()) < set(verbose.splitlines())


def test_withheld_ttft_prints_no_model_without_verbose(capsys):
    """A model that backs nothing (another model's KV bytes) is a detail: one line says TTFT
    is withheld; --verbose prints the model and its notes; --json keeps them either way."""
    argv = ["plan", "--target-hit-ratio", "0.6", "--model", "llama-3.1-8b"]
    assert cli_main(argv) == 0
    text = capsys.readouterr().out
    assert "TTFT model from" not in text and "per-tier medians" not in text
    assert "TTFT withheld: " in text and "(--verbose: the TTFT model)" in text
    assert len(text.splitlines()) <= 15                 # models line, answer, figures
    assert cli_main([*argv, "--verbose"]) == 0
    verbose = capsys.readouterr().out
    assert "TTFT model from" in verbose and "not identifiable" in verbose
    out = run_plan(capsys, *argv[1:])
    assert out["models"]["lmcache"]["not_identifiable"] and out["ttft_withheld"]


def bad_measured(tmp_path, configs: list[str]) -> str:
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps({"config": c, "pass": "p1", "doc": i, "doc_tokens": 4864,
                                        "ttft_ms": 500.0 + i, "total_ms": 700.0}) + "\n"
                            for i, c in enumerate(configs)))
    return str(path)


@pytest.mark.parametrize("argv, message", [
    (["--target-ttft-ms", "100", "--model", "gpt-5"], "--model: unknown model preset"),
    (["--target-ttft-ms", "100", "--gpu", "1.5G"], "unknown unit"),
    (["--target-ttft-ms", "100", "--gpu", "-3"], ">= 0"),
    (["--target-ttft-ms", "0"], "expected a number > 0"),
    (["--target-ttft-ms", "-5"], "expected a number > 0"),
    (["--target-hit-ratio", "1.5"], "--target-hit-ratio: expected a number in (0, 1]"),
    (["--target-ttft-ms", "100", "--pass", "4"], "--pass"),
    (["--target-ttft-ms", "100", "--kv-shape", "28,2"], "--kv-shape"),
    (["--target-ttft-ms", "100", "--docs", "0"], "--docs: expected an integer >= 1"),
    ([], "one of the arguments --target-ttft-ms --target-ttft-p90-ms --target-hit-ratio is required"),
])
def test_bad_input_is_one_line(argv, message, capsys):
    try:
        code = cli_main(["plan", *argv])
    except SystemExit as exc:          # argparse's own errors
        code = exc.code
    out, err = capsys.readouterr()
    assert code != 0 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err


def test_bad_input_is_one_line_on_stderr_and_exit_2():
    """As ``python -m pipeline`` runs it (conftest.cli_in_process; that a real process
    exits with this status is test_cli.py's subprocess test, the same argparse error path)."""
    proc = cli_in_process("plan", "--target-ttft-ms", "100", "--gpu", "12parsecs")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "unknown unit 'parsecs'" in proc.stderr


def test_unmatched_measured_file(tmp_path, capsys):
    path = bad_measured(tmp_path, ["vllm-other"] * 5)
    assert cli_main(["plan", "--target-ttft-ms", "100", "--measured", path]) == 1
    err = capsys.readouterr().err
    assert "no request can be matched to a simulated scenario" in err and path in err


def test_fewer_points_than_parameters(tmp_path, capsys):
    path = bad_measured(tmp_path, ["lmcache", "lmcache"])
    assert cli_main(["plan", "--target-ttft-ms", "100", "--measured", path]) == 1
    assert "fewer points than parameters" in capsys.readouterr().err


def test_json_is_strict_when_a_tier_has_one_request(tmp_path, capsys):
    # one CPU-served request: its median has no standard error (NaN), printed as null
    path = tmp_path / "m.jsonl"
    rows = [("baseline", "p1", d, 580.0 + d) for d in range(6)] + \
        [("baseline", "p2", 5, 30.0), ("baseline", "p2", 4, 31.0)] + \
        [("lmcache", "p1", d, 600.0 + d) for d in range(6)] + \
        [("lmcache", "p2", 5, 31.0), ("lmcache", "p2", 0, 48.0)]
    path.write_text("".join(json.dumps({"config": c, "pass": p, "doc": d, "doc_tokens": 4864,
                                        "ttft_ms": t, "total_ms": t + 200}) + "\n"
                            for c, p, d, t in rows))
    out = run_plan(capsys, "--target-ttft-ms", "100", "--measured", str(path),
                   "--measured-gpu", "10022", "--measured-cpu", "100000")
    assert out["answer"]["cpu"]["tokens"] == 50_110
    assert out["models"]["lmcache"]["tier_ms"]["cpu"] == 48.0
    assert out["models"]["lmcache"]["tier_stderr"]["cpu"] is None


def test_a_tier_the_measurement_never_saw_is_an_error(tmp_path, capsys):
    # only lmcache, every request recomputed (a GPU too small to hit): no CPU or GPU figure
    path = bad_measured(tmp_path, ["lmcache"] * 8)
    assert cli_main(["plan", "--target-ttft-ms", "100", "--measured", path]) == 1
    err = capsys.readouterr().err
    assert "no request of config lmcache is served by the gpu tier" in err


def test_a_measurement_with_several_lengths_gets_a_least_squares_fit(tmp_path, capsys):
    """Documents of different lengths: the per-token costs become identifiable, and the fit
    through the CLI recovers the costs the file was generated with."""
    rng = np.random.default_rng(7)
    true = {"overhead_ms": 20.0, "recompute_ms_per_token": 0.1, "cpu_ms_per_token": 0.004,
            "gpu_ms_per_token": 0.001}
    lengths = {doc: int(length) for doc, length in enumerate(rng.integers(1000, 9000, 10))}
    cost = {"miss": true["recompute_ms_per_token"], "cpu": true["cpu_ms_per_token"],
            "gpu": true["gpu_ms_per_token"]}
    rows = []
    for config, cpu in (("baseline", 0), ("lmcache", 56000)):
        cache = TwoTierCache(21520, cpu)
        for name, docs in (("p1", range(10)), ("p2", range(10)), ("p3", range(9, -1, -1))):
            for doc in docs:
                tier = cache.access(doc, 5011)
                ttft = true["overhead_ms"] + cost[tier] * lengths[doc] + rng.normal(0, 0.5)
                rows.append({"config": config, "pass": name, "doc": doc,
                             "doc_tokens": lengths[doc], "ttft_ms": ttft, "total_ms": ttft + 1})
    path = tmp_path / "lengths.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = run_plan(capsys, "--target-ttft-ms", "200", "--measured", str(path))
    model = out["models"]["lmcache"]
    assert model["method"] == "least squares"
    assert model["not_identifiable"] == []        # ten lengths: even a and c are identified
    for name, value in {**true, "recompute_fixed_ms": 0.0, "attention_ms_per_token2": 0.0}.items():
        assert abs(model["params"][name] - value) <= 5 * model["stderr"][name], name
    bandwidth = model["reload_bandwidth_gbps"]
    assert abs(bandwidth["value"] - 28672 / 0.004e-3 / 1e9) <= 5 * bandwidth["stderr"]
    assert out["answer"]["cpu"]["tokens"] == 50_110


@pytest.mark.parametrize("params, monotone", [
    ({"recompute_ms_per_token": 0.1, "cpu_ms_per_token": 0.004}, True),
    ({"recompute_ms_per_token": 0.1, "cpu_ms_per_token": 0.004, "recompute_fixed_ms": -1}, True),
    ({"recompute_ms_per_token": 0.1, "cpu_ms_per_token": 0.004, "recompute_fixed_ms": -600},
     False),
    ({"recompute_ms_per_token": 0.003, "cpu_ms_per_token": 0.004}, False),
])
def test_bisection_only_when_ttft_cannot_rise_with_the_cpu_tier(params, monotone):
    from pipeline.ttft.model import TTFTModel

    model = TTFTModel("lmcache", "least squares", 10, params={"overhead_ms": 10.0, **params})
    evaluator = DocumentEvaluator("the lab", DocumentWorkload().workload(None), 21520,
                                  {"lmcache": model, "baseline": model})
    assert evaluator.monotone() is monotone
    result = plan(evaluator, Target("ttft", 300, "mean", (1,)))
    assert ("bisected" in result.search) is monotone
    # either way the answer is the first capacity that meets it (a scan over every candidate)
    low, high = evaluator.candidates()
    scan = [int(c) for c in (0, *low, *high)
            if Target("ttft", 300, "mean", (1,)).met(evaluator.figures(int(c)))]
    assert result.cpu_tokens == (scan[0] if scan else int(high[-1]))


def test_plan_for_the_shared_trace(capsys):
    from conftest import shared_trace

    trace = shared_trace()
    out = run_plan(capsys, str(trace), "--gpu", "200000", "--target-hit-ratio", "0.5")
    assert out["answer"]["status"] == "met"
    assert out["cache_models"] == {"gpu": "vllm", "cpu": "lmcache"}      # the default
    assert out["answer"]["cpu"]["tokens"] == 6_536_704          # 12,767 chunks of 512 tokens
    assert out["figures"][0]["hit_ratio"] >= 0.5 > out["figures_one_token_below"][0]["hit_ratio"]


def test_bad_trace_and_pattern(tmp_path, capsys):
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 10}\n')
    assert cli_main(["plan", "--target-hit-ratio", "0.5", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {bad}:1: ") and len(err.splitlines()) == 1
    assert cli_main(["plan", "--target-hit-ratio", "0.5", str(bad), "--pattern", "zipf"]) == 1
    assert "not both" in capsys.readouterr().err


def test_plan_for_a_pattern(capsys):
    # LMCache's long_doc_qa: 8 documents of 20000 tokens, a warm-up round then 2 more reads
    out = run_plan(capsys, "--pattern", "long-doc-qa", "--target-hit-ratio", "0.9",
                   "--gpu", "40000", "--block-size", "256", "--pass", "all", status=1)
    assert "long" in out["workload"] and out["answer"]["status"] == "unreachable"
    assert out["answer"]["cpu"]["tokens"] % 256 == 0


def test_engine_models_in_block_mode(capsys):
    out = run_plan(capsys, "--target-hit-ratio", "0.9", "--block-size", "16",
                   "--cpu-model", "lmcache", "--gpu-model", "vllm")
    # LMCache stores whole 256-token chunks only (save_unfull_chunk off): 19 per document
    assert out["answer"]["cpu"]["tokens"] == 10 * 19 * 256
    assert "CPU lmcache head-first" in out["workload"]
    assert "scanned" in out["answer"]["search"]


@pytest.mark.parametrize("argv, message, status", [
    (["--cpu-model", "lmcache"], "engine models need block mode", 2),
    (["--pattern", "zipf", "--num-requests", "0"], "no requests", 1),
    (["--block-size", "16", "--cpu-model", "block-lru", "--chunk-size", "256"],
     "--chunk-size applies to the lmcache", 2),
    (["--block-size", "16", "--cpu-model", "lmcache", "--cpu-order", "tail-first"],
     "--cpu-order tail-first: the lmcache model is head-first", 2),
])
def test_engine_model_options_are_checked(argv, message, status, capsys):
    """An option of another model or an order the model cannot follow is a usage error."""
    assert cli_main(["plan", "--target-hit-ratio", "0.9", *argv]) == status
    err = capsys.readouterr().err
    assert message in err and len(err.splitlines()) == 1
