"""bench: the trace the engine and trace benchmarks run on (--trace), what a skip says, and
the landmark hits the curve benchmark prints."""

import re

import numpy as np
import pytest

from pipeline.bench import curve
from pipeline.bench import trace as trace_bench
from pipeline.cli import main
from pipeline.onepass.stack_distance import lru_hit_counts
from pipeline.policies.reference import write_oracle_trace
from test_engine_caches_bench import tiny_trace

QUICK = ["bench", "--skip-run", "--skip-curve"]


def test_with_engines_runs_on_the_trace_given(tmp_path, capsys):
    assert main([*QUICK, "--with", "engines", "--engines-capacities", "3",
                 "--trace", str(tiny_trace(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "trace: 5 requests, 14 blocks of 512" in out and "SKIPPED" not in out


@pytest.mark.parametrize("name", ["engines", "trace"])
def test_without_a_trace_the_skip_is_said_on_stdout_and_stderr(tmp_path, capsys, monkeypatch,
                                                               name):
    monkeypatch.setattr(trace_bench, "SHARED_TRACE", tmp_path / "absent.jsonl")
    extra = ["--trace-skip-curve"] if name == "trace" else []
    assert main([*QUICK, "--with", name, *extra]) == 0
    captured = capsys.readouterr()
    assert "SKIPPED" in captured.out and "pass --trace PATH" in captured.out
    assert captured.err.startswith("bench: SKIPPED") and captured.err.count("\n") == 1


@pytest.mark.parametrize("content, reason", [(None, "no such file"),
                                             ('{"oops": 1}\n', "not a Mooncake trace")])
def test_a_bad_trace_is_one_line_before_any_figure(tmp_path, capsys, content, reason):
    path = tmp_path / "t.jsonl"
    if content is not None:
        path.write_text(content)
    assert main([*QUICK, "--with", "trace,engines", "--trace", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.err.startswith(f"error: --trace {path}: {reason}")
    assert captured.err.count("\n") == 1 and "==" not in captured.out


def test_the_50_percent_hits_are_at_half_the_distinct_bytes(capsys):
    """With 1000 capacities from 5 % to 100 %, the middle grid point sits at 52.5 %: the
    printed 50 % figure must be the hits at half the distinct bytes, not that point's."""
    pytest.importorskip("libcachesim")
    keys, sizes = curve.zipf_trace(3000, 300, 7)
    total = curve.distinct_bytes(keys, sizes)
    grid = curve.capacity_grid(total, 1000)
    with __import__("tempfile").TemporaryDirectory() as folder:
        path = f"{folder}/t.bin"
        write_oracle_trace(path, keys, sizes)
        curve.compare(grid, keys, sizes, path, 10, None)
    line = [l for l in capsys.readouterr().out.splitlines() if "hits at 5%" in l][0]
    figures = re.search(r": ([\d,]+) / ([\d,]+) / ([\d,]+) of", line).groups()
    half = lru_hit_counts(keys, sizes, np.array([round(total / 2)]))[0]
    middle = lru_hit_counts(keys, sizes, grid[499:500])[0]
    assert half != middle                      # the grid's middle point is no answer
    assert int(figures[1].replace(",", "")) == half
    assert int(figures[0].replace(",", "")) == lru_hit_counts(
        keys, sizes, np.array([round(total * 0.05)]))[0]
