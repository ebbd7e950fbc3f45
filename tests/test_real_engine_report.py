"""load_measurement and the real-engine report sections, on a hand-made measurement file."""

from __future__ import annotations

import json

import polars as pl

from kvlab.summarize import read_records
from pipeline.charts.real_engine import sections, tier_frame
from pipeline.components.llamacpp_cache import StateSize
from pipeline.measure.llamacpp.compare import agreement, load_measurement, predict
from pipeline.measure.workload import lab_requests

STATE = StateSize(500, 20)
TTFT = {"gpu": 18.0, "cpu": 30.0, "miss": 900.0}


def fake_measurement(tmp_path):
    """A file and provenance as --local-engine writes them, TTFT and log tiers from the model."""
    caches = {"baseline": None, "small": 3 * STATE(4 + 9 + 3)}
    requests = [r for name in caches for r in lab_requests(name, 4, 4, ["fwd", "fwd", "rev"])]
    predicted = predict(requests, caches, STATE, 4)
    out = tmp_path / "m.jsonl"
    with out.open("w") as handle:
        for request, tier in zip(requests, predicted["predicted_tier"]):
            handle.write(json.dumps({
                "config": request.config, "pass": request.pass_name, "doc": request.doc,
                "doc_tokens": 4, "ttft_ms": TTFT[tier] + request.step, "total_ms": 1000.0,
                "repeat": 0, "step": request.step, "server_tier": tier}) + "\n")
    (tmp_path / "m.provenance.json").write_text(json.dumps({
        "state_size": {"fixed_bytes": STATE.fixed, "bytes_per_token": STATE.per_token},
        "configs": {name: {"cache_bytes": size} for name, size in caches.items()},
        "workload": {"docs": 4, "doc_tokens": 4, "passes": ["fwd", "fwd", "rev"], "repeats": 1,
                     "seed": 20261003, "completion_tokens": 4}}))
    return out


def test_load_measurement_joins_predictions_in_sending_order(tmp_path):
    path = fake_measurement(tmp_path)
    assert len(read_records(str(path))) == 24          # kvlab's reader accepts the file
    joined = load_measurement(path)
    assert joined.height == 24
    assert joined.filter(pl.col("config") == "small")["request"].to_list() == list(range(12))
    assert (joined["predicted_tier"].cast(pl.String) == joined["server_tier"]).all()
    summary = {row["config"]: row for row in agreement(joined).iter_rows(named=True)}
    assert summary["small"]["model_vs_server"] == summary["small"]["model_vs_ttft"] == 12
    assert summary["baseline"]["hits"] == 1                 # pass 3 starts with the live doc
    assert summary["small"]["miss_p50_ms"] > 10 * summary["small"]["hit_p50_ms"]


def test_sections_render_with_captions(tmp_path):
    joined = load_measurement(fake_measurement(tmp_path))
    assert tier_frame(joined).height == 3 * joined.height
    tiers, ttft = sections(joined)
    assert tiers.key == "real-engine-tiers" and "small: model 12/12" in tiers.caption
    assert "recomputed 9" in ttft.caption and "slower than a hit" in ttft.caption
    for section in (tiers, ttft):
        assert section.chart.to_dict()["facet"]


def test_measure_show_prints_the_comparison(tmp_path, capsys):
    from pipeline.cli import main as cli_main

    path = fake_measurement(tmp_path)
    assert cli_main(["measure", "--show", "--output", str(path)]) == 0
    out = capsys.readouterr().out
    assert "model_vs_server" in out and "pass2-replay" in out
    assert cli_main(["measure", "--show", "--output", str(tmp_path / "none.jsonl")]) == 1
    assert "no provenance file" in capsys.readouterr().err
