"""``fit --vllm-bench``: the roofline's efficiency factors recovered from a vllm bench serve
result that kvlab's own ``simulate`` wrote with known factors, the fitted file read back by
``--latency FILE``, and bad input refused in one line with nothing written."""

from __future__ import annotations

import importlib.util
import json

import polars as pl
import pytest

from conftest import ROOT
from pipeline.cli import main as cli_main

_spec = importlib.util.spec_from_file_location("synth_vllm_bench",
                                               ROOT / "scripts" / "synth_vllm_bench.py")
synth = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(synth)

TRUE_MFU, TRUE_MBU = 0.55, 0.8


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """A 60-request random-dataset run at 1 request/s, Llama-3.1-8B on an H100."""
    path = tmp_path_factory.mktemp("bench") / "bench.json"
    synth.synthesize(path, model="llama-3.1-8b", gpu_type="H100", mfu=TRUE_MFU, mbu=TRUE_MBU,
                     num_prompts=60, input_len=1024, output_len=64, range_ratio=0.5,
                     rate=1.0, seed=1)
    return path


def _fit(bench, out, *extra: str) -> int:
    return cli_main(["fit", "--vllm-bench", str(bench), "--model", "llama-3.1-8b",
                     "--gpu-type", "H100", "--output", str(out), *extra])


def test_the_fit_recovers_the_factors_it_was_simulated_with(bench, tmp_path, capsys):
    out = tmp_path / "eff.json"
    assert _fit(bench, out, "--report", str(tmp_path / "report")) == 0
    printed = capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["kind"] == "roofline-efficiency" and doc["source"] == [str(bench)]
    assert doc["mfu_prefill"]["fitted"] and doc["mbu_decode"]["fitted"]
    assert doc["mfu_prefill"]["value"] == pytest.approx(TRUE_MFU, rel=0.01)
    assert doc["mbu_decode"]["value"] == pytest.approx(TRUE_MBU, rel=0.01)
    assert "least absolute relative errors" in doc["provenance"]
    assert doc["fitted_on"]["gpu"] == "H100 SXM" and doc["step_overhead_ms"] == 2.0
    figures = pl.read_csv(tmp_path / "report" / "figures.csv")
    assert figures["error_pct"].abs().max() < 5            # the fit predicts its own run
    assert "--mfu-prefill" in printed and "median TPOT ms" in printed


def test_the_fitted_file_is_the_roofline_with_those_factors(bench, tmp_path, capsys):
    out = tmp_path / "eff.json"
    assert _fit(bench, out) == 0
    doc = json.loads(out.read_text())
    mfu, mbu = doc["mfu_prefill"]["value"], doc["mbu_decode"]["value"]
    common = ["simulate", "data/simulate/chat.jsonl", "--block-size", "4", "--gpu", "64blocks",
              "--rate", "2", "--model", "llama-3.1-70b", "--tensor-parallel-size", "4",
              "--gpu-type", "H100"]
    assert cli_main([*common, "--latency", str(out), "--out", str(tmp_path / "a")]) == 0
    assert cli_main([*common, "--latency", "roofline", "--mfu-prefill", str(mfu),
                     "--mbu-decode", str(mbu), "--out", str(tmp_path / "b")]) == 0
    a, b = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in "ab")
    assert a["ttft_ms_p90"] == b["ttft_ms_p90"] and a["tpot_ms_p50"] == b["tpot_ms_p50"]
    assert str(out) in a["provenance"] and "fitted" in a["provenance"]
    capsys.readouterr()
    assert cli_main([*common[:-1], "A100", "--latency", str(out), "--out",
                     str(tmp_path / "c")]) == 2
    assert "--gpu-type" in capsys.readouterr().err
    assert cli_main([*common, "--latency", str(out), "--mfu-prefill", "0.5", "--out",
                     str(tmp_path / "d")]) == 2


def test_least_squares_is_there_too_and_close(bench, tmp_path):
    out = tmp_path / "eff.json"
    assert _fit(bench, out, "--loss", "squares") == 0
    doc = json.loads(out.read_text())
    assert doc["mfu_prefill"]["value"] == pytest.approx(TRUE_MFU, rel=0.03)
    assert doc["provenance"].startswith("fitted: weighted least squares")


