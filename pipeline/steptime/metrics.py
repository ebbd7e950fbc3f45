"""Per-request and per-run figures of a simulated run, and vLLM's own prefix-cache metrics.

``request_outputs(requests)`` adds the tokens per tier (``miss_tokens`` = prompt - GPU hit -
CPU hit) to the engine's requests table (TTFT, queue wait and end-to-end come with the time
clock). ``run_metrics(requests, steps)`` gives TTFT / queue / end-to-end percentiles
(linear interpolation, as numpy's and vLLM's benchmark's), TPOT and ITL (``tpot``),
throughput, the token-weighted
hit ratio per tier, preemptions, whether the run is overloaded (``overloaded``,
``offered_rate``, ``served_rate``, ``queue_at_last_arrival``: ``pipeline.engine.overload``),
and the prefix-cache hit rate as vLLM 0.33 reports it:

* Prometheus: ``vllm:prefix_cache_hits / vllm:prefix_cache_queries``. vLLM records one
  entry per admission (``KVCacheManager.record_prefix_cache_stats``, at admission only):
  queries = the request's tokens, hits = its local prefix-cache hit; a re-admission after a
  preemption goes to ``preempted_*`` instead (``PrefixCacheStats.record``), so the counters
  hold each request once, at its first admission. With a KV connector (the CPU tier),
  ``vllm:external_prefix_cache_queries`` = tokens - local hit, ``..._hits`` = the
  connector's hit.
* The log line every ``VLLM_LOG_STATS_INTERVAL`` (10 s): ``Prefix cache hit rate`` from
  ``CachingMetrics(max_recent_requests=1000)``: one entry per engine step with admissions
  (empty ones are not appended), the oldest entries dropped while the window holds more
  than 1,000 requests, the newest always kept (``vllm/v1/metrics/stats.py``).

>>> entries = windowed_hit_rate([600, 600], [6000, 6000], [3000, 0])
>>> entries.tolist()       # the second entry pushes the window past 1,000 requests
[0.5, 0.0]
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from pipeline.engine.overload import overload_of
from pipeline.steptime.tpot import token_metrics

__all__ = ["VLLM_WINDOW_REQUESTS", "VLLM_LOG_INTERVAL_S", "request_outputs",
           "prefix_cache_entries", "windowed_hit_rate", "vllm_log_figures", "run_metrics",
           "PERCENTILES"]

VLLM_WINDOW_REQUESTS = 1000      # CachingMetrics(max_recent_requests=1000)
VLLM_LOG_INTERVAL_S = 10.0       # envs.VLLM_LOG_STATS_INTERVAL default
PERCENTILES = (50, 90, 99)


def _cpu(requests: pl.DataFrame) -> pl.Expr:
    return pl.col("cpu_hit_tokens") if "cpu_hit_tokens" in requests.columns else pl.lit(0)


def request_outputs(requests: pl.DataFrame) -> pl.DataFrame:
    """The requests table plus ``cpu_hit_tokens`` (0 when absent) and ``miss_tokens``."""
    return requests.with_columns(
        cpu_hit_tokens=_cpu(requests).cast(pl.Int64),
        miss_tokens=(pl.col("prompt_tokens") - pl.col("gpu_hit_tokens") - _cpu(requests))
        .cast(pl.Int64))


def prefix_cache_entries(requests: pl.DataFrame, steps: pl.DataFrame | None = None
                         ) -> pl.DataFrame:
    """vLLM's per-step PrefixCacheStats (non-preempted part), one row per step with a first
    admission: step, requests, queries, hits, external_queries, external_hits, and
    ``end_ms`` (when the step ends: its stats reach the loggers) with the time clock."""
    entries = (request_outputs(requests)
               .group_by(pl.col("first_scheduled_step").alias("step"))
               .agg(requests=pl.len(), queries=pl.col("prompt_tokens").sum(),
                    hits=pl.col("gpu_hit_tokens").sum(),
                    external_queries=(pl.col("prompt_tokens") - pl.col("gpu_hit_tokens")).sum(),
                    external_hits=pl.col("cpu_hit_tokens").sum())
               .sort("step"))
    if steps is not None and {"start_ms", "duration_ms"} <= set(steps.columns):
        ends = steps.select("step", end_ms=pl.col("start_ms") + pl.col("duration_ms"))
        entries = entries.join(ends, on="step", how="left")
    return entries


def windowed_hit_rate(requests, queries, hits, window: int = VLLM_WINDOW_REQUESTS
                      ) -> np.ndarray:
    """CachingMetrics' hit rate after each observed entry (entries with requests > 0, in
    order): the window is the longest run of newest entries with at most ``window``
    requests, and at least the newest entry."""
    n = np.asarray(requests, dtype=np.int64)
    q = np.concatenate(([0], np.cumsum(np.asarray(queries, dtype=np.int64))))
    h = np.concatenate(([0], np.cumsum(np.asarray(hits, dtype=np.int64))))
    c = np.concatenate(([0], np.cumsum(n)))
    if np.any(n < 1):
        raise ValueError("every entry must hold at least one request (vLLM skips empty ones)")
    end = np.arange(1, n.size + 1)
    # smallest start j with c[end] - c[j] <= window, capped at end - 1 (the newest entry)
    start = np.minimum(np.searchsorted(c, c[end] - window, side="left"), end - 1)
    total = q[end] - q[start]
    return np.where(total > 0, (h[end] - h[start]) / np.where(total > 0, total, 1), 0.0)


def vllm_log_figures(entries: pl.DataFrame, end_ms: float,
                     interval_s: float = VLLM_LOG_INTERVAL_S) -> pl.DataFrame:
    """What vLLM's log line shows every ``interval_s`` seconds of the run (time clock):
    time_s, prefix_cache_hit_rate and external_prefix_cache_hit_rate (percent; null before
    the first admission, as vLLM omits the field while the window is empty)."""
    local = windowed_hit_rate(entries["requests"], entries["queries"], entries["hits"])
    external_rows = entries.filter(pl.col("external_queries") > 0)
    external = windowed_hit_rate(external_rows["requests"], external_rows["external_queries"],
                                 external_rows["external_hits"]) if external_rows.height else None
    count = max(1, math.ceil(end_ms / (interval_s * 1e3)))
    times = np.arange(1, count + 1) * interval_s * 1e3

    def at(ends: np.ndarray, rates: np.ndarray | None) -> list[float | None]:
        if rates is None:
            return [None] * count
        index = np.searchsorted(ends, times, side="right") - 1
        return [None if i < 0 else round(100 * float(rates[i]), 6) for i in index]

    return pl.DataFrame({
        "time_s": times / 1e3,
        "prefix_cache_hit_rate": at(entries["end_ms"].to_numpy(), local),
        "external_prefix_cache_hit_rate": at(external_rows["end_ms"].to_numpy()
                                             if external_rows.height else np.zeros(0),
                                             external)},
        schema={"time_s": pl.Float64, "prefix_cache_hit_rate": pl.Float64,
                "external_prefix_cache_hit_rate": pl.Float64})


def _quantiles(frame: pl.DataFrame, column: str, prefix: str) -> dict[str, float | None]:
    values = frame[column].drop_nulls()
    return {f"{prefix}_p{p}": (None if values.is_empty()
                               else float(values.quantile(p / 100, "linear")))
            for p in PERCENTILES}


def run_metrics(requests: pl.DataFrame, steps: pl.DataFrame | None = None,
                label: str | None = None) -> dict[str, object]:
    """The per-run figures (see the module docstring) as a flat dict; ``label`` names the
    step-time model ("roofline (...)" or "fitted (...)") the times come from."""
    frame = request_outputs(requests)
    prompt = int(frame["prompt_tokens"].sum())
    tiers = {tier: int(frame[f"{tier}_tokens"].sum())
             for tier in ("gpu_hit", "cpu_hit", "miss")}
    entries = prefix_cache_entries(requests, steps)
    queries, hits = int(entries["queries"].sum()), int(entries["hits"].sum())
    connector = "cpu_hit_tokens" in requests.columns          # a CPU tier: vLLM's connector
    ext_q = int(entries["external_queries"].sum()) if connector else 0
    ext_h = int(entries["external_hits"].sum()) if connector else 0
    window = windowed_hit_rate(entries["requests"], entries["queries"], entries["hits"])
    out: dict[str, object] = {
        "requests": frame.height, "prompt_tokens": prompt,
        "output_tokens": int(frame["output_tokens"].sum()) if "output_tokens" in frame.columns
        else None,
        "gpu_hit_ratio": tiers["gpu_hit"] / prompt if prompt else None,
        "cpu_hit_ratio": tiers["cpu_hit"] / prompt if prompt else None,
        "miss_ratio": tiers["miss"] / prompt if prompt else None,
        "hit_ratio": (tiers["gpu_hit"] + tiers["cpu_hit"]) / prompt if prompt else None,
        "preemptions": int(frame["preemptions"].sum()) if "preemptions" in frame.columns
        else 0,
        "preempted_requests": int((frame["preemptions"] > 0).sum())
        if "preemptions" in frame.columns else 0,
        "vllm_prefix_cache_queries": queries, "vllm_prefix_cache_hits": hits,
        "vllm_prefix_cache_hit_rate": hits / queries if queries else None,
        "vllm_external_prefix_cache_queries": ext_q,
        "vllm_external_prefix_cache_hits": ext_h,
        "vllm_external_prefix_cache_hit_rate": ext_h / ext_q if ext_q else None,
        "vllm_log_hit_rate_final": float(window[-1]) if window.size else None,
        "step_time_model": label,
        **overload_of(requests).metrics(),
    }
    if "ttft_ms" in frame.columns:
        for column, prefix in (("ttft_ms", "ttft_ms"), ("queue_ms", "queue_ms"),
                               ("e2e_ms", "e2e_ms")):
            if column in frame.columns:
                out.update(_quantiles(frame, column, prefix))
        out["ttft_ms_mean"] = float(frame["ttft_ms"].mean()) if frame.height else None
        if steps is not None and "start_ms" in steps.columns:
            out.update(token_metrics(frame, steps))
        start = float(frame["arrival_ms"].min()) if "arrival_ms" in frame.columns else 0.0
        duration_s = (float(frame["finish_ms"].max()) - start) / 1e3 if frame.height else 0.0
        out["duration_s"] = duration_s
        out["request_throughput"] = frame.height / duration_s if duration_s > 0 else None
        out["output_throughput"] = (out["output_tokens"] / duration_s
                                    if duration_s > 0 and out["output_tokens"] is not None
                                    else None)
        out["total_token_throughput"] = ((prompt + (out["output_tokens"] or 0)) / duration_s
                                         if duration_s > 0 else None)
    else:
        arrival = "arrival_step" if "arrival_step" in frame.columns else "first_scheduled_step"
        first = (frame["first_token_step"] - frame[arrival]) \
            if "first_token_step" in frame.columns else None
        if first is not None:
            out.update(_quantiles(frame.with_columns(first.alias("_t")), "_t", "ttft_steps"))
    return out
