"""Step-time models: model shapes, GPU presets, the roofline and the fitted file."""

import argparse
import json
from types import SimpleNamespace

import pytest

from pipeline.base.errors import CLIError
from pipeline.sizes.units import MODELS, PRESETS, ModelShape, model_shape, parse_model_shape
from pipeline.steptime import Linear, Roofline, StepCost, gpu_preset, load_latency, step_cost
from pipeline.sizes.gpus import GpuPreset, custom_gpu
from pipeline.steptime.options import add_latency_arguments, latency_from_args
from pipeline.sizes.units import add_kv_arguments

TINY = ModelShape("tiny", layers=2, hidden_size=4, intermediate_size=8, attention_heads=2,
                  kv_heads=1, vocab_size=10)
SLOW = GpuPreset("slow", bf16_tflops=1e-9, fp8_tflops=2e-9, hbm_gbps=1e-6, host_link_gbps=1e-7)


def test_presets_parameter_counts_match_the_model_cards():
    # published totals: Qwen2.5 model cards (0.49B, 1.54B, 7.61B, 72.7B), Llama 3.1 8B/70B
    published = {"qwen2.5-0.5b": 0.49e9, "qwen2.5-1.5b": 1.54e9, "qwen2.5-7b": 7.61e9,
                 "qwen2.5-72b": 72.7e9, "llama-3.1-8b": 8.03e9, "llama-3.1-70b": 70.6e9,
                 "mistral-7b-v0.3": 7.25e9}
    for name, total in published.items():
        assert MODELS[name].parameters == pytest.approx(total, rel=0.01), name


def test_kv_presets_follow_from_the_shapes():
    for name, model in MODELS.items():
        assert PRESETS[name] == model.kv()
    assert PRESETS["qwen2.5-1.5b"].bytes_per_token == 28672
    assert "deepseek-v3" in PRESETS and "deepseek-v3" not in MODELS
    with pytest.raises(ValueError, match="no dense model shape"):
        model_shape("DeepSeek-V3")


def test_tiny_shape_by_hand():
    # q, o: 2 x 4 x 4; k, v: 2 x 4 x (1 x 2); MLP 3 x 4 x 8 -> 144 per layer
    assert TINY.head_dim == 2 and TINY.layer_parameters == 288
    assert TINY.lm_head_parameters == 40 and TINY.parameters == 368
    assert TINY.kv().bytes_per_token == 2 * 2 * 1 * 2 * 2
    assert parse_model_shape("2,4,8,2,1,10").layer_parameters == 288
    assert parse_model_shape("2,4,8,2,1,10,tied").parameters == 328
    with pytest.raises(ValueError, match="expected LAYERS"):
        parse_model_shape("2,4,8")
    with pytest.raises(ValueError, match="divide"):
        ModelShape("bad", 2, 5, 8, 2, 1, 10)


def test_roofline_decode_is_the_larger_roof():
    model = Roofline(TINY, SLOW, overhead_ms=1.0)
    # one decode over 4 cached tokens: pairs 1 x 4 + 1 = 5, context 5, one sampled sequence
    record = SimpleNamespace(prefill_tokens=0, decode_seqs=1, context_tokens=5,
                             reload_tokens=0, scheduled=[(0, 1, 4)], first_tokens=[])
    cost = step_cost(record)
    assert (cost.attention_pairs, cost.sampled_seqs, cost.tokens) == (5, 1, 1)
    # FLOPs 2 x 288 + 2 x 40 + 4 x 2 x 2 x 2 x 5 = 816 at 1000 FLOP/s -> 816 ms
    # bytes (288 + 40) x 2 + 16 x 5 = 736 at 1000 B/s -> 736 ms
    parts = model.parts(record)
    assert parts["compute_ms"] == pytest.approx(816.0)
    assert parts["memory_ms"] == pytest.approx(736.0)
    assert model.step_ms(record) == pytest.approx(1.0 + 816.0)


