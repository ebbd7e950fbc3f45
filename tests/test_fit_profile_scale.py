"""fit --vllm-bench --profile DIR: the scale of a measured profile's GPU milliseconds,
recovered from a vllm bench serve result that ``simulate`` wrote on the same profile with
every time 1.3 times longer, and read back by ``--latency FILE``."""

from __future__ import annotations

import importlib.util
import itertools
import json

import polars as pl
import pytest

from conftest import ROOT
from pipeline.cli import main as cli_main
from test_profile_latency import LLAMA_2_7B, SAMPLE, decode_ms, prefill_ms

_spec = importlib.util.spec_from_file_location("synth_vllm_bench",
                                               ROOT / "scripts" / "synth_vllm_bench.py")
synth = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(synth)

SCALE = 1.3


def _profile(folder, scale: float) -> None:
    """The H100 Llama-2-7B MLP sample and an attention profile of a known formula, every
    measured time x ``scale``."""
    folder.mkdir()
    times = pl.col("^time_stats.*$") * scale
    pl.read_csv(SAMPLE).with_columns(times).write_csv(folder / "mlp.csv")
    rows = [dict(batch_size=1, prefill_chunk_size=c, kv_cache_size=k, n_embd=4096,
                 num_tensor_parallel_workers=1,
                 **{"time_stats.attn_prefill.median": prefill_ms(k, c),
                    "time_stats.attn_decode.median": None})
            for c, k in itertools.product((16, 256, 1024, 4096), (0, 1024, 4096))]
    rows += [dict(batch_size=b, prefill_chunk_size=0, kv_cache_size=k, n_embd=4096,
                  num_tensor_parallel_workers=1,
                  **{"time_stats.attn_prefill.median": None,
                     "time_stats.attn_decode.median": decode_ms(b, k)})
             for b, k in itertools.product((1, 32, 256), (128, 4096, 8192))]
    pl.DataFrame(rows).with_columns(times).write_csv(folder / "attention.csv")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("profile-scale")
    _profile(root / "measured", 1.0)
    _profile(root / "slower", SCALE)
    config = root / "config.json"
    config.write_text(json.dumps(LLAMA_2_7B))
    bench = root / "bench.json"
    synth.synthesize(bench, model="", gpu_type="H100", mfu=1, mbu=1, num_prompts=40,
                     input_len=1024, output_len=32, range_ratio=0.5, rate=2.0, seed=0,
                     step_model=["--latency", f"profile:{root / 'slower'}",
                                 "--model-config", str(config)], batched=4096)
    return root, config, bench


def test_the_scale_is_recovered_and_read_back(setup, tmp_path, capsys):
    root, config, bench = setup
    out = tmp_path / "scale.json"
    assert cli_main(["fit", "--vllm-bench", str(bench), "--model-config", str(config),
                     "--profile", str(root / "measured"), "--max-num-batched-tokens", "4096",
                     "--output", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["kind"] == "profile-scale" and doc["directory"] == str(root / "measured")
    assert doc["scale"]["value"] == pytest.approx(SCALE, rel=0.01)
    assert "profile scale" in capsys.readouterr().out
    common = ["simulate", "data/simulate/chat.jsonl", "--block-size", "4", "--gpu",
              "64blocks", "--rate", "2", "--model-config", str(config),
              "--max-num-batched-tokens", "4096"]
    assert cli_main([*common, "--latency", str(out), "--out", str(tmp_path / "a")]) == 0
    assert cli_main([*common, "--latency", f"profile:{root / 'slower'}",
                     "--out", str(tmp_path / "b")]) == 0
    a, b = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in "ab")
    assert a["ttft_ms_p90"] == pytest.approx(b["ttft_ms_p90"], rel=0.01)
    assert "x1.3" in a["step_time_model"] and str(out) in a["provenance"]


def test_roofline_factors_do_not_mix_with_a_profile(setup, tmp_path, capsys):
    root, config, bench = setup
    assert cli_main(["fit", "--vllm-bench", str(bench), "--model-config", str(config),
                     "--profile", str(root / "measured"), "--mfu-prefill", "0.5",
                     "--output", str(tmp_path / "x.json")]) == 2
    assert "--mfu-prefill" in capsys.readouterr().err
