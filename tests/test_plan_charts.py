"""Report sections for sizing the CPU tier, and `plan --report`."""

from __future__ import annotations

import json

import polars as pl
import pytest

import pipeline.charts
from conftest import ROOT
from pipeline.charts.plan import (curve_capacities, fit_section, measured_points,
                                  ttft_capacity_section)
from pipeline.cli import main as cli_main
from pipeline.sizes.units import preset
from pipeline.plan.search import DocumentEvaluator, Target, plan
from pipeline.ttft.model import fit_configs, measured_requests, residuals_by_pass
from pipeline.workloads.documents import DocumentWorkload

NAMES = ["pass1-fwd", "pass2-fwd", "pass3-rev"]


@pytest.fixture(scope="module")
def lab():
    requests = measured_requests(str(ROOT / "data" / "ttft.jsonl"), 21520, 56000, 5011)
    models = fit_configs(requests)
    evaluator = DocumentEvaluator("the lab", DocumentWorkload().workload(None), 21520, models)
    return evaluator, residuals_by_pass(requests, models)


def test_curve_includes_every_change_point_and_the_token_below(lab):
    evaluator, _ = lab
    capacities = curve_capacities(evaluator, extra=56000)
    assert {0, 50109, 50110, 25054, 25055} <= set(capacities)
    assert max(capacities) >= 56000


def test_capacity_section(lab):
    evaluator, errors = lab
    result = plan(evaluator, Target("ttft", 100, "p50", (1, 2)))
    points = measured_points(errors, 56000, NAMES)
    assert points.height == 6
    assert points.filter(pl.col("config") == "lmcache")["cpu_capacity"].unique().to_list() \
        == [56000]
    section = ttft_capacity_section(evaluator, preset("qwen2.5-1.5b"), "p50", points, result)
    spec = json.dumps(section.chart.to_dict())
    assert "50,110 tokens = 1.34 GiB" in spec
    assert "pass2-fwd 576.3 -> 48.1 ms" in section.caption
    assert "within 3.6 %" in section.caption


def test_measured_points_need_matching_passes(lab):
    _, errors = lab
    assert measured_points(errors, 56000, NAMES[:2]).height == 0


def test_fit_section(lab):
    _, errors = lab
    section = fit_section(errors)
    assert section.key == "plan-fit" and "worst error is 3.6 %" in section.caption
    section.chart.to_dict()


def test_plan_report(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(pipeline.charts, "javascript_bundle", lambda: "/* vega */")
    report = tmp_path / "plan.html"
    assert cli_main(["plan", "--target-ttft-ms", "100", "--report", str(report)]) == 0
    page = report.read_text()
    assert "chart-plan-ttft-capacity" in page and "chart-plan-fit" in page
    missing = tmp_path / "nope" / "plan.html"
    assert cli_main(["plan", "--target-ttft-ms", "100", "--report", str(missing)]) == 1
    assert "--report: folder" in capsys.readouterr().err and not missing.parent.exists()


def test_sweep_section_next_to_the_cpu_cliff():
    from pipeline.charts.plan import sweep_ttft_section
    from pipeline.sweeps import Sweep, aggregate, run_sweep
    from pipeline.ttft.model import predict_pass_ttft

    requests = measured_requests(str(ROOT / "data" / "ttft.jsonl"), 21520, 56000, 5011)
    sweep = Sweep("cpu_cliff", (21520,), (0, 20000, 50109, 50110, 56000))
    rows = predict_pass_ttft(aggregate(run_sweep(DocumentWorkload(), sweep)),
                             fit_configs(requests), 5011)
    section = sweep_ttft_section(rows)
    assert section.key == "plan-sweep-cpu_cliff"
    assert "at GPU 21,520 tokens" in section.caption
    assert "pass2-fwd 576.3 -> 48.1 ms" in section.caption
    section.chart.to_dict()


# --- what the target was, drawn -------------------------------------------------------------

def _marks(spec: dict) -> list[dict]:
    """Every mark of a (layered) Vega-Lite spec with its encoding."""
    found = []
    for layer in spec.get("layer", [spec]):
        if "layer" in layer:
            found += _marks(layer)
        else:
            mark = layer["mark"] if isinstance(layer["mark"], dict) else {"type": layer["mark"]}
            found.append({**mark, "encoding": layer.get("encoding", {})})
    return found


def test_hit_ratio_section_draws_the_target_and_marks_the_answer(lab):
    from pipeline.charts.plan import hit_ratio_section

    evaluator, _ = lab
    target = Target("hit_ratio", 0.5, "p50", (2,))
    result = plan(evaluator, target)
    kv = preset("qwen2.5-1.5b")
    section = hit_ratio_section(evaluator, kv, target, NAMES, result)
    spec = section.chart.to_dict()
    text = json.dumps(spec)
    answer = result.cpu_tokens
    assert f"plan: {answer:,} tokens = " in text and "target 0.5" in text
    assert "GiB" in spec["layer"][0]["encoding"]["x"]["axis"]["labelExpr"]   # GiB on the axis
    curve = pl.DataFrame(next(iter(spec["datasets"].values())))
    rows = curve.filter(pl.col("pass_name") == "pass3-rev")
    at = dict(zip(rows["cpu_capacity"], rows["hit_ratio"]))
    assert at[answer] >= 0.5 > at[answer - 1]              # the curve crosses at the rule
    assert f"is {answer:,} tokens (" in section.caption and "GiB)" in section.caption


def test_the_answer_label_never_runs_over_the_y_axis(lab):
    """An answer in the left part of the plot is labelled to its right."""
    evaluator, _ = lab
    kv = preset("qwen2.5-1.5b")
    result = plan(evaluator, Target("hit_ratio", 0.5, "p50", (2,)))
    section = ttft_capacity_section(evaluator, kv, "p50", None, result)
    spec = section.chart.to_dict()
    assert "plan: " in json.dumps(spec["datasets"])
    labels = [m for m in _marks(spec) if m["type"] == "text"]      # the answer's only
    data = pl.DataFrame(next(iter(section.chart.to_dict()["datasets"].values())))
    assert result.cpu_tokens < 0.6 * data["cpu_capacity"].max()
    assert labels and all(m["align"] == "left" and m["dx"] > 0 for m in labels)


def test_plan_report_with_a_hit_ratio_target_leads_with_hit_ratio_and_names_the_fit(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(pipeline.charts, "javascript_bundle", lambda: "/* vega */")
    report = tmp_path / "plan.html"
    assert cli_main(["plan", "--target-hit-ratio", "0.5", "--pass", "3", "--report",
                     str(report)]) == 0
    capsys.readouterr()
    page = report.read_text()
    assert page.index("chart-plan-hit-ratio") < page.index("chart-plan-ttft-capacity")
    assert "TTFT model fitted on" in page and "SYNTHETIC" in page
    assert "GiB of Qwen2.5-1.5B below" in page
