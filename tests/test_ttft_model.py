"""The TTFT model: recovers known parameters, detects what the data cannot identify."""

from __future__ import annotations

import functools
import math
import statistics

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.ttft.model import (PARAMETERS, TOKEN_COLUMNS, FitError, fit_config, fit_configs,
                                 predict_pass_ttft, residuals_by_pass)

TRUE = {"overhead_ms": 20.0, "recompute_fixed_ms": 15.0, "recompute_ms_per_token": 0.05,
        "attention_ms_per_token2": 2e-6, "cpu_ms_per_token": 0.004, "gpu_ms_per_token": 0.001}


def ttft(params: dict, gpu, cpu, miss):
    context = gpu + cpu + miss
    return (params["overhead_ms"] + params["recompute_fixed_ms"] * (miss > 0)
            + params["recompute_ms_per_token"] * miss
            + params["attention_ms_per_token2"] * miss * context
            + params["cpu_ms_per_token"] * cpu + params["gpu_ms_per_token"] * gpu)


def requests(rng: np.random.Generator, n: int, params: dict, noise: float,
             lengths=(500, 20000)) -> pl.DataFrame:
    """Prompts of random length split at random into a GPU prefix, CPU middle, miss tail."""
    context = rng.integers(*lengths, size=n)
    cuts = np.sort(rng.integers(0, context[:, None] + 1, size=(n, 2)), axis=1)
    gpu, cpu = cuts[:, 0], cuts[:, 1] - cuts[:, 0]
    miss = context - cuts[:, 1]
    full_hit = rng.random(n) < 0.2                     # some requests recompute nothing
    cpu, miss = np.where(full_hit, cpu + miss, cpu), np.where(full_hit, 0, miss)
    y = ttft(params, gpu, cpu, miss) + rng.normal(0, noise, n)
    return pl.DataFrame({"config": "lmcache", "pass": "p", "gpu_tokens": gpu,
                         "cpu_tokens": cpu, "miss_tokens": miss, "ttft_ms": y})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_least_squares_recovers_known_parameters(seed):
    data = requests(np.random.default_rng(seed), 400, TRUE, noise=2.0)
    model = fit_config("lmcache", data)
    assert model.method == "least squares" and not model.not_identifiable
    for name in PARAMETERS:
        error = abs(model.params[name] - TRUE[name])
        assert error <= 5 * model.stderr[name], (name, model.params[name], model.stderr[name])
        assert model.stderr[name] < 0.5 * TRUE[name] + 1e-12, name      # informative
    bandwidth, se = model.reload_bandwidth_gbps(28672)
    assert abs(bandwidth - 28672 / 0.004e-3 / 1e9) <= 5 * se


@settings(max_examples=8)
@given(st.floats(0, 100), st.floats(0, 50), st.floats(1e-3, 0.2), st.floats(0, 1e-5),
       st.floats(1e-4, 0.02), st.floats(0, 0.005), st.integers(0, 2**31))
def test_recovery_for_any_parameters(overhead, fixed, per_token, attention, cpu, gpu, seed):
    params = dict(zip(PARAMETERS, (overhead, fixed, per_token, attention, cpu, gpu)))
    model = fit_config("x", requests(np.random.default_rng(seed), 300, params, noise=1.0))
    for name in PARAMETERS:
        assert abs(model.params[name] - params[name]) <= 6 * model.stderr[name] + 1e-9, name


def test_noise_free_fit_is_exact():
    data = requests(np.random.default_rng(5), 50, TRUE, noise=0.0)
    model = fit_config("x", data)
    for name in PARAMETERS:
        assert model.params[name] == pytest.approx(TRUE[name], rel=1e-6, abs=1e-9)


def lab_like(rng: np.random.Generator, tiers: list[str], tokens: int = 4864) -> pl.DataFrame:
    """Whole-document requests of one length: the bundled lab file's shape."""
    ms = {"gpu": 30.0, "cpu": 48.0, "miss": 576.0}
    return pl.DataFrame({
        "config": "lmcache", "pass": "p",
        **{f"{t}_tokens": [tokens if tier == t else 0 for tier in tiers] for t in ms},
        "ttft_ms": [ms[tier] + rng.normal(0, 1) for tier in tiers]})


def test_one_document_length_identifies_no_per_token_cost():
    data = lab_like(np.random.default_rng(0), ["miss"] * 10 + ["cpu"] * 16 + ["gpu"] * 4)
    model = fit_config("lmcache", data)
    assert model.method == "per-tier medians"
    assert {"recompute_ms_per_token", "attention_ms_per_token2", "cpu_ms_per_token",
            "overhead_ms"} <= set(model.not_identifiable)
    assert model.tier_ms["miss"] == pytest.approx(576, abs=3)
    assert model.reference_tokens == 4864
    assert any("falling back to the per-tier medians" in note for note in model.notes)
    assert model.whole_request_ms(4864)["cpu"] == pytest.approx(model.tier_ms["cpu"])


