"""TPOT, ITL and goodput of a timed run, against each token's own emission time."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings, strategies as st

from pipeline.engine.config import SchedulerConfig
from pipeline.engine.loop import simulate
from pipeline.engine.request import SimRequest
from pipeline.steptime.tpot import goodput, token_metrics, token_times, weighted_percentile


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 100, allow_nan=False), st.integers(0, 4)), min_size=1,
                max_size=12).filter(lambda pairs: sum(w for _, w in pairs) > 0),
       st.sampled_from([0, 10, 50, 90, 99, 100]))
def test_weighted_percentile_is_numpys_over_the_repeated_values(pairs, q):
    values = np.array([v for v, _ in pairs])
    weights = np.array([w for _, w in pairs])
    assert weighted_percentile(values, weights, q) == pytest.approx(
        np.percentile(np.repeat(values, weights), q), abs=1e-9)


def _requests(seed: int) -> list[SimRequest]:
    rng = np.random.default_rng(seed)
    return [SimRequest(i, rng.integers(0, 50, int(rng.integers(4, 60))).tolist(),
                       int(rng.integers(1, 12)), arrival_s=0.002 * i) for i in range(40)]


def _run(seed: int, engine: str):
    """A crowded run (preemptions or retractions, chunked prefills taking the budget, SGLang's
    prefill batches between decodes) on a Python step-time model, every executed batch kept:
    the truth of each token's time."""
    requests, records = _requests(seed), []

    def step_ms(record):
        records.append(record)
        return 1.0 + 0.05 * record.prefill_tokens + 0.3 * record.decode_seqs

    if engine == "sglang":
        from pipeline.components.sglang_settings import SchedulerSettings
        from pipeline.engine.sglang import SGLangConfig, simulate as sglang_simulate
        config = SGLangConfig(24, 128, 4, SchedulerSettings(
            max_total_tokens=24 * 4 + 40, page_size=1, chunked_prefill_size=24,
            max_prefill_tokens=24))
        return requests, records, sglang_simulate(requests, config, clock="time",
                                                  step_ms=step_ms)
    config = SchedulerConfig(num_gpu_blocks=24, max_model_len=128, block_size=4,
                             max_num_batched_tokens=24,
                             async_scheduling=engine == "vllm-async")
    return requests, records, simulate(requests, config, clock="time", step_ms=step_ms)


def _emissions(requests, records, steps: pl.DataFrame) -> dict[int, list[float]]:
    """Each request's token times: a request samples when a batch brings its computed tokens
    to all it holds (prompt + tokens sampled so far), at the batch's end."""
    end = dict(zip(steps["step"].to_list(), (steps["start_ms"] + steps["duration_ms"]).to_list()))
    sampled: dict[int, list[float]] = {r.index: [] for r in requests}
    for record in records:
        for request, new, before in record.scheduled:
            if before + new == len(requests[request].prompt_token_ids) + len(sampled[request]):
                sampled[request].append(end[record.step])
    return sampled


@pytest.mark.parametrize("seed,engine", [(0, "vllm"), (1, "vllm"), (2, "vllm-async"),
                                         (3, "sglang"), (4, "sglang")])
def test_itl_equals_the_gaps_between_each_requests_tokens(seed, engine):
    requests, records, result = _run(seed, engine)
    sampled = _emissions(requests, records, result.steps)
    frame = token_times(result.requests, result.steps)
    unresolved, gaps, skipped = 0, [], 0
    for row in frame.iter_rows(named=True):
        times = sampled[row["request"]]
        assert len(times) == row["output_tokens"]
        assert times[0] == row["first_token_ms"] and times[-1] == row["finish_ms"]
        diffs = np.diff(times)
        if row["output_tokens"] < 2:
            assert row["tpot_ms"] is None and row["itl_max_ms"] is None
            continue
        assert row["tpot_ms"] == pytest.approx(diffs.mean())
        if row["itl_max_ms"] is None:
            unresolved += 1
            assert row["preemptions"] > 0 or engine != "sglang"
            continue
        assert row["itl_max_ms"] == pytest.approx(diffs.max())
        gaps.extend(diffs)
        skipped += row["finish_step"] - row["first_token_step"] > row["output_tokens"] - 1
    metrics = token_metrics(result.requests, result.steps)
    assert unresolved == metrics["itl_unresolved_requests"]
    if engine == "sglang":              # prefill batches between its decodes: resolved
        assert skipped > 0
    else:
        assert unresolved > 0 and result.requests["preemptions"].sum() > 0
    for p in (50, 90, 99):
        assert metrics[f"itl_ms_p{p}"] == pytest.approx(np.percentile(gaps, p))
    assert metrics["itl_ms_mean"] == pytest.approx(np.mean(gaps))


def test_goodput_counts_as_vllm_bench_serve_does():
    requests = pl.DataFrame({"ttft_ms": [10.0, 30.0, 10.0, 10.0],
                             "first_token_ms": [10.0, 30.0, 10.0, 10.0],
                             "finish_ms": [10.0, 60.0, 100.0, 28.0],
                             "output_tokens": [1, 4, 4, 3]})
    # TPOT: 0 (one token), 10, 30, 9
    both = goodput(requests, 2.0, 20.0, 10.0)
    assert both["goodput_requests"] == 2 and both["request_goodput"] == 1.0
    assert goodput(requests, 2.0, None, 10.0)["goodput_fraction"] == 0.75
    assert goodput(requests, 2.0, 20.0, None)["goodput_requests"] == 3


def test_fleet_points_carry_tpot_and_goodput(tmp_path, capsys):
    from pipeline.cli import main
    from pipeline.steptime.tpot import tpot_ms
    out = tmp_path / "out"
    argv = ["fleet", "--pattern", "groups", "--groups", "2", "--users", "2", "--questions", "2",
            "--system-prompt-length", "64", "--question-length", "16", "--output-tokens", "4",
            "--latency", "roofline", "--model", "qwen2.5-1.5b", "--jobs", "1",
            "--router", "round-robin", "--instances", "2", "--gpu", "40blocks",
            "--slo-tpot-ms", "5", "--out", str(out)]
    assert main(argv) == 0
    assert "goodput_fraction" in capsys.readouterr().out
    fleet = pl.read_parquet(out / "fleet.parquet")
    requests = pl.read_parquet(out / "requests")
    tpot = requests.select(tpot_ms().alias("t"))["t"]
    assert fleet["tpot_p90_ms"][0] == tpot.quantile(0.9, "nearest")
    assert fleet["goodput_fraction"][0] == pytest.approx((tpot.fill_null(0) <= 5).mean())