def test_roofline_prefill_chunk_and_reload():
    model = Roofline(TINY, SLOW, overhead_ms=0.0)
    # a 3-token chunk after 2 computed tokens (pairs 3 x 2 + 6 = 12) that samples, and 4
    # reloaded tokens over a 100 B/s link: 16 x 4 bytes -> 640 ms
    record = {"prefill_tokens": 3, "decode_seqs": 0, "context_tokens": 5, "reload_tokens": 4,
              "scheduled": [(7, 3, 2)], "first_tokens": [7]}
    flops = 2 * 288 * 3 + 2 * 40 * 1 + 4 * 2 * 2 * 2 * 12
    memory = 328 * 2 + 16 * 5
    assert model.parts(record)["compute_ms"] == pytest.approx(flops * 1e3 / 1000)
    assert model.step_ms(record) == pytest.approx(max(flops, memory) + 640.0)
    fp8 = Roofline(TINY, SLOW, overhead_ms=0.0, weights="fp8")
    assert fp8.parts(record)["compute_ms"] == pytest.approx(flops * 1e3 / 2000)
    assert fp8.parts(record)["memory_ms"] == pytest.approx((328 + 80) * 1e3 / 1000)


def test_roofline_real_presets_and_labels():
    llama = Roofline(model_shape("Llama-3.1-8B"), gpu_preset("H100"), overhead_ms=0.0)
    decode = llama.step_ms(StepCost(0, 1, 1))
    # one decode reads every weight once: (6.98e9 + 0.53e9) x 2 bytes / 3.35e12 B/s
    assert decode == pytest.approx(2 * 7.5049e9 / 3.35e12 * 1e3, rel=1e-3)
    # 8192 prefill tokens: compute-bound, above 2 x 6.98e9 x 8192 / 989.4e12
    prefill = llama.step_ms(StepCost(8192, 0, 8192, attention_pairs=8192 * 8193 // 2,
                                     sampled_seqs=1))
    assert prefill > 2 * 6.98e9 * 8192 / 989.4e12 * 1e3 > decode
    assert llama.label.startswith("roofline (H100, Llama-3.1-8B")
    assert "not measured" in llama.provenance and "assumed" in llama.provenance
    h200 = Roofline(model_shape("Llama-3.1-8B"), gpu_preset("h200"), overhead_ms=0.0)
    assert h200.step_ms(StepCost(0, 1, 1)) < decode          # faster HBM, same weights
    with pytest.raises(ValueError, match="no fp8"):
        Roofline(TINY, gpu_preset("A100"), weights="fp8")


def test_gpu_presets_and_custom():
    for name in ("A100", "H100", "H200", "L40S", "L4"):
        gpu = gpu_preset(name)
        assert gpu.bf16_tflops > 0 and gpu.hbm_gbps > gpu.host_link_gbps > 0
    with pytest.raises(ValueError, match="expected one of"):
        gpu_preset("V100")
    with pytest.raises(ValueError, match="--gpu-tflops"):
        custom_gpu(None, hbm_gbps=100.0, host_link_gbps=10.0)
    faster = custom_gpu(gpu_preset("L4"), hbm_gbps=600.0)
    assert faster.hbm_gbps == 600.0 and faster.bf16_tflops == 121.0


def _fitted(tmp_path, **changes):
    document = {"kind": "fitted-step-time", "version": 1, "engine": "vllm-0.33.0",
                "served_model": "Qwen/Qwen2.5-1.5B", "kv_bytes_per_token": 28672,
                "coefficients": {"fixed_ms": 3.0, "prefill_token_ms": 0.02,
                                 "context_token_ms": 0.001, "decode_seq_ms": 0.1,
                                 "reload_token_ms": 0.004},
                "stderr": {"fixed_ms": 0.5, "prefill_token_ms": 0.001, "context_token_ms": 0.0,
                           "decode_seq_ms": 0.01, "reload_token_ms": 0.0005},
                "unidentified": [], "prompt_tokens_range": [100, 4000],
                "source": ["measured.jsonl"], "holdout": {}}
    document.update(changes)
    path = tmp_path / "fit.json"
    path.write_text(json.dumps(document, indent=2))
    return path


