"""Curves under load: hit ratio and TTFT against GPU capacity, one curve per load.

``load_curves(requests, capacities, loads, config, latency)`` runs the engine model
(``pipeline.engine.simulate``, time clock) once per (load, GPU capacity) and returns one
row per point; ``upper_curve`` adds the concurrency-1 line from the one-pass ``vllm`` model
(``pipeline.onepass.vllm_fast``: every capacity in one pass, each request alone), where
TTFT is the request's own prefill priced by the same step-time model (no queue). Load
erodes the curve from that line down. Each point says whether its run is overloaded
(``overloaded``, ``offered_rate``, ``served_rate`` per second, ``queue_at_last_arrival``:
``pipeline.engine.overload``; the concurrency-1 line never is).

A GPU capacity of C tokens is ``num_gpu_blocks = C // block_size`` (vLLM logs "GPU KV cache
size: num_gpu_blocks x block_size tokens", the null block inside), as the ``vllm`` model
reads a capacity. Loads: ``speed X`` (the trace's arrival times / X), ``rate R`` (Poisson
arrivals, R per second, seeded), ``concurrency K`` (closed loop, K outstanding).
"""

from __future__ import annotations

import concurrent.futures
import copy
import multiprocessing
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import polars as pl

from pipeline.engine.config import SchedulerConfig
from pipeline.engine.core import EngineSim
from pipeline.engine.loop import simulate
from pipeline.engine.request import SimRequest
from pipeline.engine.workload import with_arrivals
from pipeline.steptime.alone import alone_ms
from pipeline.steptime.cost import StepTimeModel
from pipeline.steptime.metrics import run_metrics
from pipeline.steptime.tpot import tpot_quantiles

__all__ = ["Load", "parse_loads", "apply_load", "load_curves", "upper_curve", "CURVE_SCHEMA",
           "ONE_PASS", "UPPER"]

ONE_PASS = "concurrency 1 (one pass)"
UPPER = "upper"                 # the curve column: "upper" (concurrency 1) or "under load"
CURVE_SCHEMA = pl.Schema({
    "curve": pl.String, "load": pl.String, "load_kind": pl.String, "load_value": pl.Float64,
    "gpu_capacity": pl.Int64, "num_gpu_blocks": pl.Int64, "requests": pl.Int64,
    "hit_ratio": pl.Float64, "gpu_hit_ratio": pl.Float64, "cpu_hit_ratio": pl.Float64,
    "vllm_prefix_cache_hit_rate": pl.Float64, "ttft_ms_p50": pl.Float64,
    "ttft_ms_p90": pl.Float64, "ttft_ms_p99": pl.Float64, "queue_ms_p90": pl.Float64,
    "preemptions": pl.Int64, "output_throughput": pl.Float64, "step_time_model": pl.String,
    "overloaded": pl.Boolean, "offered_rate": pl.Float64, "served_rate": pl.Float64,
    "queue_at_last_arrival": pl.Int64, "request_rate": pl.Float64,
    "request_throughput": pl.Float64, "tpot_ms_p50": pl.Float64, "tpot_ms_p90": pl.Float64})


@dataclass(frozen=True)
class Load:
    """One load: ``kind`` speed, rate or concurrency, and its value."""

    kind: str
    value: float

    @property
    def label(self) -> str:
        if self.kind == "speed":
            return f"speed {self.value:g}x"
        if self.kind == "rate":
            return f"rate {self.value:g}/s"
        return f"concurrency {int(self.value)}"


