"""The index report of a run off the lab: the engine models' own results drawn, captions
that do not repeat a number as its own threshold, edge labels kept inside their panels."""

from __future__ import annotations

import html
import re

import polars as pl
import pytest

from conftest import run_outputs
from pipeline.charts.blocks import block_sections, second_pass_tokens
from pipeline.cli import main

SMALL = ["--points", "6", "--grid-steps", "3", "--quiet"]
ENGINES = ["--docs", "4", "--tokens", "100", "--block-size", "16", "--gpu-model", "vllm",
           "--cpu-model", "lmcache"]


def captions(page: str) -> dict[str, str]:
    return {key: html.unescape(text) for key, text in re.findall(
        r'id="chart-([a-z0-9-]+)"></div><figcaption>(.*?)</figcaption>', page)}


@pytest.fixture(scope="module")
def engine_page(tmp_path_factory):
    root = tmp_path_factory.mktemp("off-lab")
    assert main(["run", *SMALL, *run_outputs(root), *ENGINES]) == 0
    return root, (root / "report" / "index.html").read_text()


def _first_full(frame: pl.DataFrame, x: str) -> tuple[int, int]:
    best = int(frame["cached_tokens"].max())
    return best, int(frame.filter(pl.col("cached_tokens") == best)[x].min())


def test_the_engine_models_results_are_drawn_with_their_own_numbers(engine_page):
    root, page = engine_page
    found = captions(page)
    assert {"run-engines-gpu", "run-engines-cpu"} <= set(found)
    engine = pl.read_parquet(root / "events" / "blocks_aggregates.parquet")
    best, first = _first_full(second_pass_tokens(engine, "gpu_cliff"), "gpu_capacity")
    caption = found["run-engines-gpu"]
    assert "GPU vllm" in caption and "CPU lmcache" in caption
    shown = f"from {first:,} GPU tokens" if first != best else "once the tier holds exactly"
    assert f"vllm keeps {best:,} {shown}" in caption
    assert "in blocks_aggregates.parquet" in page and "sweeps are in" not in page


def test_no_caption_repeats_a_number_as_its_own_threshold(engine_page, tmp_path):
    _, page = engine_page
    lab = tmp_path / "lab"
    assert main(["run", *SMALL, *run_outputs(lab), "--block-size", "16"]) == 0
    for text in [*captions(page).values(),
                 *captions((lab / "report" / "index.html").read_text()).values()]:
        assert not re.search(r"\b(\d[\d,]*) (?:\w+ ){0,3}from \1\b", text), text
        assert "at most 0 " not in text, text


def test_edge_labels_stay_inside_their_panel_when_the_edges_are_at_the_right():
    from pipeline.blocks.sweep import block_frames

    _, aggregates = block_frames(25, 8000, ("fwd", "fwd", "rev"), 256, cpu_sweep_gpu=21520)
    scenario = {"docs": 25, "tokens": 8000, "block_size": 256, "cpu_sweep_gpu": 21520}
    for section in block_sections(aggregates, scenario):
        spec = section.chart.to_dict()
        for panel in spec["hconcat"]:
            texts = [layer for layer in _layers(panel) if _mark(layer)["type"] == "text"]
            assert len(texts) == 2
            assert all(_mark(t)["align"] == "right" for t in texts)   # edges at 80 % of x
        assert "198,400" in section.caption


def _layers(spec: dict) -> list[dict]:
    out = []
    for layer in spec.get("layer", []):
        out += _layers(layer) if "layer" in layer else [layer]
    return out


def _mark(layer: dict) -> dict:
    return layer["mark"] if isinstance(layer["mark"], dict) else {"type": layer["mark"]}