def test_two_miss_lengths_fall_back_to_the_linear_model():
    rng = np.random.default_rng(3)
    n = 120
    tier = rng.choice(["gpu", "cpu", "miss"], n)
    length = np.where(tier == "miss", rng.choice([2000, 8000], n), rng.integers(500, 9000, n))
    linear = {**TRUE, "recompute_fixed_ms": 0.0, "attention_ms_per_token2": 0.0}
    frame = {f"{t}_tokens": np.where(tier == t, length, 0) for t in ("gpu", "cpu", "miss")}
    y = ttft(linear, frame["gpu_tokens"], frame["cpu_tokens"], frame["miss_tokens"])
    data = pl.DataFrame({**frame, "ttft_ms": y + rng.normal(0, 0.5, n)})
    model = fit_config("x", data)
    assert model.method == "least squares"
    assert set(model.not_identifiable) >= {"recompute_fixed_ms", "attention_ms_per_token2"}
    assert "recompute_fixed_ms" not in model.params
    assert model.params["cpu_ms_per_token"] == pytest.approx(0.004, abs=5 *
                                                             model.stderr["cpu_ms_per_token"])


def test_not_exercised_parameters_are_left_out():
    data = lab_like(np.random.default_rng(1), ["miss"] * 20 + ["gpu"] * 10)
    model = fit_config("baseline", data)
    assert "cpu_ms_per_token" in model.not_exercised


def test_fewer_points_than_parameters():
    data = requests(np.random.default_rng(0), 4, TRUE, noise=1.0)
    with pytest.raises(FitError, match="fewer points than parameters"):
        fit_config("lmcache", data)
    with pytest.raises(FitError, match="no requests"):
        fit_config("lmcache", data.head(0))


def test_missing_tier_is_borrowed_from_the_other_config():
    rng = np.random.default_rng(2)
    base = lab_like(rng, ["miss"] * 20 + ["gpu"] * 10).with_columns(config=pl.lit("baseline"))
    off = lab_like(rng, ["miss"] * 10 + ["cpu"] * 16 + ["gpu"] * 4)
    models = fit_configs(pl.concat([base, off]))
    assert models["baseline"].tier_ms["cpu"] == models["lmcache"].tier_ms["cpu"]
    assert any("lmcache's median" in note for note in models["baseline"].notes)
    table = residuals_by_pass(pl.concat([base, off]), models)
    assert table.height == 2 and table["error_mean_pct"].abs().max() < 5


@functools.cache
def two_configs():
    return fit_configs(pl.concat([
        lab_like(np.random.default_rng(0), ["miss"] * 5 + ["gpu"] * 5)
        .with_columns(config=pl.lit("baseline")),
        lab_like(np.random.default_rng(1), ["miss"] * 5 + ["cpu"] * 5 + ["gpu"] * 3)]))


@settings(max_examples=60)
@given(st.integers(0, 30), st.integers(0, 30), st.integers(0, 30), st.integers(0, 1))
def test_pass_p50_from_counts_is_the_median_of_the_requests(gpu, cpu, miss, offload):
    models = two_configs()
    row = pl.DataFrame({"cpu_capacity": [offload * 1000], "gpu_hits": [gpu], "cpu_hits": [cpu],
                        "misses": [miss]})
    got = predict_pass_ttft(row, models, 4864).row(0, named=True)
    whole = models["lmcache" if offload else "baseline"].whole_request_ms(4864)
    values = [whole["gpu"]] * gpu + [whole["cpu"]] * cpu + [whole["miss"]] * miss
    if not values:
        assert got["predicted_p50_ms"] is None and got["predicted_mean_ms"] is None
        return
    assert got["predicted_p50_ms"] == pytest.approx(statistics.median(values))
    assert got["predicted_mean_ms"] == pytest.approx(statistics.fmean(values))
    assert not math.isnan(got["predicted_mean_ms"])


def test_token_columns_are_the_contract():
    assert TOKEN_COLUMNS == ("gpu_tokens", "cpu_tokens", "miss_tokens")


def test_lab_file_is_within_ten_percent_on_every_pass():
    from conftest import ROOT
    from pipeline.ttft.model import measured_requests

    requests = measured_requests(str(ROOT / "data" / "ttft.jsonl"), 21520, 56000, 5011)
    table = residuals_by_pass(requests, fit_configs(requests))
    assert table.height == 6
    assert table["error_p50_pct"].abs().max() < 10 and table["error_mean_pct"].abs().max() < 10


