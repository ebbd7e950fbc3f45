"""--model-config (a Hugging Face config.json), --kv-cache-dtype and --tensor-parallel-size:
the shapes against published parameter counts, KV per GPU as vLLM splits it, the roofline's
split and all-reduce, and bad input as one line with exit 2."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT, cli_in_process
from pipeline.sizes.hf_config import read_model_config
from pipeline.sizes.model_presets import model_shape
from pipeline.steptime import Roofline, StepCost, gpu_preset

#: config.json fields of published models (Apache-2.0 configs; the sizes as the model
#: repositories give them): Mixtral-8x7B-v0.1 (mistralai), Qwen1.5-MoE-A2.7B (Qwen)
MIXTRAL = {"architectures": ["MixtralForCausalLM"], "hidden_size": 4096,
           "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
           "num_key_value_heads": 8, "vocab_size": 32000, "num_local_experts": 8,
           "num_experts_per_tok": 2, "tie_word_embeddings": False}
QWEN_MOE = {"architectures": ["Qwen2MoeForCausalLM"], "hidden_size": 2048,
            "intermediate_size": 5632, "moe_intermediate_size": 1408,
            "shared_expert_intermediate_size": 5632, "num_attention_heads": 16,
            "num_hidden_layers": 24, "num_key_value_heads": 16, "vocab_size": 151936,
            "num_experts": 60, "num_experts_per_tok": 4, "decoder_sparse_step": 1,
            "mlp_only_layers": [], "tie_word_embeddings": False}
LLAMA_8B = {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
            "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256,
            "head_dim": 128, "tie_word_embeddings": False}


def _write(tmp_path, config, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return path


@pytest.mark.parametrize("config,total,active", [(MIXTRAL, 46.7e9, 12.9e9),
                                                 (QWEN_MOE, 14.3e9, 2.7e9)])
def test_moe_weights_count_every_expert_and_flops_the_active_ones(tmp_path, config, total,
                                                                  active):
    shape = read_model_config(_write(tmp_path, config))
    embeddings = 2 * shape.lm_head_parameters
    assert shape.parameters == pytest.approx(total, rel=0.005)          # the model cards
    assert shape.active_layer_parameters + embeddings == pytest.approx(active, rel=0.01)


def test_a_dense_config_is_the_preset(tmp_path):
    shape = read_model_config(_write(tmp_path, LLAMA_8B))
    preset = model_shape("Llama-3.1-8B")
    assert shape.parameters == preset.parameters
    assert shape.kv().bytes_per_token == preset.kv().bytes_per_token == 131072
    assert shape.active_layer_parameters == shape.layer_parameters


def test_head_dim_and_text_config_and_mha_default(tmp_path):
    config = {"text_config": {**LLAMA_8B, "head_dim": 256}}
    del config["text_config"]["num_key_value_heads"]
    shape = read_model_config(_write(tmp_path, config))
    assert shape.head_dim == 256 and shape.kv_heads == 32            # MHA when absent
    assert shape.kv().bytes_per_token == 2 * 32 * 32 * 256 * 2


@pytest.mark.parametrize("change,message", [
    ({"num_hidden_layers": None}, "lacks num_hidden_layers"),
    ({"num_experts_per_tok": None}, "lacks num_experts_per_tok"),
    ({"kv_lora_rank": 512}, "kv_lora_rank is not supported"),
    ({"hidden_size": "4096"}, "hidden_size must be a whole number"),
])
def test_bad_configs_name_the_field(tmp_path, change, message):
    config = {**MIXTRAL, **change}
    config = {k: v for k, v in config.items() if v is not None}
    with pytest.raises(ValueError, match=message):
        read_model_config(_write(tmp_path, config))


def test_kv_per_gpu_splits_and_replicates_heads_as_vllm():
    llama = model_shape("Llama-3.1-70B")                             # 64 heads, 8 KV heads
    assert llama.kv("bf16", 4).bytes_per_token * 4 == llama.kv().bytes_per_token
    assert llama.kv("bf16", 16).bytes_per_token == 2 * 80 * 1 * 128 * 2   # max(1, 8 // 16)
    assert llama.kv("fp8").bytes_per_token * 2 == llama.kv().bytes_per_token
    with pytest.raises(ValueError, match="does not divide the 64 attention heads"):
        llama.kv("bf16", 3)
    qwen = model_shape("Qwen2.5-7B")                                 # 28 heads, 4 KV heads
    with pytest.raises(ValueError, match="do not divide one another"):
        qwen.kv("bf16", 14)


def test_tensor_parallel_roofline_splits_and_adds_the_all_reduces():
    shape, h100 = model_shape("Llama-3.1-70B"), gpu_preset("H100")
    one, four = Roofline(shape, h100, 0.0), Roofline(shape, h100, 0.0, tensor_parallel=4)
    prefill = StepCost(4096, 0, 4096, attention_pairs=4096 * 4097 // 2, sampled_seqs=1)
    a, b = one.parts(prefill), four.parts(prefill)
    assert b["compute_ms"] == pytest.approx(a["compute_ms"] / 4)
    # 2 all-reduces x 80 layers x 8192 x 2 bytes x 2 (4-1)/4, per token, over 450 GB/s
    assert b["comm_ms"] == pytest.approx(4096 * 2 * 80 * 8192 * 2 * 1.5 / 450e9 * 1e3)
    assert a["comm_ms"] == 0.0
    decode = StepCost(0, 1, 1)
    assert four.parts(decode)["memory_ms"] == pytest.approx(one.parts(decode)["memory_ms"] / 4,
                                                            rel=1e-6)
    assert "TP 4" in four.label and "NVLink 900 GB/s" in four.provenance
    assert "PCIe 4.0 x16" in Roofline(shape, gpu_preset("L40S"), tensor_parallel=2).provenance


def test_moe_roofline_reads_every_expert_and_computes_the_active_ones(tmp_path):
    shape = read_model_config(_write(tmp_path, MIXTRAL))
    model = Roofline(shape, gpu_preset("H100"), 0.0)
    parts = model.parts(StepCost(1000, 0, 1000, attention_pairs=0, sampled_seqs=0))
    assert parts["compute_ms"] == pytest.approx(
        2 * shape.active_layer_parameters * 1000 / 989.4e12 * 1e3)
    assert model.weight_bytes == 2 * (shape.layer_parameters + shape.lm_head_parameters)


def _simulate(tmp_path, *argv):
    return cli_in_process("simulate",
                           str(ROOT / "data" / "simulate" / "chat.jsonl"), "--rate", "2",
                           "--latency", "roofline", "--out", str(tmp_path / "out"), *argv)


def test_fp8_doubles_the_tokens_of_a_size_and_tp_is_per_gpu(tmp_path):
    config = _write(tmp_path, LLAMA_8B)
    done = _simulate(tmp_path, "--gpu", "1GiB", "--model-config", str(config),
                     "--kv-cache-dtype", "fp8", "--tensor-parallel-size", "2")
    assert done.returncode == 0, done.stderr
    assert "--gpu 1GiB = 32,768 tokens" in done.stdout                # 2^30 / 32,768 B
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert "TP 2, fp8 KV" in metrics["step_time_model"]


@pytest.mark.parametrize("argv,message", [
    (["--tensor-parallel-size", "3", "--model", "Llama-3.1-8B"],
     "--tensor-parallel-size 3: 3 does not divide the 32 attention heads"),
    (["--model-config", "MISSING"], "lacks num_attention_heads"),
    (["--pipeline-parallel-size", "2", "--model", "Llama-3.1-8B"],
     "--pipeline-parallel-size: 2: pipeline parallelism is not modelled yet"),
    (["--kv-cache-dtype", "fp4", "--model", "Llama-3.1-8B"], "--kv-cache-dtype: invalid"),
    (["--kv-shape", "32,8,128", "--kv-cache-dtype", "fp8"],
     "--kv-cache-dtype: applies to --model or --model-config, not --kv-shape"),
])
def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path, argv, message):
    if "MISSING" in argv:
        config = dict(LLAMA_8B)
        del config["num_attention_heads"]
        argv = [str(_write(tmp_path, config)) if a == "MISSING" else a for a in argv]
    done = _simulate(tmp_path, "--gpu", "1GiB", *argv)
    assert done.returncode == 2 and message in done.stderr
    assert done.stderr.count("\n") == 1 and not (tmp_path / "out").exists()


def test_fleet_memory_counts_every_gpu_of_a_tensor_parallel_instance():
    import polars as pl
    from pipeline.fleet.plan import Memory, smallest_memory
    fleet = pl.DataFrame({"router": ["r"], "load": [1.0], "instances": [2], "gpu_blocks": [10],
                          "ttft_p90_ms": [1.0], "hit_ratio": [0.5]})
    one = smallest_memory(fleet, 5.0, memory=Memory(1024, 16, 160))
    four = smallest_memory(fleet, 5.0, memory=Memory(1024, 16, 160, gpus=4))
    assert four["total_gib"][0] == pytest.approx(4 * one["total_gib"][0])
    assert four["total_tokens"][0] == one["total_tokens"][0]
