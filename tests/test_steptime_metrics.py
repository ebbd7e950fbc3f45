"""Per-request and per-run figures, and vLLM's prefix-cache metrics against vLLM's code."""

import sys
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import ROOT
from pipeline.steptime.metrics import (prefix_cache_entries, request_outputs, run_metrics,
                                       vllm_log_figures, windowed_hit_rate)

VLLM = Path.home() / ".cache" / "kvlab" / "vllm-0.33.0"


def _requests():
    # 4 requests, two admitted at step 0, one at 2, one at 5 (preempted twice later)
    return pl.DataFrame({
        "request": [0, 1, 2, 3], "first_scheduled_step": [0, 0, 2, 5],
        "first_token_step": [1, 2, 3, 6], "finish_step": [4, 5, 6, 9],
        "prompt_tokens": [100, 200, 100, 400], "gpu_hit_tokens": [0, 96, 48, 320],
        "cpu_hit_tokens": [0, 0, 32, 16], "output_tokens": [10, 10, 20, 20],
        "preemptions": [0, 0, 0, 2],
        "arrival_ms": [0.0, 0.0, 10.0, 30.0], "first_scheduled_ms": [0.0, 0.0, 20.0, 50.0],
        "first_token_ms": [10.0, 20.0, 30.0, 60.0], "finish_ms": [40.0, 50.0, 60.0, 1000.0],
        "ttft_ms": [10.0, 20.0, 20.0, 30.0], "queue_ms": [0.0, 0.0, 10.0, 20.0],
        "e2e_ms": [40.0, 50.0, 50.0, 970.0]})


def _steps():
    return pl.DataFrame({"step": list(range(10)), "start_ms": [10.0 * s for s in range(10)],
                         "duration_ms": [10.0] * 10})


def test_tokens_per_tier():
    out = request_outputs(_requests())
    assert out["miss_tokens"].to_list() == [100, 104, 20, 64]
    no_cpu = request_outputs(_requests().drop("cpu_hit_tokens"))
    assert no_cpu["cpu_hit_tokens"].to_list() == [0, 0, 0, 0]


def test_run_metrics_by_hand():
    m = run_metrics(_requests(), _steps(), label="roofline (H100, x)")
    assert m["requests"] == 4 and m["prompt_tokens"] == 800
    assert m["gpu_hit_ratio"] == pytest.approx(464 / 800)
    assert m["cpu_hit_ratio"] == pytest.approx(48 / 800)
    assert m["hit_ratio"] == pytest.approx(512 / 800)
    assert m["miss_ratio"] == pytest.approx(288 / 800)
    assert (m["preemptions"], m["preempted_requests"]) == (2, 1)
    # TTFT [10, 20, 20, 30]: linear percentiles
    assert m["ttft_ms_p50"] == 20.0 and m["ttft_ms_p90"] == pytest.approx(27.0)
    assert m["ttft_ms_p99"] == pytest.approx(29.7)
    # 4 requests, 60 output tokens over 1 s (arrival 0 .. last finish 1000 ms)
    assert m["duration_s"] == 1.0 and m["request_throughput"] == 4.0
    assert m["output_throughput"] == 60.0 and m["total_token_throughput"] == 860.0
    # Prometheus counters: each request once, local hits; external = the rest vs CPU hits
    assert (m["vllm_prefix_cache_queries"], m["vllm_prefix_cache_hits"]) == (800, 464)
    assert m["vllm_external_prefix_cache_queries"] == 336
    assert m["vllm_external_prefix_cache_hits"] == 48
    assert m["vllm_log_hit_rate_final"] == pytest.approx(464 / 800)   # all inside the window
    assert m["step_time_model"] == "roofline (H100, x)"


