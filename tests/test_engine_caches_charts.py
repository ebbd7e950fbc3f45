"""Report sections of the engine models: the curves they draw hold the models' figures."""

import polars as pl

from pipeline.charts import Section
from pipeline.charts.engines import lab_engine_sections
from pipeline.blocks.engine_curves import cpu_model_curves, gpu_model_curves


def test_vllm_curve_is_the_block_lru_one_two_blocks_later():
    caps = [47968, 48000, 50080, 50112]
    wide = gpu_model_curves(caps).pivot(on="model", index="capacity", values="hit_tokens")
    lru, vllm = dict(zip(wide["capacity"], wide["block-lru"])), \
        dict(zip(wide["capacity"], wide["vllm 0.33"]))
    assert vllm[48000] == lru[47968] == 28_960 and vllm[50112] == lru[50080] == 50_080


def test_cpu_cliffs_document_vs_chunks():
    frame = cpu_model_curves([48384, 48640, 50079, 50080, 50110])
    hits = {(m, c): h for m, c, h in frame.iter_rows()}
    assert hits[("lmcache", 48384)] == 0 and hits[("lmcache", 48640)] == 48_640
    assert hits[("block-lru blocks", 50079)] == 0 and hits[("block-lru blocks", 50080)] == 50_080
    assert hits[("document (kvlab)", 50080)] == 0 and hits[("document (kvlab)", 50110)] == 50_110


def test_sections_render():
    for section in lab_engine_sections(gpu_model_curves([48000, 50110]),
                                       cpu_model_curves([48640, 56000])):
        assert isinstance(section, Section) and section.caption.endswith(".")
        assert isinstance(section.chart.to_dict(), dict)
