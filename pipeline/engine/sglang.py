"""``sglang``: SGLang 0.5.23's scheduler and radix cache as an engine of the registry
(``pipeline.engine.engines``): ``simulate --engine sglang``, ``fleet --engine sglang``.

The loop is ``pipeline.components.sglang_ksched`` (compiled, over the flat radix tree of
``sglang_kradix``; its plain-Python oracle is ``tests/oracles/sglang_sched.py``), one engine
an ``SGLangInstance`` (``sglang_instance``: the lab's requests as token sequences, one turn
a step). This module drives it on the step clock (``sglang_step_clock``: one compiled call
for the whole run), the time clock or a closed loop (one compiled call per batch, the step
time priced in Python), and writes the same frames as vLLM's engine
(``loop.REQUEST_COLUMNS``, ``STEP_COLUMNS``).
With ``--enable-hierarchical-cache`` the same compiled loop runs over HiCache's tree
(``sglang_khiradix``); HiCache settings it does not run (``PYTHON_HICACHE_FIELDS``: L3
storage) go to the plain-Python HiCache engine (``sglang_hicache``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import polars as pl

from pipeline.components import engine_layout as L
from pipeline.engine.compiled import compiled_model, request_table, with_times
from pipeline.engine.kstep import reload_term
from pipeline.engine.loop import STEP_COLUMNS, SimResult
from pipeline.engine.request import SimRequest
from pipeline.engine.sglang_hicache import SGLangHiInstance
from pipeline.engine.sglang_instance import SGLangInstance
from pipeline.engine.sglang_intake import refusal
from pipeline.engine.sglang_options import HICACHE_SUMMARY, HICACHE_WRITE_POLICY, OPTIONS, \
    SGLangConfig, sglang_config, storage_clause
from pipeline.engine.sglang_step_clock import run_on_steps, with_clipped

__all__ = ["SGLang", "SGLangConfig", "simulate"]


#: HiCache settings the compiled engine does not run (the L3 storage backend's): a run
#: that gives one is the plain-Python HiCache engine (``sglang_hicache``)
PYTHON_HICACHE_FIELDS = ("storage",)


def compiled_hicache(spec) -> bool:
    """Whether a run with HiCache ``spec`` (None: without) runs compiled."""
    return spec is None or not any(getattr(spec, name, None) for name in
                                   PYTHON_HICACHE_FIELDS)


def adjust_models_line(args, line: str) -> str:
    """The run's models line: which loop ran; with HiCache its host tier (and, with the L3
    storage options, the plain-Python HiCache engine, the non-overlap loop)."""
    hicache = getattr(args, "enable_hierarchical_cache", False)
    if hicache and getattr(args, "hicache_storage_backend", None):
        line = line.replace(SGLang.SUMMARY, HICACHE_SUMMARY, 1)    # its own loop, named
    elif hicache:
        line = line.replace("radix cache", "radix cache with HiCache", 1)
    if getattr(args, "disable_overlap_schedule", False):
        line = line.replace("(overlap loop)", "(non-overlap loop)", 1)
    if not hicache:
        return line
    return line.replace("CPU none (no CPU tier)", "host tier HiCache (write policy "
                        f"{args.hicache_write_policy or HICACHE_WRITE_POLICY})"
                        f"{storage_clause(args)}", 1)


def adjust_models_field(args, field: dict) -> dict:
    """The run's ``models`` field with HiCache: its host tier and write policy as ``cpu``."""
    if not getattr(args, "enable_hierarchical_cache", False):
        return field
    field = {**field, "cpu": "hicache",
             "hicache_write_policy": args.hicache_write_policy or HICACHE_WRITE_POLICY}
    if getattr(args, "hicache_storage_backend", None) is not None:
        field["hicache_storage_backend"] = args.hicache_storage_backend
    return field


