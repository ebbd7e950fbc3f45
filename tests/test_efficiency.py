"""The roofline's efficiency factors: the profiled defaults are what the committed vidur
profiles give, they scale the peaks (and the compiled kernel alike), and a GPU without a
profile needs a number."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import ROOT, cli_in_process
from pipeline.sizes.units import model_shape
from pipeline.steptime import Roofline, StepCost, gpu_preset
from pipeline.steptime.efficiency import EFFICIENCY, profile_efficiency, profile_rows

PROFILES = ROOT / "data" / "profiles" / "vidur"


@pytest.mark.parametrize("gpu", sorted(EFFICIENCY))
def test_the_defaults_are_the_committed_profiles_medians(gpu):
    paths = sorted(Path(PROFILES, gpu).glob("*/mlp.csv"))
    assert len(paths) == 2
    mfu, mbu = profile_efficiency(paths, gpu_preset(gpu))
    assert EFFICIENCY[gpu] == (round(mfu, 3), round(mbu, 3))
    rows = profile_rows(paths[0], gpu_preset(gpu))
    assert rows["mfu"].max() < 1 and rows["mbu"].max() < 1      # measured: under the peaks


def test_factors_scale_the_roofs_and_the_vector():
    shape, h100 = model_shape("Llama-3.1-8B"), gpu_preset("H100")
    peak, scaled = Roofline(shape, h100, 0.0), Roofline(shape, h100, 0.0, mfu=0.5, mbu=0.8)
    step = StepCost(2048, 0, 2048, attention_pairs=2048 * 2049 // 2, sampled_seqs=1)
    assert scaled.parts(step)["compute_ms"] == pytest.approx(peak.parts(step)["compute_ms"] / 0.5)
    assert scaled.parts(step)["memory_ms"] == pytest.approx(peak.parts(step)["memory_ms"] / 0.8)
    assert scaled.rates.per_token == pytest.approx(peak.rates.per_token / 0.5)
    assert scaled.rates.weights == pytest.approx(peak.rates.weights / 0.8)
    assert "MFU 0.5, MBU 0.8" in scaled.label and scaled.label.startswith("roofline")
    with pytest.raises(ValueError):
        Roofline(shape, h100, mfu=0.0)


def _simulate(tmp_path, *argv):
    return cli_in_process("simulate",
                           str(ROOT / "data" / "simulate" / "chat.jsonl"), "--rate", "2",
                           "--gpu", "1GiB", "--model", "Llama-3.1-8B",
                           "--out", str(tmp_path / "out"), *argv)


def test_options_take_the_profile_or_a_number(tmp_path):
    done = _simulate(tmp_path, "--latency", "roofline", "--mfu-prefill", "--mbu-decode")
    assert done.returncode == 0, done.stderr
    assert f"MFU {EFFICIENCY['h100'][0]:g}, MBU {EFFICIENCY['h100'][1]:g}" in done.stdout
    for argv, message in (
            (["--latency", "roofline", "--gpu-type", "L4", "--mbu-decode"],
             "--mbu-decode: no measured profile for L4"),
            (["--latency", "roofline", "--mfu-prefill", "0"], "--mfu-prefill"),
            (["--mfu-prefill", "0.5"], "--mfu-prefill: scales the roofline's peaks")):
        (tmp_path / "bad").mkdir(exist_ok=True)
        done = _simulate(tmp_path / "bad", *argv)
        assert done.returncode == 2 and message in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1 and not (tmp_path / "bad" / "out").exists()


@pytest.mark.parametrize("gpu,options,measured", [
    ("H100", {}, True), ("A100", {}, True), ("H200", {}, True),     # H200: the H100's
    ("L4", {}, False), ("L40S", {}, False),                         # the mean, assumed
    ("H100", {"mfu_prefill": 0.4}, False)])                         # given
def test_only_a_profiled_efficiency_is_called_measured(gpu, options, measured):
    from argparse import Namespace
    from pipeline.steptime.roofline import roofline_caveat
    args = Namespace(**{**dict(
        gpu_type=gpu, model="qwen2.5-7b", weights="bf16", step_overhead_ms=2.0,
        mfu_prefill=None, mbu_decode=None, tensor_parallel_size=1, gpu_tflops=None,
        gpu_fp8_tflops=None, gpu_hbm_gbps=None, host_link_gbps=None), **options})
    roofline = Roofline.from_args(args)
    said = "at measured efficiency" if measured else "at assumed or given efficiency"
    assert roofline.provenance.startswith(f"roofline {said}")
    assert said in roofline_caveat(roofline.label)
