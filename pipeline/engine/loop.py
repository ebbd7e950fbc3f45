"""Drive ``EngineSim`` over a workload: arrivals by step, by time, or a closed loop."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np
import polars as pl

from pipeline.components import engine_layout as L
from pipeline.engine.compiled import (MODEL_NONE, STUCK_MESSAGE, compiled_model, compiled_run,
                                      load_columns, request_table, with_tier_columns,
                                      with_times)
from pipeline.engine.config import SchedulerConfig
from pipeline.engine.core import DecodeRun, EngineSim, StepRecord
from pipeline.engine.hashing import flat_request_keys
from pipeline.engine.krun import STUCK_CALLS
from pipeline.engine.native_tier import NativeSpec, NativeTier
from pipeline.engine.request import SimRequest
from pipeline.engine.simple_offload_tier import SimpleOffloadTier, SimpleSpec

__all__ = ["SimResult", "simulate", "request_frame", "step_frame", "timed_run", "CLOCKS",
           "REQUEST_COLUMNS", "STEP_COLUMNS"]

CLOCKS = ("steps", "time")
REQUEST_COLUMNS = ("request", "arrival_step", "first_scheduled_step", "first_token_step",
                   "finish_step", "gpu_hit_tokens", "cpu_hit_tokens", "prompt_tokens",
                   "output_tokens", "preemptions")
STEP_COLUMNS = ("step", "prefill_tokens", "decode_seqs", "context_tokens", "reload_tokens",
                "num_running", "num_waiting", "free_blocks")


@dataclass(frozen=True)
class SimResult:
    """``requests``: one row per request in input order; ``steps``: one row per batch."""

    requests: pl.DataFrame
    steps: pl.DataFrame


def simulate(requests: Sequence[SimRequest], config: SchedulerConfig, *, cpu_tier=None,
             clock: str = "steps", step_ms: Callable[[StepRecord], float] | None = None,
             concurrency: int | None = None,
             decode_run_ms: Callable[[int, int, int], np.ndarray] | None = None,
             offload: NativeSpec | SimpleSpec | None = None) -> SimResult:
    """Run ``requests`` (``index`` 0..n-1 in input order) through vLLM's engine loop.

    ``clock="steps"``: one step = one executed batch; before each ``schedule()`` every
    request with ``arrival_step <= step`` is added in input order; an idle engine jumps to
    the next arrival. ``clock="time"``: ``step_ms(record)`` gives each batch's duration
    and requests arrive by ``arrival_s``. ``concurrency=K``: a closed loop instead (the
    next request arrives whenever fewer than K are running or waiting).
    The whole run is one compiled loop on the step clock and on the time clock when
    ``step_ms`` is a compiled model's (``kernel_coefficients``: the fitted ``Linear``,
    ``Roofline``); any other ``step_ms`` is called per batch from Python, with
    ``decode_run_ms(num_running, context_base, count)`` (equal to ``step_ms`` per record)
    pricing runs of pure decode steps at once. ``offload``: vLLM's native offloading
    (``native_tier.NativeSpec``, or ``simple_offload_tier.SimpleSpec`` for its
    SimpleCPUOffloadConnector; the step clock, or the time clock with a compiled model);
    the frames then gain its load and transfer columns (``compiled.load_columns``).
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
    timed = clock == "time"
    due = np.zeros(n, np.float64)
    if concurrency is None:
        due = np.array([(r.arrival_s or 0.0) * 1000.0 if timed else (r.arrival_step or 0)
                        for r in requests], dtype=np.float64)
        if n and np.any(np.diff(due) < 0):
            raise ValueError("arrivals must be non-decreasing in input order")
    model = compiled_model(step_ms) if timed else (MODEL_NONE, np.zeros(8))
    if isinstance(cpu_tier, (NativeSpec, SimpleSpec)):   # the engine's CPU tier is vLLM's own
        offload, cpu_tier = cpu_tier, None
    native = None
    if offload is not None:
        if model is None:
            raise ValueError("native offloading on the time clock needs a compiled "
                             "step-time model (fitted Linear or Roofline)")
        native = SimpleOffloadTier(offload, config, timed, model) \
            if isinstance(offload, SimpleSpec) else \
            NativeTier(offload, config.block_size, timed, model)
    engine = EngineSim(config, cpu_tier, capacity=n, offload=native)
    engine.load(requests, *flat_request_keys(requests, config.block_size))
    if model is not None:
        return SimResult(*compiled_run(engine, due, timed, concurrency, model))
    return _callback_run(engine, requests, due, concurrency, step_ms, decode_run_ms)


