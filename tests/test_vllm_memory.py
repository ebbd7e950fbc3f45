"""``--gpu-memory-utilization``: vLLM 0.33's KV allocation, checked against figures derived
by hand from vLLM's formula (``request_memory``: ceil(total x F); ``determine_available_memory``:
minus the non-KV memory; ``num_blocks = available // bytes_per_block``)."""

import pytest

from conftest import cli_in_process
from pipeline.sizes.model_presets import model_shape, preset
from pipeline.sizes.vllm_memory import activation_estimate, vllm_kv_memory

GIB = 2**30
#: Llama-3.1-8B (config.json): 32 layers x (2 x 4096^2 + 2 x 4096 x 1024 + 3 x 4096 x 14336)
#: = 6,979,321,856, plus embedding and LM head 2 x 128256 x 4096 = 1,050,673,152
LLAMA_PARAMS = 8_029_995_008
#: 0.9 x 80 GiB = 77,309,411,328 B exactly; weights 2 B per parameter
REQUESTED, WEIGHTS = 77_309_411_328, 2 * LLAMA_PARAMS
#: 2 x 32 layers x 8 KV heads x 128 x 2 B per token, x 16 tokens per block
BLOCK_BYTES = 131_072 * 16


def test_arithmetic_with_a_flat_reserve_is_vllms_formula():
    memory = vllm_kv_memory("H100 SXM", 80 * GIB, 0.9, model_shape("llama-3.1-8b"),
                            preset("llama-3.1-8b"), 16, reserve_gib=1.0)
    assert memory.parameters == LLAMA_PARAMS
    assert memory.requested == REQUESTED and memory.weights == WEIGHTS
    available = REQUESTED - WEIGHTS - GIB               # 60,175,679,488 B
    assert memory.available == available == 60_175_679_488
    assert memory.num_blocks == available // BLOCK_BYTES == 28_694
    assert memory.tokens == 28_694 * 16
    line = memory.line()
    assert "0.9 x 80 GiB = 72.00 GiB - weights 14.96 GiB (8.03B params x 2 B)" in line
    assert "= 459,104 tokens = 28,694 blocks of 16" in line and "null block included" in line


def test_the_estimate_is_the_profile_runs_batch_and_logits():
    shape = model_shape("llama-3.1-8b")
    # 8192 tokens x (3 x 14336 + 4 x 4096) x 2 B + 256 sequences x 128256 x 4 B x 2
    assert activation_estimate(shape, 8192, 256) == 1_235_746_816
    memory = vllm_kv_memory("H100 SXM", 80 * GIB, 0.9, shape, preset("llama-3.1-8b"), 16)
    assert memory.num_blocks == (REQUESTED - WEIGHTS - 1_235_746_816) // BLOCK_BYTES == 28_616
    assert "estimate" in memory.line()


def test_nothing_left_for_kv_is_refused():
    with pytest.raises(ValueError, match="leaves no KV memory"):
        vllm_kv_memory("L4", 24 * GIB, 0.5, model_shape("qwen2.5-72b"), preset("qwen2.5-72b"),
                       16)


SIM = ["simulate", "--pattern", "long-doc-qa", "--num-documents", "2", "--document-length",
       "64", "--output-tokens", "2"]


def test_simulate_prints_the_arithmetic_and_runs_that_pool(tmp_path):
    done = cli_in_process(*SIM, "--gpu-memory-utilization", "0.9", "--gpu-type", "L4",
                          "--model", "qwen2.5-0.5b", "--activation-reserve", "1",
                          "--out", str(tmp_path / "a"))
    assert done.returncode == 0, done.stderr
    memory = vllm_kv_memory("L4", 24 * GIB, 0.9, model_shape("qwen2.5-0.5b"),
                            preset("qwen2.5-0.5b"), 16, reserve_gib=1.0)
    assert memory.line() in done.stdout
    same = cli_in_process(*SIM, "--gpu", f"{memory.num_blocks}blocks", "--out",
                          str(tmp_path / "b"))
    assert same.stdout.splitlines()[0].split("; wrote")[0] == \
        done.stdout.splitlines()[0].split("; wrote")[0]


@pytest.mark.parametrize("argv, message", [
    (["--gpu-type", "L4", "--model", "qwen2.5-0.5b", "--gpu", "64blocks"],
     "--gpu-memory-utilization gives --gpu: give one of them"),
    (["--model", "qwen2.5-0.5b"], "--gpu-memory-utilization needs --gpu-type"),
    (["--gpu-type", "L4"], "--gpu-memory-utilization needs --model"),
    (["--gpu-type", "L4", "--model", "deepseek-v3"], "has no dense model shape"),
])
def test_usage_errors_name_the_options(tmp_path, argv, message):
    done = cli_in_process(*SIM, "--gpu-memory-utilization", "0.9", *argv, "--out",
                          str(tmp_path / "o"))
    assert done.returncode == 2 and message in done.stderr and done.stderr.count("\n") == 1


@pytest.mark.parametrize("value", ["0", "1.5", "nan"])
def test_the_fraction_is_in_zero_one(tmp_path, value):
    done = cli_in_process(*SIM, "--gpu-memory-utilization", value, "--out", str(tmp_path))
    assert done.returncode == 2 and "--gpu-memory-utilization" in done.stderr


@pytest.mark.parametrize("command", [
    ["trace", "--pattern", "zipf", "--num-documents", "2", "--document-length", "40",
     "--num-requests", "3", "--no-report", "--json"],
    ["fleet", "--pattern", "groups", "--groups", "2", "--users", "1", "--questions", "1",
     "--system-prompt-length", "32", "--question-length", "16", "--output-tokens", "2",
     "--jobs", "1"],
])
def test_trace_and_fleet_take_it(tmp_path, command):
    done = cli_in_process(*command, "--gpu-memory-utilization", "0.5", "--gpu-type", "L4",
                          "--model", "qwen2.5-0.5b", "--activation-reserve", "1", "--out",
                          str(tmp_path / "o"))
    assert done.returncode == 0, done.stderr
    assert "--gpu-memory-utilization 0.5 on L4" in done.stdout
