"""measure --speed-probe and fit --speed-probe: each run's step times x its measured speed."""

from __future__ import annotations

import json
import statistics

import numpy as np
import pytest

from pipeline.cli import main as cli_main
from pipeline.fit.evaluate import predictions
from pipeline.fit.inputs import load_runs
from pipeline.fit.per_request import fitted_requests
from pipeline.fit.schedule import FEATURES, simulate_run
from pipeline.fit.solve import fit_runs, load_scale
from pipeline.fit.speed import with_speeds
from pipeline.measure.output import provenance_path
from pipeline.measure.probe import PROBE_TOKENS, probe_prompts, probe_scale
from pipeline.measure.traffic import block_words
from conftest import ROOT
from test_fit import SERIAL, synthetic_run, write_measurement

TRUE = np.array([2.0, 0.3, 0.001, 3.0, 0.0, 2e-5])


def slowed_runs(rng, speeds, noise: float = 0.0, n: int = 12):
    """Runs measured on a machine ``speed`` times slower than the reference."""
    runs = []
    for rate, speed in zip((0.1, 0.5, 2.0, 1.0), speeds):
        run = synthetic_run(rng, rate, n, TRUE * speed, noise, f"r{rate}")
        run.speed_probe_ms = 700.0 * speed
        runs.append(run)
    return runs


def test_probe_prompts_are_fixed_distinct_and_share_no_first_word_with_the_calibration():
    prompts = probe_prompts()
    assert prompts == probe_prompts()                       # the same work in every run
    assert all(len(p.split(" ")) == PROBE_TOKENS for p in prompts)
    firsts = {p.split(" ")[0] for p in prompts}
    assert len(firsts) == len(prompts)
    assert probe_scale({"before_ms": [1.0, 3.0], "after_ms": [2.0, 100.0]}) == 2.5
    assert probe_scale({"before_ms": [], "after_ms": None}) is None
    assert probe_scale(None) is None
    # docs/calibration.md: no prompt of the calibration trace starts with a probe's word,
    # so a probe shares only the beginning-of-sequence token with the run's requests
    trace = ROOT / "data" / "measured" / "llamacpp_calib.trace.jsonl"
    starts = {block_words(json.loads(line)["hash_ids"][0], 1)[0]
              for line in trace.read_text().splitlines() if line.strip()}
    assert len(starts) > 10 and not firsts & starts


def test_a_known_speed_scales_rows_and_schedule_and_recovers_the_reference_coefficients():
    rng = np.random.default_rng(3)
    runs = slowed_runs(rng, (1.0, 1.3, 0.8))
    train = [np.ones(r.n, dtype=bool) for r in runs]
    runs, reference = with_speeds(runs, train)
    assert reference == pytest.approx(700.0)
    assert [r.speed for r in runs] == pytest.approx([1.0, 1.3, 0.8])
    assert load_scale(runs[1], 0.0) == pytest.approx(1.3)
    fit = fit_runs(runs, [SERIAL] * 3, train)
    assert np.allclose(fit.vector()[[0, 1, 5]], TRUE[[0, 1, 5]], rtol=1e-4, atol=1e-6)
    for run in runs:
        predicted = simulate_run(run, SERIAL, fit.vector() * load_scale(run, 0.0)).ttft_ms()
        assert np.allclose(predicted, run.ttft_ms, rtol=1e-5, atol=1e-5)


def test_held_out_slow_run_is_predicted_from_its_probe_alone():
    rng = np.random.default_rng(8)
    runs = slowed_runs(rng, (1.0, 1.05, 0.95, 1.4), noise=0.02)
    held = [np.full(r.n, r.speed_probe_ms > 900) for r in runs]          # the slow run
    train = [~h for h in held]
    errors = {}
    for probe in (False, True):
        use = with_speeds(runs, train)[0] if probe else runs
        fit = fit_runs(use, [SERIAL] * 4, train, held=held)
        frame = predictions(use, [SERIAL] * 4, fit.vector(), held)
        errors[probe] = float(frame.filter(frame["held_out"])["error_pct"].abs().median())
    assert errors[False] > 20          # fitted near speed 1, the slow run is predicted fast
    assert errors[True] < 4


def _write(tmp_path, runs, probes):
    paths = []
    for index, (run, probe) in enumerate(zip(runs, probes)):
        path = tmp_path / f"run{index}.jsonl"
        write_measurement(path, run)
        sidecar = json.loads(provenance_path(path).read_text())
        session = {"date": "d", "command": "c", "load_average": [1.0, 1.0, 1.0]}
        if probe is not None:
            session["speed_probe"] = {"before_ms": [probe, probe * 1.01],
                                      "after_ms": [probe * 0.99, probe]}
        sidecar["sessions"] = [session]
        provenance_path(path).write_text(json.dumps(sidecar))
        paths.append(path)
    return paths


def test_command_records_speeds_and_the_report_frame_reuses_them(tmp_path, capsys):
    rng = np.random.default_rng(2)
    runs = slowed_runs(rng, (1.0, 1.2, 0.9), noise=0.01)
    paths = _write(tmp_path, runs, [r.speed_probe_ms for r in runs])
    assert [r.speed_probe_ms for r in load_runs(paths)] == pytest.approx(
        [700.0, 840.0, 630.0], rel=0.02)
    out = tmp_path / "fitted.json"
    assert cli_main(["fit", *map(str, paths), "--speed-probe", "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "speed probe: each run's step times x r0.1 1.000, r0.5 1.200, r2.0 0.900" in printed
    doc = json.loads(out.read_text())
    block = doc["speed_probe"]
    assert block["reference_ms"] == pytest.approx(statistics.median(
        [r.speed_probe_ms for r in load_runs(paths)]))
    assert [r["speed"] for r in block["runs"]] == pytest.approx([1.0, 1.2, 0.9], rel=1e-3)
    assert "speed probe" in doc["provenance"]
    result = fitted_requests(out, root=tmp_path)
    beta = np.array([doc["coefficients"][name] for name in FEATURES])
    expected = np.concatenate([simulate_run(r, SERIAL, beta * s["speed"]).ttft_ms()
                               for r, s in zip(load_runs(paths), block["runs"])])
    assert np.allclose(result.frame["predicted_ttft_ms"].to_numpy(), expected)
    assert cli_main(["fit", *map(str, paths), "--output", str(out)]) == 0
    assert "speed_probe" not in json.loads(out.read_text())        # off by default


def test_a_run_without_a_probe_is_one_line(tmp_path, capsys):
    rng = np.random.default_rng(4)
    runs = slowed_runs(rng, (1.0, 1.1))
    paths = _write(tmp_path, runs, [700.0, None])
    out = tmp_path / "fitted.json"
    assert cli_main(["fit", *map(str, paths), "--speed-probe", "--output", str(out)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "run1.jsonl" in err[0] and "records no speed probe" in err[0]
    assert not out.exists()
