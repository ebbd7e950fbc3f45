"""fit --machine-load: each run's step times scaled by 1 + c x its load average, c fitted."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pipeline.cli import main as cli_main
from pipeline.fit.evaluate import predictions
from pipeline.fit.inputs import load_runs
from pipeline.fit.per_request import fitted_requests
from pipeline.fit.schedule import FEATURES, simulate_run
from pipeline.fit.solve import FitError, fit_runs, load_scale
from pipeline.measure.output import provenance_path
from test_fit import SERIAL, synthetic_run, write_measurement

TRUE = np.array([2.0, 0.3, 0.001, 3.0, 0.0, 2e-5])


def loaded_runs(rng, per_load: float, loads, noise: float = 0.0, n: int = 12):
    """Runs measured with step times x (1 + per_load x load), each with its load."""
    runs = []
    for rate, load in zip((0.1, 0.5, 2.0, 1.0), loads):
        run = synthetic_run(rng, rate, n, TRUE * (1 + per_load * load), noise, f"r{rate}")
        run.machine_load = float(load)
        runs.append(run)
    return runs


@settings(max_examples=8, deadline=None)
@given(per_load=st.floats(0.0, 0.3), seed=st.integers(0, 10_000))
def test_recovers_the_load_scale_and_the_idle_coefficients(per_load, seed):
    rng = np.random.default_rng(seed)
    runs = loaded_runs(rng, per_load, (0.3, 1.5, 4.0))
    fit = fit_runs(runs, [SERIAL] * 3, [np.ones(r.n, dtype=bool) for r in runs],
                   machine_load=True)
    assert fit.machine_load
    assert fit.per_load == pytest.approx(per_load, abs=1e-5)
    got = fit.vector()
    assert np.allclose(got[[0, 1, 5]], TRUE[[0, 1, 5]], rtol=1e-4, atol=1e-6), got
    for run in runs:       # every request's TTFT, queueing included, is reproduced
        predicted = simulate_run(run, SERIAL, fit.vector() * load_scale(run, fit.per_load)).ttft_ms()
        assert np.allclose(predicted, run.ttft_ms, rtol=1e-5, atol=1e-5)


def test_without_the_covariate_held_out_loads_are_biased_and_with_it_they_are_not():
    rng = np.random.default_rng(5)
    runs = loaded_runs(rng, 0.1, (3.0, 4.0, 0.3, 0.5), noise=0.02)
    held = [np.full(r.n, r.machine_load < 1) for r in runs]        # the two idle runs
    train = [~h for h in held]
    errors = {}
    for covariate in (False, True):
        fit = fit_runs(runs, [SERIAL] * 4, train, held=held, machine_load=covariate)
        frame = predictions(runs, [SERIAL] * 4, fit.vector(), held, fit.per_load)
        errors[covariate] = float(frame.filter(frame["held_out"])["error_pct"].median())
    assert errors[False] > 15          # fitted at load 3-4, the idle runs are predicted slow
    assert abs(errors[True]) < 3


def test_one_load_cannot_identify_it_and_a_missing_load_is_an_error():
    rng = np.random.default_rng(1)
    runs = loaded_runs(rng, 0.0, (2.0, 2.0))
    fit = fit_runs(runs, [SERIAL] * 2, [np.ones(r.n, dtype=bool) for r in runs],
                   machine_load=True)
    assert not fit.machine_load and fit.per_load == 0.0
    assert any("same load average" in note for note in fit.notes)
    runs[1].machine_load = None
    with pytest.raises(FitError, match="records no load average"):
        fit_runs(runs, [SERIAL] * 2, [np.ones(r.n, dtype=bool) for r in runs],
                 machine_load=True)
    assert load_scale(runs[1], 0.5) == 1.0 and load_scale(runs[0], 0.0) == 1.0


def test_command_writes_the_scale_and_the_report_frame_uses_it(tmp_path, capsys):
    rng = np.random.default_rng(2)
    paths = []
    for index, run in enumerate(loaded_runs(rng, 0.08, (0.4, 2.5, 4.5), noise=0.01)):
        path = tmp_path / f"run{index}.jsonl"
        write_measurement(path, run)
        sidecar = json.loads(provenance_path(path).read_text())
        sidecar["sessions"] = [{"date": "d", "command": "c",
                                "load_average": [run.machine_load, 1.0, 1.0]}]
        provenance_path(path).write_text(json.dumps(sidecar))
        paths.append(path)
    assert [r.machine_load for r in load_runs(paths)] == [0.4, 2.5, 4.5]
    out = tmp_path / "fitted.json"
    assert cli_main(["fit", *map(str, paths), "--machine-load", "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    match = re.search(r"machine load: step times x \(1 \+ ([\d.]+) x load average\)", printed)
    assert match and float(match.group(1)) == pytest.approx(0.08, rel=0.1)
    assert "the fitted runs' 1-minute load averages, from their sidecars: 0.4 .. 4.5" in printed
    doc = json.loads(out.read_text())
    block = doc["machine_load"]
    assert block["per_load_average"] == pytest.approx(0.08, rel=0.1)
    assert block["fitted_loads"] == [0.4, 2.5, 4.5] and "idle machine" in block["meaning"]
    assert "scaled by 1 + " in doc["provenance"]
    result = fitted_requests(out, root=tmp_path)
    beta = np.array([doc["coefficients"][name] for name in FEATURES])
    expected = np.concatenate([
        simulate_run(r, SERIAL, beta * (1 + block["per_load_average"] * r.machine_load))
        .ttft_ms() for r in load_runs(paths)])
    assert np.allclose(result.frame["predicted_ttft_ms"].to_numpy(), expected)
    from pipeline.steptime import load_latency
    model = load_latency(out)                      # plan says whose step times it prices
    assert model.per_load == block["per_load_average"]
    assert "an idle machine's step times: x (1 + 0.0" in model.describe()
    assert cli_main(["fit", *map(str, paths), "--output", str(out)]) == 0
    assert "machine_load" not in json.loads(out.read_text())       # off by default
    assert "idle" not in load_latency(out).describe()
