"""plan --target-ttft-p90-ms: the smallest GPU capacity meeting TTFT p90 under a load."""

import json

import pytest

from conftest import cli_in_process

PATTERN = ["--pattern", "long-doc-qa", "--num-documents", "6", "--document-length", "300",
           "--repeat-count", "2", "--output-tokens", "8", "--latency", "roofline",
           "--model", "qwen2.5-7b", "--gpu-type", "L4", "--concurrency", "4"]


#: the roofline needs a model (none is assumed)
ROOF = ["--latency", "roofline", "--model", "qwen2.5-1.5b"]


def _plan(*args):
    return cli_in_process("plan", *args)


def _answer(target):
    done = _plan("--target-ttft-p90-ms", str(target), *PATTERN, "--json")
    document = json.loads(done.stdout)
    assert done.returncode == (document["answer"]["status"] == "unreachable"), done.stderr
    return document


def test_answer_is_the_smallest_meeting_pool():
    loose = _answer(10**7)
    assert loose["answer"]["status"] == "gpu_minimum"
    top = _answer(1.0)
    assert top["answer"]["status"] == "unreachable"
    # a target between the smallest pool's p90 and the top's: met, and one block below misses
    target = (loose["figures"]["ttft_ms_p90"] + top["figures"]["ttft_ms_p90"]) / 2
    plan = _answer(target)
    if plan["answer"]["status"] == "met":
        assert plan["figures"]["ttft_ms_p90"] <= target
        assert plan["figures_one_block_below"]["ttft_ms_p90"] > target
    assert plan["step_time_model"].startswith("roofline (L4, Qwen2.5-7B")
    assert plan["answer"]["gpu_tokens"] == 16 * plan["answer"]["num_gpu_blocks"]


def test_text_names_the_roofline():
    done = _plan("--target-ttft-p90-ms", "100000", *PATTERN)
    assert done.returncode == 0, done.stderr
    assert "[roofline (L4, Qwen2.5-7B, bf16 weights, MFU 0.703, MBU 0.738)]" in done.stdout


@pytest.mark.parametrize("options, status, message", [
    (["--pattern", "long-doc-qa", "--concurrency", "2"], 2, "needs a step-time model"),
    (["--pattern", "long-doc-qa", *ROOF, "--concurrency", "2", "--rate",
      "1"], 2, "give one load"),
    (["--pattern", "long-doc-qa", *ROOF, "--speed", "2", "--concurrency",
      "2"], 2, "give one load"),
    (["--pattern", "long-doc-qa", *ROOF, "--concurrency", "2", "--report",
      "r.html"], 2, "--report: not available"),
    (["--pattern", "long-doc-qa", *ROOF], 1, "untimed workload"),
])
def test_errors_are_one_line(options, status, message):
    """Usage errors (options that do not go together) exit 2; a workload that lacks what
    the options need exits 1."""
    done = _plan("--target-ttft-p90-ms", "100", *options)
    assert done.returncode == status and message in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1
