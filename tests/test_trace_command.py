"""``python -m pipeline trace``: the printout, the Parquet events, the report, bad input."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from conftest import SYNTHETIC_TRACE, needs_shared_trace

from pipeline.blocks.sweep import block_hit_steps
from pipeline.cli import main

SYNTHETIC = SYNTHETIC_TRACE
needs_trace = needs_shared_trace


def run_json(capsys, *argv):
    assert main(["trace", *map(str, argv), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@needs_trace
def test_shared_trace_prints_the_infinite_cache_ratio_and_every_point(tmp_path, capsys):
    assert main(["trace", str(SYNTHETIC), "--gpu", "0,5138944", "--cpu", "0,20555776",
                 "--out", str(tmp_path / "out"), "--no-report"]) == 0
    out = capsys.readouterr().out
    assert "infinite-cache block hit ratio: 0.6396" in out
    assert len([line for line in out.splitlines() if line.lstrip()[:1].isdigit()]) == 4


@needs_trace
def test_parquet_events_give_the_gpu_curve_in_polars(tmp_path, capsys):
    gpu = [400 * 512, 5000 * 512, 20000 * 512]
    summary = run_json(capsys, SYNTHETIC, "--gpu", ",".join(map(str, gpu)), "--cpu", "0",
                       "--out", tmp_path, "--no-report", "--gpu-model", "block-lru")
    assert summary["infinite_cache_block_hit_ratio"] == 0.6396
    assert summary["gpu_curve_exact_from_blocks"] <= 400
    events = pl.read_parquet(tmp_path / "events.parquet")
    assert events.height == summary["block_accesses"] == 121877
    prefix = events.select(pl.col("stack_distance").fill_null(2 ** 40).cast(pl.Int64)
                           .cum_max().over("request", order_by="block_index"))
    curve = [prefix.filter(pl.col("stack_distance") <= c // 512).height * 512 for c in gpu]
    assert curve == [p["gpu_tokens"] for p in summary["points"]]
    steps = block_hit_steps(events, 512)             # the blocks branch's reading of it
    at = [steps.filter(pl.col("capacity") <= c)["hit_tokens"].max() for c in gpu]
    assert at == curve
    for name in ("events", "requests"):
        assert summary["files"][name]["bytes_per_row"] <= 8
    per_request = pl.read_parquet(tmp_path / "requests.parquet")
    totals = per_request.group_by("point").agg(pl.col("gpu_hit_tokens").sum()).sort("point")
    assert totals["gpu_hit_tokens"].to_list() == [p["gpu_tokens"] for p in summary["points"]]


def test_fast_and_literal_models_agree_per_request_on_a_pattern(tmp_path, capsys):
    common = ["--pattern", "zipf", "--num-documents", "6", "--document-length", "100",
              "--num-requests", "40", "--question-length", "20", "--system-prompt-length",
              "40", "--block-size", "16", "--gpu", "0,64,160,480", "--cpu", "0,128,1000",
              "--no-report"]
    fast = run_json(capsys, *common, "--out", tmp_path / "fast", "--gpu-model", "block-lru",
                    "--cpu-model", "block-lru")
    literal = run_json(capsys, *common, "--out", tmp_path / "literal", "--gpu-model",
                       "block-lru-replay", "--cpu-model", "block-lru-replay")
    assert fast["points"] == literal["points"]
    a, b = (pl.read_parquet(tmp_path / name / "requests.parquet").drop("gpu_model", "cpu_model")
            for name in ("fast", "literal"))
    assert a.equals(b)
    assert a.select(pl.col("gpu_hit_tokens") + pl.col("cpu_hit_tokens")).to_series().max() > 0


def test_long_doc_qa_tile_cliff_head_first_but_not_tail_first(tmp_path, capsys):
    room = 3 * 1024 + 512    # 4 documents of 4 blocks, room for 3 and 2 blocks
    args = ["--pattern", "long-doc-qa", "--repeat-mode", "tile", "--num-documents", "4",
            "--document-length", "1024", "--block-size", "256", "--gpu", str(room),
            "--cpu", "0", "--out", tmp_path, "--no-report", "--gpu-model", "block-lru"]
    head = run_json(capsys, *args, "--gpu-order", "head-first")
    tail = run_json(capsys, *args, "--gpu-order", "tail-first")
    assert head["points"][0]["gpu_tokens"] == 0
    assert tail["points"][0]["gpu_tokens"] > 0


def test_report_page_has_its_four_sections(tmp_path, capsys):
    report = tmp_path / "trace.html"
    summary = run_json(capsys, "--pattern", "multi-tenant", "--users", "3", "--num-documents",
                       "4", "--document-length", "300", "--system-prompt-length", "100",
                       "--out", tmp_path / "out", "--report", report)
    page = report.read_text()
    for key in ("trace-gpu", "trace-orders", "trace-cpu", "trace-reuse"):
        assert f'id="chart-{key}"' in page
    assert summary["report"] == str(report)


def write(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return path


GOOD = '{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}'


@pytest.mark.parametrize(("line", "reason"), [
    ("{oops", ":2: not JSON"),
    ('{"timestamp": 0, "input_length": 600, "output_length": 1}', ":2: missing field"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": []}', ":2: hash_ids"),
    ('{"timestamp": 0, "input_length": 9000, "output_length": 1, "hash_ids": [1]}',
     ":2: input_length 9000 is inconsistent"),
])
def test_a_bad_line_stops_before_anything_is_written(tmp_path, capsys, line, reason):
    trace = write(tmp_path / "t.jsonl", [GOOD, line])
    out, report = tmp_path / "out", tmp_path / "r.html"
    assert main(["trace", str(trace), "--out", str(out), "--report", str(report)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {trace}{reason}") and err.count("\n") == 1
    assert not out.exists() and not report.exists()
    assert main(["trace", str(trace), "--out", str(out), "--skip-bad-lines",
                 "--no-report"]) == 0
    assert "skipped 1 bad lines (first: line 2" in capsys.readouterr().out
    assert (out / "events.parquet").exists()


@pytest.mark.parametrize("argv", [
    ["--format", "csv"], ["--block-size", "0"], ["--gpu", "1,x"], ["--gpu", "-5"],
    ["--gpu-order", "middle-first"], ["--pattern", "zipf", "--zipf-alpha", "-1"],
])
def test_bad_options_are_usage_errors(tmp_path, capsys, argv):
    trace = write(tmp_path / "t.jsonl", [GOOD])
    with pytest.raises(SystemExit) as exit_:
        main(["trace", str(trace), "--out", str(tmp_path / "out"), *argv])
    assert exit_.value.code == 2 and not (tmp_path / "out").exists()
    assert capsys.readouterr().err.count("\n") == 1


def test_path_and_pattern_exclude_each_other_and_outputs_must_be_writable(tmp_path, capsys):
    trace = write(tmp_path / "t.jsonl", [GOOD])
    assert main(["trace", str(trace), "--pattern", "zipf"]) == 1
    assert main(["trace"]) == 1
    blocker = write(tmp_path / "file", ["x"])
    assert main(["trace", str(trace), "--out", str(blocker / "sub"), "--no-report"]) == 1
    assert "--out" in capsys.readouterr().err
    assert not np.any([p.name.endswith(".parquet") for p in tmp_path.rglob("*")])


def test_the_trace_benchmark_runs_small():
    from pipeline.bench.trace import curve_figures
    figures = curve_figures(requests=50, documents=10, document_length=64, question_length=16,
                            capacities=10)
    assert (figures["blocks"], figures["requests"]) == (250, 50)
    assert 0 < figures["hit_ratio_at_top"] < 1
