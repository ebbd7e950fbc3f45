"""Drive ``EngineSim`` over a workload: arrivals by step, by time, or a closed loop."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np
import polars as pl

from pipeline.engine.config import SchedulerConfig
from pipeline.engine.core import DecodeRun, EngineSim, StepRecord
from pipeline.engine.hashing import bulk_request_keys
from pipeline.engine.request import SimRequest

__all__ = ["SimResult", "simulate", "request_frame", "step_frame", "timed_run", "CLOCKS",
           "REQUEST_COLUMNS", "STEP_COLUMNS"]

CLOCKS = ("steps", "time")
REQUEST_COLUMNS = ("request", "arrival_step", "first_scheduled_step", "first_token_step",
                   "finish_step", "gpu_hit_tokens", "cpu_hit_tokens", "prompt_tokens",
                   "output_tokens", "preemptions")
STEP_COLUMNS = ("step", "prefill_tokens", "decode_seqs", "context_tokens", "reload_tokens",
                "num_running", "num_waiting", "free_blocks")
#: Engine calls in a row that execute nothing before the run is declared stuck.
_STUCK_CALLS = 64


@dataclass(frozen=True)
class SimResult:
    """``requests``: one row per request in input order; ``steps``: one row per batch."""

    requests: pl.DataFrame
    steps: pl.DataFrame


def simulate(requests: Sequence[SimRequest], config: SchedulerConfig, *, cpu_tier=None,
             clock: str = "steps", step_ms: Callable[[StepRecord], float] | None = None,
             concurrency: int | None = None,
             decode_run_ms: Callable[[int, int, int], np.ndarray] | None = None) -> SimResult:
    """Run ``requests`` (``index`` 0..n-1 in input order) through vLLM's engine loop.

    ``clock="steps"``: one step = one executed batch; before each ``schedule()`` every
    request with ``arrival_step <= step`` is added in input order; an idle engine jumps to
    the next arrival. ``clock="time"``: ``step_ms(record)`` gives each batch's duration
    and requests arrive by ``arrival_s``. ``concurrency=K``: a closed loop instead (the
    next request arrives whenever fewer than K are running or waiting).
    ``decode_run_ms(num_running, context_base, count)`` (a step-time model's, equal to
    ``step_ms`` per record): the time clock then fast-forwards runs of pure decode steps as
    the step clock does, up to the next arrival.
    """
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {', '.join(CLOCKS)}, got {clock!r}")
    if clock == "time" and step_ms is None:
        raise ValueError("the time clock needs a step-time model (step_ms)")
    if concurrency is not None and concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    n = len(requests)
    if any(r.index != i for i, r in enumerate(requests)):
        raise ValueError("requests must be numbered 0..n-1 in input order")
    engine = EngineSim(config, cpu_tier)
    keys = bulk_request_keys(requests, config.block_size)
    timed = clock == "time"
    if concurrency is None:
        due = np.array([(r.arrival_s or 0.0) * 1000.0 if timed else (r.arrival_step or 0)
                        for r in requests], dtype=np.float64)
        if n and np.any(np.diff(due) < 0):
            raise ValueError("arrivals must be non-decreasing in input order")
    now = 0.0                                   # the clock: steps or milliseconds
    arrival = np.zeros(n, dtype=np.float64)
    ends: dict[int, float] = {}                 # step -> end time (time clock)
    starts: dict[int, float] = {}
    records: list[StepRecord] = []
    runs: list[DecodeRun] = []                  # stretches of pure decode steps
    pointer, idle_calls = 0, 0
    while True:
        clock_now = now if timed else engine.step_count
        if concurrency is None:
            while pointer < n and due[pointer] <= clock_now:
                arrival[pointer] = clock_now if not timed else due[pointer]
                engine.add_request(requests[pointer], keys[pointer])
                keys[pointer] = None
                pointer += 1
        else:
            while pointer < n and engine.outstanding() < concurrency:
                arrival[pointer] = clock_now
                engine.add_request(requests[pointer], keys[pointer])
                keys[pointer] = None
                pointer += 1
        if not engine.has_work():
            if pointer == n:
                break
            if timed:
                now = max(now, float(due[pointer]))
            else:
                engine.step_count = max(engine.step_count, int(due[pointer]))
            continue
        if not timed:                           # a run of pure decode steps at once
            ahead = (1 << 62) if concurrency is not None or pointer == n \
                else int(due[pointer]) - engine.step_count
            run = engine.advance(ahead)
            if run is not None:
                runs.append(run)
                idle_calls = 0
                continue
        elif decode_run_ms is not None:         # the same on the time clock (steptime)
            run = timed_run(engine, decode_run_ms, now, None if concurrency is not None
                            or pointer == n else float(due[pointer]))
            if run is not None:
                run, durations = run
                runs.append(run)
                for j, duration in enumerate(durations):
                    starts[run.first_step + j] = now
                    now += duration
                    ends[run.first_step + j] = now
                run.durations = durations
                idle_calls = 0
                continue
        record = engine.step()
        if record is None:
            idle_calls += 1
            if idle_calls > _STUCK_CALLS:
                raise RuntimeError("the engine schedules nothing while requests wait "
                                   "(a request that can never fit)")
            continue
        idle_calls = 0
        records.append(record)
        if timed:
            duration = float(step_ms(record))
            record.duration_ms = duration
            starts[record.step] = now
            now += duration
            ends[record.step] = now
    return SimResult(request_frame(engine, requests, arrival, timed, starts, ends),
                     step_frame(records, runs, timed, starts, ends))


def request_frame(engine: EngineSim, requests: Sequence[SimRequest], arrival: np.ndarray,
                  timed: bool, starts: dict, ends: dict) -> pl.DataFrame:
    states = [engine.result(r.index) for r in requests]
    columns = {
        "request": [s.index for s in states],
        "arrival_step": None if timed else arrival.astype(np.int64),
        "first_scheduled_step": [s.first_scheduled_step for s in states],
        "first_token_step": [s.first_token_step for s in states],
        "finish_step": [s.finish_step for s in states],
        "gpu_hit_tokens": [s.gpu_hit for s in states],
        "cpu_hit_tokens": [s.cpu_hit for s in states],
        "prompt_tokens": [s.num_prompt for s in states],
        "output_tokens": [s.num_tokens - s.num_prompt for s in states],
        "preemptions": [s.preemptions for s in states],
    }
    frame = pl.DataFrame({k: v for k, v in columns.items() if v is not None},
                         schema_overrides={k: pl.Int64 for k in columns})
    if not timed:
        return frame
    frame = frame.with_columns(
        arrival_ms=pl.Series(arrival),
        first_scheduled_ms=pl.Series([starts[s.first_scheduled_step] for s in states]),
        first_token_ms=pl.Series([ends[s.first_token_step] for s in states]),
        finish_ms=pl.Series([ends[s.finish_step] for s in states]))
    return frame.with_columns(ttft_ms=pl.col("first_token_ms") - pl.col("arrival_ms"),
                              queue_ms=pl.col("first_scheduled_ms") - pl.col("arrival_ms"),
                              e2e_ms=pl.col("finish_ms") - pl.col("arrival_ms"))


def timed_run(engine: EngineSim, decode_run_ms, now: float, due: float | None):
    """A run of pure decode steps on the time clock: as many as start before ``due`` (the
    next arrival; None: no limit), priced by ``decode_run_ms``; (run, durations) or None."""
    running = engine.running
    n = len(running)
    if not n:
        return None
    max_len = engine.config.max_model_len
    cap = min(min(r.max_tokens + r.num_prompt, max_len) - r.num_tokens - 1 for r in running)
    cap = min(cap, 1 << 16)
    if cap < 2:
        return None
    base = sum(r.computed for r in running) + n
    limit, durations = cap, []
    if due is not None:
        t, limit, chunk = now, 0, 32
        while limit < cap and t < due:           # steps that start before the arrival
            if limit == len(durations):          # price them a chunk at a time
                more = min(chunk, cap - limit)
                durations += decode_run_ms(n, base + n * limit, more).tolist()
                chunk *= 4
            t += durations[limit]
            limit += 1
    run = engine.advance(limit)
    if run is None:
        return None
    if len(durations) < run.count:
        durations = decode_run_ms(run.num_running, run.context_base, run.count).tolist()
    return run, durations[:run.count]


def step_frame(records: list[StepRecord], runs: list[DecodeRun], timed: bool,
               starts: dict, ends: dict) -> pl.DataFrame:
    columns = {name: [np.fromiter((getattr(r, name) for r in records), np.int64,
                                  len(records))] for name in STEP_COLUMNS}
    if runs:
        values = _run_columns(runs)
        for name in STEP_COLUMNS:
            columns[name].append(values[name])
    frame = pl.DataFrame({name: np.concatenate(parts).astype(np.int64)
                          for name, parts in columns.items()})
    if timed:
        durations = [np.fromiter((r.duration_ms for r in records), np.float64, len(records))]
        durations += [np.asarray(run.durations, np.float64) for run in runs]
        frame = frame.with_columns(duration_ms=pl.Series(np.concatenate(durations)))
        frame = frame.with_columns(start_ms=pl.Series(
            [starts[s] for s in frame["step"].to_list()], dtype=pl.Float64))
    if runs:
        frame = frame.sort("step")
    if timed:
        frame = frame.select(*STEP_COLUMNS, "start_ms", "duration_ms")
    return frame


def _run_columns(runs: list[DecodeRun]) -> dict[str, np.ndarray]:
    """The step columns of every decode run, in run order, without a per-run array."""
    def field(name):
        return np.fromiter((getattr(r, name) for r in runs), np.int64, len(runs))
    count, n = field("count"), field("num_running")
    total = int(count.sum())
    j = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
    running = np.repeat(n, count)
    zeros = np.zeros(total, np.int64)
    return {"step": np.repeat(field("first_step"), count) + j, "prefill_tokens": zeros,
            "decode_seqs": running, "context_tokens": np.repeat(field("context_base"), count)
            + running * j, "reload_tokens": zeros, "num_running": running,
            "num_waiting": np.repeat(field("num_waiting"), count),
            "free_blocks": np.fromiter(chain.from_iterable(r.free_blocks for r in runs),
                                       np.int64, total)}