def _callback_run(engine: EngineSim, requests, due: np.ndarray, concurrency, step_ms,
                  decode_run_ms) -> SimResult:
    """The time clock with a Python step-time model: one compiled step per batch."""
    n = len(requests)
    now = 0.0
    arrival = np.zeros(n, dtype=np.float64)
    ends: dict[int, float] = {}
    starts: dict[int, float] = {}
    records: list[StepRecord] = []
    runs: list[DecodeRun] = []
    pointer, idle_calls = 0, 0
    while True:
        if concurrency is None:
            while pointer < n and due[pointer] <= now:
                arrival[pointer] = due[pointer]
                engine.enqueue(pointer)
                pointer += 1
        else:
            while pointer < n and engine.outstanding() < concurrency:
                arrival[pointer] = now
                engine.enqueue(pointer)
                pointer += 1
        if not engine.has_work():
            if pointer == n:
                break
            now = max(now, float(due[pointer]))
            continue
        if decode_run_ms is not None:
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
            if idle_calls > STUCK_CALLS:
                raise RuntimeError(STUCK_MESSAGE)
            continue
        idle_calls = 0
        records.append(record)
        duration = float(step_ms(record))
        record.duration_ms = duration
        starts[record.step] = now
        now += duration
        ends[record.step] = now
    return SimResult(request_frame(engine, requests, arrival, True, starts, ends),
                     step_frame(records, runs, True, starts, ends, engine.extra_names))


def request_frame(engine: EngineSim, requests: Sequence[SimRequest], arrival: np.ndarray,
                  timed: bool, starts: dict, ends: dict) -> pl.DataFrame:
    """One row per request of ``requests`` (``REQUEST_COLUMNS``, then a tier stack's or the
    native offload's columns as ``simulate`` writes them; time columns from the steps'
    ``starts`` and ``ends``, step -> ms)."""
    rows = engine.request_rows(requests)
    frame = with_tier_columns(request_table(rows, arrival, timed), rows,
                              getattr(engine, "T", ()))      # (another engine: none)
    if getattr(engine, "native", None) is not None:
        slots = np.fromiter((engine.slots[r.index] for r in requests), np.int64,
                            len(requests))
        frame = load_columns(frame, engine, slots, timed)
    if not timed:
        return frame

    def at(times: dict, column: int) -> np.ndarray:
        return np.array([times[s] for s in rows[:, column].tolist()], dtype=np.float64)
    return with_times(frame, arrival, at(starts, L.FSCHED), at(ends, L.FTOK),
                      at(ends, L.FIN))


def timed_run(engine: EngineSim, decode_run_ms, now: float, due: float | None):
    """A run of pure decode steps on the time clock: as many as start before ``due`` (the
    next arrival; None: no limit), priced by ``decode_run_ms``; (run, durations) or None."""
    slots = engine.running_slots()
    n = slots.size
    if not n:
        return None
    rows = engine.R[slots]
    cap = int(np.min(np.minimum(rows[:, L.MAXTOK] + rows[:, L.NPROMPT],
                                engine.config.max_model_len) - rows[:, L.NTOK] - 1))
    cap = min(cap, 1 << 16)
    if cap < 2:
        return None
    base = int(rows[:, L.COMPUTED].sum()) + n
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
               starts: dict, ends: dict, extra: tuple[str, ...] = ()) -> pl.DataFrame:
    """One row per batch (``STEP_COLUMNS``, then the engine's ``extra`` columns from each
    record's ``extra``: 0 in pure decode runs; on the time clock ``start_ms`` and
    ``duration_ms``)."""
    columns = {name: [np.fromiter((getattr(r, name) for r in records), np.int64,
                                  len(records))] for name in STEP_COLUMNS}
    for j, name in enumerate(extra):
        columns[name] = [np.fromiter((r.extra[j] for r in records), np.int64, len(records))]
    if runs:
        values = _run_columns(runs)
        for name in STEP_COLUMNS:
            columns[name].append(values[name])
        for name in extra:
            columns[name].append(np.zeros(values["step"].size, np.int64))
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
        frame = frame.select(*STEP_COLUMNS, *extra, "start_ms", "duration_ms")
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
