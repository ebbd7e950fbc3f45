"""``fit --vllm-metrics``: the roofline's factors recovered from a vLLM /metrics scrape that
kvlab's own ``simulate`` produced with known factors, the difference of two scrapes, a
profile's scale, and bad input refused in one line with nothing written."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from conftest import ROOT
from pipeline.cli import main as cli_main
from pipeline.fit.vllm_metrics import Histogram

_spec = importlib.util.spec_from_file_location("synth_vllm_metrics",
                                               ROOT / "scripts" / "synth_vllm_metrics.py")
synth = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(synth)

TRUE_MFU, TRUE_MBU = 0.55, 0.8
RUN = dict(model="llama-3.1-8b", gpu_type="H100", mfu=TRUE_MFU, mbu=TRUE_MBU, num_prompts=60,
           input_len=1024, output_len=64, range_ratio=0.5, seed=1)


@pytest.fixture(scope="module")
def runs():
    """Observations of two runs on one server (1 and 4 requests/s), and their lengths."""
    both = {rate: synth.run_observations(rate=rate, **RUN) for rate in (1.0, 4.0)}
    return {rate: observed for rate, (observed, _) in both.items()} | {
        f"{rate} s": length for rate, (_, length) in both.items()}


def _write(path, observed) -> str:
    path.write_text(synth.exposition(observed, "llama-3.1-8b"))
    return str(path)


def _fit(tmp_path, *args: str) -> int:
    return cli_main(["fit", *args, "--model", "llama-3.1-8b", "--gpu-type", "H100",
                     "--output", str(tmp_path / "eff.json")])


def _factors(tmp_path) -> tuple[float, float]:
    doc = json.loads((tmp_path / "eff.json").read_text())
    return doc["mfu_prefill"]["value"], doc["mbu_decode"]["value"]


def test_the_factors_are_recovered_from_the_histograms(runs, tmp_path, capsys):
    scrape = _write(tmp_path / "metrics.prom", runs[4.0])
    assert _fit(tmp_path, "--vllm-metrics", scrape, "--report", str(tmp_path / "r")) == 0
    mfu, mbu = _factors(tmp_path)
    assert mfu == pytest.approx(TRUE_MFU, rel=0.01) and mbu == pytest.approx(TRUE_MBU, rel=0.01)
    doc = json.loads((tmp_path / "eff.json").read_text())
    assert doc["kind"] == "roofline-efficiency" and doc["source"] == [scrape]
    assert doc["metrics"]["requests"] == 60 and "mean prefill time" in doc["provenance"]
    printed = capsys.readouterr().out
    assert "solved exactly" in printed and "compute roof (1/MFU)" in printed
    assert (tmp_path / "r" / "figures.csv").exists()


def test_at_light_load_the_run_length_corrects_the_decode_factor(runs, tmp_path):
    """Without the run's length the decodes beside a prefill chunk are taken per busy
    step, more than a Poisson arrival finds at light load: MBU comes out high, by under
    5 %; with it, the time average: within 1 %."""
    scrape = _write(tmp_path / "m.prom", runs[1.0])
    assert _fit(tmp_path, "--vllm-metrics", scrape) == 0
    mfu, mbu = _factors(tmp_path)
    assert mfu == pytest.approx(TRUE_MFU, rel=0.01)
    assert TRUE_MBU < mbu < TRUE_MBU * 1.05
    assert _fit(tmp_path, "--vllm-metrics", scrape, "--vllm-metrics-seconds",
                str(runs["1.0 s"])) == 0
    assert _factors(tmp_path) == pytest.approx((TRUE_MFU, TRUE_MBU), rel=0.01)
    assert json.loads((tmp_path / "eff.json").read_text())["metrics"]["seconds"] \
        == runs["1.0 s"]


def test_two_scrapes_fit_what_the_run_between_them_added(runs, tmp_path):
    before = _write(tmp_path / "before.prom", runs[1.0])
    after = _write(tmp_path / "after.prom", synth.merged(runs[1.0], runs[4.0]))
    alone = _write(tmp_path / "alone.prom", runs[4.0])
    assert _fit(tmp_path, "--vllm-metrics", alone) == 0
    expected = _factors(tmp_path)
    assert _fit(tmp_path, "--vllm-metrics", after, "--vllm-metrics-before", before) == 0
    assert _factors(tmp_path) == expected
    assert _fit(tmp_path, "--vllm-metrics", after) == 0             # both runs: another fit
    assert _factors(tmp_path) != expected


def test_a_factor_no_step_identifies_is_held_at_the_profiled_one(tmp_path, capsys):
    short, _ = synth.run_observations(**dict(RUN, num_prompts=20, input_len=64,
                                             output_len=32, rate=1.0, seed=0))
    assert _fit(tmp_path, "--vllm-metrics", _write(tmp_path / "m.prom", short)) == 0
    doc = json.loads((tmp_path / "eff.json").read_text())
    assert not doc["mfu_prefill"]["fitted"] and doc["mfu_prefill"]["value"] == 0.691
    assert "the compute roof binds none" in doc["mfu_prefill"]["why"]
    assert doc["mbu_decode"]["value"] == pytest.approx(TRUE_MBU, rel=0.01)
    assert "one factor from two means" in capsys.readouterr().out


def test_the_fitted_file_is_read_by_latency_file(runs, tmp_path):
    assert _fit(tmp_path, "--vllm-metrics", _write(tmp_path / "m.prom", runs[4.0])) == 0
    assert cli_main(["simulate", "data/simulate/chat.jsonl", "--block-size", "4", "--gpu",
                     "64blocks", "--rate", "2", "--model", "llama-3.1-8b", "--gpu-type",
                     "H100", "--latency", str(tmp_path / "eff.json"), "--out",
                     str(tmp_path / "sim")]) == 0
    metrics = json.loads((tmp_path / "sim" / "metrics.json").read_text())
    assert str(tmp_path / "eff.json") in metrics["provenance"]


def test_histogram_quantiles_are_prometheus_linear_interpolation():
    h = Histogram("x", np.array([1.0, 2.0, 4.0, np.inf]), np.array([2.0, 6.0, 8.0, 10.0]),
                  20.0, 10.0)
    assert h.quantile(0.1) == pytest.approx(0.5)          # in the first bucket, from 0
    assert h.quantile(0.4) == pytest.approx(1.5)          # rank 4: half-way through (1, 2]
    assert h.quantile(0.95) == 4.0                        # the +Inf bucket: the last bound
    assert h.like([0.5, 3.0]).cumulative.tolist() == [1, 1, 2, 2]


def _scrape(runs, **change) -> str:
    text = synth.exposition(runs[4.0], "llama-3.1-8b")
    for old, new in change.items():
        text = text.replace(old, new)
    return text


@pytest.mark.parametrize("text, message", [
    ('{"completed": 3}\n', ":1: not Prometheus text exposition"),
    ("# only comments\n", "no Prometheus samples"),
    ("process_cpu_seconds_total 3.5\n", "no vllm: metrics"),
    ("drop:vllm:request_prefill_time_seconds", "no vllm:request_prefill_time_seconds"),
    ("zero:vllm:inter_token_latency_seconds", "vllm:inter_token_latency_seconds has no "
                                              "observations"),
    ("model:other", "several model_name labels"),
])
def test_bad_scrapes_are_one_line_exit_2_nothing_written(runs, tmp_path, capsys, text,
                                                         message):
    path = tmp_path / "bad.prom"
    if text.startswith("drop:"):
        name = text.split(":", 1)[1]
        text = "\n".join(line for line in _scrape(runs).splitlines() if name not in line)
    elif text.startswith("zero:"):
        empty = dict(runs[4.0], **{text.split(":", 1)[1]: []})
        text = synth.exposition(empty, "llama-3.1-8b")
    elif text.startswith("model:"):
        text = _scrape(runs) + synth.exposition(runs[1.0], "other")
    path.write_text(text)
    assert _fit(tmp_path, "--vllm-metrics", str(path)) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and str(path) in err and len(err.splitlines()) == 1
    assert not (tmp_path / "eff.json").exists()


def test_mismatched_scrapes_are_refused(runs, tmp_path, capsys):
    small = _write(tmp_path / "small.prom", runs[1.0])
    large = _write(tmp_path / "large.prom", synth.merged(runs[1.0], runs[4.0]))
    other = tmp_path / "other.prom"
    other.write_text(synth.exposition(runs[1.0], "other-model"))
    rebucketed = tmp_path / "rebucketed.prom"
    rebucketed.write_text(_scrape(runs).replace('le="0.3"', 'le="0.35"'))
    for after, before, message in (
            (small, large, "counts more than the later scrape"),     # swapped
            (large, str(other), "not the same server"),
            (large, str(rebucketed), "other buckets")):
        assert _fit(tmp_path, "--vllm-metrics", after, "--vllm-metrics-before", before) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "--vllm-metrics-before" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "eff.json").exists()


def test_options_that_do_not_mix_with_a_scrape(runs, tmp_path, capsys):
    scrape = _write(tmp_path / "m.prom", runs[4.0])
    for extra in (["--holdout", "0.3"], ["--loss", "squares"], ["--ttft-only"]):
        assert _fit(tmp_path, "--vllm-metrics", scrape, *extra) == 2
        assert "not with --vllm-metrics" in capsys.readouterr().err
    assert _fit(tmp_path, "--vllm-metrics-before", scrape) == 2
    assert _fit(tmp_path, "--vllm-metrics-seconds", "60") == 2
    assert "only with --vllm-metrics FILE" in capsys.readouterr().err
    assert cli_main(["fit", "--vllm-metrics", scrape, "--output",
                     str(tmp_path / "eff.json")]) == 2
    assert "--vllm-metrics needs --model PRESET" in capsys.readouterr().err
    assert not (tmp_path / "eff.json").exists()


def test_a_profile_scale_from_the_histograms(tmp_path):
    from test_fit_profile_scale import SCALE, _profile
    from test_profile_latency import LLAMA_2_7B
    _profile(tmp_path / "measured", 1.0)
    _profile(tmp_path / "slower", SCALE)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA_2_7B))
    observed, _ = synth.run_observations(
        **dict(RUN, num_prompts=40, output_len=32, rate=4.0, seed=0),
        step_model=["--latency", f"profile:{tmp_path / 'slower'}", "--model-config",
                    str(config)], batched=4096)
    scrape = _write(tmp_path / "m.prom", observed)
    out = tmp_path / "scale.json"
    assert cli_main(["fit", "--vllm-metrics", scrape, "--model-config", str(config),
                     "--profile", str(tmp_path / "measured"), "--max-num-batched-tokens",
                     "4096", "--output", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["kind"] == "profile-scale"
    assert doc["scale"]["value"] == pytest.approx(SCALE, rel=0.02), doc["scale"]



def test_the_text_format_parser(tmp_path):
    from pipeline.fit.prometheus_text import read_samples
    path = tmp_path / "m.prom"
    path.write_text('# HELP x a "help" line\n# TYPE x gauge\n'
                    'x{a="q\\"uote",b="back\\\\slash",c="new\\nline"} NaN 1700000000000\n'
                    'y +Inf\nz{} -1.5e3\n# EOF\n')
    x, y, z = read_samples(path, "--vllm-metrics")
    assert x.labels == (("a", 'q"uote'), ("b", "back\\slash"), ("c", "new\nline"))
    assert np.isnan(x.value) and y.value == np.inf and z.value == -1500.0 and z.line == 5


def test_data_parallel_engines_are_summed(runs, tmp_path):
    one = synth.exposition(runs[4.0], "llama-3.1-8b")
    two = one + "\n".join(line.replace('engine="0"', 'engine="1"') for line in
                          one.splitlines() if not line.startswith("#")) + "\n"
    (tmp_path / "one.prom").write_text(one)
    (tmp_path / "two.prom").write_text(two)
    assert _fit(tmp_path, "--vllm-metrics", str(tmp_path / "one.prom")) == 0
    single = _factors(tmp_path)
    assert _fit(tmp_path, "--vllm-metrics", str(tmp_path / "two.prom")) == 0
    assert _factors(tmp_path) == pytest.approx(single, rel=1e-3)   # 120 rebuilt points, not 60
    assert json.loads((tmp_path / "eff.json").read_text())["metrics"]["engines"] == 2


def test_an_older_servers_itl_name_is_read(runs, tmp_path):
    new = _write(tmp_path / "new.prom", runs[4.0])
    old = tmp_path / "old.prom"
    old.write_text((tmp_path / "new.prom").read_text().replace(
        "vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"))
    assert _fit(tmp_path, "--vllm-metrics", new) == 0
    expected = _factors(tmp_path)
    assert _fit(tmp_path, "--vllm-metrics", str(old)) == 0
    assert _factors(tmp_path) == expected
