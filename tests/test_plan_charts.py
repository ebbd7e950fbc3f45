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
from pipeline.kvsize import preset
from pipeline.planner import DocumentEvaluator, Target, document_workload, plan
from pipeline.ttft_model import fit_configs, measured_requests, residuals_by_pass
from pipeline.workloads.documents import DocumentWorkload

NAMES = ["pass1-fwd", "pass2-fwd", "pass3-rev"]


@pytest.fixture(scope="module")
def lab():
    requests = measured_requests(str(ROOT / "data" / "ttft.jsonl"), 21520, 56000, 5011)
    models = fit_configs(requests)
    evaluator = DocumentEvaluator(document_workload(DocumentWorkload()), 21520, models)
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
    from pipeline.ttft_model import predict_pass_ttft

    requests = measured_requests(str(ROOT / "data" / "ttft.jsonl"), 21520, 56000, 5011)
    sweep = Sweep("cpu_cliff", (21520,), (0, 20000, 50109, 50110, 56000))
    rows = predict_pass_ttft(aggregate(run_sweep(DocumentWorkload(), sweep)),
                             fit_configs(requests), 5011)
    section = sweep_ttft_section(rows)
    assert section.key == "plan-sweep-cpu_cliff"
    assert "at GPU 21,520 tokens" in section.caption
    assert "pass2-fwd 576.3 -> 48.1 ms" in section.caption
    section.chart.to_dict()