def parse_loads(kind: str, text: str) -> list[Load]:
    """``0.5,1,2,4`` for ``kind`` -> Loads; ValueError naming the bad value."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise ValueError(f"empty list {text!r}")
    loads = []
    for part in parts:
        try:
            value = float(part)
        except ValueError:
            raise ValueError(f"not a number: {part!r}") from None
        if not np.isfinite(value) or value <= 0:
            raise ValueError(f"must be > 0, got {part!r}")
        if kind == "concurrency" and value != int(value):
            raise ValueError(f"a concurrency is a whole number, got {part!r}")
        loads.append(Load(kind, value))
    return loads


def apply_load(requests: Sequence[SimRequest], load: Load, seed: int = 0
               ) -> tuple[list[SimRequest], int | None]:
    """(copies of the requests with the load's arrival times, the closed-loop concurrency
    or None); arrivals through the engine's own ``with_arrivals``."""
    copies = [copy.copy(r) for r in requests]
    if load.kind == "concurrency":
        for r in copies:
            r.arrival_s = 0.0
        return copies, int(load.value)
    if load.kind == "speed":
        if any(r.arrival_s is None for r in requests):
            raise ValueError("--speed needs arrival times in the trace (use --rate or "
                             "--concurrency for an untimed workload)")
        with_arrivals(copies, "time", speed=load.value)
    elif load.kind == "rate":
        with_arrivals(copies, "time", rate=load.value, seed=seed)
    else:
        raise ValueError(f"unknown load kind {load.kind!r}")
    return copies, None


def _blocks(capacity: int, block_size: int) -> int:
    return max(capacity // block_size, 2)


_WORK: dict = {}


def _init(work: dict) -> None:
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)      # Ctrl-C is the parent's one line
    _WORK.update(work)


def _request_rate(requests: Sequence[SimRequest], load: Load, metrics: dict) -> float | None:
    """Requests per second of a point: the Poisson rate; a trace's arrivals (n - 1 over their
    span); a closed loop's served throughput."""
    if load.kind == "rate":
        return load.value
    if load.kind == "speed":
        times = [r.arrival_s for r in requests]
        span = max(times) - min(times)
        return (len(times) - 1) / span if span > 0 else None
    return metrics.get("request_throughput")


def _point(job: tuple[int, int]) -> dict:
    k, capacity = job
    requests, concurrency, load = _WORK["loads"][k]
    config: SchedulerConfig = replace(_WORK["config"],
                                      num_gpu_blocks=_blocks(capacity, _WORK["config"].block_size))
    cpu_tier = _WORK["cpu_tier"]() if _WORK["cpu_tier"] is not None else None
    try:
        latency = _WORK["latency"]
        result = simulate(requests, config, cpu_tier=cpu_tier, clock="time",
                          step_ms=latency.step_ms, concurrency=concurrency,
                          decode_run_ms=getattr(latency, "decode_run_ms", None))
    except RuntimeError as exc:
        raise ValueError(f"GPU capacity {capacity:,} tokens ({config.num_gpu_blocks} blocks): "
                         f"{exc}; give larger capacities") from None
    m = run_metrics(result.requests, result.steps, _WORK["latency"].label)
    m.update(tpot_quantiles(result.requests), request_rate=_request_rate(requests, load, m))
    return {"curve": "under load", "load": load.label, "load_kind": load.kind,
            "load_value": load.value, "gpu_capacity": capacity,
            "num_gpu_blocks": config.num_gpu_blocks, "requests": m["requests"],
            **{name: m.get(name) for name in CURVE_SCHEMA.names() if name in m
               and name not in ("requests",)}}


