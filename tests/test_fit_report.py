"""The report's measured vs predicted TTFT per request: the stage's frame from a fitted file
and its measurements, the renderer's sections, and the group on run's page."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import polars as pl
import pytest

from pipeline.charts import fitted_ttft, page_html
from pipeline.cli import main as cli_main
from pipeline.fit.inputs import load_runs
from pipeline.fit.per_request import fitted_requests
from pipeline.fit.schedule import FEATURES, EngineModel, simulate_run
from test_fit import synthetic_run, write_measurement

TRUE = np.array([3.0, 0.5, 0.002, 4.0, 0.0, 3e-5])


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """Two measured runs, their fit (``fit --output``) and the folder."""
    folder = tmp_path_factory.mktemp("fit_report")
    rng = np.random.default_rng(7)
    paths = []
    for rate in (0.2, 1.0):
        path = folder / f"rate-{rate}.jsonl"
        write_measurement(path, synthetic_run(rng, rate, 12, TRUE, 0.05, f"rate-{rate}"))
        paths.append(path)
    out = folder / "fitted.json"
    assert cli_main(["fit", *map(str, paths), "--output", str(out),
                     "--report", str(folder / "report")]) == 0
    return folder, paths, out


def test_frame_is_every_request_simulated_with_the_files_coefficients(fitted, capsys):
    folder, paths, out = fitted
    result = fitted_requests(out, root=folder)
    doc = json.loads(out.read_text())
    beta = np.array([doc["coefficients"][name] for name in FEATURES])
    runs = load_runs(paths)
    expected = np.concatenate([simulate_run(r, EngineModel.from_dict(doc["engine_model"]),
                                            beta).ttft_ms() for r in runs])
    frame = result.frame
    assert frame.height == 24 and not frame["held_out"].any()
    assert np.allclose(frame["predicted_ttft_ms"].to_numpy(), expected)
    assert np.allclose(frame["measured_ttft_ms"].to_numpy(),
                       np.concatenate([r.ttft_ms for r in runs]))
    # the same rows as fit --report's requests.csv (the fit's own predictions)
    report = pl.read_csv(folder / "report" / "requests.csv")
    assert np.allclose(report["predicted_ttft_ms"].to_numpy(), expected, rtol=1e-4)
    labels = result.provenance
    assert labels["engine"] == "llama.cpp" and labels["served_model"] == "tiny"
    assert labels["fitted_file"].endswith("fitted.json")
    assert labels["sources"] == "rate-0.2.jsonl, rate-1.0.jsonl"
    assert labels["in_sample"] == "in-sample: all 24 requests were in the fit"
    assert "fitted: weighted least squares" in labels["fit"]


def test_bad_fitted_file_is_one_error_naming_it(tmp_path, fitted):
    bad = tmp_path / "f.json"
    bad.write_text("{")
    with pytest.raises(ValueError, match=r"f\.json:1: not JSON"):
        fitted_requests(bad)
    bad.write_text(json.dumps({"kind": "other"}))
    with pytest.raises(ValueError, match=r"f\.json: not a fitted step-time file"):
        fitted_requests(bad)
    _, _, out = fitted
    doc = json.loads(out.read_text())
    doc["source"] = [str(tmp_path / "gone.jsonl")]
    bad.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"gone"):
        fitted_requests(bad)


def test_sections_state_the_errors_they_draw(fitted):
    folder, _, out = fitted
    result = fitted_requests(out, root=folder)
    frame = result.frame
    scatter, timeline = fitted_ttft.page_sections(frame, result.provenance["in_sample"])
    p50 = float(frame["error_pct"].abs().quantile(0.5, "linear"))
    assert f"|error| p50 {p50:.1f} %" in scatter.caption
    assert "rate-0.2" in scatter.caption and "in-sample" in scatter.caption
    spec = scatter.chart.to_dict()
    assert spec["layer"][1]["encoding"]["x"]["scale"]["type"] == "log"
    assert timeline.chart.to_dict()["facet"]["row"]["field"] == "load"
    worst = frame.sort(pl.col("error_pct").abs(), descending=True).row(0, named=True)
    assert f"line {worst['line']} of {worst['load']}" in timeline.caption
    held = frame.with_columns(held_out=pl.col("line") <= 3)
    assert "the 6 held-out requests" in fitted_ttft.caption(held)
    label = fitted_ttft.provenance_html(result.provenance)
    assert "<strong>fitted</strong>" in label and "fitted.json" in label and "tiny" in label
    page = page_html("t", "t", [("g", label, [scatter, timeline])])
    assert 'id="chart-fitted-ttft-scatter"' in page


def test_runs_report_draws_the_committed_fit_per_request():
    """run's page: the committed llama.cpp fit, measured vs predicted per request, labelled."""
    from pipeline import report
    from pipeline.fit.per_request import FITTED_FILE
    result = fitted_requests(FITTED_FILE)
    doc = json.loads(FITTED_FILE.read_text())
    assert result.frame.height == 150 and result.frame["load"].n_unique() == 5
    assert result.provenance["fitted_file"] == "data/measured/llamacpp_calib2.fitted.json"
    assert result.provenance["engine"].startswith("llama.cpp")
    assert result.provenance["served_model"] == doc["served_model"]
    assert "AMD" in result.provenance["hardware"] or "CPU" in result.provenance["hardware"]
    heading, prelude, sections = report.fitted_engine_group(result.frame, result.provenance)
    assert "fitted step time" in heading and "llamacpp_calib2.fitted.json" in prelude
    assert [s.key for s in sections] == ["fitted-ttft-scatter", "fitted-ttft-timeline"]