def test_fitted_file_gives_the_linear_model(tmp_path):
    model = load_latency(_fitted(tmp_path))
    record = SimpleNamespace(prefill_tokens=100, decode_seqs=10, context_tokens=2000,
                             reload_tokens=50)
    assert model.step_ms(record) == pytest.approx(3.0 + 2.0 + 2.0 + 1.0 + 0.2)
    assert model.label == "fitted (fit.json: vllm-0.33.0, Qwen/Qwen2.5-1.5B)"
    assert "measured.jsonl" in model.provenance and "±" in model.provenance
    assert model.range_note([100, 4000]) is None
    assert "1 of 2 prompts" in model.range_note([50, 200])


def test_fitted_unidentified_is_zero_with_a_note(tmp_path):
    coefficients = {"fixed_ms": 3.0, "prefill_token_ms": 0.02, "context_token_ms": 0.001,
                    "decode_seq_ms": 0.1, "reload_token_ms": None}
    model = load_latency(_fitted(tmp_path, coefficients=coefficients,
                                 unidentified=["reload_token_ms"]))
    assert model.coefficients["reload_token_ms"] == 0.0
    assert model.notes == ("reload_token_ms was not identified by the fit: taken as 0 ms",)


@pytest.mark.parametrize("changes, message", [
    ({"kind": "other"}, "not a fitted step-time file"),
    ({"version": 2}, "version 2"),
    ({"coefficients": {"fixed_ms": 1.0}}, "lacks prefill_token_ms"),
    ({"coefficients": {"fixed_ms": "x", "prefill_token_ms": 0, "context_token_ms": 0,
                       "decode_seq_ms": 0, "reload_token_ms": 0}}, "coefficients.fixed_ms"),
    ({"unidentified": ["nope"]}, "unidentified"),
    ({"prompt_tokens_range": [9, 1]}, "prompt_tokens_range"),
    ({"kv_bytes_per_token": 0}, "kv_bytes_per_token"),
])
def test_bad_fitted_files_name_the_file_and_field(tmp_path, changes, message):
    path = _fitted(tmp_path, **changes)
    with pytest.raises(ValueError, match=message) as info:
        load_latency(path)
    assert str(info.value).startswith(str(path))


