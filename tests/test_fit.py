"""fit: recovers known step costs from synthetic schedules; bad inputs are one line each."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pipeline.cli import main as cli_main
from pipeline.fit.inputs import Run, prompt_tokens
from pipeline.fit.schedule import FEATURES, EngineModel, serial_schedule, simulate_run
from pipeline.fit.solve import design_rows, fit_runs, identifiability
from pipeline.measure.output import provenance_path

SERIAL = EngineModel(max_num_seqs=1, max_num_batched_tokens=512, block_size=16)


def synthetic_run(rng: np.random.Generator, rate_per_s: float, n: int, true: np.ndarray,
                  noise: float = 0.0, label: str = "rate", bos: bool = True,
                  source=simulate_run, granule: int = 1, concurrency: int | None = None) -> Run:
    """Requests of 300..8000 tokens, half sharing a prefix of the previous prompt's blocks,
    measured by ``source``'s schedule under ``true`` (times times lognormal ``noise``)."""
    arrival = np.cumsum(rng.exponential(1000.0 / rate_per_s, n))
    arrival -= arrival[0]
    ids: list[list[int]] = []
    prompts, next_id = [], 0
    for i in range(n):
        if i and rng.random() < 0.5:
            block_ids = ids[-1][: int(rng.integers(1, len(ids[-1]) + 1))] + [next_id]
            next_id += 1
        else:
            count = int(rng.integers(1, 16))
            block_ids = list(range(next_id, next_id + count))
            next_id += count
        ids.append(block_ids)
        tokens = len(block_ids) * 512 - granule * int(rng.integers(0, 200 // granule))
        prompts.append(prompt_tokens(block_ids, 512, tokens, bos))
    run = Run("synthetic.jsonl", label, {}, list(range(1, n + 1)), arrival, np.zeros(n),
              np.zeros(n), np.array([p.size for p in prompts]),
              rng.integers(2, 12, n), prompts, np.full(n, -1), concurrency=concurrency)
    schedule = source(run, SERIAL, true)
    run.ttft_ms = schedule.ttft_ms() * rng.lognormal(0.0, noise, n)
    run.e2e_ms = np.maximum(schedule.e2e_ms() * rng.lognormal(0.0, noise, n), run.ttft_ms)
    return run


coefficient = st.floats(0.0, 10.0)


@settings(max_examples=10)
@given(fixed=coefficient, prefill=st.floats(0.01, 2.0), context=st.floats(0.0, 0.01),
       decode=coefficient, pairs=st.floats(0.0, 1e-4), seed=st.integers(0, 10_000))
def test_fit_recovers_known_coefficients_from_noise_free_schedules(fixed, prefill, context,
                                                                   decode, pairs, seed):
    true = np.array([fixed, prefill, context, decode, 0.0, pairs])
    rng = np.random.default_rng(seed)
    runs = [synthetic_run(rng, rate, 12, true) for rate in (0.05, 0.5, 5.0)]
    fit = fit_runs(runs, [SERIAL] * 3, [np.ones(r.n, dtype=bool) for r in runs])
    assert fit.converged
    assert fit.unidentified.keys() == {"reload_token_ms"}
    got = fit.vector()
    scale = np.array([1.0, 0.01, 1e-4, 1.0, 1.0, 1e-6])  # absolute tolerance per coefficient
    assert np.all(np.abs(got - true) <= 1e-6 * np.maximum(true, 1.0) + 1e-6 * scale), (got, true)
    # the fitted model reproduces every request's TTFT, queueing included
    for run in runs:
        predicted = simulate_run(run, SERIAL, got).ttft_ms()
        assert np.allclose(predicted, run.ttft_ms, rtol=1e-6, atol=1e-6)


@settings(max_examples=20)
@given(seed=st.integers(0, 10_000))
def test_design_rows_sum_to_simulated_times(seed):
    """On a fixed schedule a request's TTFT is offset + row @ coefficients, exactly."""
    rng = np.random.default_rng(seed)
    true = np.array([2.0, 0.3, 0.001, 5.0, 0.0, 2e-5])
    run = synthetic_run(rng, float(rng.uniform(0.05, 5.0)), 15, true)
    schedule = serial_schedule(run, SERIAL, true)
    rows, offset, _ = design_rows(schedule, schedule.first_token_step)
    assert np.allclose(offset + rows @ true, schedule.ttft_ms())
    assert np.all(offset <= 1e-9)                    # a busy period starts at or before arrival


@settings(max_examples=10)
@given(seed=st.integers(0, 10_000), concurrency=st.integers(1, 3))
def test_closed_loop_runs_are_simulated_as_closed_loops(seed, concurrency):
    """A closed loop's requests arrive as earlier ones finish in the simulation, whatever
    the measured send times say; the fit still recovers the coefficients exactly."""
    true = np.array([2.0, 0.4, 0.001, 3.0, 0.0, 2e-5])
    rng = np.random.default_rng(seed)
    run = synthetic_run(rng, 1.0, 15, true, concurrency=concurrency)
    run.arrival_ms = run.arrival_ms * 0 + 1e9          # ignored in a closed loop
    schedule = simulate_run(run, SERIAL, true)
    finished = np.sort(schedule.end_ms[schedule.finish_step])
    assert np.all(schedule.arrival_ms[:concurrency] == 0)
    assert np.allclose(np.sort(schedule.arrival_ms[concurrency:]), finished[:-concurrency])
    fit = fit_runs([run], [SERIAL], [np.ones(run.n, dtype=bool)])
    assert np.allclose(fit.vector()[[1, 5]], true[[1, 5]], rtol=1e-6)


def test_noisy_fit_is_close_and_has_standard_errors():
    true = np.array([3.0, 0.5, 0.002, 4.0, 0.0, 3e-5])
    rng = np.random.default_rng(7)
    runs = [synthetic_run(rng, rate, 40, true, noise=0.03) for rate in (0.1, 0.3, 1.0)]
    fit = fit_runs(runs, [SERIAL] * 3, [np.ones(r.n, dtype=bool) for r in runs])
    assert abs(fit.coefficients["prefill_token_ms"] - 0.5) < 0.02
    assert abs(fit.coefficients["context_token_ms"] - 0.002) < 3e-4
    assert 0 < fit.stderr["prefill_token_ms"] < 0.02


def test_identifiability_names_zero_and_tied_columns():
    x = np.array([[1.0, 2.0, 0.0, 3.0, 0.0, 1.0], [1.0, 5.0, 0.0, 3.0, 0.0, 4.0],
                  [1.0, 7.0, 0.0, 3.0, 0.0, 2.0]])
    reasons = identifiability(x)
    assert "no step reloaded tokens" in reasons["reload_token_ms"]
    assert "context_token_ms" in reasons
    assert "moves together with decode_seq_ms" in reasons["fixed_ms"]
    assert "prefill_token_ms" not in reasons and "attention_pair_ms" not in reasons


# --- the command ---------------------------------------------------------------------------

def write_measurement(path, run: Run, engine_model: dict | None = None) -> None:
    """A measure --trace file and sidecar holding ``run``'s requests."""
    with path.open("w") as out:
        for i in range(run.n):
            block = 512
            ids = sorted(set((run.prompts[i][1:] - 1) // block))
            out.write(json.dumps({
                "config": "baseline", "pass": run.label, "doc": i, "repeat": 0, "step": i,
                "doc_tokens": int(run.prompt_tokens[i]) - 1, "ttft_ms": float(run.ttft_ms[i]),
                "total_ms": float(run.e2e_ms[i]), "send_s": float(run.arrival_ms[i]) / 1000,
                "max_tokens": int(run.max_tokens[i]), "prefix_block": block,
                "prefix_ids": [int(k) for k in ids], "session": 0}) + "\n")
    provenance_path(path).write_text(json.dumps({
        "kind": "measure-replay", "version": 1, "engine": {"name": "llama.cpp"},
        "served_model": "tiny", "kv_bytes_per_token": 2048,
        "workload": {"prompts": "words"},
        "engine_model": engine_model or {"max_num_seqs": 1, "max_num_batched_tokens": 512}}))


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fit")
    true = np.array([3.0, 0.5, 0.002, 4.0, 0.0, 3e-5])
    rng = np.random.default_rng(3)
    paths = []
    for rate in (0.1, 0.4, 2.0):
        path = folder / f"rate-{rate}.jsonl"
        write_measurement(path, synthetic_run(rng, rate, 16, true, 0.02, f"rate-{rate}"))
        paths.append(path)
    return folder, paths


def test_fit_command_writes_the_contract_json_and_holdout_line(measured, capsys):
    folder, paths = measured
    out = folder / "fitted.json"
    assert cli_main(["fit", *map(str, paths), "--output", str(out), "--holdout", "0.3",
                     "--holdout-by", "load", "--report", str(folder / "report")]) == 0
    printed = capsys.readouterr().out
    match = re.search(r"held-out TTFT error: p50 ([\d.]+) %, p90 ([\d.]+) %", printed)
    assert match and float(match.group(1)) < 5.0
    assert "reload_token_ms: no step reloaded tokens" in printed
    doc = json.loads(out.read_text())
    assert doc["kind"] == "fitted-step-time" and doc["version"] == 1
    assert doc["engine"] == "llama.cpp" and doc["served_model"] == "tiny"
    assert set(doc["coefficients"]) == set(FEATURES) == set(doc["stderr"])
    assert doc["unidentified"] == ["reload_token_ms"]
    assert abs(doc["coefficients"]["prefill_token_ms"] - 0.5) < 0.03
    assert doc["holdout"]["by"] == "load" and doc["holdout"]["requests"] == 16
    lo, hi = doc["prompt_tokens_range"]
    assert 1 < lo < hi <= 15 * 512 + 1
    rows = (folder / "report" / "requests.csv").read_text().splitlines()
    assert rows[0].startswith("file,load,line") and len(rows) == 49


@pytest.mark.parametrize("content, message", [
    ("not json\n", r"\.jsonl:1: not JSON"),
    ('{"config": "b"}\n', r"\.jsonl:1: missing field 'pass'"),
    ('{"error": "x", "error_kind": "timeout"}\n', r"no answered request to fit"),
])
def test_bad_lines_are_one_line_naming_file_and_line(tmp_path, capsys, content, message):
    path = tmp_path / "m.jsonl"
    path.write_text(content)
    provenance_path(path).write_text(json.dumps({"kind": "measure-replay", "version": 1}))
    assert cli_main(["fit", str(path), "--output", str(tmp_path / "f.json")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(message, err), err
    assert not (tmp_path / "f.json").exists()


def test_missing_sidecar_and_bad_options(tmp_path, capsys):
    path = tmp_path / "m.jsonl"
    path.write_text("{}\n")
    assert cli_main(["fit", str(path), "--output", str(tmp_path / "f.json")]) == 1
    assert "no sidecar" in capsys.readouterr().err
    for bad in ("0", "1", "x"):
        with pytest.raises(SystemExit) as exit_info:
            cli_main(["fit", str(path), "--output", "f.json", "--holdout", bad])
        assert exit_info.value.code == 2
        assert "expected a fraction between 0 and 1" in capsys.readouterr().err


@settings(max_examples=20)
@given(seed=st.integers(0, 10_000))
def test_engine_simulation_at_one_sequence_matches_the_serial_schedule(seed):
    """pipeline.engine with max_num_seqs 1 and 512-token chunks schedules the synthetic
    workloads (each prompt sharing only a prefix of the previous one, every length a multiple
    of the block size: llama.cpp reuses tokens, vLLM whole blocks) exactly
    as the plain serial engine: same steps, same first-token and finish steps, same times."""
    from pipeline.fit.schedule import engine_schedule
    rng = np.random.default_rng(seed)
    true = np.array([2.0, 0.3, 0.001, 5.0, 0.0, 2e-5])
    run = synthetic_run(rng, float(rng.uniform(0.05, 5.0)), 12, true, bos=False,
                        source=serial_schedule, granule=16)
    serial = serial_schedule(run, SERIAL, true)
    engine = engine_schedule(run, SERIAL, true)
    assert np.array_equal(serial.first_token_step, engine.first_token_step)
    assert np.array_equal(serial.finish_step, engine.finish_step)
    assert np.allclose(serial.features, engine.features)
    assert np.allclose(serial.end_ms, engine.end_ms)


@settings(max_examples=40)
@given(cached=st.integers(0, 6000), miss=st.integers(0, 6000), cpu_share=st.floats(0, 1),
       fixed=coefficient, prefill=st.floats(0, 2), context=st.floats(0, 0.01),
       reload=st.floats(0, 0.1), pairs=st.floats(0, 1e-4))
def test_plan_step_time_ttft_equals_one_request_on_the_serial_engine(
        cached, miss, cpu_share, fixed, prefill, context, reload, pairs):
    """plan's closed form prices a lone request exactly as the simulated engine runs it
    (reload aside, which the serial engine has no CPU tier for)."""
    import polars as pl
    from pipeline.steptime import Linear
    from pipeline.steptime.alone import request_ttft
    if cached + miss == 0:
        return
    coefficients = dict(zip(FEATURES, (fixed, prefill, context, 0.0, 0.0, pairs)))
    prompt = np.arange(1, cached + miss + 1, dtype=np.int64)
    previous = np.concatenate([prompt[:cached], -np.arange(1, 4, dtype=np.int64)])
    run = Run("f", "x", {}, [1, 2], np.array([0.0, 1e6]), np.zeros(2), np.zeros(2),
              np.array([previous.size, prompt.size]), np.array([1, 1]), [previous, prompt],
              np.full(2, -1))
    schedule = serial_schedule(run, SERIAL, np.array([*coefficients.values()]))
    expected = schedule.ttft_ms()[1]
    cpu = int(cached * cpu_share)
    frame = pl.DataFrame({"gpu_tokens": [cached - cpu], "cpu_tokens": [cpu],
                          "miss_tokens": [miss]})
    got = frame.select(request_ttft(Linear(coefficients), 512)).item()
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-9)
    with_reload = Linear({**coefficients, "reload_token_ms": reload})
    extra = frame.select(request_ttft(with_reload, 512)).item() - got
    assert extra == pytest.approx(reload * min(cpu, cached + miss - max(miss, 1)), abs=1e-6)


def test_fitted_problem_names_model_kv_size_and_range():
    import polars as pl
    from pipeline.steptime import Linear
    from pipeline.base.errors import CLIError
    from pipeline.steptime.alone import plan_with_latency
    model = Linear(dict.fromkeys(FEATURES, 0.0), kv_bytes_per_token=2048,
                   prompt_tokens_range=(500, 8000), served_model="tiny", source="f.json")
    lengths = pl.Series([600, 7000])
    assert plan_with_latency(model, None, lengths) is None
    assert "f.json was fitted on tiny, not llama" in plan_with_latency(
        model, None, lengths, served_model="llama")
    assert "2,048 KV bytes per token, this plan sizes 4,096" in plan_with_latency(
        model, 4096, lengths)
    assert "1 of 3 prompts lie outside the 500..8000" in plan_with_latency(
        model, 2048, pl.Series([600, 9000, 700]))
    with pytest.raises(CLIError, match="^--target-ttft-ms: TTFT withheld: 1 of 3 prompts"):
        plan_with_latency(model, 2048, pl.Series([600, 9000, 700]),
                          ttft_target="--target-ttft-ms")


def test_the_committed_fitted_file_is_what_the_step_time_reader_takes():
    """data/measured/llamacpp_calib.fitted.json through the engine contract's reader
    (steptime's load_latency, which plan reads too)."""
    from conftest import ROOT
    from pipeline.steptime import load_latency
    path = ROOT / "data" / "measured" / "llamacpp_calib.fitted.json"
    doc = json.loads(path.read_text())
    model = load_latency(path)
    assert model.coefficients == doc["coefficients"] and model.chunk == 512
    assert model.prompt_tokens_range == (513, 8001) and model.kv_bytes_per_token == 2048
    assert doc["unidentified"] == ["reload_token_ms"] and doc["source"]
    steptime = pytest.importorskip("pipeline.steptime.fitted")
    linear = steptime.load_latency(path)
    for name in steptime.COEFFICIENTS:
        assert linear.coefficients[name] == pytest.approx(doc["coefficients"][name])
    assert linear.prompt_tokens_range == (513, 8001)
    from types import SimpleNamespace

    from pipeline.fit.schedule import step_features
    beta = np.array([doc["coefficients"][name] for name in FEATURES])
    for scheduled in ([(0, 512, 0)], [(0, 300, 4096)], [(0, 1, 7000)], [(0, 1, 9), (1, 200, 0)]):
        record = SimpleNamespace(
            scheduled=scheduled, prefill_tokens=sum(n for _, n, b in scheduled if n > 1),
            decode_seqs=sum(1 for _, n, b in scheduled if n == 1),
            context_tokens=sum(n + b for _, n, b in scheduled), reload_tokens=0,
            first_tokens=[])
        assert linear.step_ms(record) == pytest.approx(float(np.dot(step_features(record), beta)))