def test_the_serial_schedule_the_page_uses_is_the_engine_simulations_on_the_committed_runs():
    """The page's shortcut (``serial_equal``): on the committed measurement and fit, the
    serial schedule and pipeline.engine give the same steps and the same times."""
    from pipeline.fit.per_request import FITTED_FILE, serial_equal
    from pipeline.fit.schedule import engine_schedule, serial_schedule
    from pipeline.fit.solve import load_scale
    from conftest import ROOT
    doc = json.loads(FITTED_FILE.read_text())
    runs = load_runs([ROOT / s for s in doc["source"]])
    engine = EngineModel.from_dict(doc["engine_model"])
    assert serial_equal(engine, runs)
    assert not serial_equal(EngineModel(max_num_seqs=1, block_size=16), runs)
    assert not serial_equal(EngineModel(max_num_seqs=1, block_size=1, num_gpu_blocks=4000),
                            runs)
    beta = np.array([doc["coefficients"][name] for name in FEATURES])
    per_load = (doc.get("machine_load") or {}).get("per_load_average", 0.0)
    speeds = [r["speed"] for r in (doc.get("speed_probe") or {}).get("runs", [])]
    assert len(speeds) in (0, len(runs))
    for run, speed in zip(runs, speeds or [1.0] * len(runs)):
        coefficients = beta * load_scale(replace(run, speed=speed), per_load)
        serial, engine_run = (f(run, engine, coefficients)
                              for f in (serial_schedule, engine_schedule))
        assert np.array_equal(serial.first_token_step, engine_run.first_token_step)
        assert np.array_equal(serial.hit_tokens, engine_run.hit_tokens)
        assert np.allclose(serial.features, engine_run.features)
        assert np.allclose(serial.ttft_ms(), engine_run.ttft_ms(), rtol=1e-12)


def test_a_holdout_files_held_out_requests_are_marked_as_the_fit_held_them(fitted, tmp_path,
                                                                          capsys):
    folder, paths, _ = fitted
    for by in ("load", "length", "request"):
        out = tmp_path / f"{by}.json"
        assert cli_main(["fit", *map(str, paths), "--output", str(out), "--holdout", "0.5",
                         "--holdout-by", by, "--report", str(tmp_path / by)]) == 0
        result = fitted_requests(out, root=folder)
        report = pl.read_csv(tmp_path / by / "requests.csv")
        assert result.frame["held_out"].to_list() == report["held_out"].to_list(), by
        held = result.frame.filter(pl.col("held_out"))
        doc = json.loads(out.read_text())
        assert held.height == doc["holdout"]["requests"] > 0
        p50 = float(held["error_pct"].abs().quantile(0.5, "linear"))
        assert p50 == pytest.approx(doc["holdout"]["p50_pct"], abs=0.01)
        assert result.provenance["in_sample"].startswith(f"held out: {held.height} requests")
    doc["holdout"].pop("seed")                      # by request, the draw is not recorded
    out.write_text(json.dumps(doc))
    result = fitted_requests(out, root=folder)
    assert not result.frame["held_out"].any() and "not marked" in result.provenance["in_sample"]


def test_the_page_draws_the_committed_load_holdout_beside_the_fit():
    from pipeline import report
    from pipeline.fit.per_request import FITTED_FILE, HOLDOUT_FILE
    fit, held = fitted_requests(FITTED_FILE), fitted_requests(HOLDOUT_FILE)
    doc = json.loads(HOLDOUT_FILE.read_text())
    out = held.frame.filter(pl.col("held_out"))
    assert sorted(out["load"].unique().to_list()) == ["rate-0.3", "rate-0.45"]
    assert float(out["error_pct"].abs().quantile(0.5, "linear")) == pytest.approx(
        doc["holdout"]["p50_pct"], abs=0.01)
    _, prelude, sections = report.fitted_engine_group(fit.frame, fit.provenance,
                                                      (held.frame, held.provenance))
    assert "holdout-load/fitted.json" in prelude
    assert [s.key for s in sections] == ["fitted-ttft-scatter", "fitted-ttft-holdout",
                                         "fitted-ttft-timeline"]
    assert "the 60 held-out requests: p50" in sections[1].caption
    assert sections[1].chart.to_dict()["title"].startswith("fitted without rate-0.3 and rate-0.45")
