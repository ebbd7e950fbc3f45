"""--latency profile:DIR: vidur-format profiles priced per batch (the committed H100 MLP
sample, an attention profile built here from a known formula), refused outside the measured
range or when a file, a column or the model does not match; the interpolation's held-out
error stays small on every committed profile."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

from conftest import ROOT
from pipeline.base.errors import UsageError
from pipeline.steptime.profile import LAYER_OPERATIONS, read_profile

SAMPLE = ROOT / "data" / "profiles" / "vidur" / "h100" / "Llama-2-7b-hf" / "mlp.csv"
LLAMA_2_7B = {"hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
              "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 32000}


def prefill_ms(kv, chunk):
    return 0.01 + 1e-5 * kv + 2e-8 * chunk * chunk


def decode_ms(batch, context):
    return 0.005 + 1e-4 * batch + 3e-7 * batch * context


@pytest.fixture()
def profile(tmp_path):
    folder = tmp_path / "profile"
    folder.mkdir()
    shutil.copy(SAMPLE, folder / "mlp.csv")
    rows = [dict(batch_size=1, prefill_chunk_size=c, kv_cache_size=k, n_embd=4096,
                 num_tensor_parallel_workers=1, **{"time_stats.attn_prefill.median":
                                                   prefill_ms(k, c),
                                                   "time_stats.attn_decode.median": None})
            for c, k in itertools.product((16, 256, 1024, 4096), (0, 1024, 4096))]
    rows += [dict(batch_size=b, prefill_chunk_size=0, kv_cache_size=k, n_embd=4096,
                  num_tensor_parallel_workers=1, **{"time_stats.attn_prefill.median": None,
                                                    "time_stats.attn_decode.median":
                                                    decode_ms(b, k)})
             for b, k in itertools.product((1, 32, 256), (128, 4096, 8192))]
    pl.DataFrame(rows).write_csv(folder / "attention.csv")
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA_2_7B))
    return folder, config


def _args(config, **more):
    return SimpleNamespace(model_config=str(config), model=None, max_num_batched_tokens=4096,
                           step_overhead_ms=1.0, gpu_type="H100", **more)


def test_a_batch_is_the_sum_of_its_measured_operations(profile):
    folder, config = profile
    model = read_profile(str(folder), _args(config))
    mlp = pl.read_csv(SAMPLE).filter(pl.col("num_tensor_parallel_workers") == 1,
                                     pl.col("num_tokens") == 1024)
    layer = float(mlp.select(pl.sum_horizontal(
        *(f"time_stats.{op}.median" for op in LAYER_OPERATIONS))).median().item())
    emb = float(mlp["time_stats.emb.median"].median())
    # a 1000-token chunk after 500 cached tokens, with 24 decodes at context 2,000
    record = SimpleNamespace(prefill_tokens=1000, decode_seqs=24, context_tokens=0,
                             reload_tokens=0, first_tokens=[],
                             scheduled=[(0, 1000, 500)] + [(i, 1, 1999) for i in range(1, 25)])
    attention = prefill_ms(500, 1000) + decode_ms(24, 2000)
    assert model.step_ms(record) == pytest.approx(1.0 + 32 * (layer + attention) + emb,
                                                  rel=1e-9)
    assert model.label.startswith("profile (profile, ") and "TP 1" in model.label


def test_outside_the_measured_range_is_refused_not_extrapolated(profile):
    folder, config = profile
    model = read_profile(str(folder), _args(config))
    long_context = SimpleNamespace(prefill_tokens=0, decode_seqs=1, context_tokens=9000,
                                   reload_tokens=0, first_tokens=[], scheduled=[(0, 1, 8999)])
    with pytest.raises(UsageError, match="outside the profile's measured range"):
        model.step_ms(long_context)
    with pytest.raises(UsageError, match="--max-num-batched-tokens 8192 is beyond"):
        read_profile(str(folder), SimpleNamespace(**{**vars(_args(config)),
                                                     "max_num_batched_tokens": 8192}))


@pytest.mark.parametrize("breaks,message", [
    (lambda folder: (folder / "attention.csv").unlink(), "lacks attention.csv"),
    (lambda folder: pl.read_csv(folder / "mlp.csv").drop("time_stats.mlp_act.median")
     .write_csv(folder / "mlp.csv"), "lacks the column time_stats.mlp_act.median"),
])
def test_a_missing_file_or_column_is_named(profile, breaks, message):
    folder, config = profile
    breaks(folder)
    with pytest.raises(UsageError, match=message):
        read_profile(str(folder), _args(config))


def test_the_command_runs_and_refuses_in_one_line(profile, tmp_path):
    folder, config = profile
    base = [sys.executable, "-m", "pipeline", "simulate", "--pattern", "multi-tenant",
            "--document-length", "1000", "--output-tokens", "16",
            "--rate", "4", "--gpu", "4GiB", "--model-config", str(config),
            "--latency", f"profile:{folder}"]
    done = subprocess.run([*base, "--max-num-batched-tokens", "4096", "--out",
                           str(tmp_path / "ok")], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    metrics = json.loads((tmp_path / "ok" / "metrics.json").read_text())
    assert metrics["step_time_model"].startswith("profile") and metrics["tpot_ms_p50"] > 0
    for argv, message in (([], "--max-num-batched-tokens 8192 is beyond"),
                          (["--max-num-batched-tokens", "4096", "--tensor-parallel-size",
                            "2"], "attention.csv needs prefill and decode rows at --tensor-parallel-size 2")):
        done = subprocess.run([*base, *argv, "--out", str(tmp_path / "bad")],
                              capture_output=True, text=True, cwd=ROOT)
        assert done.returncode == 2 and message in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1 and not (tmp_path / "bad").exists()


def test_interpolation_holds_out_well_on_every_committed_profile():
    sys.path.insert(0, str(ROOT / "scripts"))
    from profile_holdout import holdout
    rows = [row for path in sorted((ROOT / "data" / "profiles" / "vidur").glob("*/*/mlp.csv"))
            for row in holdout(path)]
    assert len(rows) == 16
    assert max(r["median_pct"] for r in rows) < 2.0 and max(r["p90_pct"] for r in rows) < 6.0
    assert np.isfinite([r["max_pct"] for r in rows]).all()