def test_predicted_columns_on_the_sweep_aggregates():
    """The Parquet columns the sweeps get: second pass along the CPU cliff at GPU 21520."""
    from conftest import ROOT
    from pipeline.sweeps import Sweep, aggregate, run_sweep
    from pipeline.ttft.model import measured_requests
    from pipeline.workloads.documents import DocumentWorkload

    models = fit_configs(measured_requests(str(ROOT / "data" / "ttft.jsonl"), 21520, 56000,
                                           5011))
    sweep = Sweep("cpu_cliff", (21520,), (0, 50109, 50110))
    rows = predict_pass_ttft(aggregate(run_sweep(DocumentWorkload(), sweep)), models, 5011)
    second = {row["cpu_capacity"]: row for row in rows.filter(pl.col("pass_index") == 1)
              .iter_rows(named=True)}
    assert second[0]["predicted_p50_ms"] == pytest.approx(576.3, abs=0.1)     # baseline recompute
    assert second[50109]["predicted_p50_ms"] == pytest.approx(601.7, abs=0.1)  # lmcache recompute
    assert second[50110]["predicted_p50_ms"] == pytest.approx(48.1, abs=0.1)   # CPU reloads
    third = rows.filter(pl.col("pass_index") == 2, pl.col("cpu_capacity") == 50110).row(
        0, named=True)
    assert third["predicted_mean_ms"] == pytest.approx((4 * 31.085 + 6 * 48.145) / 10)


def test_per_request_predictions_pick_the_config_by_cpu_capacity():
    from pipeline.ttft.model import predicted_ttft

    models = two_configs()
    frame = pl.DataFrame({"cpu_capacity": [0, 0, 100, 100, 100], "pass": ["a"] * 5,
                          "gpu_tokens": [0, 100, 0, 0, 50], "cpu_tokens": [0, 0, 100, 0, 50],
                          "miss_tokens": [100, 0, 0, 100, 0]})
    table = (frame.with_columns(predicted_ms=predicted_ttft(models))
             .group_by("cpu_capacity", "pass")
             .agg(predicted_p50_ms=pl.col("predicted_ms").median(),
                  predicted_mean_ms=pl.col("predicted_ms").mean()).sort("cpu_capacity"))
    base, off = models["baseline"].tier_ms, models["lmcache"].tier_ms
    assert table["predicted_mean_ms"].to_list() == pytest.approx([
        (base["miss"] + base["gpu"]) / 2,
        (off["cpu"] + off["miss"] + (off["gpu"] + off["cpu"]) / 2) / 3])
    assert table["predicted_p50_ms"][1] == pytest.approx(off["cpu"])


def test_identifiable_from_the_null_space():
    from pipeline.steptime.regression import identifiable

    t = np.array([1.0, 2.0, 3.0, 4.0])
    ok, rank = identifiable(np.column_stack([np.ones(4), t]))
    assert ok.tolist() == [True, True] and rank == 2
    # a third column equal to the sum of two others: those three are confounded, t is not
    a = np.array([1.0, 0.0, 1.0, 0.0])
    ok, rank = identifiable(np.column_stack([np.ones(4), a, 1 - a, t]))
    assert ok.tolist() == [False, False, False, True] and rank == 3
    ok, _ = identifiable(np.column_stack([np.ones(4), t, np.zeros(4)]))
    assert ok.tolist() == [True, True, False]       # an all-zero column identifies nothing


def test_block_mode_request_frames_fit_directly():
    """The block engine's per-request result (pipeline.blocks) renamed to TOKEN_COLUMNS is
    fit input as it is: partial hits at several lengths make every cost identifiable."""
    from pipeline.catalog.model_api import two_tier
    from pipeline.workloads.stream import block_stream
    from pipeline.workloads.blocks import BLOCK_SCHEMA

    rng = np.random.default_rng(11)
    length = {doc: int(n) for doc, n in enumerate(rng.integers(200, 2000, 12))}
    rows = [(r, i, doc * 1000 + i, min(16, length[doc] - 16 * i))
            for r, doc in enumerate(int(d) for d in rng.integers(0, 12, 200))
            for i in range(-(-length[doc] // 16))]
    blocks = pl.DataFrame(rows, schema=list(BLOCK_SCHEMA), orient="row").cast(BLOCK_SCHEMA)
    stream = block_stream(blocks, 16)
    result = two_tier(stream, 3000, 6000, "tail-first", "head-first")
    frame = result.select(gpu_tokens="gpu_hit_tokens", cpu_tokens="cpu_hit_tokens",
                          miss_tokens="miss_tokens")
    linear = {**TRUE, "recompute_fixed_ms": 0.0, "attention_ms_per_token2": 0.0}
    y = ttft(linear, *(frame[c].to_numpy() for c in TOKEN_COLUMNS))
    model = fit_config("lmcache", frame.with_columns(ttft_ms=y + rng.normal(0, 0.2, len(y))))
    assert model.method == "least squares"
    assert model.params["cpu_ms_per_token"] == pytest.approx(0.004, abs=5 * model.stderr[
        "cpu_ms_per_token"])
