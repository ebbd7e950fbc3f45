"""The policy report sections: curves from the engine, OPT as the ceiling, captions with
the figures."""

from __future__ import annotations

import json

import polars as pl

from pipeline.charts.policies import policy_sections
from pipeline.blocks.policy_curves import lab_curves, trace_curves


def test_lab_curves_and_section():
    lab = lab_curves(points=25)
    wide = lab.pivot(on="policy", index="capacity", values="hits")
    for name in ("lru", "fifo", "mru", "lfu", "clock", "sieve", "s3fifo", "arc"):
        assert (wide[name] <= wide["opt"]).all(), name
    at = wide.filter(pl.col("capacity") == 50109)
    assert at["lru"][0] == 9 and at["opt"][0] == 18      # LRU: reverse pass only; OPT 9+9
    (section,) = policy_sections(lab)
    assert section.key == "policies-lab" and "30% of accesses" in section.caption
    assert "60%" in section.caption
    spec = section.chart.to_dict()
    assert len(spec["layer"]) == 2


def test_trace_section(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": i, "input_length": 1024,
                                         "output_length": 1, "hash_ids": [i % 7, i % 5 + 10]})
                             + "\n" for i in range(60)))
    curves = trace_curves(trace, points=6)
    sections = policy_sections(lab_curves(points=5), curves)
    assert [s.key for s in sections] == ["policies-lab", "policies-trace"]
    assert "OPT's" in sections[1].caption