class SGLang:
    """SGLang's engine: ``SGLangConfig``, ``SGLangInstance`` per instance, ``simulate``."""

    NAME = "sglang"
    SUMMARY = "SGLang 0.5.23's scheduler and radix cache (overlap loop), compiled"
    COMPILED = False
    OPTIONS = OPTIONS
    config = staticmethod(sglang_config)

    adjust_models_line = staticmethod(adjust_models_line)
    adjust_models_field = staticmethod(adjust_models_field)

    @staticmethod
    def instance(config: SGLangConfig, cpu_tier=None, capacity: int = 64):
        """One engine: compiled, or with HiCache's L3 storage the plain-Python one."""
        make = SGLangInstance if compiled_hicache(config.hicache) else SGLangHiInstance
        return make(config, cpu_tier, capacity)

    @staticmethod
    def refusal(request: SimRequest, config: SGLangConfig) -> str | None:
        """Why SGLang's intake does not queue this request as modelled, or None."""
        s = config.settings
        return refusal(len(request.prompt_token_ids), request.max_tokens,
                       s.max_total_tokens, s.page_size, config.context_len)

    @staticmethod
    def simulate(requests: Sequence[SimRequest], config: SGLangConfig, *, cpu_tier=None,
                 clock: str = "steps", step_ms: Callable | None = None,
                 concurrency: int | None = None, decode_run_ms=None) -> SimResult:
        return simulate(requests, config, cpu_tier=cpu_tier, clock=clock, step_ms=step_ms,
                        concurrency=concurrency)


def simulate(requests: Sequence[SimRequest], config: SGLangConfig, *, cpu_tier=None,
             clock: str = "steps", step_ms: Callable | None = None,
             concurrency: int | None = None) -> SimResult:
    """A whole run: arrivals by step (``arrival_step``), by time (``arrival_s``, each batch
    ``step_ms(record)`` long) or a closed loop of ``concurrency``; vLLM's engine's frames."""
    if clock == "time" and step_ms is None:
        raise ValueError("the time clock needs a step-time model (step_ms)")
    timed = clock == "time"
    if not timed and concurrency is None and compiled_hicache(config.hicache):
        return run_on_steps(requests, config)
    engine = SGLang.instance(config, cpu_tier, capacity=len(requests))
    engine.add_all(requests)
    engine.timed = timed
    n = len(requests)
    price = step_ms if timed else (lambda record: 1.0)
    due = np.zeros(n, np.float64)
    if concurrency is None:
        due = np.array([(r.arrival_s or 0.0) * 1000.0 if timed else float(r.arrival_step or 0)
                        for r in requests], np.float64)
    arrival = np.zeros(n, np.float64)
    parts, now, pointer = [], 0.0, 0
    while pointer < n or engine.has_work():
        if concurrency is None:
            if not engine.has_work():
                now = max(now, due[pointer])
            while pointer < n and due[pointer] <= now:
                arrival[pointer] = due[pointer]
                engine.enqueue(requests[pointer])
                pointer += 1
            until = due[pointer] if pointer < n else np.inf
        else:
            outstanding = engine.outstanding
            while pointer < n and outstanding < concurrency:
                arrival[pointer] = now
                engine.enqueue(requests[pointer])
                pointer, outstanding = pointer + 1, outstanding + 1
            until = now                                  # one batch, then look again
        part = engine.run_until(max(until, np.nextafter(now, np.inf)), now, price)
        parts.append(part)
        now = part.now_ms
    names = STEP_COLUMNS + getattr(engine, "extra_names", ())
    steps = np.concatenate([p.steps for p in parts]) if parts else \
        np.zeros((0, len(names)), np.int64)
    rows = engine.request_rows(requests)
    frame = with_clipped(request_table(rows, arrival, timed), engine.clipped, requests)
    if hasattr(engine, "with_request_columns"):                  # an L3 store's column
        frame = engine.with_request_columns(frame, requests)
    step_frame = pl.DataFrame({name: steps[:, j] for j, name in enumerate(names)},
                              schema={name: pl.Int64 for name in names})
    if not timed:
        return SimResult(frame, step_frame)
    if config.hicache is not None:
        frame = _with_load_ms(frame, engine.host_loaded(requests), step_ms)
    start = np.concatenate([p.start_ms for p in parts]) if parts else np.zeros(0)
    end = start + np.concatenate([p.duration_ms for p in parts]) if parts else np.zeros(0)
    return SimResult(with_times(frame, arrival, start[rows[:, L.FSCHED]],
                                end[rows[:, L.FTOK]], end[rows[:, L.FIN]]),
                     step_frame.with_columns(start_ms=pl.Series(start, dtype=pl.Float64),
                                             duration_ms=pl.Series(end - start,
                                                                   dtype=pl.Float64)))


def _with_load_ms(frame: pl.DataFrame, host: np.ndarray, step_ms) -> pl.DataFrame:
    """``load_ms``: the step model's reload term for each request's host tokens (what its
    load adds to its batch; null without a load or for a model without that term)."""
    model = compiled_model(step_ms)
    ms = [reload_term(*model, n) if model is not None and n else None
          for n in host.tolist()]
    return frame.with_columns(load_ms=pl.Series(ms, dtype=pl.Float64))
