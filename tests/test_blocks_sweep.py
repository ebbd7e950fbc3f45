"""Block-mode sweeps (events and aggregates) and the block-mode report section."""

import os

import polars as pl
import pytest

from pipeline.commands.blocks import run_blocks
from pipeline.workloads.stream import ORDERS
from pipeline.blocks.sweep import (AGGREGATE_SCHEMA, AGGREGATES_FILE, EVENT_SCHEMA, EVENTS_FILE,
                                   block_hit_steps, block_sweeps)
from pipeline.charts.blocks import block_sections

LAB = {"docs": 10, "tokens": 5011, "passes": ["fwd", "fwd", "rev"], "block_size": 16}
SPEC = [21520, 48000, 50079, 50080, 50110]


@pytest.fixture(scope="module")
def lab_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("blocks")
    aggregates = block_sweeps(**LAB, events_dir=out, cpu_sweep_gpu=21520, spec_points=SPEC)
    return out, aggregates


def test_aggregates_equal_the_blocks_command(lab_sweep):
    _, aggregates = lab_sweep
    assert aggregates.schema == AGGREGATE_SCHEMA
    for order in ORDERS:
        for gpu in (0, 21520, 45088, 48000, 50079, 50080, 50110):
            rows = aggregates.filter(pl.col("sweep") == "gpu_cliff", pl.col("gpu_order") == order,
                                     pl.col("gpu_capacity") == gpu).sort("pass_index")
            expected = run_blocks(gpu=gpu, docs=10, tokens=5011, passes=LAB["passes"],
                                  block_size=16, gpu_order=order)["passes"]
            assert rows.select("gpu_hit_tokens", "cpu_hit_tokens", "miss_tokens",
                               "hit_blocks").to_dicts() == [
                {k: p[k] for k in ("gpu_hit_tokens", "cpu_hit_tokens", "miss_tokens",
                                   "hit_blocks")} for p in expected]
        for cpu_order in ORDERS:
            for cpu in (0, 21520, 45088, 48000, 50080):
                rows = aggregates.filter(pl.col("sweep") == "cpu_cliff",
                                         pl.col("gpu_order") == order,
                                         pl.col("cpu_order") == cpu_order,
                                         pl.col("cpu_capacity") == cpu).sort("pass_index")
                expected = run_blocks(gpu=21520, cpu=cpu, docs=10, tokens=5011,
                                      passes=LAB["passes"], block_size=16, gpu_order=order,
                                      cpu_order=cpu_order)["passes"]
                assert rows["cpu_hit_tokens"].to_list() == [p["cpu_hit_tokens"]
                                                            for p in expected]
                assert rows["miss_tokens"].to_list() == [p["miss_tokens"] for p in expected]


def test_events_give_the_hit_curve_and_stay_small(lab_sweep):
    out, aggregates = lab_sweep
    events = pl.read_parquet(out / EVENTS_FILE)
    assert events.schema == EVENT_SCHEMA
    assert events.height == 2 * 30 * 314          # two orders x 30 requests x 314 blocks
    assert os.path.getsize(out / EVENTS_FILE) / events.height <= 8
    steps = block_hit_steps(events, 16)
    totals = (aggregates.filter(pl.col("sweep") == "gpu_cliff", pl.col("gpu_capacity") >= 5008)
              .group_by("gpu_order", "gpu_capacity").agg(pl.col("gpu_hit_tokens").sum())
              .with_columns(pl.col("gpu_order").cast(pl.String)).sort("gpu_capacity"))
    curve = (totals.join_asof(steps.with_columns(pl.col("gpu_order").cast(pl.String))
                              .sort("capacity"), left_on="gpu_capacity", right_on="capacity",
                              by="gpu_order", strategy="backward", check_sortedness=False)
             .with_columns(pl.col("hit_tokens").fill_null(0)))
    assert curve.height > 50
    assert (curve["hit_tokens"] == curve["gpu_hit_tokens"]).all()


def test_bad_input_writes_nothing(tmp_path):
    target = tmp_path / "events"
    with pytest.raises(ValueError, match="block size"):
        block_sweeps(**{**LAB, "block_size": 0}, events_dir=target)
    with pytest.raises(ValueError, match="gpu capacities"):
        block_sweeps(**LAB, events_dir=target, gpu_capacities=[100, -1])
    assert not target.exists()


def test_report_section_states_the_lab_figures(lab_sweep):
    _, aggregates = lab_sweep
    scenario = {"docs": 10, "tokens": 5011, "block_size": 16, "cpu_sweep_gpu": 21520}
    gpu, cpu = block_sections(aggregates, scenario)
    assert "from 45,088 GPU tokens" in gpu.caption and "49,920 at 50,079" in gpu.caption
    assert "head-first keeps nothing below the edge" in gpu.caption
    assert "30 below the working set" in gpu.caption
    assert "GPU alone keeps no second-pass tokens" in cpu.caption
    assert "brings them to 50,080 head-first once the tier holds exactly them" in cpu.caption
    for section in (gpu, cpu):
        spec = section.chart.to_dict()
        assert len(spec["hconcat"]) == 2