def test_a_factor_given_is_held_and_the_other_fitted(bench, tmp_path):
    out = tmp_path / "eff.json"
    assert _fit(bench, out, "--mbu-decode", "0.7") == 0
    doc = json.loads(out.read_text())
    assert not doc["mbu_decode"]["fitted"] and doc["mbu_decode"]["value"] == 0.7
    assert doc["mfu_prefill"]["fitted"] and doc["mfu_prefill"]["value"] != TRUE_MFU


def _result(bench, **changes) -> dict:
    result = json.loads(bench.read_text())
    for key, value in changes.items():
        if value is None:
            del result[key]
        else:
            result[key] = value
    return result


@pytest.mark.parametrize("content, message", [
    ("not json {", "not JSON"),
    ("[1, 2]", "not a vllm bench serve result"),
    ('{"kind": "fitted-step-time"}', "not a vllm bench serve result"),
    (dict(mean_ttft_ms=None), "missing field 'mean_ttft_ms'"),
    (dict(input_lens=None), "no per-request data ('input_lens')"),
    (dict(start_times=None), "--save-detailed"),
    (dict(ttfts=[0.1]), "ttfts must be a list of 60 entries"),
    (dict(latencies=["x"] * 60), "latencies must hold numbers"),
])
def test_bad_input_is_one_line_exit_2_nothing_written(bench, tmp_path, capsys, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content if isinstance(content, str) else json.dumps(_result(bench, **content)))
    out = tmp_path / "eff.json"
    assert _fit(path, out) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and str(path) in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_options_that_do_not_mix(bench, tmp_path, capsys):
    out = tmp_path / "eff.json"
    measured = ROOT / "data" / "measured" / "llamacpp_calib_closed-c1.jsonl"
    assert cli_main(["fit", str(measured), "--model", "llama-3.1-8b", "--output", str(out)]) == 2
    assert "--model: only with --vllm-bench" in capsys.readouterr().err
    assert cli_main(["fit", "--output", str(out)]) == 2
    assert _fit(bench, out, "--machine-load") == 2
    assert _fit(bench, out, "--mfu-prefill", "--mbu-decode", "0.5") == 2
    assert not out.exists()


def test_no_model_is_one_line_naming_vllm_bench(bench, tmp_path, capsys):
    out = tmp_path / "eff.json"
    assert cli_main(["fit", "--vllm-bench", str(bench), "--gpu-type", "H100",
                     "--output", str(out)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "--vllm-bench needs --model PRESET" in error[0]
    assert not out.exists()


def test_appended_results_are_runs_and_a_run_can_be_held_out(bench, tmp_path, capsys):
    appended = tmp_path / "appended.json"
    appended.write_text(bench.read_text() + "\n" + bench.read_text())
    out = tmp_path / "eff.json"
    assert _fit(appended, out, "--holdout", "0.5", "--holdout-by", "load") == 0
    doc = json.loads(out.read_text())
    assert len(doc["bench"]) == 2 and doc["holdout"]["requests"] == 60
    assert doc["holdout"]["p50_pct"] < 3                 # the same run, held out
    assert "held out by load: rate 1.0 (result 2)" in capsys.readouterr().out


def test_a_factor_the_run_cannot_identify_falls_back_to_the_profile(tmp_path):
    short = tmp_path / "short.json"
    synth.synthesize(short, model="llama-3.1-8b", gpu_type="H100", mfu=TRUE_MFU,
                     mbu=TRUE_MBU, num_prompts=20, input_len=64, output_len=32,
                     range_ratio=0.5, rate=1.0, seed=0)
    out = tmp_path / "eff.json"
    assert _fit(short, out) == 0
    doc = json.loads(out.read_text())
    assert not doc["mfu_prefill"]["fitted"] and doc["mfu_prefill"]["value"] == 0.691
    assert "compute-bound" in doc["mfu_prefill"]["why"] and doc["mbu_decode"]["fitted"]


def test_help_says_the_factors_are_fitted_unless_given(capsys):
    with pytest.raises(SystemExit):
        cli_main(["fit", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert text.count("default: fitted") == 2 and "default: that profile" not in text
