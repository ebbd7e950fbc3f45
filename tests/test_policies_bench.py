"""Smoke test of the policy benchmark (the figures themselves are not tested)."""

import pytest

pytest.importorskip("libcachesim", reason="libCacheSim (a dev dependency) not installed")


def test_bench_runs_and_agrees_with_libcachesim(capsys):
    from pipeline.bench.policies import run_bench
    rows = run_bench(requests=3000, objects=300, points=2, policies=("lru", "mru", "opt"))
    assert [row["policy"] for row in rows] == ["lru", "mru", "opt"]
    assert rows[1]["lcs_mps"] is None and rows[0]["lcs_curve_measured"]
    assert "ours M/s" in capsys.readouterr().out


def test_onepass_bench_agrees_with_replay_and_libcachesim(capsys):
    from pipeline.bench.policies import run_onepass_bench
    rows = run_onepass_bench(requests=3000, objects=300, points=3, lcs_curve=("belady",))
    assert [row["policy"] for row in rows] == ["lru", "mru", "opt", "belady"]
    assert rows[3]["lcs_curve_measured"] and rows[2]["hits"] >= rows[3]["hits"]
    assert "one pass s" in capsys.readouterr().out