def load_curves(requests: Sequence[SimRequest], capacities: Sequence[int],
                loads: Sequence[Load], config: SchedulerConfig, latency: StepTimeModel, *,
                cpu_tier=None, jobs: int = 1, seed: int = 0) -> pl.DataFrame:
    """One row per (load, GPU capacity in tokens), CURVE_SCHEMA; ``cpu_tier`` a factory
    (a fresh tier per run, picklable when ``jobs`` > 1) or None; ``jobs`` worker
    processes."""
    size = config.block_size
    need = max((-(-min(len(r.prompt_token_ids) + r.max_tokens - 1, config.max_model_len)
                 // size) for r in requests), default=0)
    small = [int(c) for c in capacities if _blocks(int(c), size) - 1 < need]
    if small:
        raise ValueError(f"GPU capacity {small[0]:,} tokens cannot hold the largest request "
                         f"({need} blocks of {size} tokens): the smallest capacity that can "
                         f"is {(need + 1) * size:,} tokens")
    _WORK.update(loads=[(*apply_load(requests, load, seed), load) for load in loads],
                 config=config, latency=latency, cpu_tier=cpu_tier)
    work = [(k, int(c)) for k in range(len(loads)) for c in capacities]
    try:
        if jobs > 1 and len(work) > 1:
            # spawn, not fork: polars' thread pool does not survive a fork
            context = multiprocessing.get_context("spawn")
            with concurrent.futures.ProcessPoolExecutor(
                    jobs, mp_context=context, initializer=_init,
                    initargs=(dict(_WORK),)) as pool:
                rows = list(pool.map(_point, work))
        else:
            rows = [_point(job) for job in work]
    finally:
        _WORK.clear()
    return pl.DataFrame(rows, schema=CURVE_SCHEMA)


def _block_frame(requests: Sequence[SimRequest], config: SchedulerConfig) -> pl.DataFrame:
    """The prompts as a block frame with the engine's own block keys; the partial tail (never
    cacheable) a key of its own."""
    from pipeline.workloads.blocks import BLOCK_SCHEMA
    engine, size = EngineSim(config), config.block_size
    rows: dict[str, list] = {"request": [], "block_index": [], "block_key": [],
                             "block_tokens": []}
    for r in requests:
        keys = engine.request_block_hashes(r)
        tail = len(r.prompt_token_ids) - len(keys) * size
        n = len(keys) + (1 if tail else 0)
        rows["request"] += [r.index] * n
        rows["block_index"] += list(range(n))
        rows["block_key"] += [k & (2**63 - 1) for k in keys] + ([2**63 + r.index] if tail else [])
        rows["block_tokens"] += [size] * len(keys) + ([tail] if tail else [])
    return pl.DataFrame(rows).cast(dict(BLOCK_SCHEMA))


def upper_curve(requests: Sequence[SimRequest], capacities: Sequence[int],
                config: SchedulerConfig, latency: StepTimeModel) -> pl.DataFrame:
    """The concurrency-1 line (CURVE_SCHEMA rows, curve ``UPPER``, load ``ONE_PASS``): hits from
    the one-pass ``vllm`` model, TTFT of each request alone under ``latency``."""
    from pipeline.workloads.stream import block_stream
    from pipeline.onepass.vllm_fast import vllm_gpu
    blocks = [_blocks(int(c), config.block_size) for c in capacities]
    if any(r.output_token_ids is not None for r in requests):
        # sampled tokens a later prompt may re-send: the engine itself, one at a time
        alone = [simulate([replace(r, arrival_s=0.0) for r in requests],
                          replace(config, num_gpu_blocks=b), clock="steps", concurrency=1)
                 for b in blocks]
        hits = np.stack([a.requests["gpu_hit_tokens"].to_numpy() for a in alone])
    else:
        stream = block_stream(_block_frame(requests, config), config.block_size)
        outputs = np.array([r.max_tokens for r in requests], dtype=np.int64)
        hits = vllm_gpu(stream, [b * config.block_size for b in blocks],
                        output_tokens=outputs)
    prompt = np.array([len(r.prompt_token_ids) for r in requests], dtype=np.int64)
    rows = []
    for capacity, hit in zip(capacities, hits):
        # a request larger than the pool is never scheduled under vLLM: no TTFT for it
        ttft = alone_ms(latency, hit, np.zeros_like(hit), prompt - hit,
                        config.max_num_batched_tokens)
        frame = pl.DataFrame({"ttft_ms": ttft})
        quantiles = {f"ttft_ms_p{p}": float(frame["ttft_ms"].quantile(p / 100, "linear"))
                     for p in (50, 90, 99)}
        ratio = float(hit.sum() / prompt.sum()) if prompt.sum() else None
        rows.append({"curve": UPPER, "load": ONE_PASS, "load_kind": "one-pass",
                     "load_value": 1.0, "gpu_capacity": int(capacity),
                     "num_gpu_blocks": _blocks(int(capacity), config.block_size),
                     "requests": prompt.size, "hit_ratio": ratio, "gpu_hit_ratio": ratio,
                     "cpu_hit_ratio": 0.0, "vllm_prefix_cache_hit_rate": ratio, **quantiles,
                     "queue_ms_p90": 0.0, "preemptions": 0, "output_throughput": None,
                     "step_time_model": latency.label, "overloaded": False,
                     "offered_rate": None, "served_rate": None, "queue_at_last_arrival": 0})
    return pl.DataFrame(rows, schema=CURVE_SCHEMA)