def test_not_json_names_the_line(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{\n  "kind": \n}')
    with pytest.raises(ValueError, match=r"bad\.json:3: not JSON"):
        load_latency(path)


def _args(*argv):
    parser = argparse.ArgumentParser()
    add_kv_arguments(parser)
    add_latency_arguments(parser)
    return parser.parse_args(list(argv))


def test_options_choose_the_model(tmp_path):
    assert latency_from_args(_args()) is None
    roofline = latency_from_args(_args("--latency", "roofline", "--model", "llama-3.1-8b",
                                       "--gpu-type", "L4"))
    assert isinstance(roofline, Roofline) and roofline.label.startswith("roofline (L4,")
    custom = latency_from_args(_args("--latency", "roofline", "--gpu-type", "custom",
                                     "--gpu-tflops", "100", "--gpu-hbm-gbps", "1000",
                                     "--host-link-gbps", "25", "--model-shape",
                                     "2,4,8,2,1,10"))
    assert custom.gpu.hbm_gbps == 1000 and custom.model.layer_parameters == 288
    fitted = latency_from_args(_args("--latency", str(_fitted(tmp_path))))
    assert isinstance(fitted, Linear)


@pytest.mark.parametrize("argv, message", [
    (["--latency", "roofline", "--gpu-type", "V100"], "--gpu-type: unknown GPU"),
    (["--latency", "roofline", "--gpu-type", "custom"], "--gpu-type: a custom GPU needs"),
    (["--latency", "roofline", "--model", "deepseek-v3"], "--model: DeepSeek-V3"),
    (["--latency", "roofline", "--kv-shape", "28,2,128"], "--model-shape"),
    (["--latency", "roofline", "--gpu-type", "A100", "--weights", "fp8", "--model",
      "qwen2.5-1.5b"], "--weights"),
    (["--latency", "missing.json"], "--latency: missing.json: cannot read"),
])
def test_bad_options_name_the_option(argv, message):
    with pytest.raises(CLIError, match=message):
        latency_from_args(_args(*argv))


def test_fast_path_equals_parts():
    model = Roofline(model_shape("Qwen2.5-7B"), gpu_preset("L40S"), overhead_ms=1.5)
    record = SimpleNamespace(prefill_tokens=700, decode_seqs=3, context_tokens=5000,
                             reload_tokens=64, scheduled=[(0, 500, 1000), (1, 200, 0),
                                                          (2, 1, 99), (3, 1, 3000), (4, 1, 1)],
                             first_tokens=[1])
    parts = model.parts(record)
    slow = parts["overhead_ms"] + max(parts["compute_ms"], parts["memory_ms"]) + parts["reload_ms"]
    assert model.step_ms(record) == pytest.approx(slow, rel=1e-12)
    assert model.step_ms(record) == model.step_ms(record)


def test_fitted_attention_pair_coefficient(tmp_path):
    coefficients = {"fixed_ms": 1.0, "prefill_token_ms": 0.0, "context_token_ms": 0.0,
                    "decode_seq_ms": 0.0, "reload_token_ms": 0.0, "attention_pair_ms": 0.5}
    model = load_latency(_fitted(tmp_path, coefficients=coefficients))
    # pairs: 3 x 2 + 3 x 4 / 2 = 12 and 1 x 9 + 1 = 10
    record = SimpleNamespace(prefill_tokens=3, decode_seqs=1, context_tokens=15,
                             reload_tokens=0, scheduled=[(0, 3, 2), (1, 1, 9)],
                             first_tokens=[0])
    assert model.step_ms(record) == pytest.approx(1.0 + 0.5 * 22)
    with pytest.raises(ValueError, match="scheduled"):
        model.step_ms(StepCost(3, 1, 15))
    assert "attention_pair_ms" in model.provenance
    old = load_latency(_fitted(tmp_path))          # five coefficients: pairs cost nothing
    assert "attention_pair_ms" not in old.coefficients


def test_decode_only_steps_take_the_context_as_pairs():
    model = Roofline(model_shape("Qwen2.5-7B"), gpu_preset("L4"), overhead_ms=0.5)
    scheduled = [(0, 1, 99), (3, 1, 3000), (4, 1, 1)]
    record = SimpleNamespace(prefill_tokens=0, decode_seqs=3, context_tokens=100 + 3001 + 2,
                             reload_tokens=0, scheduled=scheduled, first_tokens=[])
    assert step_cost(record).attention_pairs == sum(p + 1 for _, _, p in scheduled)
    parts = model.parts(SimpleNamespace(**{**vars(record), "prefill_tokens": 0}))
    assert model.step_ms(record) == pytest.approx(
        0.5 + max(parts["compute_ms"], parts["memory_ms"]))


@pytest.mark.parametrize("model", [
    Roofline(model_shape("Llama-3.1-8B"), gpu_preset("H100"), overhead_ms=1.0),
    Roofline(TINY, SLOW, overhead_ms=0.0),
    Roofline(model_shape("Llama-3.1-70B"), gpu_preset("L40S"), 1.0, tensor_parallel=4),
    Linear({"fixed_ms": 2.0, "prefill_token_ms": 0.1, "context_token_ms": 0.001,
            "decode_seq_ms": 0.3, "reload_token_ms": 0.0, "attention_pair_ms": 1e-4})])
def test_decode_run_equals_each_step(model):
    n, base, count = 7, 5000, 50
    run = model.decode_run_ms(n, base, count)
    for j in (0, 1, 17, 49):
        befores = [10 + j] * (n - 1) + [base - n - 10 * (n - 1) + j]
        record = SimpleNamespace(prefill_tokens=0, decode_seqs=n, context_tokens=base + n * j,
                                 reload_tokens=0, scheduled=[(i, 1, b) for i, b in
                                                             enumerate(befores)],
                                 first_tokens=[])
        assert sum(b + 1 for b in befores) == base + n * j
        assert run[j] == model.step_ms(record)           # bit for bit