def test_entries_and_log_lines():
    entries = prefix_cache_entries(_requests(), _steps())
    assert entries["step"].to_list() == [0, 2, 5]
    assert entries["requests"].to_list() == [2, 1, 1]
    assert entries["hits"].to_list() == [96, 48, 320]
    assert entries["end_ms"].to_list() == [10.0, 30.0, 60.0]
    logs = vllm_log_figures(entries, end_ms=25_000.0)
    assert logs["time_s"].to_list() == [10.0, 20.0, 30.0]
    assert logs["prefix_cache_hit_rate"].to_list() == [pytest.approx(58.0)] * 3
    # entries reaching the logger at 10, 30 and 60 s: the log at 20 s still shows the first
    late = vllm_log_figures(entries.with_columns(pl.col("end_ms") * 1000), end_ms=60_000.0)
    assert late["prefix_cache_hit_rate"].to_list() == [
        pytest.approx(100 * 96 / 300), pytest.approx(100 * 96 / 300),
        pytest.approx(100 * 144 / 400), pytest.approx(100 * 144 / 400),
        pytest.approx(100 * 144 / 400), pytest.approx(58.0)]
    assert late["external_prefix_cache_hit_rate"][0] == pytest.approx(100 * 0 / 204)


def test_steps_clock_metrics_have_no_times():
    frame = _requests().drop("arrival_ms", "first_scheduled_ms", "first_token_ms",
                             "finish_ms", "ttft_ms", "queue_ms", "e2e_ms")
    m = run_metrics(frame.with_columns(arrival_step=pl.lit(0)))
    assert "ttft_ms_p50" not in m and m["ttft_steps_p50"] == pytest.approx(2.5)


def _sequential(entries, window=1000):
    """CachingMetrics written out: append, then pop the oldest while over the window."""
    queue, rates = [], []
    for entry in entries:
        queue.append(entry)
        while len(queue) > 1 and sum(e[0] for e in queue) > window:
            queue.pop(0)
        queries = sum(e[1] for e in queue)
        rates.append(sum(e[2] for e in queue) / queries if queries else 0.0)
    return rates


ENTRIES = st.lists(st.tuples(st.integers(1, 400), st.integers(0, 5000)).flatmap(
    lambda rq: st.tuples(st.just(rq[0]), st.just(rq[1]), st.integers(0, rq[1]))),
    min_size=1, max_size=40)


@given(ENTRIES, st.sampled_from([1, 5, 1000]))
def test_window_equals_the_sequential_rule(entries, window):
    requests, queries, hits = zip(*entries)
    assert windowed_hit_rate(requests, queries, hits, window).tolist() == pytest.approx(
        _sequential(entries, window))


@pytest.fixture(scope="module")
def vllm_stats():
    if not (VLLM / "vllm" / "v1" / "metrics" / "stats.py").is_file():
        pytest.skip(f"vLLM 0.33.0 sources not at {VLLM} (scripts/ensure_vllm_sources.sh fetches)")
    sys.path.insert(0, str(ROOT / "scripts"))
    from stub_importer import Importer
    finder = Importer(VLLM)
    sys.meta_path.insert(0, finder)
    try:
        from vllm.v1.metrics.stats import CachingMetrics, PrefixCacheStats
        yield CachingMetrics, PrefixCacheStats
    finally:
        sys.meta_path.remove(finder)


ADMISSIONS = st.lists(st.lists(st.tuples(st.integers(1, 3000), st.floats(0, 1),
                                         st.booleans()), max_size=12), min_size=1, max_size=60)


@given(steps=ADMISSIONS)
def test_entries_and_window_equal_vllms_own_code(vllm_stats, steps):
    """Per step, admissions (prompt tokens, hit share, preempted before) recorded by vLLM's
    PrefixCacheStats and observed by its CachingMetrics, against kvlab's first-admission
    entries and window."""
    CachingMetrics, PrefixCacheStats = vllm_stats
    metrics, rows, theirs = CachingMetrics(), [], []
    for step, admissions in enumerate(steps):
        stats = PrefixCacheStats()
        for n, share, preempted in admissions:
            hit = int(share * (n - 1))
            stats.record(num_tokens=n, num_hits=hit, preempted=preempted)
            if not preempted:
                rows.append({"first_scheduled_step": step, "prompt_tokens": n,
                             "gpu_hit_tokens": hit})
        metrics.observe(stats)
        if stats.requests:
            theirs.append(metrics.hit_rate)
    if not rows:
        return
    entries = prefix_cache_entries(pl.DataFrame(rows))
    ours = windowed_hit_rate(entries["requests"], entries["queries"], entries["hits"])
    assert ours.tolist() == pytest.approx(theirs)
